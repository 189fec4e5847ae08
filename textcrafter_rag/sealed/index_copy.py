"""A copy of the in-memory index, serialized with no lock held: what a compaction seals (:mod:`.compaction`).

Until a compaction serialized the copy after letting go of the lock, every write of the process waited for the
serialization too: over a second from three million records, four at ten million
(``benchmarks/results/store_index_stall_10m.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import NotSupportedError

__all__ = ["IndexCopy"]


class IndexCopy:
    """A copy of a :class:`~.vector_index.VectorIndex` that nothing else holds (``VectorIndex.copy``).

    Args:
        faiss: The ``faiss`` module.
        parts: Makes the index's bytes in order, with no lock held: buffers (``bytes``, NumPy arrays) as they are,
            and FAISS indexes (a trained index's clone) to serialize.
    """

    def __init__(self, faiss: Any, parts: Callable[[], list[Any]]) -> None:
        self._faiss = faiss
        self._parts: Callable[[], list[Any]] | None = parts

    def parts(self) -> list[bytes | np.ndarray]:
        """The index's bytes in parts, in order (joined, what :meth:`~.vector_index.VectorIndex.restore` reads), once:
        a FAISS index is given as its serialization (a NumPy array, never copied into ``bytes``), and the copy is
        let go.

        Raises:
            NotSupportedError: Called a second time.
        """
        if self._parts is None:
            raise NotSupportedError("an index copy gives its parts once: take another copy")
        make, self._parts = self._parts, None
        return [self._faiss.serialize_index(p) if isinstance(p, self._faiss.Index) else p for p in make()]
