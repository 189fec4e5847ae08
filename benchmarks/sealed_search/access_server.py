"""The Chroma-server part of ``benchmarks.sealed_search.access_patterns``: latency beside a plain store, and the
replica's sync after another OS process writes.

Per store size, one ``chroma run`` server (started here on a free loopback port, on a fresh data folder, and
stopped after) holds two collections of the same records (clustered random 384-d unit vectors, each with a text
of about 200 characters, as :mod:`.access_costs`):

* ``plain-chroma``: LangChain's ``Chroma`` over the clean vectors and plaintexts (the engine ranks): the reference;
* ``store-index``: :class:`~langchain_textcrafter.SealedVectorStore` with ``StoreIndexSearch()`` (the default):
  each search reads the log's heads (and any new segments), scans the in-memory index, reads its best
  records by id (``open_k``, 100, once the index is trained; below ``train_at`` the ten kept and
  ``EXACT_EXTRA`` more), opens them and ranks exactly;
* ``store-index-replica``: a second sealed store object over the same collection with
  ``StoreIndexSearch(replica=True)``: the records come from its local replica.

**Latency**: ``SealedVectorStore.similarity_search_by_vector(q, k=10)`` (and ``Chroma``'s) from the call to
the opened hits, the same queries for all three, interleaved, after three warm-up searches each (the codebook
trained first). **Open**: the first search of each fresh sealed store object (the whole log; with the replica
every record read). **Data records read a query**: what the store returned to the timed queries' reads by id,
log records and the marker not counted (counted in a ``Chroma`` subclass, as the server receives them).

**Sync after 1,000 writes by another process**: a new Python process (``python -m
benchmarks.sealed_search.access_patterns --writer-child ...``, given the key in its environment) opens its own
sealed store over the collection and writes 1,000 records in 10 adds of 100 (10 segments), then exits; then, in
this process, each sealed store's next search (by the vector of one of those records) is timed: its time less
that store's p50 search is the sync. The search must return that record first (the other process's writes are
visible after the sync). Repeated ``sync_rounds`` times, a new writer process each round.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
from chromadb.config import Settings
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from benchmarks.two_stage.engines import _chroma_server
from langchain_textcrafter import SealedVectorStore
from langchain_textcrafter.ray_load import ChromaHttpFactory
from textcrafter_rag.sealed import StoreIndexSearch
from textcrafter_rag.sealed.log import LOG_FIELD
from textcrafter_rag.sealing import generate_key

from .access_costs import _FILLER, DIM, _vectors

__all__ = ["KEY_ENV", "MODES", "server_rows", "writer_child"]

#: The variable holding the key for the writer process (generated per run, never written to results).
KEY_ENV = "TEXTCRAFTER_ACCESS_PATTERNS_KEY"
MODES = ("plain-chroma", "store-index", "store-index-replica")
ROOT = Path(__file__).resolve().parents[2]


def _text(rid: str) -> str:
    return f"{rid}: {_FILLER}"


class RowEmbeddings(Embeddings):
    """Each record's precomputed vector, looked up by the id its text starts with; queries come as vectors."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.table[t.split(":", 1)[0]].tolist() for t in texts]

    def embed_query(self, text: str) -> list[float]:
        raise AssertionError("the benchmark searches by vector")


class CountingChroma(Chroma):
    """``Chroma`` that counts the data records (neither the index log nor the marker) its reads by id return."""

    data_read = 0

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        docs = super().get_by_ids(ids)
        self.data_read += sum(not {LOG_FIELD, "_tc_marker"} & set(d.metadata or {}) for d in docs)
        return docs


@dataclass(frozen=True)
class CountingFactory(ChromaHttpFactory):
    """:class:`ChromaHttpFactory` building :class:`CountingChroma`."""

    def __call__(self, embedding: Embeddings) -> Chroma:
        client = chromadb.HttpClient(host=self.host, port=int(self.port), settings=Settings(anonymized_telemetry=False))
        return CountingChroma(client=client, collection_name=self.collection, embedding_function=embedding)


def _round_vectors(seed: int, n: int, rnd: int, count: int) -> np.ndarray:
    """The vectors the writer process of round ``rnd`` adds (the same clusters as the store's records)."""
    centers = np.random.default_rng(seed + n).standard_normal((64, DIM))  # the store's first draw
    return _vectors(count, np.random.default_rng([seed, n, rnd]), centers)


def writer_child(spec: dict[str, Any]) -> dict[str, Any]:
    """In the writer process: open the sealed store with only the key, add ``writes`` records in ``adds`` adds."""
    t0 = time.perf_counter()
    n, rnd, writes, adds = spec["n"], spec["round"], spec["writes"], spec["adds"]
    ids = [f"w{rnd}-{i}" for i in range(writes)]
    table = dict(zip(ids, _round_vectors(spec["seed"], n, rnd, writes), strict=True))
    store = SealedVectorStore(
        ChromaHttpFactory(host=spec["host"], port=spec["port"], collection=spec["collection"]),
        embedding=RowEmbeddings(table),
        key=os.environ[KEY_ENV],
        search=StoreIndexSearch(),
    )
    t1 = time.perf_counter()
    per = -(-writes // adds)
    for start in range(0, writes, per):
        store.add_texts([_text(i) for i in ids[start : start + per]], ids=ids[start : start + per])
    return {"pid": os.getpid(), "written": writes, "adds": adds, "write_s": time.perf_counter() - t1,
            "process_s": time.perf_counter() - t0}  # fmt: skip


def _spawn_writer(spec: dict[str, Any], key: str) -> dict[str, Any]:
    env = {**os.environ, KEY_ENV: key, "ANONYMIZED_TELEMETRY": "False", "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "benchmarks.sealed_search.access_patterns", "--writer-child", json.dumps(spec)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"the writer process failed:\n{done.stderr[-4000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["spawn_to_exit_s"] = time.perf_counter() - t0
    assert out["pid"] != os.getpid()
    return out


def _fill(store: Any, ids: list[str], batch: int = 2_000) -> None:
    for start in range(0, len(ids), batch):
        part = ids[start : start + batch]
        store.add_texts([_text(i) for i in part], ids=part)


def _search(store: Any, q: np.ndarray) -> list[Document]:
    return store.similarity_search_by_vector(q.tolist(), k=10)


def server_rows(
    ns: Sequence[int],
    *,
    seed: int,
    n_queries: int = 200,
    sync_rounds: int = 3,
    writes: int = 1_000,
    progress: Callable[[str], Any] = lambda s: None,
) -> list[dict[str, Any]]:
    """Rows per size and mode (``MODES``); latency ratios against ``store-index``."""
    rows: list[dict[str, Any]] = []
    for n in ns:
        with tempfile.TemporaryDirectory(prefix="access-chroma-") as tmp:
            path = Path(tmp)
            with _chroma_server(path) as (host, port):
                rows += _one_size(host, port, n, seed=seed, n_queries=n_queries, sync_rounds=sync_rounds,
                                  writes=writes, progress=progress)  # fmt: skip
    return rows


def _one_size(
    host: str, port: int, n: int, *, seed: int, n_queries: int, sync_rounds: int, writes: int, progress: Callable
) -> list[dict[str, Any]]:
    key = generate_key()
    rng = np.random.default_rng(seed + n)
    centers = rng.standard_normal((64, DIM))
    ids = [f"r{i}" for i in range(n)]
    emb = RowEmbeddings(dict(zip(ids, _vectors(n, rng, centers), strict=True)))
    queries = _vectors(n_queries, rng, centers)
    client = chromadb.HttpClient(host=host, port=port, settings=Settings(anonymized_telemetry=False))
    t0 = time.perf_counter()
    _fill(Chroma(client=client, collection_name="plain", embedding_function=emb), ids)
    progress(f"server {n:,}: plain collection written in {time.perf_counter() - t0:.0f} s")
    t0 = time.perf_counter()
    factory = CountingFactory(host=host, port=port, collection="sealed")
    _fill(SealedVectorStore(factory, embedding=emb, key=key, search=StoreIndexSearch()), ids)
    progress(f"server {n:,}: sealed collection written in {time.perf_counter() - t0:.0f} s")
    stores: list[Any] = [CountingChroma(client=client, collection_name="plain", embedding_function=emb)]
    per_mode = [{"n_records": n, "mode": MODES[0], "engine": "chroma run (this machine)", "n_queries": n_queries}]
    for mode, replica in ((MODES[1], False), (MODES[2], True)):
        store = SealedVectorStore(factory, embedding=emb, key=key, search=StoreIndexSearch(replica=replica))
        t0 = time.perf_counter()
        _search(store, queries[0])
        per_mode.append({"n_records": n, "mode": mode, "engine": "chroma run (this machine)", "n_queries": n_queries,
                         "open_s": time.perf_counter() - t0})  # fmt: skip
        store._search.store_index().index.wait_trained()
        stores.append(store)
    for s in stores:
        for q in queries[:3]:  # warm-up: connections, caches
            _search(s, q)
    read0 = [_wrapped(s).data_read for s in stores]
    lat: list[list[float]] = [[] for _ in stores]
    for q in queries:  # interleaved: a shared machine's load falls on every mode alike
        for j, s in enumerate(stores):
            t0 = time.perf_counter()
            _search(s, q)
            lat[j].append((time.perf_counter() - t0) * 1000)
    for j, r in enumerate(per_mode):
        r["p50_ms"], r["p95_ms"] = float(np.percentile(lat[j], 50)), float(np.percentile(lat[j], 95))
        r["data_records_read_a_query"] = (_wrapped(stores[j]).data_read - read0[j]) / len(queries)
    for r in per_mode:
        r["p50_ratio"], r["p95_ratio"] = r["p50_ms"] / per_mode[1]["p50_ms"], r["p95_ms"] / per_mode[1]["p95_ms"]
        progress(f"server {n:,} {r['mode']}: p50 {r['p50_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms")
    syncs: list[list[dict[str, Any]]] = [[], []]
    for rnd in range(sync_rounds):
        spec = {"host": host, "port": port, "collection": "sealed", "n": n, "round": rnd, "seed": seed,
                "writes": writes, "adds": 10}  # fmt: skip
        child = _spawn_writer(spec, key)
        probe = _round_vectors(seed, n, rnd, writes)
        order = (0, 1) if rnd % 2 == 0 else (1, 0)  # which store syncs first alternates
        for j in order:
            s, r = stores[1 + j], per_mode[1 + j]
            before = _wrapped(s).data_read
            t0 = time.perf_counter()
            hits = _search(s, probe[rnd])
            ms = (time.perf_counter() - t0) * 1000
            replica = s._search.indexes.replica if s._search.indexes is not None else None
            syncs[j].append({"sync_ms": ms - r["p50_ms"], "search_ms": ms, "found_first": bool(hits)
                             and hits[0].id == f"w{rnd}-{rnd}", "data_records_read": _wrapped(s).data_read - before,
                             "replica_records": len(replica) if replica is not None else 0,
                             "replica_pending": replica.pending if replica is not None else 0,
                             "writer_pid": child["pid"], "writer_write_s": child["write_s"]})  # fmt: skip
        progress(f"server {n:,} sync round {rnd}: " + ", ".join(
            f"{MODES[1 + j]} {syncs[j][-1]['sync_ms']:.0f} ms" for j in (0, 1)))  # fmt: skip
    for j in (0, 1):
        r = per_mode[1 + j]
        r["sync_rounds"] = syncs[j]
        r["sync_ms"] = float(np.median([s["sync_ms"] for s in syncs[j]])) if syncs[j] else float("nan")
        r["found_after_sync"] = all(s["found_first"] for s in syncs[j])
        r["sync_writes"] = writes
    return per_mode


def _wrapped(store: Any) -> CountingChroma:
    return store.store if isinstance(store, SealedVectorStore) else store
