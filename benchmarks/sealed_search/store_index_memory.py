"""The memory part of ``benchmarks.sealed_search.store_index``: the process's RSS growth per record of an index
built from a log, in a fresh subprocess per size (what it measures is said in :mod:`.store_index`).
"""

from __future__ import annotations

import gc
import json
import os
import resource
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from textcrafter_rag.heap import release_free_heap
from textcrafter_rag.numerics import unit_rows
from textcrafter_rag.sealed.log import LOG_FIELD, IndexLog
from textcrafter_rag.sealed.port import PortRecord
from textcrafter_rag.sealed.store_index import StoreIndex, StoreIndexSearch
from textcrafter_rag.testing.memory_port import MemoryPort

# -- memory -------------------------------------------------------------------------------------------

#: Segments of 2,000 records another writer adds after the reopen, each read by the reopened index.
LIVE_SEGMENTS = 20
#: Records of the warm-up build before the measured one: past ``train_at``, so its codebook trains on as many
#: points, into as many lists, as the measured build's, and FAISS and its BLAS make every one-time allocation they
#: keep (code pages read in, per-thread buffers) before the warm baseline is read.
WARM_RECORDS = 40_000


class _SharedPort(MemoryPort):
    """A :class:`MemoryPort` that takes calls from two threads (a compaction's and a writer's), one at a time: a
    compaction started without waiting runs in the background, as on a server."""

    concurrent_calls = True

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def put(self, records: Sequence[PortRecord]) -> None:
        with self._lock:
            super().put(records)

    def get(self, ids: Sequence[str]) -> list[PortRecord]:
        with self._lock:
            return super().get(ids)

    def delete(self, ids: Sequence[str]) -> None:
        with self._lock:
            super().delete(ids)

    def search(self, vector: Sequence[float], k: int) -> list[PortRecord]:
        with self._lock:
            return super().search(vector, k)


def _rss() -> int:

    gc.collect()
    return int(psutil.Process().memory_info().rss)


def _trimmed_rss() -> int | None:
    """RSS after glibc's ``malloc_trim(0)`` returned the heap's free pages (``None`` without glibc)."""

    return _rss() if release_free_heap() else None


def _write_log(writer: IndexLog, n: int, rng: np.random.Generator, dim: int) -> None:
    """``n`` random records appended to ``writer``'s log, 2,000 a segment."""
    for start in range(0, n, 2000):
        m = min(2000, n - start)
        ids = [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(m)]
        writer.append(adds=ids, vectors=unit_rows(rng.standard_normal((m, dim))).astype(np.float32))


def _warm_up(n: int, dim: int, seed: int) -> float:
    """A first index of ``n`` records built from its own log, trained, scanned once and dropped, in this process
    (seconds): what the libraries keep after their first use is then in the warm baseline, not in the measured
    index's growth."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed + 1)
    key, port = rng.bytes(32), MemoryPort()
    _write_log(IndexLog(key, port=port, dim=dim), n, rng, dim)
    index = StoreIndex(key, options=StoreIndexSearch(), port=port, dim=dim)
    index.refresh()
    index.index.wait_trained()
    index.candidates(unit_rows(rng.standard_normal((1, dim)))[0], index.options.opened(len(index)))
    del index, port
    return time.perf_counter() - t0


def memory_child(n: int, dim: int, seed: int, warm_records: int = WARM_RECORDS) -> dict[str, Any]:
    """In this process: write a log of ``n`` random records to a MemoryPort, then build a StoreIndex from it: the
    RSS growth from a cold baseline (read before the process first used FAISS) and from a warm one (read after a
    first index of ``warm_records`` records was built and dropped: :func:`_warm_up`)."""

    rng = np.random.default_rng(seed)
    key = rng.bytes(32)
    port = _SharedPort()
    t0 = time.perf_counter()
    _write_log(IndexLog(key, port=port, dim=dim), n, rng, dim)
    write_s = time.perf_counter() - t0
    log_chars = sum(len(r.text) for r in port.records.values())
    cold = _trimmed_rss() or _rss()  # the writer's free heap handed back first: a clean baseline
    warm_s = _warm_up(warm_records, dim, seed)
    before = _trimmed_rss() or _rss()
    options = StoreIndexSearch()
    t0 = time.perf_counter()
    index = StoreIndex(key, options=options, port=port, dim=dim)
    index.refresh()
    read_s = time.perf_counter() - t0
    index.index.wait_trained()
    trained_s = time.perf_counter() - t0
    q = unit_rows(rng.standard_normal((1, dim)))[0]
    t1 = time.perf_counter()
    got = index.candidates(q, options.opened(len(index)))
    scan_ms = (time.perf_counter() - t1) * 1000
    after = _rss()
    trimmed = _trimmed_rss()
    vi = index.index
    # what the process holds per record, as far as FAISS and the id table say (an accounting, not a measurement)
    faiss_bytes = vi.bytes_per_record  # codes (or float32 rows) + the int64 label
    id_bytes = vi.id_bytes_per_record
    trained = bool(vi.trained)
    # compaction: the index stored as a sealed snapshot, then opened from it by another fresh StoreIndex
    segments_before = sum(1 for r in port.records.values() if r.fields.get(LOG_FIELD) == "seg")
    t1 = time.perf_counter()
    compacted = index.compact()
    compact_s = time.perf_counter() - t1
    snap = [r for r in port.records.values() if r.fields.get(LOG_FIELD) == "snap"]
    segments_after = sum(1 for r in port.records.values() if r.fields.get(LOG_FIELD) == "seg")
    n_first = len(index)
    del index, vi
    base_snapshot = _trimmed_rss() or _rss()  # the first index gone: the port (log and snapshot) remains
    t1 = time.perf_counter()
    reopened = StoreIndex(key, options=options, port=port, dim=dim)
    reopened.refresh()
    snapshot_open_s = time.perf_counter() - t1
    same = reopened.candidates(q, options.opened(len(reopened))) == got and len(reopened) == n_first
    after_snapshot, trimmed_snapshot = _rss(), _trimmed_rss()
    # then live: another writer adds LIVE_SEGMENTS segments, and the reopened index reads each one (a reader
    # serving while the store grows: FAISS grows each list it adds to by doubling, from the snapshot's exact sizes)
    held = set(port.records)
    other = IndexLog(key, port=port, dim=dim)
    for _ in range(LIVE_SEGMENTS):
        ids = [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(2000)]
        other.append(adds=ids, vectors=unit_rows(rng.standard_normal((2000, dim))).astype(np.float32))
        reopened.refresh()
    del other, ids
    live_n = len(reopened)
    # the log records just written are the store's (about 1 KB a record of sealed text in this process's port),
    # not the index's: deleted before reading the RSS, and the heap they held handed back
    port.delete([i for i in port.records if i not in held])
    after_live = _trimmed_rss() or _rss()
    stall = compaction_stall(reopened, rng, dim)  # last: its writes grow the index past what was measured
    return {
        "part": "memory",
        "n_records": n,
        "dim": dim,
        "vectors": f"{dim}-d random unit vectors (Gaussian, normalised), random UUID4 ids",
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
        "log_records": len(port.records),
        "log_chars": log_chars,
        "write_seconds": round(write_s, 1),
        "build_seconds": round(read_s, 2),
        "build_and_train_seconds": round(trained_s, 2),
        "first_scan_ms": round(scan_ms, 2),
        "index_entries": n_first,
        "trained": trained,
        "rss_before_mb": round(before / 2**20, 1),
        "rss_after_mb": round(after / 2**20, 1),
        "rss_bytes_per_record": (after - before) / n,
        "rss_cold_bytes_per_record": (after - cold) / n,
        "warm_up_records": warm_records,
        "warm_up_seconds": round(warm_s, 1),
        "warm_up_kept_mb": round((before - cold) / 2**20, 1),
        "rss_trimmed_bytes_per_record": None if trimmed is None else (trimmed - before) / n,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "accounted_faiss_bytes_per_record": faiss_bytes,
        "accounted_id_table_bytes_per_record": id_bytes,
        "open_k_found": len(got),
        "compacted": compacted,
        "compact_seconds": round(compact_s, 2),
        "log_chunks_before_compaction": segments_before,
        "log_chunks_after_compaction": segments_after,
        "snapshot_records": len(snap),
        "snapshot_mb": round(sum(len(r.text) for r in snap) / 2**20, 1),
        "open_from_snapshot_seconds": round(snapshot_open_s, 2),
        "opened_from_snapshot": reopened.snapshots.loaded == 1,
        "snapshot_same_candidates": bool(same),
        "rss_snapshot_bytes_per_record": (after_snapshot - base_snapshot) / n,
        "rss_snapshot_trimmed_bytes_per_record": None
        if trimmed_snapshot is None
        else (trimmed_snapshot - base_snapshot) / n,
        "live_records_added": live_n - n_first,
        "rss_live_bytes_per_record": (after_live - base_snapshot) / live_n,
        **stall,
    }


def compaction_stall(index: StoreIndex, rng: np.random.Generator, dim: int) -> dict[str, Any]:
    """How long a write waits for a compaction: the index's bytes made alone (its copy, which a compaction makes
    under the lock that writes take, and the copy's serialization), then writes of one segment each, timed one by
    one, while the index compacts in its background thread (``compact(wait=False)``, as a due compaction runs on
    a server), beside the same writes without one."""

    def write() -> float:
        ids = [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(2000)]
        vectors = unit_rows(rng.standard_normal((2000, dim))).astype(np.float32)
        t0 = time.perf_counter()
        index.add(ids, vectors)
        return time.perf_counter() - t0

    t0 = time.perf_counter()
    data = index.index.to_bytes()
    taken_ms = (time.perf_counter() - t0) * 1000
    del data
    alone = [write() for _ in range(5)]
    waits: list[float] = []
    t0 = time.perf_counter()
    if not index.compact(wait=False):  # in the index's background thread, as a due compaction runs
        raise RuntimeError("no compaction started")
    while not index.wait_compacted(timeout=0) or not waits:
        waits.append(write())
    index.wait_compacted()
    return {
        "index_bytes_taken_ms": round(taken_ms, 1),
        "compaction_with_writes_seconds": round(time.perf_counter() - t0, 2),
        "writes_during_compaction": len(waits),
        "write_ms_median_alone": round(float(np.median(alone)) * 1000, 1),
        "write_ms_longest_during_compaction": round(max(waits) * 1000, 1),
    }


def memory_rows(
    ns: Sequence[int],
    *,
    dim: int,
    seed: int,
    warm_records: int = WARM_RECORDS,
    progress: Callable[[str], Any] = lambda s: None,
    timeout: float = 1200,
) -> list[dict[str, Any]]:
    """One :func:`memory_child` per size, each in a fresh Python process (its RSS is the index's alone)."""
    rows = []
    code = (
        "import json, sys; from benchmarks.sealed_search.store_index_memory import memory_child; "
        "print(json.dumps(memory_child(*map(int, sys.argv[1:]))))"
    )
    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    for n in ns:
        t0 = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", code, str(n), str(dim), str(seed), str(warm_records)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=root,
            env={**os.environ, "PYTHONPATH": path},  # FAISS's threads as the caller's (unset: one a core)
        )
        if out.returncode != 0:
            raise RuntimeError(f"memory child for n={n} failed ({out.returncode}):\n{out.stderr[-4000:]}")
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        progress(
            f"memory n={n:,}: {r['rss_bytes_per_record']:.0f} B a record, build {r['build_seconds']} s "
            f"({time.perf_counter() - t0:.0f} s in all)"
        )
    return rows
