"""Record ids and the int64 labels FAISS keeps, in 14 bytes an id rather than a few hundred.

The store-held index holds every record's id in memory, and at a million records Python strings in two dicts
cost more than the PQ codes (about 200 B a record, measured). The default keyed ids are version-4 UUIDs, so
such an id is held as its two 64-bit halves, sorted by the first:

* the **label** FAISS stores is the first half read as an int64 (a UUID4's version nibble, bits 12-15 of it,
  is always ``0100``, so no label is ever FAISS's "none", -1);
* FAISS already holds each label (8 bytes in its list), so the table does not hold it whole again: its top 16
  bits are the table's bucket (one offset a bucket, 256 KB in all) and only its other 48 bits are held, beside
  the second half (:class:`_SortedHalves`): 14 bytes an id where the two halves take 16. A lookup is a binary
  search within the id's bucket.

Everything else (clear user ids, a non-canonical spelling, or a UUID4 whose first half another id already
holds: a 2**-64 event a pair, but never wrong) goes in a plain dict under a hashed label whose bits 12-15 are
``0000``, so the two kinds of label never meet. New ids wait in an unsorted buffer, merged into the sorted
arrays every :data:`_PENDING` ids (one ``O(n)`` merge per 16,384 adds: a smaller buffer holds less memory, 256 KB,
a larger one merges less often).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from ..errors import InvalidInputError

__all__ = ["IdTable"]

_VERSION_BITS = 0xF << 12
_UUID4_BITS = 0x4 << 12
_LOW64 = (1 << 64) - 1
_PENDING = 16_384
#: Buckets of the sorted first halves, by their top 16 bits.
_BUCKETS = 1 << 16
_KEY_BITS = (1 << 48) - 1


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


def _halves(rids: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each id: whether it is a canonical (lower-case, dashed) version-4 UUID, and its two halves if so."""
    n = len(rids)
    ok, hi, lo = np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.uint64)
    for i, rid in enumerate(rids):
        if len(rid) != 36 or rid[14] != "4":
            continue
        try:
            u = uuid.UUID(rid)
        except ValueError:
            continue
        if str(u) == rid:
            ok[i], hi[i], lo[i] = True, _signed(u.int >> 64), u.int & _LOW64
    return ok, hi, lo


def _other_label(rid: str, salt: int) -> int:
    digest = hashlib.blake2b(f"{salt}:{rid}".encode(), digest_size=8).digest()
    return _signed(int.from_bytes(digest, "big") & ~_VERSION_BITS)


def _lookup(keys: np.ndarray, order: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions in ``keys`` (unsorted: ``order`` sorts them, as for the buffer of new ids) of each ``hi``, and
    which were found."""
    view = keys[order]
    pos = np.searchsorted(view, hi)
    clipped = np.minimum(pos, max(len(view) - 1, 0))
    found = (pos < len(view)) & (view[clipped] == hi) if len(view) else np.zeros(len(hi), dtype=bool)
    return (order[clipped] if len(order) else clipped), found


class _SortedHalves:
    """UUID4 halves sorted by the first, which is held as its bucket (its top 16 bits) and its other 48 bits.

    ``top[b]`` is where bucket ``b`` starts; within a bucket the entries are sorted by their 48 bits, so the order
    is that of the first halves as int64 (the bucket is the top 16 bits read as signed, plus 2**15).
    """

    def __init__(self) -> None:
        self.top = np.zeros(_BUCKETS + 1, dtype=np.uint32)
        self.mid = np.empty(0, dtype=np.uint16)  # bits 32-47 of each first half
        self.low = np.empty(0, dtype=np.uint32)  # bits 0-31
        self.lo = np.empty(0, dtype=np.uint64)  # the second halves, aligned

    def __len__(self) -> int:
        return len(self.lo)

    @staticmethod
    def _split(hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (hi >> 48) + (_BUCKETS >> 1), hi & _KEY_BITS

    def _key(self, at: np.ndarray) -> np.ndarray:
        return (self.mid[at].astype(np.int64) << 32) | self.low[at].astype(np.int64)

    def find(self, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each first half is or would go (its lower bound), and whether it is held there."""
        hi = np.asarray(hi, dtype=np.int64)
        bucket, key = self._split(hi)
        start, end = self.top[bucket].astype(np.int64), self.top[bucket + 1].astype(np.int64)
        if not len(self):
            return start, np.zeros(len(hi), dtype=bool)
        left, right = start.copy(), end.copy()
        while True:  # a binary search in each one's bucket, all at once
            active = left < right
            if not active.any():
                break
            middle = (left + right) >> 1
            below = active & (self._key(np.where(active, middle, 0)) < key)
            left = np.where(below, middle + 1, left)
            right = np.where(active & ~below, middle, right)
        found = (left < end) & (self._key(np.minimum(left, len(self) - 1)) == key)
        return left, found

    def first_halves(self) -> np.ndarray:
        """Every first half, in order (a copy: 8 bytes an entry, while it lives)."""
        counts = np.diff(self.top.astype(np.int64))
        bucket = np.repeat(np.arange(_BUCKETS, dtype=np.int64) - (_BUCKETS >> 1), counts)
        return (bucket << 48) | self._key(np.arange(len(self)))

    def insert(self, hi: np.ndarray, lo: np.ndarray) -> None:
        """Hold these (new, distinct) halves."""
        order = np.argsort(hi, kind="stable")
        hi, lo = hi[order], lo[order]
        at, _ = self.find(hi)
        bucket, key = self._split(hi)
        self.mid = np.insert(self.mid, at, (key >> 32).astype(np.uint16))
        self.low = np.insert(self.low, at, (key & 0xFFFFFFFF).astype(np.uint32))
        self.lo = np.insert(self.lo, at, lo)
        self.top[1:] += np.cumsum(np.bincount(bucket, minlength=_BUCKETS)).astype(np.uint32)

    def drop(self, at: np.ndarray, hi: np.ndarray) -> None:
        """Forget the entries at ``at`` (held, distinct), whose first halves are ``hi``."""
        keep = np.ones(len(self), dtype=bool)
        keep[at] = False
        self.mid, self.low, self.lo = self.mid[keep], self.low[keep], self.lo[keep]
        bucket, _ = self._split(np.asarray(hi, dtype=np.int64))
        self.top[1:] -= np.cumsum(np.bincount(bucket, minlength=_BUCKETS)).astype(np.uint32)

    @property
    def nbytes(self) -> int:
        return self.top.nbytes + self.mid.nbytes + self.low.nbytes + self.lo.nbytes


class IdTable:
    """Maps record ids to unique int64 labels (never -1) and back; not thread-safe (the index locks)."""

    def __init__(self) -> None:
        self._sorted = _SortedHalves()  # UUID4 ids merged
        self._p_hi = np.empty(_PENDING, dtype=np.int64)  # unsorted buffer of new UUID4 ids
        self._p_lo = np.empty(_PENDING, dtype=np.uint64)
        self._pn = 0
        self._p_order: np.ndarray | None = None  # argsort of the buffer, cached until it changes
        self._other: dict[int, str] = {}  # label -> id, for every other id
        self._other_label: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._sorted) + self._pn + len(self._other)

    # -- lookups --------------------------------------------------------------------------------------

    def _pending_order(self) -> np.ndarray:
        if self._p_order is None:
            self._p_order = np.argsort(self._p_hi[: self._pn], kind="stable")
        return self._p_order

    def _locate(
        self, hi: np.ndarray, lo: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per UUID4: held in the sorted arrays (and where), held in the buffer (and where), or hi taken."""
        m_at, m_hi = self._sorted.find(hi)
        p_at, p_hi = _lookup(self._p_hi[: self._pn], self._pending_order(), hi)
        in_m = m_hi & (self._sorted.lo[np.minimum(m_at, len(self._sorted) - 1)] == lo) if len(self._sorted) else m_hi
        in_p = p_hi & (self._p_lo[p_at] == lo) if self._pn else p_hi
        return in_m, m_at, in_p, p_at, (m_hi | p_hi) & ~in_m & ~in_p

    def labels(self, rids: Sequence[str]) -> np.ndarray:
        """The label of each id, -1 where it is not held."""
        ok, hi, lo = _halves(rids)
        out = np.full(len(rids), -1, dtype=np.int64)
        in_m, _, in_p, _, _ = self._locate(hi, lo)
        out[ok & (in_m | in_p)] = hi[ok & (in_m | in_p)]
        for i, rid in enumerate(rids):
            if rid in self._other_label:
                out[i] = self._other_label[rid]
        return out

    def ids(self, labels: Sequence[int] | np.ndarray) -> list[str]:
        """The ids of these labels (each one held), in order."""
        labels = np.asarray(labels, dtype=np.int64)
        compact = (labels & _VERSION_BITS) == _UUID4_BITS
        lo = np.zeros(len(labels), dtype=np.uint64)
        m_at, m_found = self._sorted.find(labels)
        p_at, _ = _lookup(self._p_hi[: self._pn], self._pending_order(), labels)
        if len(self._sorted):
            lo[m_found] = self._sorted.lo[m_at[m_found]]
        if self._pn:
            lo[~m_found] = self._p_lo[p_at[~m_found]]
        return [
            str(uuid.UUID(int=((h & _LOW64) << 64) | low)) if c else self._other[h]
            for h, low, c in zip(labels.tolist(), lo.tolist(), compact.tolist())
        ]

    def __iter__(self) -> Iterator[str]:
        yield from self.ids(self._sorted.first_halves())
        yield from self.ids(self._p_hi[: self._pn])
        yield from list(self._other.values())

    # -- changes --------------------------------------------------------------------------------------

    def add(self, rids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Hold these (distinct) ids: each one's label, and whether it was held already (its vector is replaced)."""
        ok, hi, lo = _halves(rids)
        in_m, _, in_p, _, taken = self._locate(hi, lo)
        labels, held = hi.copy(), ok & (in_m | in_p)
        fresh = ok & ~held & ~taken
        first = np.zeros(len(rids), dtype=bool)  # one id a first half: two in one batch, the second is "other"
        _, at = np.unique(hi[fresh], return_index=True)
        first[np.flatnonzero(fresh)[at]] = True
        for i in np.flatnonzero(~(held | first)).tolist():
            rid = rids[i]
            if rid in self._other_label:
                labels[i], held[i] = self._other_label[rid], True
                continue
            salt, label = 0, _other_label(rid, 0)
            while label in self._other:  # a hash collision between two other ids: the next salt
                salt += 1
                label = _other_label(rid, salt)
            self._other[label], self._other_label[rid], labels[i] = rid, label, label
        self._append(hi[first], lo[first])
        return labels, held

    def _append(self, hi: np.ndarray, lo: np.ndarray) -> None:
        if self._pn + len(hi) > _PENDING:
            self._merge(self._p_hi[: self._pn], self._p_lo[: self._pn])
            self._pn = 0
        if len(hi) > _PENDING:
            self._merge(hi, lo)
        elif len(hi):
            self._p_hi[self._pn : self._pn + len(hi)], self._p_lo[self._pn : self._pn + len(hi)] = hi, lo
            self._pn += len(hi)
        self._p_order = None

    def _merge(self, hi: np.ndarray, lo: np.ndarray) -> None:
        self._sorted.insert(hi, lo)

    def pop(self, rids: Sequence[str]) -> np.ndarray:
        """Forget these ids: the labels of those that were held (unknown ids are ignored)."""
        ok, hi, lo = _halves(rids)
        in_m, m_at, in_p, p_at, _ = self._locate(hi, lo)
        out = [hi[ok & (in_m | in_p)]]
        if (ok & in_m).any():
            self._sorted.drop(m_at[ok & in_m], hi[ok & in_m])
        if (ok & in_p).any():
            keep = np.ones(self._pn, dtype=bool)
            keep[p_at[ok & in_p]] = False
            n = int(keep.sum())
            self._p_hi[:n], self._p_lo[:n] = self._p_hi[: self._pn][keep], self._p_lo[: self._pn][keep]
            self._pn, self._p_order = n, None
        others = [self._other_label.pop(rid) for rid in rids if rid in self._other_label]
        for label in others:
            del self._other[label]
        return np.concatenate([*out, np.asarray(others, dtype=np.int64)])

    # -- snapshots ------------------------------------------------------------------------------------
    def arrays(self) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
        """Everything held, for a snapshot: the sorted UUID4 labels, their second halves, and the other ids."""
        return self.frozen()()

    def frozen(self) -> Callable[[], tuple[np.ndarray, np.ndarray, dict[int, str]]]:
        """:meth:`arrays` in two steps, so a compaction's lock covers only the first: what is held now (the sorted
        arrays themselves, which no change writes into, since each makes new ones; copies of the rest, the buffer
        of new ids and the bucket offsets: a few hundred KB, and the other ids), and a function that makes the
        arrays from it, with no lock, whatever the table does meanwhile."""
        held, now = _SortedHalves(), self._sorted
        held.top, held.mid, held.low, held.lo = now.top.copy(), now.mid, now.low, now.lo
        new_hi, new_lo, other = self._p_hi[: self._pn].copy(), self._p_lo[: self._pn].copy(), dict(self._other)

        def arrays() -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
            nonlocal new_hi, new_lo
            if len(new_hi):  # the buffer merged into the copy (new arrays, its own offsets), as into the table; once
                held.insert(new_hi, new_lo)
                new_hi, new_lo = new_hi[:0], new_lo[:0]
            return held.first_halves(), held.lo, other

        return arrays

    @classmethod
    def from_arrays(cls, hi: np.ndarray, lo: np.ndarray, other: dict[int, str]) -> IdTable:
        """The table :meth:`arrays` gave (``hi`` sorted, ``lo`` aligned): every label as it was."""
        if hi.shape != lo.shape or (len(hi) > 1 and not bool(np.all(hi[1:] > hi[:-1]))):
            raise InvalidInputError("a snapshot's id table is not sorted and aligned")
        table = cls()
        table._sorted.insert(hi.astype(np.int64), lo.astype(np.uint64))
        table._other = {int(k): str(v) for k, v in other.items()}
        table._other_label = {v: k for k, v in table._other.items()}
        return table

    @property
    def nbytes(self) -> int:
        """Bytes the NumPy arrays hold (the dict of other ids is not counted)."""
        return self._sorted.nbytes + self._p_hi.nbytes + self._p_lo.nbytes
