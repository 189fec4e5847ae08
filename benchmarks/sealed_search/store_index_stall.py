"""How long a write waits for a compaction, as one store-held index grows to 10,000,000 records.

A compaction copies the index under the lock that writes take (FAISS's ``clone_index``), then serializes, seals and
stores the copy in its background thread, at a lower CPU priority, while writes go on
(:mod:`textcrafter_rag.sealed.compaction`, :mod:`textcrafter_rag.sealed.background`). The ``memory`` part of
``store_index`` times a write during one at 1,000,000 records, built from a log it keeps whole; a 10,000,000-record
log (about 10 GB of sealed text in a :class:`~textcrafter_rag.testing.memory_port.MemoryPort`) does not fit here
beside the index and its copies. So this grows one :class:`~textcrafter_rag.sealed.store_index.StoreIndex` by its
own adds of 2,000 entries (the log's segment size, 384-d random unit vectors, random UUID4 ids, as the ``memory``
part) into a ``MemoryPort``, and compacts it, in the add's own thread, every ``--fold`` entries: each compaction
deletes the segments it covers, so the port holds the newest snapshot and at most ``--fold`` entries of log. At each
size of ``--at`` it times, as the ``memory`` part does (:func:`~.store_index_memory.compaction_stall`): the index's
bytes taken alone, five writes alone, then writes one after another while the index compacts in its background
thread (``compact(wait=False)``), each timed; then a new ``StoreIndex`` given only the key and the store opens it,
and must hold every entry. The store-held mode's target: no write waits more than a second.

Usage::

    python -m benchmarks.sealed_search.store_index_stall                      # up to 10,000,000 records
    python -m benchmarks.sealed_search.store_index_stall --at 1000000 3000000  # these sizes only
"""

from __future__ import annotations

import resource
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import psutil

from benchmarks.common.options import base_parser, resolve_size
from benchmarks.common.reporting import Script, make_meta, md_table, write_results
from textcrafter_rag.numerics import unit_rows
from textcrafter_rag.sealed.log import LOG_FIELD
from textcrafter_rag.sealed.store_index import StoreIndex, StoreIndexSearch

from .store_index import _git, _load
from .store_index_memory import _SharedPort, compaction_stall

__all__ = ["NAME", "SCRIPT", "main", "measure", "render_markdown"]

NAME = "store_index_stall"
SCRIPT = Script(NAME, "benchmarks.sealed_search.store_index_stall")
#: Entries of one add: the log's segment size.
_ADD = 2_000
#: The most a write may wait, in ms (the store-held mode's target).
TARGET_MS = 1_000.0
_DIM = 384


def measure(
    at: Sequence[int],
    *,
    fold: int,
    seed: int,
    options: StoreIndexSearch,
    progress: Callable[[str], Any] = lambda s: None,
) -> list[dict[str, Any]]:
    """Grow one index to each size of ``at`` (ascending), compacting every ``fold`` entries, and time a write
    during a compaction at each: one row a size."""
    rng = np.random.default_rng(seed)
    port = _SharedPort()
    key = rng.bytes(32)
    index = StoreIndex(key, options=options, port=port, dim=_DIM)
    rows: list[dict[str, Any]] = []
    t0, since_fold, longest_add = time.perf_counter(), 0, 0.0
    for target in sorted({int(n) for n in at}):
        while len(index) < target:
            m = min(_ADD, target - len(index))
            ids = [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(m)]
            vectors = unit_rows(rng.standard_normal((m, _DIM))).astype(np.float32)
            t1 = time.perf_counter()
            index.add(ids, vectors)
            longest_add = max(longest_add, time.perf_counter() - t1)
            since_fold += m
            if since_fold >= fold and index.compact():  # False while the codebook trains: retried at the next add
                since_fold = 0
        index.index.wait_trained()
        if not index.compact():
            raise RuntimeError("the index did not compact once trained")
        built_s = time.perf_counter() - t0
        n_records = len(index)
        segments = sum(1 for r in port.records.values() if r.fields.get(LOG_FIELD) == "seg")
        stall = compaction_stall(index, rng, _DIM)
        snapshot = [r for r in port.records.values() if r.fields.get(LOG_FIELD) == "snap"]
        t1 = time.perf_counter()
        fresh = StoreIndex(key, options=options, port=port, dim=_DIM)  # a new process's: the key and the store
        fresh.refresh()
        open_s, fresh_entries, loaded = time.perf_counter() - t1, len(fresh), fresh.snapshots.loaded
        del fresh
        rows.append(
            {
                "n_records": n_records,
                "trained": bool(index.index.trained),
                "lists": index.index.lists[0],
                "grown_seconds": round(built_s, 1),
                "longest_add_while_growing_ms": round(longest_add * 1000, 1),
                **stall,
                "write_within_target": stall["write_ms_longest_during_compaction"] <= TARGET_MS,
                "snapshot_mb": round(sum(len(r.text) for r in snapshot) / 2**20, 1),
                "log_segments_held": segments,
                "port_records": len(port.records),
                "fresh_open_seconds": round(open_s, 2),
                "fresh_open_from_snapshot": loaded == 1,
                "fresh_open_finds_all": fresh_entries == len(index),
                "rss_mb": round(psutil.Process().memory_info().rss / 2**20, 1),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
            }
        )
        r = rows[-1]
        progress(
            f"{n_records:,} records: longest write during a compaction {r['write_ms_longest_during_compaction']} ms "
            f"(alone {r['write_ms_median_alone']} ms), index bytes taken in {r['index_bytes_taken_ms']} ms"
        )
        longest_add = 0.0
    return rows


def render_markdown(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    columns = [
        "n_records",
        "write_ms_longest_during_compaction",
        "write_within_target",
        "write_ms_median_alone",
        "writes_during_compaction",
        "compaction_with_writes_seconds",
        "index_bytes_taken_ms",
        "snapshot_mb",
        "fresh_open_seconds",
        "fresh_open_finds_all",
        "longest_add_while_growing_ms",
        "grown_seconds",
        "peak_rss_mb",
    ]
    headers = [
        "records",
        "longest write during a compaction, ms",
        "<= 1 s",
        "write alone (median), ms",
        "writes during it",
        "compaction with writes, s",
        "index bytes taken alone, ms",
        "snapshot MB",
        "new process's open, s",
        "it finds every entry",
        "longest add while growing, ms",
        "grown by, s",
        "peak RSS MB",
    ]
    return "\n".join(
        [
            "# The store-held index: a write during a compaction, as the index grows",
            "",
            f"`{meta['command']}` on {meta['date']}; machine: {meta['machine'].get('cpu_count')} cores, shared (load "
            f"average {meta.get('load_avg_1m_start')} at the start, {meta.get('load_avg_1m_end')} at the end); code "
            f"at {meta.get('git', {}).get('head', '?')}; {meta.get('runtime_seconds')} s in all. One index grown by "
            f"adds of {_ADD:,} entries (384-d random unit vectors) into a MemoryPort, compacted every "
            f"{meta.get('fold'):,} entries as it grows.",
            "",
            md_table(rows, columns, headers=headers, digits=1),
            "",
            "A write is one add of 2,000 entries (one log segment). *Index bytes taken alone*: the index's copy "
            "and its serialization, timed with no write beside them. *Longest add while growing*: the longest add "
            "since the size before, with no compaction beside it (those ran between two adds, in the same thread, "
            "and are not in it). *New process's open*: a fresh `StoreIndex` given the key and the store, after the "
            "writes, reading the newest snapshot and the segments past it; *it finds every entry*: it holds as many "
            f"as the index that wrote them. The target: no write waits more than {TARGET_MS / 1000:g} s.",
            "",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = base_parser(SCRIPT, __doc__)
    ap.add_argument(
        "--at",
        type=int,
        nargs="+",
        default=[1_000_000, 3_000_000, 10_000_000],
        help="sizes at which a write during a compaction is timed (the index grows through them in order)",
    )
    ap.add_argument("--fold", type=int, default=1_000_000, help="entries added between two compactions as it grows")
    args = ap.parse_args(None if argv is None else list(argv))
    size = resolve_size(args)
    t_start = time.perf_counter()
    load0 = _load()

    def log(msg: str) -> None:
        print(f"[{NAME}] {msg} ({time.perf_counter() - t_start:.0f} s)", flush=True)

    if size == "smoke":  # seconds: a small index, trained early
        at, fold, options = [3_000, 30_000], 8_000, StoreIndexSearch(train_at=1_000, compact_every=0)
    else:
        at, fold, options = args.at, args.fold, StoreIndexSearch(compact_every=0)
    rows = measure(at, fold=fold, seed=args.seed, options=options, progress=log)
    extra = {"fold": fold, "load_avg_1m_start": load0, "load_avg_1m_end": _load(), "git": _git()}
    extra["runtime_seconds"] = round(time.perf_counter() - t_start, 1)
    meta = make_meta(SCRIPT, argv, size=size, seed=args.seed, **extra)
    paths = write_results(
        NAME, size=size, meta=meta, rows=rows, markdown=render_markdown(rows, meta), out_dir=args.out_dir, tag=args.tag
    )
    log("wrote " + ", ".join(map(str, paths)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
