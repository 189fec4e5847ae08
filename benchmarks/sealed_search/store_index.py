"""The store-held index (LangChain's default sealed search): latency on real engines, open time, memory.

**Latency** (``latency``): SciFact (5,183 abstracts, 300 queries) grown to ``n_records`` with the scale grid's
cluster-preserving fitted distractors (each distractor's text a SciFact abstract's, prefixed, so the sealed
payloads have SciFact's sizes), written to Qdrant local and to a Chroma server (``chroma run``, started and
stopped here) as:

* ``plain``: the engine's own LangChain store (clean vectors, plaintext, the engine ranks): the reference;
* ``plain, ef_search=400`` (Chroma only): the same, in a collection made with a wider HNSW search than Chroma's
  default 100, which ranks below clean at a million records: the plain row nearer equal retrieval quality;
* ``single-stage``: :class:`SealedVectorStore` with ``search=None`` (clean vectors, sealed texts);
* ``plain, beside``: the plain store again, in a second collection of the store-held rows' engine instance, timed
  with them query by query (the ``plain`` row is timed right after its own write, minutes before them, on an
  instance of its own: a server that idled meanwhile answers everyone slower at first);
* ``store-index (default)``: ``SealedVectorStore(..., search=StoreIndexSearch())``: every search first reads
  the log's heads (and any new segments), scans the in-memory index for ``open_k`` = 100 records (once trained;
  below ``train_at`` its best ``k`` + ``EXACT_EXTRA``), fetches them by id, opens and ranks them exactly;
* ``store-index, refresh_every=1.0``: a second store object over the same collection that reads the log at most
  once a second.

Each query is timed from the call to the opened hits (embeddings precomputed: the encoder is not timed), after
three warm-up searches; NDCG@10 comes from the same searches, against the exact search of the clean vectors of
the same grown store. The store-held rows (and ``plain, beside``) wait for the writer's background compaction in
flight, then are timed together, their searches interleaved query by query, so a server still settling weighs on
each alike.
The candidate default (``search=DEFAULT_SEARCH``) is not measured again: the committed ``two_stage_engines.json``
(5,183 records) is cited.

**Open time** (``open``): a new store object over the same collection, given only the key (a fresh process's
view: it holds nothing of the log), timed from construction to the end of its first search, which reads the
whole log into memory; ``opens`` times per engine.

**Memory** (``memory``): in a fresh subprocess per size, a log of ``N`` records of 384-d random unit vectors
(not SciFact: the memory and build time do not depend on the vectors) under random UUID ids is written to
:class:`~textcrafter_rag.testing.memory_port.MemoryPort`; the process RSS (psutil) is read before and after
building a :class:`StoreIndex` from it (read the log, apply it, wait for the PQ codebook's background training),
and the difference is divided by ``N``: from a warm baseline, read after a first index of 40,000 records was built,
trained and dropped in the same process, and from a cold one, read before that (the libraries' first use
counted). The same process then compacts the log and opens a second index from the snapshot (its own RSS growth),
and another writer adds 40,000 records that the second index reads (``live``: a reader serving while the store
grows; the new log records are deleted from the port before the RSS is read). Last, segments of 2,000 records are
written and timed one by one while the same index compacts in its background thread
(how long a write waits for a compaction).

Usage::

    python -m benchmarks.sealed_search.store_index                    # full: 20,000 records, 1,000,000 in memory
    python -m benchmarks.sealed_search.store_index --parts memory     # one part (the others from the part cache)
    python -m benchmarks.sealed_search.store_index --quick            # writes store_index_quick.*
    python -m benchmarks.sealed_search.store_index --parts latency --engines qdrant --modes plain store-index \
        --n-records 1000000 --opens 1 --tag 1m                        # one larger latency run: store_index_1m.*

``--n-records``, ``--modes``, ``--opens`` and ``--net-delay-ms`` change the latency part only (cached under their
own key); with any of them the report holds the parts measured in this run only (not the cached memory rows).
``--net-delay-ms 1`` puts a proxy between the Chroma client and its server that holds all traffic 1 ms each way
(:mod:`benchmarks.common.net_delay`): on loopback two requests sent at once cost what two in turn do, across a
network they save a round trip.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.caches import cache_dir, cache_key
from benchmarks.common.options import base_parser, resolve_data_or_none, resolve_size, set_threads
from benchmarks.common.reporting import RESULTS_DIR, Timer, clean_json, make_meta, write_results

from .store_index_memory import memory_rows
from .store_index_parts import (
    BYTES_TARGET,
    MODE_NAMES,
    MODES,
    NAME,
    NDCG_TARGET,
    P95_TARGET,
    SCRIPT,
    SIZES,
    Config,
    Retrieval,
    _scifact,
    first_queries,
    grow,
    latency_rows,
)
from .store_index_report import NOT_COVERED, _cited_candidates, not_covered, render_markdown

__all__ = [
    "MODES",
    "NAME",
    "PARTS",
    "SCRIPT",
    "SIZES",
    "Config",
    "Retrieval",
    "first_queries",
    "grow",
    "latency_rows",
    "main",
    "memory_rows",
    "render_markdown",
]

PARTS = ("latency", "memory")
#: Bump when a part's code changes, so its cached rows are measured again.
PART_VERSIONS = {"latency": "5", "memory": "5"}


# -- command line -------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    ap = base_parser(SCRIPT, __doc__)
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="parts to measure")
    ap.add_argument("--redo", action="store_true", help="measure the selected parts again, ignoring the part cache")
    ap.add_argument(
        "--engines",
        nargs="+",
        choices=("qdrant", "qdrant-memory", "chroma"),
        default=None,
        help="engines (latency); qdrant-memory: Qdrant local without its file (no SQLite write a point)",
    )
    ap.add_argument("--n-records", type=int, default=None, help="records of the latency part (default: the size's)")
    ap.add_argument(
        "--modes",
        nargs="+",
        choices=tuple(MODE_NAMES),
        default=None,
        help="searches of the latency part (default: all; store-index is the default search, refresh-every its "
        "refresh_every=1.0 variant; plain-ef the plain store on Chroma with a wider HNSW search; plain-beside the "
        "plain store timed with the store-held rows; the open part runs with either store-index search)",
    )
    ap.add_argument("--opens", type=int, default=None, help="opens timed per engine (default: the size's)")
    ap.add_argument(
        "--net-delay-ms",
        type=float,
        default=0.0,
        help="milliseconds added each way between the Chroma client and its server (a proxy: a server across a "
        "network; chroma only)",
    )
    ap.add_argument(
        "--memory-ns",
        nargs="+",
        type=int,
        default=None,
        help="measure only these of the size's memory record counts now (each is cached; the report shows all cached)",
    )
    return ap


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _git() -> dict[str, Any]:
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True).stdout
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "textcrafter_rag", "integrations"],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout
    except OSError:
        return {}
    return {"head": head.strip(), "dirty_library": bool(dirty.strip())}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(None if argv is None else list(argv))
    size = resolve_size(args)
    cfg = SIZES[size]
    if args.engines:
        cfg = Config(**{**asdict(cfg), "engines": tuple(args.engines)})
    if args.n_records is not None:
        cfg = Config(**{**asdict(cfg), "n_records": args.n_records})
    if args.opens is not None:
        cfg = Config(**{**asdict(cfg), "opens": args.opens})
    delay = float(args.net_delay_ms)
    if delay < 0 or (delay and set(cfg.engines) != {"chroma"}):
        _parser().error("--net-delay-ms takes a positive delay, with --engines chroma (Qdrant local has no network)")
    modes = tuple(m for m in MODES if args.modes is None or m in {MODE_NAMES[n] for n in args.modes})
    # a latency run off the size's grid: its report is this run's parts only
    custom = args.n_records is not None or args.modes is not None or args.opens is not None or bool(delay)
    set_threads()
    t_start = time.perf_counter()
    cache = cache_dir(args.cache_dir)

    def log(msg: str) -> None:
        print(f"[store_index] {msg} ({time.perf_counter() - t_start:.0f} s)", flush=True)

    part_dir = cache / "sealed_search" / "store_index_parts"
    configs = {
        "latency": repr(
            (cfg.n_records, cfg.n_queries, cfg.engines, cfg.opens, cfg.n_clusters)
            + ((modes,) if modes != MODES else ())
            + ((delay,) if delay else ())
        ),
        **{f"memory-{n}": repr((n, cfg.memory_dim)) for n in cfg.memory_ns},
    }

    def part_path(part: str) -> Path:
        version = PART_VERSIONS[part.split("-")[0]]
        return part_dir / f"{part}-{cache_key(part, version, size, args.seed, configs[part])}.json"

    def cached(part: str) -> dict[str, Any] | None:
        p = part_path(part)
        return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None

    done: dict[str, dict[str, Any]] = {}
    if (
        (not custom or "latency" in args.parts)
        and (got := cached("latency")) is not None
        and not (args.redo and "latency" in args.parts)
    ):
        done["latency"] = got
    # the memory part is cached per size: --memory-ns measures some now, the report shows every size cached
    now = set(args.memory_ns or cfg.memory_ns) if "memory" in args.parts else set()
    mem = {
        n: got
        for n in cfg.memory_ns
        if (not custom or n in now) and (got := cached(f"memory-{n}")) is not None and not (args.redo and n in now)
    }
    for n in sorted(now - set(mem)):
        load0 = _load()
        got = {
            "rows": memory_rows((n,), dim=cfg.memory_dim, seed=args.seed, progress=log),
            "meta": {"load_avg_1m_start": load0, "load_avg_1m_end": _load()},
        }
        part_dir.mkdir(parents=True, exist_ok=True)
        part_path(f"memory-{n}").write_text(json.dumps(clean_json(got)), encoding="utf-8")
        mem[n] = got
    if mem:
        done["memory"] = {
            "rows": [r for n in cfg.memory_ns if n in mem for r in mem[n]["rows"]],
            "meta": {
                "ns": [n for n in cfg.memory_ns if n in mem],
                "dim": cfg.memory_dim,
                "load_avg_1m": {n: mem[n].get("meta", {}) for n in cfg.memory_ns if n in mem},
                "faiss_threads": "the caller's OMP_NUM_THREADS in the child (unset: FAISS's default)",
            },
        }
    for part in ("latency",):
        if part not in args.parts or part in done:
            continue
        load0 = _load()
        with Timer() as t:
            if part == "latency":
                data_dir = resolve_data_or_none(args.data_dir)
                if data_dir is None:
                    return 2
                data = _scifact(data_dir, cache=cache, size=size, seed=args.seed, progress=not args.no_progress)
                data = grow(
                    first_queries(data, cfg.n_queries), cfg.n_records, n_clusters=cfg.n_clusters, seed=args.seed
                )
                log(f"latency: {len(data.doc_ids):,} records ({data.about})")
                key = np.random.default_rng(args.seed).bytes(32)
                rows = latency_rows(
                    data,
                    engines=cfg.engines,
                    key=key,
                    opens=cfg.opens,
                    modes=modes,
                    net_delay_ms=delay,
                    progress=log,
                )
                meta = {"records": data.about, "engines": list(cfg.engines), "modes": list(modes)}
                meta["net_delay_ms"] = delay
        meta["seconds"] = round(t.seconds, 1)
        meta["load_avg_1m_start"], meta["load_avg_1m_end"] = load0, _load()
        done[part] = {"rows": rows, "meta": meta}
        part_dir.mkdir(parents=True, exist_ok=True)
        part_path(part).write_text(json.dumps(clean_json(done[part])), encoding="utf-8")
        log(f"{part} done in {t.seconds:.0f} s")
    rows = [r for p in PARTS if p in done for r in done[p]["rows"]]
    meta = make_meta(
        SCRIPT,
        argv,
        size=size,
        seed=args.seed,
        config=asdict(cfg),
        parts=[p for p in PARTS if p in done],
        parts_missing=[p for p in PARTS if p not in done],
        latency=done.get("latency", {}).get("meta", {}),
        memory=done.get("memory", {}).get("meta", {}),
        cited_candidates=_cited_candidates(RESULTS_DIR),
        targets={"p95_ratio_to_plain": P95_TARGET, "ndcg_ratio": NDCG_TARGET, "bytes_per_record": BYTES_TARGET},
        git=_git(),
        not_covered=not_covered(cfg.n_records, cfg.n_queries, cfg.engines, modes, net_delay_ms=delay)
        if custom
        else NOT_COVERED,
        custom=custom,
        runtime_seconds=round(time.perf_counter() - t_start, 1),
    )
    jp, mp = write_results(
        NAME,
        size=size,
        meta=meta,
        rows=rows or [{"part": "none", "n": 0}],
        markdown=render_markdown(rows, meta),
        out_dir=args.out_dir,
        tag=args.tag,
    )
    log(f"wrote {jp}, {mp}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
