"""Defenses: TextCrafter and the paper's baselines, all behind ``protect(x) -> x'``."""

from __future__ import annotations

from .base import Mechanism
from .ldp import LDPGaussian, Purkayastha, analytic_gaussian_sigma
from .simple import GaussianNoise, NoDefense, Shuffle
from .spec import from_spec
from .textcrafter import TextCrafter

__all__ = [
    "Mechanism", "NoDefense", "Shuffle", "GaussianNoise", "LDPGaussian", "Purkayastha",
    "TextCrafter", "from_spec", "analytic_gaussian_sigma",
]
