"""textcrafter-rag: protect text embeddings against inversion attacks before they are stored.

Quick use::

    from textcrafter_rag import Protector, bundled_minilm
    protector = Protector(base=bundled_minilm())          # loads the shipped TextCrafter policy
    vectors = protector.embed_documents(["Alice Smith's account 12345 is overdrawn."])

Layout: the method in :mod:`textcrafter_rag.textcrafter`, the baselines in
:mod:`textcrafter_rag.mechanisms`, infrastructure (validation, randomness, encoders, files, CLI)
at the top level, attacks in :mod:`textcrafter_rag.attacks` and the store audit in
:mod:`textcrafter_rag.audit`. The sealed stores' search modes are chosen with ``search=`` and one of
:class:`StoreIndexSearch` (the store-held index), :class:`TwoStageSearch` (candidates),
:class:`AppIndexSearch` (an app-side index file) or :class:`SingleStageSearch` (the store ranks protected vectors),
all exported here and by both adapters; the sealed-search wing is :mod:`textcrafter_rag.sealed`.
"""

from __future__ import annotations

from ._version import __version__
from .encoders import Encoder, as_encoder, bundled_minilm
from .errors import ArtifactError, FingerprintMismatch, MissingPolicyError, TextcrafterError, VectorFileError
from .keyed import KeyedRotation, TenantKey
from .mechanisms import GaussianNoise, LDPGaussian, Mechanism, NoDefense, Purkayastha, Shuffle
from .options import ProtectionOptions
from .protector import Protector
from .sealed.app_index import AppIndexSearch
from .sealed.candidates import TwoStageSearch
from .sealed.modes import SingleStageSearch
from .sealed.store_index import StoreIndexSearch
from .sealing import SecretKey, generate_key
from .specs import from_spec, resolve_mechanism, resolve_policy
from .textcrafter import TextCrafter, fit_textcrafter

__all__ = [
    "Protector",
    "ProtectionOptions",
    "TextCrafter",
    "fit_textcrafter",
    "Mechanism",
    "NoDefense",
    "Shuffle",
    "GaussianNoise",
    "LDPGaussian",
    "Purkayastha",
    "from_spec",
    "resolve_mechanism",
    "resolve_policy",
    "Encoder",
    "as_encoder",
    "bundled_minilm",
    "SecretKey",
    "generate_key",
    "KeyedRotation",
    "TenantKey",
    "StoreIndexSearch",
    "TwoStageSearch",
    "AppIndexSearch",
    "SingleStageSearch",
    "TextcrafterError",
    "ArtifactError",
    "FingerprintMismatch",
    "MissingPolicyError",
    "VectorFileError",
    "__version__",
]
