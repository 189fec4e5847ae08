"""The baselines behind ``protect(x) -> x'``: identity, shuffling, Gaussian noise and two LDP mechanisms.

TextCrafter itself lives in :mod:`textcrafter_rag.textcrafter`; :func:`textcrafter_rag.from_spec`
builds any of them from a spec string.
"""

from __future__ import annotations

from .base import Mechanism
from .ldp import LDPGaussian, Purkayastha, analytic_gaussian_sigma
from .simple import GaussianNoise, NoDefense, Shuffle

__all__ = [
    "Mechanism",
    "NoDefense",
    "Shuffle",
    "GaussianNoise",
    "LDPGaussian",
    "Purkayastha",
    "analytic_gaussian_sigma",
]
