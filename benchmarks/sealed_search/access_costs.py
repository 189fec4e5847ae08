"""The cost part of ``benchmarks.sealed_search.access_patterns``: the replica against the store-held index alone.

Per store size, over an in-process dict store (:class:`~.access_world.WatchedPort`, its request log off):

* **latency**: p50 / p95 of a search (the app's whole work: the log read, the FAISS scan, the records from the
  replica or read by id, the opening and exact re-rank), the same queries in both modes, interleaved;
* **open**: the first search of a fresh process (the log read into FAISS; with the replica every record read);
* **memory**: the process's RSS growth over that open, per record (``malloc_trim`` first, so the baseline is
  the heap in use; the replica's process opens second, beside the first): its FAISS index, and the replica;
* **sync**: another writer (a second app object with its own writer log, as another process would be) adds
  1,000 records in 10 batches; the first search after it, less the p50 search: the time to catch up.

The store is in memory, so a read by id costs the app no network round trip here: on a real server each query
of ``store-index`` pays one more request than the replica's.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .access_world import App, WatchedPort
from .store_index_memory import _rss, _trimmed_rss

__all__ = ["cost_rows"]

DIM = 384
KEY = bytes(range(32))
#: A sealed text's plaintext: about a SciFact sentence (the store holds it padded and sealed).
_FILLER = "a clinical note of about two hundred characters, standing in for a stored chunk of a document " * 2


def _vectors(n: int, rng: np.random.Generator, centers: np.ndarray) -> np.ndarray:
    x = centers[rng.integers(len(centers), size=n)] + 0.5 * rng.standard_normal((n, DIM))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _fill(app: App, n: int, rng: np.random.Generator, centers: np.ndarray, tag: str, batch: int = 2_000) -> None:
    for start in range(0, n, batch):
        m = min(batch, n - start)
        ids = [f"{tag}-{i}" for i in range(start, start + m)]
        app.add(ids, [f"{i}: {_FILLER}" for i in ids], _vectors(m, rng, centers))


def cost_rows(
    ns: Sequence[int], *, seed: int, n_queries: int = 200, progress: Callable[[str], Any] = lambda s: None
) -> list[dict[str, Any]]:
    """Rows per size and mode (``store-index``, ``store-index-replica``), ratios against ``store-index``."""
    rows: list[dict[str, Any]] = []
    for n in ns:
        rng = np.random.default_rng(seed + n)
        centers = rng.standard_normal((64, DIM))
        port = WatchedPort()
        port.watching = False
        t0 = time.perf_counter()
        _fill(App(port, KEY, replica=False), n, rng, centers, "r")
        progress(f"costs: {n:,} records written in {time.perf_counter() - t0:.0f} s")
        queries = _vectors(n_queries, rng, centers)
        apps, per_n = [], []
        for mode, replica in (("store-index", False), ("store-index-replica", True)):
            gc.collect()
            before = _trimmed_rss() or _rss()
            app = App(port, KEY, replica=replica)
            t0 = time.perf_counter()
            app.search(queries[0])
            open_s = time.perf_counter() - t0
            held = app.core.store_index()
            assert held is not None
            held.index.wait_trained()
            apps.append(app)
            per_n.append({"n_records": n, "mode": mode, "open_s": open_s, "n_queries": n_queries,
                          "rss_bytes_per_record": (_rss() - before) / n})  # fmt: skip
        lat: list[list[float]] = [[], []]
        for q in queries:  # interleaved: a shared machine's load falls on both modes alike
            for j, app in enumerate(apps):
                t0 = time.perf_counter()
                app.search(q)
                lat[j].append((time.perf_counter() - t0) * 1000)
        _fill(App(port, KEY, replica=False), 1_000, rng, centers, "other", batch=100)  # another writer
        for j, (app, r) in enumerate(zip(apps, per_n, strict=True)):
            r["p50_ms"], r["p95_ms"] = float(np.percentile(lat[j], 50)), float(np.percentile(lat[j], 95))
            t0 = time.perf_counter()
            app.search(queries[1])
            r["sync_ms"] = (time.perf_counter() - t0) * 1000 - r["p50_ms"]
            replica = app.core.indexes.replica if app.core.indexes is not None else None
            r["replica_records"] = len(replica) if replica is not None else 0
            r["replica_pending"] = replica.pending if replica is not None else 0
            progress(
                f"costs {n:,} {r['mode']}: p50 {r['p50_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms, open {r['open_s']:.1f} "
                f"s, {r['rss_bytes_per_record']:.0f} B a record, sync {r['sync_ms']:.0f} ms"
            )
        del apps
        base = per_n[0]
        for r in per_n:
            r["p50_ratio"] = r["p50_ms"] / base["p50_ms"]
            r["p95_ratio"] = r["p95_ms"] / base["p95_ms"]
        rows += per_n
        del port
    return rows
