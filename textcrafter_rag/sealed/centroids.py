"""The inverted file's centroids, held in bfloat16, and a query's nearest lists found in NumPy.

At 1,000,000 records the coarse quantizer's 2,048 float32 centroids of 384 dimensions (3 MB) are 3 B a record, a
twentieth of the 64 B budget; in bfloat16 (FAISS's ``QT_bf16`` scalar quantizer, the top 16 bits of each float32)
they take half that. The codes stay exact against them: FAISS encodes each residual, and scores each probed list,
from the centroid as the quantizer decodes it, so a rounded centroid (each component within 2**-7 of
itself) moves only which lists are nearest.

A query's nearest lists are found in NumPy, not by FAISS's scalar-quantizer search, which starts a team of OpenMP
threads for every search, one query too: :meth:`Centroids.nearest` decodes the centroids in blocks of
:data:`_BLOCK` (a shift of each 16-bit code) into one buffer and takes the inner products in NumPy's own loop, on
the caller's thread; FAISS then scans those lists. Adds still assign their batches through FAISS. The price of the
1.5 B a record saved is scan time: FAISS decodes each probed list's centroid to score it, slower from bfloat16 than
copied from float32. At 1,000,000 records a query's scan took 8.39 ms at p50 against 5.81 ms with float32
centroids on the same day, with the same NDCG@10 (``benchmarks/results/store_index_scale_1m_bf16.md``,
``store_index_scale_1m_flat_sameday.md``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Centroids", "in_bfloat16"]

#: Centroids decoded at a time: a 192 KB buffer at 384 dimensions.
_BLOCK = 128


def in_bfloat16(faiss: Any, ivf: Any) -> None:
    """Replace a trained inverted file's flat quantizer by one holding the same centroids in bfloat16 (before any
    code is added: every residual is then taken from the centroids as held)."""
    if ivf.ntotal:
        raise ValueError("the quantizer is replaced before the first code")
    flat = faiss.downcast_index(ivf.quantizer)
    centroids = faiss.rev_swig_ptr(flat.get_xb(), flat.ntotal * flat.d).reshape(flat.ntotal, flat.d).copy()
    half = faiss.IndexScalarQuantizer(flat.d, faiss.ScalarQuantizer.QT_bf16, faiss.METRIC_INNER_PRODUCT)
    half.add(centroids)
    ivf.quantizer = half  # the index owns its quantizer (``own_fields``): it frees this one with itself
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
        self._quantizer = quantizer  # the views' memory is its own: it lives as long as this
        self._buffer = np.empty((min(_BLOCK, n), d), dtype=np.uint32)
        self._scores = np.empty(n, dtype=np.float32)

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
