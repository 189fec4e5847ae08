"""The store-held index's write protocol with real processes on real engines (a ``chroma run`` server, and
Qdrant local, which admits one process at a time, for a crash and a restart).

Each worker is a separate Python process (``_store_index_worker.py``) driven line by line, so the test fixes
the interleaving: all three writers finish a batch before any starts the next, a writer is SIGKILLed at a
point it reports (before or after the store takes its records), and an add and a delete of the same ids are
interleaved by stopping one writer inside its write (it reports where, and waits on its stdin pipe) while the
other writes: never after a sleep.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from textcrafter_rag.sealing import generate_key

from ._sealed_engine_servers import ChromaServer

pytest.importorskip("langchain_chroma", reason="the Chroma tests need langchain-chroma (the test extra)")

WORKER = Path(__file__).with_name("_store_index_worker.py")
#: Bounds a broken worker (a hang fails the test instead of blocking CI); no result depends on it.
ANSWER_DEADLINE_S = 180


class Worker:
    """One worker process; ``ask`` sends a command and returns its one-line answer."""

    def __init__(self, engine: str, address: str, collection: str, key: str, log: Path, *extra: str) -> None:
        self.log = log
        self._err = open(log, "ab")  # noqa: SIM115 - closed in close()
        env = {**os.environ, "ANONYMIZED_TELEMETRY": "False", "HF_HUB_OFFLINE": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), engine, address, collection, key, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            env=env,
        )
        assert self.read() == {"ready": True}

    def send(self, **cmd: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], ANSWER_DEADLINE_S)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.kill()
            raise AssertionError(f"the worker gave no answer:\n{self.log.read_text(errors='replace')[-4000:]}")
        return json.loads(line)

    def ask(self, **cmd: Any) -> dict[str, Any]:
        self.send(**cmd)
        return self.read()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._err.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.ask(op="exit") == {"bye": True}
        self.proc.wait()
        self._err.close()


def batch(name: str, n: int) -> dict[str, list[str]]:
    ids = [f"{name}-{i}" for i in range(n)]
    return {"ids": ids, "texts": [f"record {i} written by {name}: a sealed note" for i in ids]}


@pytest.fixture(scope="module")
def chroma(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    server = ChromaServer(tmp_path_factory.mktemp("chroma-store-index") / "data").start()
    try:
        yield server
    finally:
        server.stop()


class Spawner:
    """Starts workers over one collection of the test's own (killed at teardown if still running)."""

    def __init__(self, chroma: ChromaServer, tmp_path: Path, collection: str) -> None:
        self.chroma, self.tmp_path, self.collection = chroma, tmp_path, collection
        self.workers: list[Worker] = []

    def __call__(self, key: str, *extra: str) -> Worker:
        address = f"{self.chroma.host}:{self.chroma.port}"
        w = Worker("chroma", address, self.collection, key, self.tmp_path / f"w{len(self.workers)}.log", *extra)
        self.workers.append(w)
        return w


@pytest.fixture
def spawn(chroma: ChromaServer, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Spawner]:
    name = "".join(c for c in request.node.name if c.isalnum())[-40:]
    spawner = Spawner(chroma, tmp_path, f"c-{name}")
    yield spawner
    for w in spawner.workers:
        if w.proc.poll() is None:
            w.kill()


def test_three_writers_at_once_lose_nothing_for_a_reader_opened_before_and_one_opened_after(spawn: Spawner) -> None:
    key = generate_key()
    before = spawn(key)
    assert before.ask(op="find", texts=["nothing yet"])["found"] == [None]
    writers = [spawn(key) for _ in range(3)]
    first = [batch(f"w{i}a", 30) for i in range(3)]
    second = [batch(f"w{i}b", 30) for i in range(3)]
    for w, b in zip(writers, first):  # all three write at once
        w.send(op="add", **b)
    acked = [w.read()["acked"] for w in writers]
    for w, b in zip(writers, second):  # each starts its second batch only once all finished the first
        w.send(op="add", **b)
    acked += [w.read()["acked"] for w in writers]
    assert acked == [b["ids"] for b in first + second]
    after = spawn(key)
    texts = [t for b in first + second for t in b["texts"]]
    ids = [i for b in first + second for i in b["ids"]]
    for reader in (before, after, writers[0]):
        assert reader.ask(op="find", texts=texts)["found"] == ids
    audit = after.ask(op="audit")
    assert audit == {"stored": 180, "unindexed": [], "dead": []}
    for w in [before, after, *writers]:
        w.close()


def test_a_settled_reader_finds_each_write_of_another_process_at_its_next_search(spawn: Spawner) -> None:
    """Once a reader has read the log's beacon before a search of the heads, its quiet searches search no heads
    (Chroma upserts: the beacon is kept); each write another process acknowledged since moved the beacon, so the
    reader's next search finds it: the first of its searches after each write, one text only."""
    key = generate_key()
    writer, reader = spawn(key), spawn(key)
    one = batch("one", 5)
    writer.ask(op="add", **one)
    assert reader.ask(op="find", texts=one["texts"])["found"] == one["ids"]  # settled: many searches since
    for name in ("two", "three", "four"):
        more = batch(name, 5)
        writer.ask(op="add", **more)
        assert reader.ask(op="find", texts=more["texts"][-1:])["found"] == more["ids"][-1:]
    other = spawn(key)  # a writer the reader never saw: only its head names it
    five = batch("five", 5)
    other.ask(op="add", **five)
    assert reader.ask(op="find", texts=five["texts"][:1])["found"] == five["ids"][:1]
    for w in (writer, reader, other):
        w.close()


@pytest.mark.parametrize("point", ["before-store", "after-store"])
def test_a_writer_killed_mid_batch_loses_no_acknowledged_record_and_leaves_none_unindexed(
    spawn: Spawner, point: str
) -> None:
    key = generate_key()
    writer = spawn(key)
    done = batch("acked", 20)
    assert writer.ask(op="add", **done)["acked"] == done["ids"]
    killed = batch("killed", 20)
    assert writer.ask(op="add", pause=point, **killed) == {"paused": point}
    writer.kill()  # SIGKILL: the index entries are logged; the records are stored or not, as `point` says
    fresh = spawn(key)
    found = fresh.ask(op="find", texts=done["texts"] + killed["texts"])
    assert found["found"][:20] == done["ids"]
    if point == "after-store":  # stored, so indexed: found although never acknowledged
        assert found["found"][20:] == killed["ids"]
    else:  # never stored: the entries are read, find no record, and are counted, not returned
        assert all(f in done["ids"] for f in found["found"][20:] if f is not None)
        assert found["dead"] > 0
    assert fresh.ask(op="audit")["unindexed"] == []
    fresh.close()


@pytest.mark.parametrize("point", ["before-pointer", "before-deletes"])
def test_a_writer_killed_mid_compaction_loses_nothing_and_the_next_compaction_works(spawn: Spawner, point: str) -> None:
    key = generate_key()
    writer = spawn(key)
    first, second = batch("a", 20), batch("b", 20)
    for b in (first, second):
        assert writer.ask(op="add", **b)["acked"] == b["ids"]
    assert writer.ask(op="compact", pause=point) == {"paused": point}
    writer.kill()  # SIGKILL: a snapshot no head names, or a named snapshot whose covered records are all still there
    texts, ids = first["texts"] + second["texts"], first["ids"] + second["ids"]
    fresh = spawn(key)
    found = fresh.ask(op="find", texts=texts)
    assert found["found"] == ids and found["dead"] == 0
    assert found["loaded"] == (point == "before-deletes")  # a snapshot is read only once its head names it
    assert fresh.ask(op="audit")["unindexed"] == []
    assert fresh.ask(op="compact") == {"compacted": True}
    fresh.close()
    last = spawn(key)
    found = last.ask(op="find", texts=texts)
    assert found["found"] == ids and found["dead"] == 0 and found["loaded"] == 1
    last.close()


def test_a_rolled_back_head_is_detected_by_a_reader_that_saw_the_newer_one(spawn: Spawner) -> None:
    import chromadb
    from chromadb.config import Settings

    key = generate_key()
    writer, reader = spawn(key), spawn(key)
    one = batch("one", 5)
    writer.ask(op="add", **one)
    client = chromadb.HttpClient(
        host=spawn.chroma.host, port=spawn.chroma.port, settings=Settings(anonymized_telemetry=False)
    )
    coll = client.get_collection(spawn.collection)
    old = coll.get(where={"_tc_log": "head"}, include=["documents", "metadatas", "embeddings"])
    old_beacon = coll.get(where={"_tc_log": "beacon"}, include=["documents", "metadatas", "embeddings"])
    old_segments = set(coll.get(where={"_tc_log": "seg"})["ids"])
    two = batch("two", 5)
    writer.ask(op="add", **two)
    assert reader.ask(op="find", texts=two["texts"])["found"] == two["ids"]
    newer = coll.get(where={"_tc_log": "head"})["ids"]
    new_segments = [i for i in coll.get(where={"_tc_log": "seg"})["ids"] if i not in old_segments]
    assert len(old["ids"]) == len(newer) == 1 and new_segments
    # The host puts the older copy back: it drops the newer head and the segment written after it, and restores the
    # older head and the older beacon (Chroma's upsert replaces: every write overwrote the beacon)
    assert len(old_beacon["ids"]) == 1
    coll.delete(ids=newer + new_segments)
    coll.add(ids=old["ids"], documents=old["documents"], metadatas=old["metadatas"], embeddings=old["embeddings"])
    coll.upsert(**{k: old_beacon[k] for k in ("ids", "documents", "metadatas", "embeddings")})
    answer = reader.ask(op="find", texts=one["texts"])
    assert answer.get("error") == "IndexRollbackError"
    writer.close()
    reader.close()


def test_a_replica_reader_finds_another_process_writes_at_its_next_search_and_its_queries_read_no_record(
    spawn: Spawner,
) -> None:
    """``StoreIndexSearch(replica=True)``: process B writes, process A's next search finds it; A's reads by id
    (counted in A, as the store receives them) hold no data record per query, and are the same for every query."""
    key = generate_key()
    reader, writer = spawn(key, "replica"), spawn(key)
    assert reader.ask(op="find", texts=["nothing yet"])["found"] == [None]
    one = batch("one", 30)
    assert writer.ask(op="add", **one)["acked"] == one["ids"]
    first = reader.ask(op="find", texts=one["texts"])
    assert first["found"] == one["ids"] and first["data_read"] == 30  # the sync: each new record read once
    again = reader.ask(op="find", texts=list(reversed(one["texts"])))
    assert again["found"] == list(reversed(one["ids"]))
    assert again["data_read"] == 0  # thirty queries, no data record read
    assert all(a == again["asked"][0] for a in again["asked"])  # every query read the same (log probes only)
    # B logs a batch and stops before storing it: A's search finds the entries pending, then B stores.
    two = batch("two", 10)
    assert writer.ask(op="add", pause="before-store", **two) == {"paused": "before-store"}
    pending = reader.ask(op="find", texts=two["texts"])
    assert all(f not in two["ids"] for f in pending["found"]) and pending["dead"] > 0
    writer.send(op="continue")  # unblocks the paused add: B stores the records and acknowledges
    assert writer.read()["acked"] == two["ids"]
    assert reader.ask(op="find", texts=two["texts"])["found"] == two["ids"]  # retried at the next sync
    assert writer.ask(op="delete", ids=one["ids"][:5]) == {"deleted": one["ids"][:5]}
    gone = reader.ask(op="find", texts=one["texts"][:5] + two["texts"])
    assert not set(gone["found"]) & set(one["ids"][:5]) and gone["found"][5:] == two["ids"]
    assert gone["data_read"] == 0  # a tombstone drops records: nothing to read
    for w in (reader, writer):
        w.close()


# -- an add and a delete of the same ids from two processes, in a forced order ------------------------------
#
# Each race runs twice on the same two writers, with other ids: first with the check it is about switched off in
# the worker (``unchecked``: the add's confirm, or the delete's read-back), which shows the interleaving really
# happened (the store then holds records no search finds), then as shipped.


def check_only_the_unchecked_are_lost(
    spawn: Spawner, key: str, writers: list[Worker], unchecked: dict[str, list[str]], checked: dict[str, list[str]]
) -> None:
    """A new process with only the key: the raced records of the unchecked run are stored and found by no search;
    every other record is stored and found, by it and by the writers, and no entry is dead."""
    fresh = spawn(key)
    names = unchecked["ids"] + checked["ids"]
    assert fresh.ask(op="audit", ids=names) == {"stored": 6, "unindexed": unchecked["ids"][:2], "dead": []}
    for reader in (fresh, *writers):
        found = reader.ask(op="find", texts=unchecked["texts"] + checked["texts"])
        assert found["found"][2:] == unchecked["ids"][2:] + checked["ids"] and found["dead"] == 0
        assert not set(found["found"][:2]) & set(unchecked["ids"])  # stored, and found by no search
    for w in (fresh, *writers):
        w.close()


def test_an_add_whose_entries_a_racing_delete_removed_is_found_after_its_confirm(spawn: Spawner) -> None:
    """A logs its entries and stops before its store write; B (a new process: a delete is its first call) deletes
    two of those ids in full: the store holds nothing yet, its tombstones are merged after A's entries, the
    read-back finds nothing; A then stores and confirms, which logs the two again."""
    key = generate_key()
    a, b = spawn(key), spawn(key)
    unchecked, checked = batch("unchecked", 3), batch("checked", 3)
    for added, off in ((unchecked, True), (checked, False)):
        assert a.ask(op="add", pause="before-store", unchecked=off, **added) == {"paused": "before-store"}
        raced = added["ids"][:2]
        assert b.ask(op="delete", ids=raced) == {"deleted": raced}
        a.send(op="continue")  # A stores the three records, then (unless unchecked) confirms
        assert a.read() == {"acked": added["ids"]}
    check_only_the_unchecked_are_lost(spawn, key, [a, b], unchecked, checked)


def test_a_delete_whose_records_a_racing_add_stored_again_indexes_them_after_its_tombstones(spawn: Spawner) -> None:
    """B deletes two stored records and stops before its tombstones; A adds the two again in full (entries, records,
    confirm, which has no tombstone to see yet); B then logs its tombstones, merged after A's entries, and reads
    the ids back: the store holds them, so it logs them again."""
    key = generate_key()
    a, b = spawn(key), spawn(key)
    unchecked, checked = batch("unchecked", 3), batch("checked", 3)
    for added, off in ((unchecked, True), (checked, False)):
        assert a.ask(op="add", **added) == {"acked": added["ids"]}
        raced = {"ids": added["ids"][:2], "texts": added["texts"][:2]}
        assert b.ask(op="delete", pause="after-delete", unchecked=off, ids=raced["ids"]) == {"paused": "after-delete"}
        assert a.ask(op="add", **raced) == {"acked": raced["ids"]}
        b.send(op="continue")  # B logs its tombstones, then (unless unchecked) reads the records back
        assert b.read() == {"deleted": raced["ids"]}
    check_only_the_unchecked_are_lost(spawn, key, [a, b], unchecked, checked)


def test_an_add_and_a_delete_that_do_not_overlap_keep_their_order(spawn: Spawner) -> None:
    """A delete that starts after another process's add was acknowledged removes the records everywhere, and an add
    that starts after another's delete was acknowledged is found everywhere: the checks find nothing to do."""
    key = generate_key()
    a, b = spawn(key), spawn(key)
    gone, back = batch("gone", 3), batch("back", 3)
    for added in (gone, back):
        assert a.ask(op="add", **added) == {"acked": added["ids"]}
        assert b.ask(op="delete", ids=added["ids"]) == {"deleted": added["ids"]}
    assert a.ask(op="add", **back) == {"acked": back["ids"]}
    fresh = spawn(key)
    assert fresh.ask(op="audit", ids=gone["ids"] + back["ids"]) == {"stored": 3, "unindexed": [], "dead": []}
    for reader in (fresh, a, b):
        found = reader.ask(op="find", texts=gone["texts"] + back["texts"])
        assert found["found"][3:] == back["ids"] and found["dead"] == 0
        assert not set(found["found"][:3]) & set(gone["ids"])
    for w in (fresh, a, b):
        w.close()


def test_a_delete_between_an_adds_store_write_and_its_confirm_leaves_dead_entries_never_a_lost_record(
    spawn: Spawner,
) -> None:
    """A stores its records and stops before its confirm; B deletes two of them in full (from the store, then
    tombstones after A's entries). A's confirm sees the entries gone and logs them again, as it must without
    reading the store (a read that lags would say a stored record is absent): the store no longer holds them, so
    they are dead entries, skipped and counted by searches, never records no search finds. The next delete of
    the ids removes them."""
    key = generate_key()
    a, b = spawn(key), spawn(key)
    added = batch("late", 3)
    raced = added["ids"][:2]
    assert a.ask(op="add", pause="after-store", **added) == {"paused": "after-store"}
    assert b.ask(op="delete", ids=raced) == {"deleted": raced}
    a.send(op="continue")  # A confirms: the two entries are logged again
    assert a.read() == {"acked": added["ids"]}
    fresh = spawn(key)
    assert fresh.ask(op="audit", ids=added["ids"]) == {"stored": 1, "unindexed": [], "dead": raced}
    found = fresh.ask(op="find", texts=added["texts"])
    assert found["found"][2] == added["ids"][2] and not set(found["found"][:2]) & set(raced)
    assert found["dead"] == 2 * 3  # each of the three searches read the two dead entries and skipped them
    assert b.ask(op="delete", ids=raced) == {"deleted": raced}
    assert fresh.ask(op="audit", ids=added["ids"]) == {"stored": 1, "unindexed": [], "dead": []}
    for w in (fresh, a, b):
        w.close()
