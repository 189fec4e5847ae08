"""The store-held index's FAISS cache: tightening its inverted lists keeps every entry, and the bulk steps that
leave freed heap behind (a codebook swapped in, a snapshot loaded, a long read, a compaction) hand it back."""

from __future__ import annotations

import gc
import math
import os
import subprocess
import sys
import textwrap
import threading

import faiss
import numpy as np
import pytest
from _store_index_helpers import DIM, process, vectors, write_in_batches

from textcrafter_rag.errors import InvalidInputError, NotSupportedError
from textcrafter_rag.sealed import inverted_lists, store_index, vector_index
from textcrafter_rag.sealed.vector_index import VectorIndex
from textcrafter_rag.testing.memory_port import MemoryPort


def _lists(index: VectorIndex) -> list[tuple[list[int], bytes]]:
    """Every inverted list's labels and codes, in order."""
    inv = index._ivf().invlists
    out = []
    for at in range(inv.nlist):
        n = inv.list_size(at)
        ids = faiss.rev_swig_ptr(inv.get_ids(at), n).tolist() if n else []
        codes = faiss.rev_swig_ptr(inv.get_codes(at), n * inv.code_size).tobytes() if n else b""
        out.append((ids, codes))
    return out


def _trained(n: int, seed: int) -> tuple[VectorIndex, np.ndarray]:
    ids = [f"r{i}" for i in range(n)]
    x = vectors(n, seed)
    index = VectorIndex(DIM, code_bytes=8, train_at=300, background=False)
    for start in range(0, n, 50):  # many small adds
        index.add(ids[start : start + 50], x[start : start + 50])
    assert index.trained
    return index, x


def test_tightening_keeps_every_list_entry_for_entry_and_the_index_goes_on_working() -> None:
    index, x = _trained(1_200, 0)
    before, found = _lists(index), [index.search(x[i], 10) for i in range(0, 1_200, 97)]
    old = index._ivf().invlists
    index.tighten()
    assert index._ivf().invlists is not old  # new lists: the old ones were freed by the index that owned them
    gc.collect()  # a second owner of the new lists (Python's) would free them here, under the index
    assert _lists(index) == before
    assert [index.search(x[i], 10) for i in range(0, 1_200, 97)] == found
    index.add(["late"], x[:1])  # lists tightened to their size grow again on the next add
    index.remove(["r5"])
    assert "late" in index.search(x[0], 5) and "r5" not in index.search(x[5], 50)
    assert len(index) == 1_200


def _address(index: VectorIndex, at: int) -> int:
    """Where list ``at``'s codes are (FAISS's arrays never grow in place: a list that grows past its capacity moves)."""
    inv = index._ivf().invlists
    return faiss.rev_swig_ptr(inv.get_codes(at), 1).__array_interface__["data"][0]


def test_a_tightened_list_is_held_at_its_size_then_takes_new_codes_in_its_room_without_moving() -> None:
    index, x = _trained(1_200, 3)
    index.tighten()
    inv = index._ivf().invlists
    assert index._capacity.tolist() == [inv.list_size(at) for at in range(inv.nlist)]  # no room yet
    at = max(range(inv.nlist), key=inv.list_size)
    size = inv.list_size(at)
    rotated = faiss.downcast_VectorTransform(index._index.chain.at(0)).apply_py(x)  # the learned rotation
    near = index._ivf().quantizer.search(rotated, 1)[1][:, 0]  # each vector's list, in the rotated space
    first, rest = x[near == at][:1], x[near == at][1 : 1 + math.ceil((size + 1) * inverted_lists.ROOM)]
    assert len(rest)
    where = _address(index, at)
    index.add(["first"], first)  # its first new code: one copy, with the room
    assert _address(index, at) != where and int(index._capacity[at]) == size + 1 + len(rest)
    where = _address(index, at)
    index.add([f"n{i}" for i in range(len(rest))], rest)  # as many as the room holds
    assert inv.list_size(at) == size + 1 + len(rest)
    assert _address(index, at) == where  # no copy: FAISS alone would have doubled the list here


def test_the_swap_tightens_once_and_hands_the_heap_back(monkeypatch) -> None:
    calls: list[str] = []
    tighten = VectorIndex.tighten
    monkeypatch.setattr(vector_index, "release_free_heap", lambda: calls.append("release") or True)
    monkeypatch.setattr(VectorIndex, "tighten", lambda self: calls.append("tighten") or tighten(self))
    x = vectors(1_000, 1)
    index = VectorIndex(DIM, code_bytes=8, train_at=600, background=False)
    index.add([f"r{i}" for i in range(600)], x[:600])  # trains, swaps, tightens, then hands the heap back
    assert calls == ["tighten", "release"]
    index.add([f"r{i}" for i in range(600, 1_000)], x[600:])  # lists grow one by one, never all at once
    assert calls == ["tighten", "release"]


def _bound_for(index: VectorIndex, x: np.ndarray, at: int) -> np.ndarray:
    """The rows of ``x`` that the index puts in list ``at``."""
    rotated = faiss.downcast_VectorTransform(index._index.chain.at(0)).apply_py(x)  # the learned rotation
    return x[index._ivf().quantizer.search(rotated, 1)[1][:, 0] == at]


def test_a_full_list_alone_grows_and_by_its_share() -> None:
    index, _ = _trained(1_200, 4)
    index.tighten()
    inv = index._ivf().invlists
    at = max(range(inv.nlist), key=inv.list_size)
    other = next(i for i in range(inv.nlist) if i != at and inv.list_size(i))
    size, capacity, where, elsewhere = (
        inv.list_size(at),
        int(index._capacity[at]),
        _address(index, at),
        _address(index, other),
    )
    assert capacity == size  # tightened to its size: its first new code is one more than its room
    bound = _bound_for(index, vectors(20_000, 5), at)
    new = bound[: capacity - size + 1]  # one more than its room
    before = _lists(index)[at][0]
    index.add([f"n{i}" for i in range(len(new))], new)
    need = size + len(new)
    grown = need + math.ceil(need * inverted_lists.ROOM)
    assert int(index._capacity[at]) == grown
    assert _address(index, at) != where and _address(index, other) == elsewhere  # that list moved, no other
    assert _lists(index)[at][0][:size] == before and inv.list_size(at) == need  # every entry kept, in order
    assert index.search(new[0], 1) == ["n0"]
    where = _address(index, at)
    fill = bound[len(new) : len(new) + grown - need]  # its new room, exactly
    index.add([f"f{i}" for i in range(len(fill))], fill)
    assert inv.list_size(at) == grown and _address(index, at) == where  # FAISS's doubling would hold far more:
    index.add(["over"], bound[len(new) + len(fill) :][:1])
    assert _address(index, at) != where  # its capacity was the share given, so one more moves it


def test_adds_code_and_file_records_as_faiss_own_add_does() -> None:
    index, _ = _trained(1_200, 6)
    twin = faiss.clone_index(index._index)  # the same rotation, lists and codes
    new = vectors(500, 7)
    index.add([f"n{i}" for i in range(500)], new)
    labels = index._ids.labels([f"n{i}" for i in range(500)])
    twin.add_with_ids(new, labels)
    theirs = faiss.extract_index_ivf(twin).invlists
    for at, (ids, codes) in enumerate(_lists(index)):
        n = theirs.list_size(at)
        assert ids == (faiss.rev_swig_ptr(theirs.get_ids(at), n).tolist() if n else [])
        assert codes == (faiss.rev_swig_ptr(theirs.get_codes(at), n * theirs.code_size).tobytes() if n else b"")
    assert index._index.ntotal == twin.ntotal == 1_700


def test_a_restored_list_grows_at_its_first_new_code_and_keeps_its_entries() -> None:
    index, x = _trained(1_200, 8)
    reader = VectorIndex(DIM, code_bytes=8, train_at=300, background=False)
    reader.restore(index.to_bytes())
    inv = reader._ivf().invlists
    assert reader._capacity.tolist() == [inv.list_size(at) for at in range(inv.nlist)]  # read at exact sizes
    at = max(range(inv.nlist), key=inv.list_size)
    size, before = inv.list_size(at), _lists(reader)[at][0]
    reader.add(["late"], _bound_for(reader, x, at)[:1])
    assert reader._capacity[at] == size + 1 + math.ceil((size + 1) * inverted_lists.ROOM)
    assert _lists(reader)[at][0][:size] == before and "late" in reader.search(x[0], 1_201)


def test_a_snapshot_loaded_and_a_long_read_hand_the_heap_back(monkeypatch) -> None:
    port, x = MemoryPort(), vectors(400, 2)
    released: list[int] = []
    monkeypatch.setattr(store_index, "release_free_heap", lambda: released.append(1) or True)
    monkeypatch.setattr(store_index, "_RELEASE_AFTER", 150)
    writer = process(port)
    write_in_batches(writer, x[:100], prefix="r")
    assert released == []  # 100 entries applied: below the threshold
    write_in_batches(writer, x[100:200], prefix="r", first=100)
    assert len(released) == 1  # the write that crossed 150 entries
    released.clear()
    reader = process(port)
    assert len(reader.candidates(x[0], 3)) == 3  # reads 200 entries from the log: once past 150
    assert len(released) == 1
    released.clear()
    assert writer.compact()  # tightens (an exact index: nothing to do), stores, then hands the heap back
    assert len(released) == 1
    released.clear()
    fresh = process(port)
    assert fresh.candidates(x[7], 1) == ["r7"] and fresh.snapshots.loaded == 1
    assert len(released) == 1  # the snapshot loaded (200 entries, not applied one by one)


def test_the_codes_are_residuals_after_a_learned_rotation_code_bytes_each() -> None:
    index, x = _trained(1_200, 5)
    rotation = faiss.downcast_VectorTransform(index._index.chain.at(0))
    assert isinstance(rotation, faiss.OPQMatrix)
    assert np.allclose(rotation.apply_py(x[:5]), x[:5] @ index._rotation.T, atol=1e-5)  # a query's, done in NumPy
    assert index._ivf().by_residual and index._ivf().code_size == 8 == index.bytes_per_record - 8
    index.search(x[0], 10)
    assert index.lists == (index._ivf().nlist, index._ivf().nprobe) and index.lists[0] > 1
    assert VectorIndex(DIM, code_bytes=8, train_at=300).lists == (0, 0)  # exact: no lists
    restored = VectorIndex(DIM, code_bytes=8, train_at=300, background=False)
    restored.restore(index.to_bytes())
    queries = range(0, 1_200, 97)
    assert [restored.search(x[i], 10) for i in queries] == [index.search(x[i], 10) for i in queries]


def test_a_snapshot_of_unrotated_codes_still_opens_searches_and_takes_new_codes() -> None:
    """Snapshots written before the rotation hold a plain ``IndexIVFPQ`` of each direction's own codes."""
    x, ids = vectors(1_000, 4), [f"r{i}" for i in range(1_000)]
    old = VectorIndex(DIM, code_bytes=8, train_at=1 << 30, background=False)  # never trains by itself
    old.add(ids[:900], x[:900])
    ivf = faiss.IndexIVFPQ(faiss.IndexFlatIP(DIM), DIM, 8, 8, 8, faiss.METRIC_INNER_PRODUCT)
    ivf.by_residual = False
    ivf.train(x[:900])
    old._move_into(ivf)  # as earlier releases trained it
    fresh = VectorIndex(DIM, code_bytes=8, train_at=300, background=False)
    fresh.restore(old.to_bytes())
    assert fresh.trained and not isinstance(fresh._index, faiss.IndexPreTransform) and fresh._rotation is None
    assert fresh.search(x[3], 10) == old.search(x[3], 10)
    fresh.add(ids[900:], x[900:])
    fresh.remove(["r5"])
    assert len(fresh) == 999 and fresh.bytes_per_record == 16
    assert "r950" in fresh.search(x[950], 20) and "r5" not in fresh.search(x[5], 50)


def test_a_small_sample_is_warned_of_by_the_codebook_alone_not_at_each_round_of_the_rotation(capfd) -> None:
    """FAISS prints a warning from C++ for each k-means on fewer than 39 points a centroid: the rotation's 50
    rounds of product quantizer training would print one a sub-quantizer each (400 lines here)."""
    _trained(1_200, 6)
    warned = [line for line in capfd.readouterr().err.splitlines() if line.startswith("WARNING clustering")]
    assert 0 < len(warned) <= 8  # the codebook's own 8 sub-quantizers at most


def test_a_vector_with_nan_is_refused_before_anything_changes() -> None:
    index, x = _trained(1_200, 9)
    bad = x[:2].copy()
    bad[1, 3] = np.nan  # FAISS would file it in no list: stored, and found by no search
    with pytest.raises(InvalidInputError, match="NaN"):
        index.add(["a", "b"], bad)
    assert len(index) == 1_200 and not any(index.holds(["a", "b"]))


def test_a_snapshot_holds_writes_back_for_the_copy_only_not_the_serialization(monkeypatch) -> None:
    index, x = _trained(1_200, 10)
    free: list[bool] = []
    serialize = faiss.serialize_index

    def watched(copy):  # FAISS's serialization, with a look at the index's lock from another thread meanwhile
        def probe() -> None:
            got = index._lock.acquire(blocking=False)
            free.append(got)
            if got:
                index._lock.release()

        thread = threading.Thread(target=probe)
        thread.start()
        thread.join()
        return serialize(copy)

    monkeypatch.setattr(faiss, "serialize_index", watched)
    data = index.to_bytes()
    assert free == [True]  # a write could have taken the lock while the bytes were made
    reader = VectorIndex(DIM, code_bytes=8, train_at=300, background=False)
    reader.restore(data)
    assert [reader.search(x[i], 10) for i in range(0, 1_200, 97)] == [
        index.search(x[i], 10) for i in range(0, 1_200, 97)
    ]


@pytest.mark.parametrize("trained", [True, False])
def test_a_copy_gives_its_parts_once_and_they_join_into_the_index_s_bytes(trained: bool) -> None:
    index, _ = _trained(1_200, 11) if trained else (VectorIndex(DIM, code_bytes=8, train_at=10_000), None)
    if not trained:
        index.add([f"e{i}" for i in range(30)], vectors(30, 11))
    copy = index.copy()
    assert copy is not None
    parts = copy.parts()
    assert any(isinstance(p, np.ndarray) for p in parts)  # the id table's arrays (and FAISS's bytes), never joined
    assert b"".join(parts) == index.to_bytes()
    with pytest.raises(NotSupportedError, match="once"):
        copy.parts()


_THREADS_PROBE = textwrap.dedent(
    """
    import faiss, numpy as np
    from textcrafter_rag.sealed import vector_index
    from textcrafter_rag.sealed.vector_index import VectorIndex

    seen, parts = [], vector_index._sub_quantizers
    def probe(dim, code_bytes):  # called in the training thread, after its setting
        seen.append(faiss.omp_get_max_threads())
        return parts(dim, code_bytes)
    vector_index._sub_quantizers = probe
    x = np.random.default_rng(0).standard_normal((600, 16)).astype(np.float32)
    index = VectorIndex(16, code_bytes=8, train_at=600)
    index.add([f"r{i}" for i in range(600)], x)
    assert index.wait_trained(600)
    print(seen[0], faiss.omp_get_max_threads())
    """
)


def test_a_background_training_runs_faiss_on_one_thread_and_leaves_every_other_threads_setting() -> None:
    """With FAISS's team of OpenMP threads for the training thread's calls, a process built from a log of 1,000,000
    records grew by 112 B a record, where one thread gives 68 B (``store_index_memory_threads_before.md``,
    ``store_index_memory_threads.md``). The setting is the training thread's own: the caller's threads keep theirs."""
    env = {**os.environ, "OMP_NUM_THREADS": "3", "OMP_WAIT_POLICY": "passive"}
    out = subprocess.run([sys.executable, "-c", _THREADS_PROBE], env=env, capture_output=True, text=True, check=True)
    in_training, caller = (int(v) for v in out.stdout.split())
    assert (in_training, caller) == (1, 3)
