"""textcrafter-rag: protect text embeddings against inversion attacks before they are stored.

Quick use::

    from textcrafter_rag import Protector, bundled_minilm
    protector = Protector(base=bundled_minilm())          # loads the shipped TextCrafter policy
    vectors = protector.embed_documents(["Alice Smith's account 12345 is overdrawn."])
"""

from __future__ import annotations

from .encoders import Encoder, FingerprintMismatch, as_encoder, bundled_minilm
from .mechanisms import (
    GaussianNoise,
    LDPGaussian,
    Mechanism,
    NoDefense,
    Purkayastha,
    Shuffle,
    TextCrafter,
    from_spec,
)
from .protector import MissingPolicyError, Protector

__version__ = "0.1.0"

__all__ = [
    "Protector", "TextCrafter", "Mechanism", "NoDefense", "Shuffle", "GaussianNoise", "LDPGaussian",
    "Purkayastha", "from_spec", "Encoder", "as_encoder", "bundled_minilm", "FingerprintMismatch",
    "MissingPolicyError", "__version__",
]
