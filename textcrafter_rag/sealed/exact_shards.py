"""The exact part of the store-held index: clean directions in fixed-size FAISS shards.

One ``IndexFlatIP`` grows its storage by doubling, and each doubling copies every vector it holds: while a
codebook trains, a reader opening a large log adds a million directions to the exact index, and the add that
crossed a power of two stood still for seconds. Shards of
:data:`SHARD` entries never copy: a full shard stays as it is and a new one is started. They also move into the
trained index whole: the oldest shard is encoded, then dropped, and dropping a shard shifts nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["SHARD", "ExactShards"]

#: Directions a shard holds (1.5 KB each at 384 dimensions: 48 MB a shard).
SHARD = 32_768


class ExactShards:
    """Exact inner-product search over shards of at most :data:`SHARD` labelled directions (not thread-safe).

    The FAISS calls the index makes (``add_with_ids``, ``remove_ids``, ``search``, ``ntotal``) have FAISS's
    meaning, so the caller uses it where it would use one ``IndexIDMap(IndexFlatIP)``.
    """

    def __init__(self, faiss: Any, dim: int) -> None:
        self.faiss, self.dim = faiss, int(dim)
        self.shards: list[Any] = []

    @property
    def ntotal(self) -> int:
        return sum(s.ntotal for s in self.shards)

    def add_with_ids(self, vectors: np.ndarray, labels: np.ndarray) -> None:
        start = 0
        while start < len(vectors):
            if not self.shards or self.shards[-1].ntotal >= SHARD:
                self.shards.append(self.faiss.IndexIDMap(self.faiss.IndexFlatIP(self.dim)))
            last = self.shards[-1]
            n = min(SHARD - last.ntotal, len(vectors) - start)
            last.add_with_ids(np.ascontiguousarray(vectors[start : start + n]), labels[start : start + n])
            start += n

    def remove_ids(self, selector: Any) -> int:
        return sum(int(s.remove_ids(selector)) for s in self.shards)

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The best ``k`` over every shard, as FAISS returns them (scores, labels; -1 where fewer).

        Each shard's flat index is searched itself and its positions mapped to labels here: ``IndexIDMap.search``
        maps them in an OpenMP loop, a team of threads for every query, and on a busy machine the query then
        waits for a descheduled thread (the default's p95 at 5,183 records on Qdrant local: 16.1 ms with it, 6.05
        ms without, ``benchmarks/results/store_index_5k_before.md`` and ``store_index_5k.md``).
        """
        scores, labels = [], []
        for s in self.shards:
            if s.ntotal:
                d, i = s.index.search(query, min(k, s.ntotal))
                held = self.faiss.rev_swig_ptr(s.id_map.data(), s.id_map.size())  # a view, read under the lock
                scores.append(d[0])
                labels.append(np.where(i[0] >= 0, held[np.maximum(i[0], 0)], -1))
        if not scores:
            return np.full((1, k), -np.inf, dtype=np.float32), np.full((1, k), -1, dtype=np.int64)
        d, i = np.concatenate(scores), np.concatenate(labels)
        best = np.argsort(-d, kind="stable")[:k]
        return d[best][None, :], i[best][None, :]

    def contents(self, shard: Any) -> tuple[np.ndarray, np.ndarray]:
        """One shard's directions and labels (copies)."""
        labels = self.faiss.vector_to_array(shard.id_map).astype(np.int64)
        return shard.index.reconstruct_n(0, shard.ntotal), labels

    def sample(self, n: int) -> np.ndarray:
        """The directions of the first shards, ``n`` at most (the codebook's training sample)."""
        out, held = [], 0
        for s in self.shards:
            if held >= n:
                break
            out.append(self.contents(s)[0][: n - held])
            held += len(out[-1])
        return np.concatenate(out) if out else np.zeros((0, self.dim), dtype=np.float32)
