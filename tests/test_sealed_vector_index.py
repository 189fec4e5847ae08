"""The store-held index's FAISS cache: tightening its inverted lists keeps every entry, and the bulk steps that
leave freed heap behind (a codebook swapped in, a snapshot loaded, a long read, a compaction) hand it back."""

from __future__ import annotations

import gc
import math

import faiss
import numpy as np
from _store_index_helpers import DIM, process, vectors, write_in_batches

from textcrafter_rag.sealed import store_index, vector_index
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
    for start in range(0, n, 50):  # many small adds: each list grows by FAISS's doubling
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


def test_a_tightened_list_takes_new_codes_in_its_room_without_moving() -> None:
    index, x = _trained(1_200, 3)
    index.tighten()
    inv = index._ivf().invlists
    at = max(range(inv.nlist), key=inv.list_size)
    size, where = inv.list_size(at), _address(index, at)
    rotated = faiss.downcast_VectorTransform(index._index.chain.at(0)).apply_py(x)  # the learned rotation
    near = index._ivf().quantizer.search(rotated, 1)[1][:, 0]  # each vector's list, in the rotated space
    new = x[near == at][: math.ceil(size * vector_index._ROOM)]  # as many as the room holds
    assert len(new)
    index.add([f"n{i}" for i in range(len(new))], new)
    assert inv.list_size(at) == size + len(new)
    assert _address(index, at) == where  # no copy: FAISS alone would have doubled the list here


def test_the_swap_tightens_and_so_does_growing_by_its_share(monkeypatch) -> None:
    calls: list[str] = []
    tighten = VectorIndex.tighten
    monkeypatch.setattr(vector_index, "release_free_heap", lambda: calls.append("release") or True)
    monkeypatch.setattr(VectorIndex, "tighten", lambda self: calls.append("tighten") or tighten(self))
    x = vectors(1_000, 1)
    index = VectorIndex(DIM, code_bytes=8, train_at=600, background=False)
    index.add([f"r{i}" for i in range(600)], x[:600])  # trains, swaps, tightens, then hands the heap back
    assert calls == ["tighten", "release"]
    within = math.floor(600 * (1 + vector_index._RETIGHTEN))  # the most entries before it is tightened again
    index.add([f"r{i}" for i in range(600, within)], x[600:within])
    assert calls == ["tighten", "release"]
    index.add([f"r{within}"], x[within : within + 1])  # past that growth: tightened again
    assert calls == ["tighten", "release"] * 2


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
