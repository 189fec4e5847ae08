"""Persistence shared by the fitted noise mechanisms (spectral, nullspace): artifact plus encoder fingerprint.

A fitted mechanism is a few float64 arrays and a JSON config, written with
:func:`~textcrafter_rag.artifacts.save_artifact` like a TextCrafter policy. When it was fitted
from an encoder, the encoder's probe embeddings are stored too, so loading it with another
encoder fails loudly instead of adding noise shaped for the wrong embedding space.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts import load_artifact, save_artifact
from ..encoders import as_encoder, verify_fingerprint
from ..errors import FingerprintMismatch

__all__ = ["save_fitted", "load_fitted"]

_PROBES = "encoder.probes"


def save_fitted(
    path: str | os.PathLike[str],
    *,
    kind: str,
    arrays: dict[str, np.ndarray],
    config: dict[str, Any],
    probes: np.ndarray | None = None,
) -> Path:
    """Write ``arrays`` (kept in their dtype, so a round trip is bit-exact) and ``config`` to ``path``."""
    tensors = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    if probes is not None:
        tensors[_PROBES] = np.asarray(probes, dtype=np.float32)
    return save_artifact(path, kind=kind, tensors=tensors, config=config)


def load_fitted(
    path: str | os.PathLike[str], *, kind: str, encoder: Any = None
) -> tuple[dict[str, Any], dict[str, np.ndarray], np.ndarray | None]:
    """Read ``(config, arrays, probes)`` and, with ``encoder``, check it is the one the mechanism was fitted for.

    Raises:
        ArtifactError: Missing, corrupted, edited or unknown-format files.
        FingerprintMismatch: ``encoder`` differs from the one the mechanism was fitted for.
    """
    config, tensors = load_artifact(path, kind=kind, arrays=True)
    arrays = {k: v for k, v in tensors.items() if k != _PROBES}
    probes = tensors.get(_PROBES)
    if encoder is not None:
        enc = as_encoder(encoder)
        dim = config.get("dim")
        if dim is not None and enc.dimension != dim:
            raise FingerprintMismatch(
                f"the {kind} at {path} was fitted for {dim}-d embeddings, but the encoder produces "
                f"{enc.dimension}-d ones; fit one for this encoder"
            )
        if probes is not None:
            verify_fingerprint(enc, probes)
    return config, arrays, probes
