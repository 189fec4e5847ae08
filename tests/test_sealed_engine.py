"""The sealed-search engine (``textcrafter_rag.sealed.engine``): one algorithm a mode, run by a sync and an async
driver that must ask the store the same things and return the same records."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from textcrafter_rag.sealed import PortRecord, StoreIndexSearch
from textcrafter_rag.sealed.candidates import TwoStageSearch
from textcrafter_rag.sealed.core import SealedSearch
from textcrafter_rag.sealed.engine import (
    Query,
    ReadIds,
    SearchStore,
    add_records,
    arun,
    clear_records,
    delete_records,
    run,
)
from textcrafter_rag.sealed.modes import MODES
from textcrafter_rag.sealed.modes.candidates import CandidateSearch
from textcrafter_rag.sealed.modes.store_index import StoreIndexMode
from textcrafter_rag.sealed.records import ID_FIELD
from textcrafter_rag.sealed.replica import port_hit_fields
from textcrafter_rag.sealed.sizing import OPEN_K_MOST, sized
from textcrafter_rag.sealed.store_index import EXACT_EXTRA
from textcrafter_rag.sealing import SecretKey
from textcrafter_rag.testing.memory_port import MemoryPort

KEY = SecretKey(bytes(range(32)))
DIM = 16


def vectors(n: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def stored(core: SealedSearch, port: MemoryPort, x: np.ndarray) -> list[str]:
    """Records written in the adapters' order (index entries first, then the sealed records)."""
    ids = [f"r{i}" for i in range(len(x))]
    if core.mode != "candidates":
        core.index_add(ids, x)
    fields = core.record_fields(x, ids, [f"sealed {i}" for i in ids])
    keyed = core.store_vectors(x, ids)
    port.put(
        [
            PortRecord(i, f"sealed {i}", {**f, ID_FIELD: i}, v.tolist())
            for i, f, v in zip(ids, fields, keyed, strict=True)
        ]
    )
    return ids


class Asked:
    """The store's side: what each driver asked, answered from a MemoryPort."""

    def __init__(self, port: MemoryPort) -> None:
        self.port, self.requests, self.threads = port, [], set()

    def search(self, vector: list[float], k: int) -> list[PortRecord]:
        self.requests.append(("search", k))
        return self.port.search(vector, k)

    def read(self, ids: list[str]) -> list[PortRecord]:
        self.requests.append(("read", tuple(ids)))
        return self.port.get(ids)

    async def asearch(self, vector: list[float], k: int) -> list[PortRecord]:
        return self.search(vector, k)

    async def aread(self, ids: list[str]) -> list[PortRecord]:
        return self.read(ids)


@pytest.mark.parametrize(
    "options", [TwoStageSearch(open_k=40), StoreIndexSearch(open_k=10)], ids=["candidates", "index"]
)
def test_the_sync_and_async_drivers_ask_the_same_and_find_the_same(options) -> None:
    port, x = MemoryPort(), vectors(60, 0)
    core = SealedSearch(KEY, tenant="t", options=options)
    if core.mode != "candidates":
        core.attach(port)  # the store-held index's log lives in the store
    stored(core, port, x)
    mode = MODES[core.mode]
    sync, asynchronous = Asked(port), Asked(port)
    found = run(mode.find(core, Query(x[7], 3, port_hit_fields)), search=sync.search, read=sync.read)
    afound = asyncio.run(
        arun(mode.find(core, Query(x[7], 3, port_hit_fields)), search=asynchronous.asearch, read=asynchronous.aread)
    )
    assert found.record_ids == afound.record_ids and np.array_equal(found.vectors, afound.vectors)
    assert sync.requests == asynchronous.requests
    assert "r7" in found.record_ids
    kinds = {kind for kind, _ in sync.requests}
    assert kinds == ({"search"} if mode.ranks_in_store else {"read"})  # an index mode never sends a vector


def test_a_candidate_search_asks_in_rounds_with_one_protected_vector() -> None:
    port, x = MemoryPort(), vectors(200, 1)
    core = SealedSearch(KEY, tenant="t", options=TwoStageSearch(open_k=200))
    stored(core, port, x)
    steps = CandidateSearch().find(core, Query(x[3], 5, port_hit_fields))
    sent, request = [], next(steps)
    try:
        while True:
            assert isinstance(request, SearchStore)
            sent.append((tuple(request.vector), request.k))
            request = steps.send(port.search(request.vector, request.k))
    except StopIteration as done:
        found = done.value
    assert len({v for v, _ in sent}) == 1  # every round sends the same protected vector: one release per query
    assert [k for _, k in sent] == sorted(k for _, k in sent) and sent[-1][1] <= 200
    assert not np.allclose(sent[0][0], x[3])  # never the clean query
    assert len(found.record_ids) == len(set(found.record_ids))


def test_an_index_search_reads_named_ids_keeps_what_the_caller_keeps_and_counts_only_its_own_misses() -> None:
    port, x = MemoryPort(), vectors(30, 2)
    core = SealedSearch(KEY, tenant="t", options=StoreIndexSearch(open_k=10))
    core.attach(port)
    stored(core, port, x)
    steps = StoreIndexMode().find(core, Query(x[0], 3, port_hit_fields, ids=["r1", "r2", "gone"], keep=lambda h: h[:1]))
    request = next(steps)
    assert request == ReadIds(["r1", "r2", "gone"])
    with pytest.raises(StopIteration) as done:
        steps.send(port.get(request.ids))
    assert done.value.value.record_ids == ["r1"]  # kept before opening
    assert core.dead == 0  # named ids that are missing are the caller's, not dead index entries
    port.delete(["r5"])
    run(StoreIndexMode().find(core, Query(x[5], 3, port_hit_fields)), search=port.search, read=port.get)
    assert core.dead == 1  # the index picked r5, and the store no longer holds it: counted, never removed


def test_the_async_driver_runs_the_algorithm_off_the_event_loop() -> None:
    port, x = MemoryPort(), vectors(10, 3)
    core = SealedSearch(KEY, tenant="t", options=StoreIndexSearch())
    core.attach(port)
    stored(core, port, x)
    seen: list[threading.Thread] = []
    plan = core.index_plan

    def recording(query: np.ndarray, **options):
        seen.append(threading.current_thread())
        return plan(query, **options)

    core.index_plan = recording  # type: ignore[method-assign]

    async def read(ids: Sequence[str]) -> list[PortRecord]:
        return port.get(ids)

    async def main() -> threading.Thread:
        await arun(StoreIndexMode().find(core, Query(x[0], 1, port_hit_fields)), search=None, read=read)  # type: ignore[arg-type]
        return threading.current_thread()

    loop_thread = asyncio.run(main())
    assert seen and all(t is not loop_thread for t in seen)  # the log read ran in a worker thread


class WritingLog:
    """A core that records the index steps a write takes, in order (in ``mode``: an index mode by default)."""

    def __init__(self, events: list[str], mode: str = "store-index") -> None:
        self.events = events
        self.search_mode = MODES[mode]

    def before_clear(self) -> str:
        self.events.append("before clear")
        return "state"

    def cleared(self, state: str) -> None:
        self.events.append(f"cleared {state}")

    def index_add(self, record_ids, clean) -> None:
        self.events.append(f"log {list(record_ids)}")

    def index_stored(self, record_ids, clean) -> None:
        self.events.append(f"check {list(record_ids)}")

    def index_remove(self, record_ids) -> int:
        self.events.append(f"tombstone {list(record_ids)}")
        return len(record_ids)


def test_a_write_runs_in_the_order_that_loses_no_record_in_both_drivers() -> None:
    """Add: entries, records, check; delete: records, tombstones (none for no ids); sync and async alike."""
    x = vectors(1, 5)
    for driver in ("sync", "async"):
        events: list[str] = []
        core = WritingLog(events)

        def store(what: str, events: list[str] = events) -> str:
            events.append(what)
            return f"{what} done"

        async def astore(what: str, store=store) -> str:
            return store(what)

        def listed(events: list[str] = events) -> list[str]:
            events.append("list")
            return ["b"]

        def settle(events: list[str] = events) -> None:
            events.append("marker")

        jobs = [
            (add_records(core, ["a"], x), "store a"),
            (delete_records(core, ["a"], settle=settle), "delete a"),
            (delete_records(core, [], listed=listed, settle=settle), "delete by filter"),
            (delete_records(core, []), "delete all"),
            (clear_records(core, settle=settle), "clear"),
        ]
        for steps, what in jobs:
            if driver == "sync":
                assert run(steps, write=lambda what=what: store(what)) == f"{what} done"
            else:
                assert asyncio.run(arun(steps, write=lambda what=what: astore(what))) == f"{what} done"
        assert events == [
            *("log ['a']", "store a", "check ['a']"),
            *("marker", "delete a", "tombstone ['a']"),
            *("list", "marker", "delete by filter", "tombstone ['b']"),
            "delete all",
            *("marker", "before clear", "clear", "cleared state"),
        ], driver


def test_a_mode_without_an_index_spares_the_store_the_reads_a_delete_or_clear_would_need() -> None:
    """Listing what a delete by filter removes, and reading the marker for the index's dimension, are an index
    mode's: in candidates neither is asked (nor any tombstone written)."""
    events: list[str] = []
    core = WritingLog(events, mode="candidates")
    jobs = [
        delete_records(core, [], listed=lambda: events.append("list") or ["b"], settle=lambda: events.append("marker")),
        clear_records(core, settle=lambda: events.append("marker")),
    ]
    for steps in jobs:
        run(steps, write=lambda: events.append("write"))
    assert events == ["write", "before clear", "write", "cleared state"]


def _reads(options: StoreIndexSearch, n: int, *, k: int, keep=None, gone: Sequence[str] = ()) -> tuple[list, list]:
    """One index search's reads by id, and the ``k`` ids it ranks best: ``n`` records stored, ``gone`` then
    deleted from the store only (their index entries stay)."""
    port, x = MemoryPort(), vectors(n, 4)
    core = SealedSearch(KEY, tenant="t", options=options)
    core.attach(port)
    stored(core, port, x)
    core.store_index().index.wait_trained()
    port.delete(list(gone))
    asked = Asked(port)
    found = run(StoreIndexMode().find(core, Query(x[0], k, port_hit_fields, keep=keep)), read=asked.read)
    best = [found.record_ids[row] for row, _ in core.rank(x[0], found.vectors, k)]
    return [ids for kind, ids in asked.requests if kind == "read"], best


def test_an_exact_index_reads_k_and_a_few_more_and_finds_what_the_whole_pick_finds() -> None:
    reads, found = _reads(StoreIndexSearch(open_k=60), 300, k=5)
    assert [len(r) for r in reads] == [5 + EXACT_EXTRA]  # not open_k: the exact index's order is the answer
    _, whole = _reads(StoreIndexSearch(open_k=60), 300, k=5, keep=lambda hits: hits)
    assert found == whole and found[0] == "r0"


def test_a_search_that_keeps_some_of_the_read_or_a_trained_index_reads_the_whole_pick() -> None:
    kept, _ = _reads(StoreIndexSearch(open_k=60), 300, k=5, keep=lambda hits: hits[:2])
    assert [len(r) for r in kept] == [60]  # a filter after the read needs the whole pick
    trained, found = _reads(StoreIndexSearch(open_k=60, train_at=256, code_bytes=4), 300, k=5)
    assert [len(r) for r in trained] == [60] and len(found) == 5  # codes rank approximately: the exact re-rank


def test_entries_whose_records_are_gone_make_an_exact_pick_read_the_rest_and_still_find_k() -> None:
    first, _ = _reads(StoreIndexSearch(open_k=60), 300, k=5)
    gone = [i for i in first[0] if i != "r0"][:10]  # 10 of the 13 read are no longer in the store
    reads, found = _reads(StoreIndexSearch(open_k=60), 300, k=5, gone=gone)
    assert [len(r) for r in reads] == [5 + EXACT_EXTRA, 60 - 5 - EXACT_EXTRA]
    assert len(found) == 5 and not set(found) & set(gone) and found[0] == "r0"


def test_a_trained_index_with_open_k_unset_reads_what_its_size_needs_and_at_least_k() -> None:
    options = StoreIndexSearch(train_at=256, code_bytes=4)  # open_k and scan_codes unset: by the index's size
    opened = sized(300)[0]
    reads, found = _reads(options, 300, k=5)
    assert [len(r) for r in reads] == [opened] and len(found) == 5
    more, _ = _reads(options, 300, k=opened + 3)  # a k past what the size needs: k are read
    assert [len(r) for r in more] == [opened + 3]
    kept, _ = _reads(options, 300, k=5, keep=lambda hits: hits[:2])  # a filter after the read: the most there is
    assert [len(r) for r in kept] == [min(300, OPEN_K_MOST)]
