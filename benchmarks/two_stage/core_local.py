"""TEMPORARY stand-in for ``textcrafter_rag.two_stage`` (same semantics) until the core module is merged."""

from __future__ import annotations

import base64

import numpy as np


def random_directions(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` unit directions: standard Gaussian draws, normalised."""
    g = rng.standard_normal((n, dim)).astype(np.float32)
    return g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)


def noise_to_norm(clean: np.ndarray, directions: np.ndarray, strength: float) -> np.ndarray:
    """``clean + strength * directions`` rescaled row-wise to the norm of ``clean``."""
    x = np.asarray(clean, dtype=np.float32)
    y = x + float(strength) * np.asarray(directions, dtype=np.float32)
    return y * (np.linalg.norm(x, axis=1, keepdims=True) / np.maximum(np.linalg.norm(y, axis=1, keepdims=True), 1e-12))


def pack_vector(v: np.ndarray) -> str:
    """float16 little-endian bytes, base64."""
    return base64.b64encode(np.asarray(v, dtype="<f2").tobytes()).decode("ascii")


def unpack_vector(s: str) -> np.ndarray:
    """Inverse of :func:`pack_vector` (float32)."""
    return np.frombuffer(base64.b64decode(s), dtype="<f2").astype(np.float32)


def rerank(query: np.ndarray, candidates: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` rows of ``candidates`` of highest cosine with ``query``, best first."""
    c = np.asarray(candidates, dtype=np.float32)
    q = np.asarray(query, dtype=np.float32)
    s = (c @ q) / np.maximum(np.linalg.norm(c, axis=1) * np.linalg.norm(q), 1e-12)
    return np.argsort(-s, kind="stable")[:k]
