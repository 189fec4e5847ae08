"""The in-memory first-stage index of the store-held mode, done by FAISS.

Every process that holds the key rebuilds it from the sealed log (:mod:`.log`): it is a cache, never the
source of truth. Below ``train_at`` records it is exact (``IndexFlatIP`` over the clean directions). From
``train_at`` on, an inverted file of product-quantizer codes (``IndexIVFPQ``, ``code_bytes`` bytes a record,
inner product, asymmetric: the query stays exact) is trained on a sample in a background thread, while writes
go on into the exact index, and swapped in when ready, so no write waits for training.

* The codes encode each direction's residual to its list's centroid, after a learned rotation (OPQ:
  ``IndexPreTransform(OPQMatrix, IndexIVFPQ)``; a rotation keeps every inner product). At 1,000,000 records
  of SciFact and fitted distractors, 32 such bytes rank as well as 48 bytes of the direction itself did, with
  100 records opened, where 32 bytes of the direction itself lost a twentieth of NDCG@10 with 200 opened
  (``benchmarks/results/store_index_scale_1m.md``, ``store_index_scale_1m_pq32_open200.md``); a record costs
  16 bytes less. Snapshots with the direction's own codes and no rotation still open, and code as they did.
* A query scans about ``scan_codes`` codes (the ``nprobe`` nearest lists, at least :data:`_MIN_PROBE`), so its
  cost stops growing with the store past a few hundred thousand records (unset: by its size, :mod:`.sizing`).
* Ids are held in an :class:`~.id_table.IdTable` (14 bytes a keyed id: FAISS's label is 8 of its 16), so a record
  costs its code, FAISS's 8-byte label and 14 bytes of id (54 bytes with the default 32-byte codes). A list is
  held at its size when a codebook is swapped in, and a full list grows by a thirty-second of its size, where
  FAISS alone doubles it: a list written to holds a sixty-fourth more than its codes on average
  (:meth:`VectorIndex.tighten`).

The re-rank of the opened records is exact (their sealed clean vectors), so the codes only have to put the
true top ``k`` among the first ``open_k``.
"""

from __future__ import annotations

import json
import math
import struct
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InvalidInputError, MissingDependencyError
from ..heap import release_free_heap
from ..numerics import unit_rows
from .exact_shards import ExactShards
from .id_table import IdTable
from .index_copy import IndexCopy
from .inverted_lists import copy_list, list_sizes, with_room
from .sizing import SCAN_CODES, sized

__all__ = ["SCAN_CODES", "VectorIndex"]

_TRAIN_SAMPLE = 32_768
#: Lists a query scans at the least.
_MIN_PROBE = 16
#: Lists of the inverted file at most, and training points a list at least: finer lists, more of them probed
#: for the same codes scanned, keep more of a query's true neighbours at ten million records.
_MAX_LISTS, _POINTS_PER_LIST = 2048, 10


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
    """Record ids and their clean directions, searched by inner product (exact, then IVF-PQ codes).

    ``add`` upserts (an id added again replaces its vector), ``remove`` forgets ids, ``search`` returns the
    ids of the best ``k``. Thread-safe.

    Args:
        dim: The encoder's dimension.
        code_bytes: Bytes of PQ code a record once trained.
        train_at: Records held exactly before the codebook is trained.
        background: Train in a background thread (the default); ``False`` trains in the write that crosses
            ``train_at`` (tests, benchmarks that want one fixed state).
        scan_codes: Codes a query scans once trained (whole lists, nearest first; ``None``: :mod:`.sizing`).
    """

    def __init__(
        self, dim: int, *, code_bytes: int, train_at: int, background: bool = True, scan_codes: int | None = None
    ) -> None:
        self.faiss = _faiss()
        self.dim, self.code_bytes, self.train_at = int(dim), int(code_bytes), int(train_at)
        self.background, self.scan_codes = bool(background), None if scan_codes is None else int(scan_codes)
        self._index: Any = ExactShards(self.faiss, self.dim)
        self._ids = IdTable()
        self._trained = False
        #: The trained index's learned rotation (``d x d``), applied to a query here (see :meth:`search`).
        self._rotation: np.ndarray | None = None
        self._training: threading.Thread | None = None
        #: Labels removed or replaced while exact entries are being moved into the trained index.
        self._moving: set[int] | None = None
        #: Each inverted list's capacity, and an upper bound on its size (removals are not subtracted), in entries
        #: (:meth:`_make_room`); ``None`` while exact.
        self._capacity: np.ndarray | None = None
        self._used: np.ndarray | None = None
        self._lock = threading.RLock()

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def trained(self) -> bool:
        """Whether the index holds PQ codes rather than exact directions."""
        return self._trained

    def ids(self) -> list[str]:
        """Every id in the index."""
        with self._lock:
            return list(self._ids)

    def _check(self, vectors: Any, n: int) -> np.ndarray:
        x = np.asarray(vectors, dtype=np.float32)
        if x.ndim != 2 or x.shape != (n, self.dim):
            raise InvalidInputError(f"expected {n} vectors of dimension {self.dim}, got shape {x.shape}")
        if not np.isfinite(x).all():  # FAISS would file such a vector in no list: a record no search finds
            raise InvalidInputError("a vector to index holds NaN or Inf")
        return np.ascontiguousarray(unit_rows(x.astype(np.float64)).astype(np.float32))

    def holds(self, ids: Sequence[str]) -> list[bool]:
        """Whether each id is in the index."""
        with self._lock:
            return (self._ids.labels([str(i) for i in ids]) != -1).tolist()  # labels are any int64 but -1

    def add(self, ids: Sequence[str], vectors: Any) -> None:
        """Add (or replace) these records."""
        ids = [str(i) for i in ids]
        x = self._check(vectors, len(ids))
        last = {rid: i for i, rid in enumerate(ids)}  # one id twice in a batch: its last vector
        if not last:
            return
        with self._lock:
            labels, held = self._ids.add(list(last))
            if held.any():
                self._index.remove_ids(self.faiss.IDSelectorBatch(labels[held]))
                if self._moving is not None:
                    self._moving.update(labels[held].tolist())
            x = np.ascontiguousarray(x[list(last.values())])
            if self._trained:
                self._add_coded(x, labels)
            else:
                self._index.add_with_ids(x, labels)
            start = not self._trained and self._training is None and len(self._ids) >= self.train_at
        if start:
            self._start_training()

    def _add_coded(self, x: np.ndarray, labels: np.ndarray) -> None:
        """Add to the trained index as FAISS's own ``add_with_ids`` does (rotate, assign each vector its list,
        encode), with room made first in the lists that would overflow (the caller holds the lock)."""
        ivf = self._ivf()
        if self._rotation is not None:  # FAISS's own rotation of a batch
            x = self.faiss.downcast_VectorTransform(self._index.chain.at(0)).apply(x)
        rotated = np.ascontiguousarray(x, dtype=np.float32)
        assign = np.ascontiguousarray(ivf.quantizer.search(rotated, 1)[1][:, 0])
        self._make_room(ivf, assign)
        ptr = self.faiss.swig_ptr
        ivf.add_core(len(x), ptr(rotated), ptr(np.ascontiguousarray(labels, dtype=np.int64)), ptr(assign))
        self._index.ntotal = ivf.ntotal  # a rotation's wrapper counts what it holds only through its own add

    def _make_room(self, ivf: Any, assign: np.ndarray) -> None:
        """Give each list that ``assign`` would overflow room for them and :data:`~.inverted_lists.ROOM` of its new
        size more: one copy of its own codes and labels into an allocation of that size (FAISS would double it);
        the other lists are not touched. ``_used`` bounds each list's size from above (a removal is not
        subtracted), so a list with room to spare after removals may be copied early, never late."""
        assert self._capacity is not None and self._used is not None
        counts = np.bincount(assign, minlength=len(self._capacity))
        invlists = ivf.invlists
        for at in np.flatnonzero(self._used + counts > self._capacity).tolist():
            size = invlists.list_size(at)
            need = size + int(counts[at])
            if need > self._capacity[at]:
                room = with_room(need)
                copy_list(self.faiss, invlists, invlists, at, size, room)
                self._capacity[at] = room
            self._used[at] = size
        self._used += counts

    def remove(self, ids: Sequence[str]) -> int:
        """Forget these ids (unknown ones ignored); how many were removed."""
        with self._lock:
            labels = self._ids.pop(list(dict.fromkeys(str(i) for i in ids)))
            if len(labels):
                self._index.remove_ids(self.faiss.IDSelectorBatch(labels))
                if self._moving is not None:
                    self._moving.update(labels.tolist())
            return len(labels)

    def _ivf(self) -> Any:
        """The trained index's inverted file: inside its rotation, or the index itself (a snapshot without one)."""
        index = self._index
        return self.faiss.downcast_index(index.index) if isinstance(index, self.faiss.IndexPreTransform) else index

    def _rotation_of(self, index: Any) -> np.ndarray | None:
        """The matrix of a trained index's rotation (``None``: none, as in snapshots written before it): a view of the
        index's own, not a copy; the two are replaced together, and the view read, under the lock."""
        if not isinstance(index, self.faiss.IndexPreTransform):
            return None
        rotation = self.faiss.downcast_VectorTransform(index.chain.at(0))
        square = isinstance(rotation, self.faiss.LinearTransform) and rotation.d_in == rotation.d_out == self.dim
        if index.chain.size() != 1 or not square or rotation.have_bias:
            raise InvalidInputError("the index's transform is not one rotation")
        return self.faiss.rev_swig_ptr(rotation.A.data(), rotation.A.size()).reshape(rotation.d_out, rotation.d_in)

    def _probe(self, ivf: Any) -> None:
        """Set how many lists a query scans: about :attr:`scan_codes` codes, at least :data:`_MIN_PROBE` lists."""
        per_list = max(ivf.ntotal / ivf.nlist, 1.0)
        codes = sized(int(ivf.ntotal))[1] if self.scan_codes is None else self.scan_codes
        ivf.nprobe = int(min(ivf.nlist, max(_MIN_PROBE, math.ceil(codes / per_list))))

    def search(self, query: Any, k: int) -> list[str]:
        """The ids of the ``k`` records of highest (approximate, once trained) inner product, best first."""
        q = self._check(np.asarray(query, dtype=np.float32).reshape(1, -1), 1)
        with self._lock:
            k = min(int(k), len(self._ids))
            if k < 1:
                return []
            index = self._index
            if self._trained:
                index = self._ivf()  # the inverted file itself (a snapshot's index without a rotation: the index)
                self._probe(index)
                if self._rotation is not None:
                    # the query's rotation in NumPy's own loop, not FAISS's BLAS: that runs it on OpenMP threads
                    # that spin after it, and on two cores the spinning took the CPU from the rest of the search
                    q = np.einsum("ij,j->i", self._rotation, q[0])[None, :]
            _, labels = index.search(q, k)
            return self._ids.ids(labels[0][labels[0] != -1])

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

    def _train(self) -> None:
        if self.background:
            # FAISS and its BLAS run this thread's work on one OpenMP thread. An OpenMP thread count is the calling
            # thread's own setting, so no other thread's changes. With FAISS's default team (two threads on two
            # cores), building from a log of 1,000,000 records grew the process by 112 B a record, where this gives
            # 68 B (benchmarks/results/store_index_memory_threads_before.md, store_index_memory_threads.md); why was
            # not traced. Training takes longer on one thread (380 s against 250 s there).
            self.faiss.omp_set_num_threads(1)
        with self._lock:
            sample = self._index.sample(4 * _TRAIN_SAMPLE)
        rng = np.random.default_rng(0)
        if len(sample) > _TRAIN_SAMPLE:
            sample = sample[np.sort(rng.choice(len(sample), _TRAIN_SAMPLE, replace=False))]
        nlist = max(1, min(_MAX_LISTS, len(sample) // _POINTS_PER_LIST))
        faiss, parts = self.faiss, _sub_quantizers(self.dim, self.code_bytes)
        quantizer = faiss.IndexFlatIP(self.dim)
        ivf = faiss.IndexIVFPQ(quantizer, self.dim, nlist, parts, 8, faiss.METRIC_INNER_PRODUCT)  # residual codes
        ivf.cp.seed = 0
        ivf.cp.min_points_per_centroid = _POINTS_PER_LIST
        ivf.own_fields = True  # each index keeps what it wraps alive (and frees it)
        quantizer.this.disown()
        rotation = faiss.OPQMatrix(self.dim, parts)
        # the rotation trains a product quantizer 50 times over, and FAISS warns of a small sample at each: with
        # this one (the same training, its warning's threshold at one point) only the codebook's own warns
        rounds = faiss.ProductQuantizer(self.dim, parts, 8)
        rounds.cp.min_points_per_centroid = 1
        rotation.pq = rounds
        index = faiss.IndexPreTransform(rotation, ivf)
        index.own_fields = True
        rotation.this.disown()
        ivf.this.disown()
        index.train(np.ascontiguousarray(sample))  # the rotation, then the lists and the codebook in its space
        rotation.pq = None  # only training reads it
        del sample
        self._move_into(index)
        release_free_heap()  # the exact shards, their copies and the sample are freed: hand their pages back

    def _move_into(self, trained: Any) -> None:
        """Move the exact shards into the trained index, oldest first, then swap it in.

        The exact index stays the one searched until the swap, so nothing is ever missing from a search. A
        shard is copied under the lock, encoded outside it, and dropped under the lock (dropping a shard shifts
        nothing); an entry removed or replaced meanwhile (:attr:`_moving`) is dropped from the trained index
        instead. Writes go on into the newest shard throughout; the last one moves with the swap.
        """
        exact: ExactShards = self._index
        while True:
            with self._lock:
                if len(exact.shards) <= 1:
                    for shard in exact.shards:
                        trained.add_with_ids(*exact.contents(shard))
                    self._index, self._trained, self._moving = trained, True, None
                    self._rotation = self._rotation_of(trained)
                    self.tighten()
                    return
                shard = exact.shards[0]
                vectors, labels = exact.contents(shard)
                self._moving = set()
            trained.add_with_ids(vectors, labels)
            with self._lock:
                gone = np.fromiter(self._moving & set(labels.tolist()), dtype=np.int64)
                if len(gone):
                    trained.remove_ids(self.faiss.IDSelectorBatch(gone))
                exact.shards.remove(shard)  # what is left of it (a replaced entry is in a newer shard) moved
                self._moving = None

    def tighten(self) -> None:
        """Copy each inverted list into one allocation of its size, under the lock, in the thread that trained the
        codebook: a list grows by :data:`~.inverted_lists.ROOM` at its first new code (:meth:`_make_room`), as a list
        read from a snapshot does.

        A list built by adds holds up to twice its codes (:mod:`.inverted_lists`). Given its room at this copy (as
        until ``benchmarks/results/store_index_memory_ids14.md``), each list held a thirty-second more from the start
        (1.25 B a record), kept for good by a reader never written to. Other ways of this copy, measured and reverted
        (on the caller's thread, allocated once, through two arrays, packed through a scratch mapping): ``SECURITY.md``.
        """
        with self._lock:
            if not self._trained:
                return
            ivf = self._ivf()
            old = ivf.invlists
            lists = self.faiss.ArrayInvertedLists(old.nlist, old.code_size)
            sizes = list_sizes(old)
            for at in np.flatnonzero(sizes).tolist():
                copy_list(self.faiss, old, lists, at, int(sizes[at]), int(sizes[at]))
            ivf.replace_invlists(lists, True)  # the index owns the new lists and frees the old ones
            lists.this.disown()
            self._capacity, self._used = sizes.copy(), sizes

    # -- snapshots ---------------------------------------------------------------------------------

    def copy(self) -> IndexCopy | None:
        """A copy of the whole index, to serialize with no lock held (:meth:`IndexCopy.parts`); ``None`` while a
        training runs.

        Only the copy holds the lock that writes and searches take: FAISS's ``clone_index`` of a trained index
        (rotation, codebook, lists, codes, labels), or every exact direction with its label, and what the id table
        holds (:meth:`~.id_table.IdTable.frozen`), so every label stays the same. The id table's arrays and the
        serialization are made after, with no lock held.
        """
        with self._lock:
            if self._training is not None and not self._trained:
                return None
            table = self._ids.frozen()
            trained = self._trained
            if trained:
                body: list[Any] = [self.faiss.clone_index(self._index)]
            else:
                parts = [self._index.contents(s) for s in self._index.shards]
                vectors = np.concatenate([v for v, _ in parts]) if parts else np.zeros((0, self.dim), np.float32)
                labels = np.concatenate([la for _, la in parts]) if parts else np.zeros(0, np.int64)
                body = [labels.astype("<i8").tobytes(), vectors.astype("<f4").tobytes()]
            exact = 0 if trained else len(labels)

        def made() -> list[Any]:
            hi, lo, other = table()
            header = {"dim": self.dim, "trained": trained, "ids": len(hi), "exact": exact}
            header["other"] = [[label, rid] for label, rid in other.items()]
            head = json.dumps(header, separators=(",", ":")).encode("utf-8")
            ids = [hi.astype("<i8", copy=False), lo.astype("<u8", copy=False)]
            return [struct.pack("<Q", len(head)), head, *ids, *body]

        return IndexCopy(self.faiss, made)

    def to_bytes(self) -> bytes | None:
        """The whole index as bytes (what :meth:`restore` reads); ``None`` while a training runs. A compaction
        takes :meth:`copy`'s parts instead, so as never to join them."""
        copy = self.copy()
        return None if copy is None else b"".join(copy.parts())

    def restore(self, data: bytes) -> None:
        """Replace everything held by what :meth:`to_bytes` gave (a snapshot's index).

        Raises:
            InvalidInputError: The bytes are not such an index, or one of another dimension.
        """
        try:
            (n,) = struct.unpack_from("<Q", data, 0)
            header = json.loads(data[8 : 8 + n].decode("utf-8"))
            at, ids, exact = 8 + n, int(header["ids"]), int(header["exact"])
            hi = np.frombuffer(data, dtype="<i8", count=ids, offset=at)
            lo = np.frombuffer(data, dtype="<u8", count=ids, offset=at + 8 * ids)
            at += 16 * ids
            table = IdTable.from_arrays(hi.copy(), lo.copy(), {int(k): str(v) for k, v in header["other"]})
            if int(header["dim"]) != self.dim:
                raise InvalidInputError(f"a snapshot of dimension {header['dim']} for an index of dimension {self.dim}")
            if header["trained"]:
                index = self.faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8, offset=at))
                self.faiss.extract_index_ivf(index)  # an inverted file, rotated or not (raises if not)
                rotation = self._rotation_of(index)
            else:
                labels = np.frombuffer(data, dtype="<i8", count=exact, offset=at).astype(np.int64)
                vectors = np.frombuffer(data, dtype="<f4", offset=at + 8 * exact).reshape(exact, self.dim)
                index = ExactShards(self.faiss, self.dim)
                index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), labels)
                rotation = None
        except (ValueError, KeyError, TypeError, struct.error, RuntimeError) as exc:
            raise InvalidInputError(f"a snapshot's index does not read back: {exc}") from None
        if index.ntotal != len(table):
            raise InvalidInputError("a snapshot's index and its ids disagree")
        self.wait_trained()  # a training running now would swap its own index in after this one
        with self._lock:
            self._index, self._ids, self._trained, self._moving = index, table, bool(header["trained"]), None
            self._rotation, self._training = rotation, None
            # FAISS reads each list at its exact size: a list grows by its room at its first new code
            self._capacity = list_sizes(self._ivf().invlists) if self._trained else None
            self._used = None if self._capacity is None else self._capacity.copy()
            start = not self._trained and len(self._ids) >= self.train_at
        if start:
            self._start_training()

    @property
    def lists(self) -> tuple[int, int]:
        """The inverted file's lists and how many the last search scanned (benchmarks); ``(0, 0)`` while exact."""
        with self._lock:
            if not self._trained:
                return 0, 0
            ivf = self._ivf()
            return int(ivf.nlist), int(ivf.nprobe)

    @property
    def bytes_per_record(self) -> int:
        """What FAISS holds a record: its code and its int64 label once trained, else float32 and the label."""
        with self._lock:
            return (int(self._ivf().code_size) if self._trained else 4 * self.dim) + 8

    @property
    def id_bytes_per_record(self) -> float:
        """What the id table's arrays hold a record (14 bytes a keyed id, plus a fixed buffer and offsets)."""
        return self._ids.nbytes / max(len(self._ids), 1)
