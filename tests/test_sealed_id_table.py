"""The store-held index's id table: every id comes back exactly, labels are unique, collisions are never wrong."""

from __future__ import annotations

import uuid

import faiss
import numpy as np
import pytest

from textcrafter_rag.sealed import exact_shards, id_table
from textcrafter_rag.sealed.id_table import IdTable
from textcrafter_rag.sealed.vector_index import VectorIndex


def _uuids(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(n)]


def test_ids_round_trip_through_labels_across_a_merge() -> None:
    table = IdTable()
    ids = _uuids(id_table._PENDING + 500, 0)  # past the buffer: one merge into the sorted arrays
    labels, held = table.add(ids)
    assert not held.any() and len(table) == len(ids)
    assert len(set(labels.tolist())) == len(ids) and (labels != -1).all()
    assert table.ids(labels) == ids
    assert sorted(table) == sorted(ids)
    again, held = table.add(ids[:10] + ids[-10:])
    assert held.all() and again.tolist() == labels[:10].tolist() + labels[-10:].tolist()


def test_a_keyed_id_costs_fourteen_bytes() -> None:
    table = IdTable()
    n = 3 * id_table._PENDING
    table.add(_uuids(n, 1))
    buffer, offsets = 16 * id_table._PENDING, 4 * (id_table._BUCKETS + 1)
    assert table._pn == 0  # all merged
    assert table.nbytes - buffer - offsets == 14 * n  # 48 bits of the label beside the 64-bit second half


def _crowded_uuids(n: int, seed: int) -> list[str]:
    """UUID4s of both signs whose first halves share a few buckets (their top 16 bits), many to a bucket."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        top = int(rng.choice([0x0000, 0x7FFF, 0x8000, 0xFFFF, 0x1234]))
        rest = int(rng.integers(0, 1 << 48)) if rng.random() < 0.8 else int(rng.integers(0, 8))  # neighbours too
        lo = int(rng.integers(0, 1 << 62))
        out.append(str(uuid.UUID(int=(top << 112) | (rest << 64) | lo, version=4)))
    return list(dict.fromkeys(out))


def test_the_bucketed_halves_answer_as_a_dict_would_through_merges_and_pops() -> None:
    """Adds and pops in rounds, across merges of the buffer, checked against a plain dict of id -> label."""
    rng = np.random.default_rng(11)
    pool = _crowded_uuids(3 * id_table._PENDING, 12)
    table, held = IdTable(), {}
    for round_ in range(6):
        fresh = [rid for rid in pool[round_ * 7_000 : (round_ + 1) * 7_000] if rid not in held]
        labels, was = table.add(fresh)
        assert not was.any()
        held.update(zip(fresh, labels.tolist()))
        gone = [rid for rid in held if rng.random() < 0.1]
        assert sorted(table.pop(gone).tolist()) == sorted(held.pop(rid) for rid in gone)
        probe = list(held)[::97] + gone[:50] + _uuids(20, 100 + round_)
        expect = [held.get(rid, -1) for rid in probe]
        assert table.labels(probe).tolist() == expect
        assert table.ids([label for label in expect if label != -1]) == [rid for rid in probe if rid in held]
        assert sorted(table) == sorted(held) and len(table) == len(held)
    hi, lo, other = table.arrays()
    assert (np.diff(hi) > 0).all() and other  # first halves shared by two ids: the second is "other"
    again = IdTable.from_arrays(hi, lo, other)
    assert again.labels(list(held)).tolist() == list(held.values())


def test_frozen_gives_the_arrays_as_they_were_whatever_the_table_does_after() -> None:
    """A compaction takes :meth:`IdTable.frozen` under its lock and makes the arrays after, while writes change the
    table: the buffer of new ids is written in place, and the bucket offsets with every merge."""
    pool = _crowded_uuids(2 * id_table._PENDING, 13)
    table = IdTable()
    table.add(pool[: id_table._PENDING + 500])  # merged into the sorted arrays, and 500 in the buffer
    table.add(["user-1", "user-2"])
    before = table.arrays()
    frozen = table.frozen()
    table.pop([*pool[:300], *pool[id_table._PENDING : id_table._PENDING + 100], "user-1"])  # from both, and other
    table.add(pool[id_table._PENDING + 500 :])  # the buffer overwritten, then merged
    table.add(["user-3"])
    hi, lo, other = frozen()
    assert np.array_equal(hi, before[0]) and np.array_equal(lo, before[1]) and other == before[2]
    assert all(np.array_equal(a, b) for a, b in zip(frozen()[:2], (hi, lo), strict=True))  # the same, called again
    assert len(hi) + len(other) == id_table._PENDING + 502 and (np.diff(hi) > 0).all()
    again = IdTable.from_arrays(hi, lo, other)
    assert again.labels([*pool[: id_table._PENDING + 500], "user-1"]).min() != -1
    assert len(table.arrays()[0]) != len(hi)


def test_pop_forgets_ids_in_the_sorted_arrays_and_in_the_buffer() -> None:
    table = IdTable()
    ids = _uuids(id_table._PENDING + 100, 2)
    labels, _ = table.add(ids)
    gone = [ids[3], ids[-3], "not-held", str(uuid.uuid4())]
    popped = table.pop(gone)
    assert sorted(popped.tolist()) == sorted([labels[3], labels[-1 - 2]])
    assert table.labels(gone).tolist() == [-1, -1, -1, -1]
    assert len(table) == len(ids) - 2
    assert ids[3] not in set(table) and ids[4] in set(table)


def test_two_uuids_with_one_first_half_both_come_back() -> None:
    first = uuid.UUID(_uuids(1, 3)[0])
    twin = uuid.UUID(int=(first.int >> 64 << 64) | (first.int & ((1 << 64) - 1)) ^ 0xFF)
    assert str(twin)[14] == "4" and twin != first
    table = IdTable()
    labels, _ = table.add([str(first)])
    twin_label, held = table.add([str(twin)])
    assert not held.any() and twin_label[0] != labels[0]
    assert table.ids([labels[0], twin_label[0]]) == [str(first), str(twin)]
    both, _ = IdTable().add([str(first), str(twin)])  # in one batch too
    assert both[0] != both[1]
    assert table.pop([str(twin)]).tolist() == [twin_label[0]] and table.ids(labels) == [str(first)]


@pytest.mark.parametrize("rid", ["user-7", "B5D6E1A0-0000-4000-8000-000000000001", "", "ünïcode id"])
def test_other_ids_are_held_as_they_are(rid: str) -> None:
    table = IdTable()
    labels, held = table.add([rid, *_uuids(3, 4)])
    assert not held.any()
    assert table.ids(labels[:1]) == [rid]
    assert (labels[0] >> 12) & 0xF != 4  # never a UUID4 label
    assert table.pop([rid]).tolist() == [labels[0]] and len(table) == 3


def test_the_trained_index_finds_upserts_and_forgets_by_id() -> None:
    rng = np.random.default_rng(5)
    ids = [*_uuids(3000, 5), *(f"clear-{i}" for i in range(100))]
    x = rng.standard_normal((len(ids), 32)).astype(np.float32)
    index = VectorIndex(32, code_bytes=8, train_at=1000, background=False)
    for start in range(0, len(ids), 700):
        index.add(ids[start : start + 700], x[start : start + 700])
    assert index.trained and len(index) == len(ids)
    for i in (0, 1500, 3050):
        assert ids[i] in index.search(x[i], 20)
    index.add([ids[0]], x[1:2])  # an upsert replaces the vector, never adds a second entry
    assert len(index) == len(ids) and ids[0] in index.search(x[1], 5)
    assert index.remove([ids[1500], ids[3050], "unknown"]) == 2
    assert ids[1500] not in index.search(x[1500], 50) and ids[3050] not in index.search(x[3050], 50)
    assert sorted(index.ids()) == sorted(set(ids) - {ids[1500], ids[3050]})


class _WritesDuringEncoding:
    """The trained index, whose first encoding step lets a writer remove one id and replace another."""

    def __init__(self, ivf, during) -> None:
        self.ivf, self.during, self.calls = ivf, during, 0

    def add_with_ids(self, vectors, labels) -> None:
        self.calls += 1
        if self.calls == 1:
            self.during()  # a write at this exact point: after the chunk was copied, before it is dropped
        self.ivf.add_with_ids(vectors, labels)

    def remove_ids(self, selector) -> int:
        return self.ivf.remove_ids(selector)

    def __getattr__(self, name):  # everything else (search, the inverted lists) is the trained index's
        return getattr(self.ivf, name)


def test_moving_into_the_trained_index_loses_no_write_made_meanwhile(monkeypatch) -> None:
    monkeypatch.setattr(exact_shards, "SHARD", 1_000)
    rng = np.random.default_rng(6)
    ids = _uuids(3_000, 6)
    x = rng.standard_normal((3_000, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    index = VectorIndex(32, code_bytes=32, train_at=1 << 30, background=False)  # never trains by itself
    index.add(ids, x)
    assert len(index._index.shards) == 3  # full shards are never copied: a new one is started
    ivf = faiss.IndexIVFPQ(faiss.IndexFlatIP(32), 32, 8, 32, 8, faiss.METRIC_INNER_PRODUCT)
    ivf.by_residual = False
    ivf.train(x)
    fresh = -x[10:11]

    def during() -> None:
        index.remove([ids[5]])  # in the chunk being encoded
        index.add([ids[10]], fresh)  # replaced: the new vector must win
        index.add(["late"], x[:1])  # a new entry: still searchable throughout

    spy = _WritesDuringEncoding(ivf, during)
    index._move_into(spy)
    assert spy.calls == 4 and index.trained  # three full shards one by one, then the newest with the swap
    index._index = ivf  # the spy stood in for the trained index
    assert len(index) == ivf.ntotal == 3_000  # 3,000 - 1 removed + 1 late
    inv = ivf.invlists
    held = [int(v) for li in range(ivf.nlist) for v in faiss.rev_swig_ptr(inv.get_ids(li), inv.list_size(li))]
    assert len(held) == len(set(held)) == 3_000  # no label twice: a replaced entry's old copy was dropped
    assert ids[5] not in index.search(x[5], 50)
    assert index.search(fresh[0], 1) == [ids[10]] and ids[10] not in index.search(x[10], 3)
    assert "late" in index.search(x[0], 5)


def test_the_index_says_which_ids_it_holds_whatever_the_sign_of_their_labels() -> None:
    """Labels are any int64 but -1 (half of all UUID4 first halves are negative): held means not -1."""
    rng = np.random.default_rng(3)
    ids = [str(uuid.UUID(int=int(rng.integers(0, 2**62)) << 66 | 0x4 << 76 | i, version=4)) for i in range(40)]
    ids += ["not-a-uuid", "UPPER-" + ids[0]]
    index = VectorIndex(8, code_bytes=8, train_at=1_000)
    index.add(ids[:30] + ids[40:], rng.standard_normal((32, 8)))
    labels = IdTable()
    labels.add(ids)
    assert (labels.labels(ids) < 0).any() and (labels.labels(ids) > 0).any()  # both signs occur
    assert index.holds(ids) == [True] * 30 + [False] * 10 + [True, True]
    index.remove(ids[:5])
    assert index.holds(ids[:6]) == [False] * 5 + [True]
