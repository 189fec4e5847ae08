"""The inverted file's centroids, held in bfloat16, and a query's nearest lists found in NumPy.

At 1,000,000 records the coarse quantizer's 2,048 float32 centroids of 384 dimensions (3 MB) are 3 B a record, a
twentieth of the 64 B budget; in bfloat16 (FAISS's ``QT_bf16`` scalar quantizer, the top 16 bits of each float32)
they take half that. The codes stay exact against them: FAISS encodes each residual, and scores each probed list,
from the centroid as the quantizer decodes it, so a rounded centroid (each component within 2**-7 of
itself) moves only which lists are nearest.

A query's nearest lists are found in NumPy, not by FAISS's scalar-quantizer search, which starts a team of OpenMP
threads for every search, one query too: :meth:`Centroids.nearest` decodes the centroids in blocks of
:data:`_BLOCK` (a shift of each 16-bit code) into one buffer and takes the inner products in NumPy's own loop, on
the caller's thread; FAISS then scans those lists. A batch of adds is assigned by FAISS's BLAS over the centroids
decoded for it (:meth:`Centroids.assign`): the scalar quantizer's own search is no BLAS, and with it a build of
10,000,000 records was trained after 1,254 s where float32 centroids took 500 s (``store_index_scale_10m_bf16.md``,
``store_index_scale_10m_scan4x_open200.md``). While the exact entries move into a newly trained index, the flat
quantizer assigns them, its centroids rounded to bfloat16 values first (:func:`round_to_bfloat16`); the bfloat16
one takes its place once they are in (:func:`in_bfloat16`).

The price of the 1.5 B a record saved is scan time: FAISS decodes each probed list's centroid to score it, slower
from bfloat16 than copied from float32. At 1,000,000 records a query's scan took 8.39 ms at p50 against 5.81 ms
with float32 centroids on the same day, with the same NDCG@10 (``benchmarks/results/store_index_scale_1m_bf16.md``,
``store_index_scale_1m_flat_sameday.md``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Centroids", "in_bfloat16", "round_to_bfloat16"]

#: Centroids decoded at a time: a 192 KB buffer at 384 dimensions.
_BLOCK = 128


def _halved(faiss: Any, ivf: Any) -> tuple[Any, np.ndarray, Any]:
    """An inverted file's flat quantizer, a view of its centroids, and a bfloat16 quantizer holding them."""
    flat = faiss.downcast_index(ivf.quantizer)
    held = faiss.rev_swig_ptr(flat.get_xb(), flat.ntotal * flat.d).reshape(flat.ntotal, flat.d)
    half = faiss.IndexScalarQuantizer(flat.d, faiss.ScalarQuantizer.QT_bf16, faiss.METRIC_INNER_PRODUCT)
    half.add(np.ascontiguousarray(held))
    return flat, held, half


def round_to_bfloat16(faiss: Any, ivf: Any) -> None:
    """Round a trained inverted file's float32 centroids to bfloat16 values, in place, before its first code: every
    residual is then taken from the centroids as :func:`in_bfloat16` holds them (FAISS's flat quantizer, which
    assigns with BLAS, still holds them while the exact entries move in)."""
    if ivf.ntotal:
        raise ValueError("the centroids are rounded before the first code")
    _, held, half = _halved(faiss, ivf)
    held[:] = half.reconstruct_n(0, half.ntotal)


def in_bfloat16(faiss: Any, ivf: Any) -> None:
    """Replace an inverted file's flat quantizer, whose centroids :func:`round_to_bfloat16` rounded, by one holding
    them in bfloat16: the same values, so every code already added stays exact.

    Raises:
        ValueError: A centroid is not a bfloat16 value, or the index does not own its quantizer (``own_fields``).
    """
    if not ivf.own_fields:
        raise ValueError("the index does not own its quantizer: it could not free it")
    flat, held, half = _halved(faiss, ivf)
    if not np.array_equal(half.reconstruct_n(0, half.ntotal), held):
        raise ValueError("the centroids are not bfloat16 values: the codes were taken from others")
    ivf.quantizer = half  # the index owns its quantizer: it frees this one with itself
    half.this.disown()
    flat.this.acquire()  # the flat one is Python's again: freed with ``flat``
    del flat


class Centroids:
    """A view of an inverted file's centroids (bfloat16, or float32 as in snapshots written before) and the lists
    nearest a query by inner product. Not thread-safe: the index's lock guards it (one buffer)."""

    def __init__(self, faiss: Any, ivf: Any) -> None:
        quantizer = faiss.downcast_index(ivf.quantizer)
        n, d = int(quantizer.ntotal), int(quantizer.d)
        if isinstance(quantizer, faiss.IndexScalarQuantizer):
            if quantizer.sq.qtype != faiss.ScalarQuantizer.QT_bf16:
                raise ValueError("the coarse quantizer is a scalar quantizer but not bfloat16")
            codes = faiss.rev_swig_ptr(quantizer.codes.data(), quantizer.codes.size())
            self._bf16: np.ndarray | None = codes.view(np.uint16).reshape(n, d)
            self._f32: np.ndarray | None = None
        elif isinstance(quantizer, faiss.IndexFlat):
            self._bf16, self._f32 = None, faiss.rev_swig_ptr(quantizer.get_xb(), n * d).reshape(n, d)
        else:
            raise ValueError(f"a coarse quantizer of a kind not held here: {type(quantizer).__name__}")
        self._faiss, self._quantizer = faiss, quantizer  # the views' memory is the quantizer's: it lives as long
        self._buffer = np.empty((min(_BLOCK, n), d), dtype=np.uint32)
        self._scores = np.empty(n, dtype=np.float32)

    def assign(self, x: np.ndarray) -> np.ndarray:
        """Each row's nearest list (a batch of adds): by FAISS's BLAS over the centroids decoded for the call."""
        decoded = self._f32 if self._f32 is not None else (self._bf16.astype(np.uint32) << 16).view(np.float32)
        _, nearest = self._faiss.knn(
            np.ascontiguousarray(x, dtype=np.float32), decoded, 1, self._faiss.METRIC_INNER_PRODUCT
        )
        return np.ascontiguousarray(nearest[:, 0], dtype=np.int64)

    def nearest(self, query: np.ndarray, nprobe: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``nprobe`` lists of highest inner product with ``query`` (1-D float32), and those products, as
        FAISS's ``search_preassigned`` takes them (one row each)."""
        scores = self._scores
        if self._f32 is not None:
            np.einsum("ij,j->i", self._f32, query, out=scores)
        else:
            assert self._bf16 is not None
            for at in range(0, len(scores), _BLOCK):
                block = self._bf16[at : at + _BLOCK]
                shifted = self._buffer[: len(block)]
                np.left_shift(block, 16, out=shifted, dtype=np.uint32)  # bfloat16 -> float32, exactly
                np.einsum("ij,j->i", shifted.view(np.float32), query, out=scores[at : at + len(block)])
        nprobe = min(int(nprobe), len(scores))
        lists = np.argpartition(-scores, nprobe - 1)[:nprobe] if nprobe < len(scores) else np.arange(len(scores))
        lists = lists[np.argsort(-scores[lists], kind="stable")]
        return lists.astype(np.int64)[None, :], scores[lists][None, :]
