"""The baselines behind ``protect(x) -> x'``: identity, shuffling, Gaussian noise, two LDP mechanisms, and
two fitted noises: spectrum-shaped (:mod:`.spectral`) and sensitive-subspace removal (:mod:`.nullspace`).

TextCrafter itself lives in :mod:`textcrafter_rag.textcrafter`; :func:`textcrafter_rag.from_spec`
builds any of them from a spec string.
"""

from __future__ import annotations

from .base import Mechanism
from .ldp import LDPGaussian, Purkayastha, analytic_gaussian_sigma
from .nullspace import NullspaceConfig, NullspaceNoise, fit_nullspace_noise
from .simple import GaussianNoise, NoDefense, Shuffle
from .spectral import SpectralConfig, SpectralNoise, fit_spectral_noise, water_fill

__all__ = [
    "Mechanism",
    "NoDefense",
    "Shuffle",
    "GaussianNoise",
    "LDPGaussian",
    "Purkayastha",
    "analytic_gaussian_sigma",
    "SpectralNoise",
    "SpectralConfig",
    "fit_spectral_noise",
    "water_fill",
    "NullspaceNoise",
    "NullspaceConfig",
    "fit_nullspace_noise",
]
