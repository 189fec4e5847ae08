"""Record ids and the int64 labels FAISS keeps, in 16 bytes an id rather than a few hundred.

The store-held index holds every record's id in memory, and at a million records Python strings in two dicts
cost more than the PQ codes (about 200 B a record, measured). The default keyed ids are version-4 UUIDs, so
such an id is held as its two 64-bit halves in sorted NumPy arrays:

* the **label** FAISS stores is the first half read as an int64 (a UUID4's version nibble, bits 12-15 of it,
  is always ``0100``, so no label is ever FAISS's "none", -1);
* the second half sits beside it; ``searchsorted`` on the labels finds either.

Everything else (clear user ids, a non-canonical spelling, or a UUID4 whose first half another id already
holds: a 2**-64 event a pair, but never wrong) goes in a plain dict under a hashed label whose bits 12-15 are
``0000``, so the two kinds of label never meet. New ids wait in an unsorted buffer, merged into the sorted
arrays every :data:`_PENDING` ids (one ``O(n)`` merge per 16,384 adds: a smaller buffer holds less memory, 256 KB,
a larger one merges less often).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator, Sequence

import numpy as np

from ..errors import InvalidInputError

__all__ = ["IdTable"]

_VERSION_BITS = 0xF << 12
_UUID4_BITS = 0x4 << 12
_LOW64 = (1 << 64) - 1
_PENDING = 16_384


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


def _lookup(keys: np.ndarray, order: np.ndarray | None, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions in ``keys`` (sorted, or sorted through ``order``) of each ``hi``, and which were found."""
    view = keys if order is None else keys[order]
    pos = np.searchsorted(view, hi)
    clipped = np.minimum(pos, max(len(view) - 1, 0))
    found = (pos < len(view)) & (view[clipped] == hi) if len(view) else np.zeros(len(hi), dtype=bool)
    where = clipped if order is None else (order[clipped] if len(order) else clipped)
    return where, found


class IdTable:
    """Maps record ids to unique int64 labels (never -1) and back; not thread-safe (the index locks)."""

    def __init__(self) -> None:
        self._hi = np.empty(0, dtype=np.int64)  # sorted labels of UUID4 ids
        self._lo = np.empty(0, dtype=np.uint64)  # their second halves, aligned
        self._p_hi = np.empty(_PENDING, dtype=np.int64)  # unsorted buffer of new UUID4 ids
        self._p_lo = np.empty(_PENDING, dtype=np.uint64)
        self._pn = 0
        self._p_order: np.ndarray | None = None  # argsort of the buffer, cached until it changes
        self._other: dict[int, str] = {}  # label -> id, for every other id
        self._other_label: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._hi) + self._pn + len(self._other)

    # -- lookups --------------------------------------------------------------------------------------

    def _pending_order(self) -> np.ndarray:
        if self._p_order is None:
            self._p_order = np.argsort(self._p_hi[: self._pn], kind="stable")
        return self._p_order

    def _locate(
        self, hi: np.ndarray, lo: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per UUID4: held in the sorted arrays (and where), held in the buffer (and where), or hi taken."""
        m_at, m_hi = _lookup(self._hi, None, hi)
        p_at, p_hi = _lookup(self._p_hi[: self._pn], self._pending_order(), hi)
        in_m = m_hi & (self._lo[m_at] == lo) if len(self._hi) else m_hi
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
        m_at, m_found = _lookup(self._hi, None, labels)
        p_at, _ = _lookup(self._p_hi[: self._pn], self._pending_order(), labels)
        if len(self._hi):
            lo[m_found] = self._lo[m_at[m_found]]
        if self._pn:
            lo[~m_found] = self._p_lo[p_at[~m_found]]
        return [
            str(uuid.UUID(int=((h & _LOW64) << 64) | low)) if c else self._other[h]
            for h, low, c in zip(labels.tolist(), lo.tolist(), compact.tolist())
        ]

    def __iter__(self) -> Iterator[str]:
        yield from self.ids(self._hi)
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
        order = np.argsort(hi, kind="stable")
        at = np.searchsorted(self._hi, hi[order])
        self._hi, self._lo = np.insert(self._hi, at, hi[order]), np.insert(self._lo, at, lo[order])

    def pop(self, rids: Sequence[str]) -> np.ndarray:
        """Forget these ids: the labels of those that were held (unknown ids are ignored)."""
        ok, hi, lo = _halves(rids)
        in_m, m_at, in_p, p_at, _ = self._locate(hi, lo)
        out = [hi[ok & (in_m | in_p)]]
        if (ok & in_m).any():
            keep = np.ones(len(self._hi), dtype=bool)
            keep[m_at[ok & in_m]] = False
            self._hi, self._lo = self._hi[keep], self._lo[keep]
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
        if self._pn:
            self._merge(self._p_hi[: self._pn], self._p_lo[: self._pn])
            self._pn, self._p_order = 0, None
        return self._hi, self._lo, dict(self._other)

    @classmethod
    def from_arrays(cls, hi: np.ndarray, lo: np.ndarray, other: dict[int, str]) -> IdTable:
        """The table :meth:`arrays` gave (``hi`` sorted, ``lo`` aligned): every label as it was."""
        if hi.shape != lo.shape or (len(hi) > 1 and not bool(np.all(hi[1:] > hi[:-1]))):
            raise InvalidInputError("a snapshot's id table is not sorted and aligned")
        table = cls()
        table._hi, table._lo = hi.astype(np.int64), lo.astype(np.uint64)
        table._other = {int(k): str(v) for k, v in other.items()}
        table._other_label = {v: k for k, v in table._other.items()}
        return table

    @property
    def nbytes(self) -> int:
        """Bytes the NumPy arrays hold (the dict of other ids is not counted)."""
        return self._hi.nbytes + self._lo.nbytes + self._p_hi.nbytes + self._p_lo.nbytes
