"""The in-memory first-stage index of the store-held mode, done by FAISS.

Every process that holds the key rebuilds it from the sealed log (:mod:`.log`): it is a cache, never the
source of truth. Below ``train_at`` records it is exact (``IndexFlatIP`` over the clean directions); from
``train_at`` on a product quantizer (``IndexPQ``, ``code_bytes`` bytes a record, inner product, asymmetric:
the query stays exact) is trained on a sample in a background thread, while writes go on into the exact
index, and swapped in when ready, so no write waits for training. The re-rank of the opened records is exact
(their sealed clean vectors), so the codes only have to put the true top ``k`` among the first ``open_k``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InvalidInputError, MissingDependencyError
from ..numerics import unit_rows

__all__ = ["VectorIndex"]

_TRAIN_SAMPLE = 32_768


def _faiss() -> Any:
    try:
        import faiss
    except ImportError:  # pragma: no cover - faiss-cpu is a dependency of this mode
        raise MissingDependencyError(
            "the store-held index needs faiss-cpu: pip install faiss-cpu (or textcrafter-rag[fit])"
        ) from None
    return faiss


def _sub_quantizers(dim: int, code_bytes: int) -> int:
    """The most sub-quantizers, at most ``code_bytes``, that divide ``dim`` (FAISS's PQ needs equal parts)."""
    return max(m for m in range(1, min(code_bytes, dim) + 1) if dim % m == 0)


class VectorIndex:
    """Record ids and their clean directions, searched by inner product (exact, then PQ codes).

    ``add`` upserts (an id added again replaces its vector), ``remove`` forgets ids, ``search`` returns the
    ids of the best ``k``. Thread-safe.

    Args:
        dim: The encoder's dimension.
        code_bytes: Bytes of PQ code a record once trained.
        train_at: Records held exactly before the codebook is trained.
        background: Train in a background thread (the default); ``False`` trains in the write that crosses
            ``train_at`` (tests, benchmarks that want one fixed state).
    """

    def __init__(self, dim: int, *, code_bytes: int, train_at: int, background: bool = True) -> None:
        self.faiss = _faiss()
        self.dim = int(dim)
        self.code_bytes = int(code_bytes)
        self.train_at = int(train_at)
        self.background = bool(background)
        self._index = self.faiss.IndexIDMap(self.faiss.IndexFlatIP(self.dim))
        self._label: dict[str, int] = {}
        self._id: dict[int, str] = {}
        self._next = 0
        self._trained = False
        self._training: threading.Thread | None = None
        self._lock = threading.RLock()

    def __len__(self) -> int:
        return len(self._label)

    @property
    def trained(self) -> bool:
        """Whether the index holds PQ codes rather than exact directions."""
        return self._trained

    def ids(self) -> list[str]:
        """Every id in the index."""
        with self._lock:
            return list(self._label)

    def _check(self, vectors: Any, n: int) -> np.ndarray:
        x = np.asarray(vectors, dtype=np.float32)
        if x.ndim != 2 or x.shape != (n, self.dim):
            raise InvalidInputError(f"expected {n} vectors of dimension {self.dim}, got shape {x.shape}")
        return np.ascontiguousarray(unit_rows(x.astype(np.float64)).astype(np.float32))

    def add(self, ids: Sequence[str], vectors: Any) -> None:
        """Add (or replace) these records."""
        ids = [str(i) for i in ids]
        x = self._check(vectors, len(ids))
        last = {rid: i for i, rid in enumerate(ids)}  # one id twice in a batch: its last vector
        with self._lock:
            self._drop([rid for rid in last if rid in self._label])
            labels = np.arange(self._next, self._next + len(last), dtype=np.int64)
            self._next += len(last)
            for rid, label in zip(last, labels.tolist()):
                self._label[rid], self._id[label] = label, rid
            if len(last):
                self._index.add_with_ids(x[list(last.values())], labels)
            start = not self._trained and self._training is None and len(self._label) >= self.train_at
        if start:
            self._start_training()

    def remove(self, ids: Sequence[str]) -> int:
        """Forget these ids (unknown ones ignored); how many were removed."""
        with self._lock:
            return self._drop([str(i) for i in ids if str(i) in self._label])

    def _drop(self, ids: list[str]) -> int:
        if not ids:
            return 0
        labels = np.asarray([self._label.pop(rid) for rid in ids], dtype=np.int64)
        for label in labels.tolist():
            del self._id[label]
        self._index.remove_ids(self.faiss.IDSelectorBatch(labels))
        return len(ids)

    def search(self, query: Any, k: int) -> list[str]:
        """The ids of the ``k`` records of highest (approximate, once trained) inner product, best first."""
        q = self._check(np.asarray(query, dtype=np.float32).reshape(1, -1), 1)
        with self._lock:
            k = min(int(k), len(self._label))
            if k < 1:
                return []
            _, labels = self._index.search(q, k)
            return [self._id[int(label)] for label in labels[0] if label >= 0]

    # -- training ----------------------------------------------------------------------------------

    def _start_training(self) -> None:
        if self.background:
            self._training = threading.Thread(target=self._train, name="textcrafter-pq-training", daemon=True)
            self._training.start()
        else:
            self._training = threading.current_thread()
            self._train()

    def wait_trained(self, timeout: float | None = None) -> bool:
        """Wait for a training in progress (benchmarks); whether the index is trained now."""
        thread = self._training
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        return self._trained

    def _vectors(self, index: Any) -> tuple[np.ndarray, np.ndarray]:
        n = index.ntotal
        labels = self.faiss.vector_to_array(index.id_map).astype(np.int64)
        return index.index.reconstruct_n(0, n), labels

    def _train(self) -> None:
        with self._lock:
            sample, _ = self._vectors(self._index)
        rng = np.random.default_rng(0)
        if len(sample) > _TRAIN_SAMPLE:
            sample = sample[np.sort(rng.choice(len(sample), _TRAIN_SAMPLE, replace=False))]
        pq = self.faiss.IndexPQ(
            self.dim, _sub_quantizers(self.dim, self.code_bytes), 8, self.faiss.METRIC_INNER_PRODUCT
        )
        pq.train(np.ascontiguousarray(sample))
        with self._lock:  # writes made during training are in the exact index: all of it moves over
            vectors, labels = self._vectors(self._index)
            coded = self.faiss.IndexIDMap(pq)
            coded.add_with_ids(vectors, labels)
            self._index = coded
            self._trained = True

    @property
    def bytes_per_record(self) -> int:
        """The vector payload a record holds in the FAISS index (codes once trained, else float32)."""
        return _sub_quantizers(self.dim, self.code_bytes) if self._trained else 4 * self.dim
