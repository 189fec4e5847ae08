"""The store-held index at 10,000,000 records: NDCG@10 against clean, records opened, app work, bytes a record.

**Data.** SciFact (5,183 abstracts, 300 judged queries, the bundled MiniLM) grown to ``--n`` records with the scale
grid's cluster-preserving fitted distractors (:func:`~.distractors.cluster_distractor_chunks`, 64 clusters),
generated 50,000 at a time: 10,000,000 float32 rows would be 15 GB, more than this 24 GB machine can hold beside
the rest. Each chunk is indexed, scored against the queries for the clean top 10 (exact, running), and kept on
disk as float16 for the re-rank, then dropped.

**Index.** The in-memory index of the store-held mode as every reader builds it
(:class:`~textcrafter_rag.sealed.vector_index.VectorIndex` with the shipped options: exact below 20,000 records,
then IVF-PQ trained in the background while adds go on), fed in the log's segment size (2,000 entries an
add) under keyed-style UUID4 ids. The log itself is not written at this size: a 10,000,000-record log in a
:class:`MemoryPort` is about 10 GB of sealed text (the ``memory`` part of ``store_index`` reads a 1,000,000-record
log into the same index).

**Measured.**

* ``ndcg@10`` of the ``open_k`` records the index picks, re-ranked exactly by their clean vectors (what the
  opened sealed vectors hold), against the exact search of all the clean vectors (``clean``);
* app work a query (one at a time, ``--queries`` timed): the index scan, plus opening ``open_k`` real sealed
  vectors and ranking them (:class:`~.timing.SealedPool`, the core's ``open_hits`` and ``rank``);
* memory: the process's RSS before the first add and after training, over the records (``malloc_trim`` first
  for the baseline; after, both as is and trimmed), beside what FAISS and the id table account for;
* the longest single add (a write must never wait for training);
* a sweep on the same index: NDCG@10 against clean and recall@10 of the exact top 10 for the first ``open_k``
  records of one scan (25 to 200), at 1x, 2x and 4x the options' ``scan_codes``, with each scan's time and lists
  probed. ``--split train`` measures SciFact's train queries, kept apart from the test queries the reports
  use, for choosing settings.

Usage::

    python -m benchmarks.sealed_search.store_index_scale              # 10,000,000 records (about 18 min here)
    python -m benchmarks.sealed_search.store_index_scale --n 1000000  # one size
"""

from __future__ import annotations

import gc
import resource
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.caches import cache_dir
from benchmarks.common.options import base_parser, resolve_data_or_none, resolve_size, set_threads
from benchmarks.common.reporting import Script, fmt, make_meta, md_table, write_results
from textcrafter_rag.metrics import retrieval_metrics
from textcrafter_rag.numerics import unit_rows
from textcrafter_rag.sealed.core import SealedSearch
from textcrafter_rag.sealed.sizing import sized
from textcrafter_rag.sealed.store_index import StoreIndexSearch
from textcrafter_rag.sealed.vector_index import VectorIndex
from textcrafter_rag.sealing import SecretKey

from .distractors import cluster_distractor_chunks
from .store_index import _git, _load
from .store_index_memory import _rss, _trimmed_rss
from .store_index_parts import BYTES_TARGET, NDCG_TARGET, Retrieval, _scifact
from .timing import SealedPool

__all__ = ["SCRIPT", "scale_row"]

NAME = "store_index_scale"
SCRIPT = Script(NAME, "benchmarks.sealed_search.store_index_scale")
#: The issue's targets beside NDCG and bytes: records opened, app work p95 (ms).
OPENED_TARGET, APP_MS_TARGET = 200, 30.0
_ADD = 2_000  # entries a log segment carries: the reader's add size
#: Records opened a query, swept on the same index and queries: the first ``m`` of the scan's order, re-ranked;
#: at each multiple of the options' ``scan_codes`` (codes a query scans).
OPEN_SWEEP, SCAN_SWEEP = (10, 15, 20, 25, 40, 60, 100, 150, 200), (1, 2, 4)
_VARIANT = 0b10 << 62


def _ids(start: int, n: int, rng: np.random.Generator) -> list[str]:
    """UUID4 ids that look keyed (random first half) and carry their row in the second half's low 62 bits."""
    hi = rng.integers(0, 1 << 63, size=n, dtype=np.int64).tolist()
    return [str(uuid.UUID(int=(h << 64) | _VARIANT | (start + i), version=4)) for i, h in enumerate(hi)]


def _row_of(rid: str) -> int:
    return uuid.UUID(rid).int & ((1 << 62) - 1)


def _chunks(base: Retrieval, n: int, *, seed: int) -> Iterator[np.ndarray]:
    yield unit_rows(base.vectors.astype(np.float64)).astype(np.float32)
    if n > len(base.doc_ids):
        yield from cluster_distractor_chunks(base.vectors, n - len(base.doc_ids), n_clusters=64, seed=seed)


def _ndcg(rows: np.ndarray, base: Retrieval) -> float:
    ranked = {
        q: [base.doc_ids[j] if j < len(base.doc_ids) else f"distractor-{j}" for j in r]
        for q, r in zip(base.query_ids, rows.tolist())
    }
    return float(retrieval_metrics(ranked, base.qrels, ks=(10,))["ndcg@10"])


def scale_row(
    base: Retrieval,
    n: int,
    *,
    options: StoreIndexSearch,
    work_dir: Path,
    seed: int,
    n_timed: int,
    log: Any = print,
) -> dict[str, Any]:
    """Build the index over ``base`` grown to ``n`` records and measure it (see the module docstring)."""
    rng = np.random.default_rng(seed + 101)
    q = unit_rows(base.query_vectors.astype(np.float64)).astype(np.float32)
    k_top = np.full((len(q), 10), -1, dtype=np.int64)
    s_top = np.full((len(q), 10), -np.inf, dtype=np.float32)
    before = _trimmed_rss() or _rss()
    index = VectorIndex(
        q.shape[1],
        code_bytes=options.code_bytes,
        train_at=options.train_at,
        background=True,
        scan_codes=options.scan_codes,
    )
    start, longest_add, t0 = 0, 0.0, time.perf_counter()
    files: list[tuple[int, Path]] = []
    for chunk in _chunks(base, n, seed=seed):
        ids = _ids(start, len(chunk), rng)
        for a in range(0, len(chunk), _ADD):
            t1 = time.perf_counter()
            index.add(ids[a : a + _ADD], chunk[a : a + _ADD])
            longest_add = max(longest_add, time.perf_counter() - t1)
        scores = q @ chunk.T  # the clean top 10, running
        part = np.argpartition(-scores, min(10, scores.shape[1] - 1), axis=1)[:, :10]
        cand_s = np.concatenate([s_top, np.take_along_axis(scores, part, axis=1)], axis=1)
        cand_k = np.concatenate([k_top, part + start], axis=1)
        best = np.argsort(-cand_s, axis=1, kind="stable")[:, :10]
        s_top, k_top = np.take_along_axis(cand_s, best, axis=1), np.take_along_axis(cand_k, best, axis=1)
        path = work_dir / f"rows-{start}.npy"
        np.save(path, chunk.astype(np.float16))
        files.append((start, path))
        start += len(chunk)
        if len(files) % 20 == 0:
            log(f"{start:,} records indexed ({time.perf_counter() - t0:.0f} s)")
    build_s = time.perf_counter() - t0
    index.wait_trained()
    trained_s = time.perf_counter() - t0
    # the loop's last chunk and its scores are this script's, not the index's: 50,000 float32 rows and 300 x 50,000
    # scores (137 MB, 137 B a record at 1,000,000 records), counted as the index's until they were dropped here
    del chunk, scores, part, cand_s, cand_k, best
    gc.collect()
    after = _rss()
    trimmed = _trimmed_rss()
    log(f"built: {start:,} records in {build_s:.0f} s (trained after {trained_s:.0f} s)")
    # unset options: what the size rule gives at this size (textcrafter_rag.sealed.sizing), as a search takes them
    open_k, scan = options.opened(start), options.scan_codes or sized(start)[1]
    opened, scan_ms = [], []
    for i in range(len(q)):
        t1 = time.perf_counter()
        got = index.search(q[i], open_k)
        scan_ms.append((time.perf_counter() - t1) * 1000)
        opened.append([_row_of(r) for r in got])
    lists, probed = index.lists  # as the timed searches probed (the sweep below probes more)
    deep, by_scan, scan_p = max(OPEN_SWEEP), {}, {}
    for times in SCAN_SWEEP:  # the sweep's picks: one scan deep enough for every open_k, at each scan size
        index.scan_codes = scan * times
        took = []
        for i in range(len(q)):
            t1 = time.perf_counter()
            by_scan[index.scan_codes, i] = [_row_of(r) for r in index.search(q[i], deep)]
            took.append((time.perf_counter() - t1) * 1000)
        scan_p[index.scan_codes] = (float(np.percentile(took, 50)), float(np.percentile(took, 95)), index.lists[1])
    index.scan_codes = options.scan_codes
    want = sorted({r for rows in (*opened, *by_scan.values()) for r in rows})
    clean = _gather(files, want)

    def reranked(picks: Sequence[Sequence[int]]) -> np.ndarray:
        return np.asarray(
            [
                [r for r, _ in sorted(((r, -float(clean[r] @ q[i])) for r in rows), key=lambda t: t[1])[:10]]
                for i, rows in enumerate(picks)
            ]
        )

    top = reranked(opened)
    key = SecretKey(rng.bytes(32))
    core = SealedSearch(key, tenant="scale", options=options)
    pool = SealedPool(core, q, open_k, seed=seed)
    app_ms = []
    for i in range(min(n_timed, len(q))):
        t1 = time.perf_counter()
        got = pool.opened(open_k, core)
        SealedSearch.rank(q[i], got.vectors, 10)
        app_ms.append(scan_ms[i] + (time.perf_counter() - t1) * 1000)
    ndcg, ref = _ndcg(top, base), _ndcg(k_top, base)
    sweep = []
    for codes, (p50, p95, probes) in scan_p.items():
        for m in OPEN_SWEEP:
            picked = reranked([by_scan[codes, i][:m] for i in range(len(q))])
            sweep.append(
                {
                    "scan_codes": codes,
                    "open_k": m,
                    "ndcg_ratio": _ndcg(picked, base) / ref if ref else None,
                    "recall10": _recall(picked, k_top),
                    "scan_ms_p50": p50,
                    "scan_ms_p95": p95,
                    "lists_probed": probes,
                }
            )
    return {
        "n_records": start,
        "open_k": open_k,
        "sized": options.open_k is None,
        "code_bytes": options.code_bytes,
        "ndcg@10": ndcg,
        "clean_ndcg@10": ref,
        "ndcg_ratio": ndcg / ref if ref else float("nan"),
        "opened_mean": float(np.mean([len(r) for r in opened])),
        "scan_ms_p50": float(np.percentile(scan_ms, 50)),
        "scan_ms_p95": float(np.percentile(scan_ms, 95)),
        "app_ms_p50": float(np.percentile(app_ms, 50)),
        "app_ms_p95": float(np.percentile(app_ms, 95)),
        "rss_bytes_per_record": (after - before) / start,
        "rss_trimmed_bytes_per_record": None if trimmed is None else (trimmed - before) / start,
        "accounted_faiss_bytes_per_record": index.bytes_per_record,
        "accounted_id_table_bytes_per_record": index.id_bytes_per_record,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "build_seconds": round(build_s, 1),
        "build_and_train_seconds": round(trained_s, 1),
        "longest_add_ms": round(longest_add * 1000, 1),
        "trained": index.trained,
        "lists": lists,
        "lists_probed": probed,
        "queries_timed": len(app_ms),
        "recall10": _recall(top, k_top),
        "scan_codes": scan,
        "open_sweep": sweep,
    }


def _recall(picked: np.ndarray, exact: np.ndarray) -> float:
    """The mean share of each query's exact top 10 among the 10 it returned."""
    return float(np.mean([len(set(a.tolist()) & set(b.tolist())) / 10 for a, b in zip(picked, exact)]))


def _gather(files: Sequence[tuple[int, Path]], rows: Sequence[int]) -> dict[int, np.ndarray]:
    """The clean vectors of these rows, read back from the float16 chunk files in one pass."""
    out: dict[int, np.ndarray] = {}
    want = np.asarray(rows, dtype=np.int64)
    for start, path in files:
        chunk = np.load(path)
        inside = want[(want >= start) & (want < start + len(chunk))]
        for r in inside.tolist():
            out[r] = chunk[r - start].astype(np.float32)
    return out


def render_markdown(row: dict[str, Any], meta: dict[str, Any]) -> str:
    checks = [
        ("NDCG@10 / clean", f">= {NDCG_TARGET}", fmt(row["ndcg_ratio"], 3), row["ndcg_ratio"] >= NDCG_TARGET),
        ("records opened", f"<= {OPENED_TARGET}", fmt(row["opened_mean"], 0), row["opened_mean"] <= OPENED_TARGET),
        ("app work p95 ms", f"<= {APP_MS_TARGET:g}", fmt(row["app_ms_p95"], 1), row["app_ms_p95"] <= APP_MS_TARGET),
        (
            "RSS B / record",
            f"<= {BYTES_TARGET:g}",
            fmt(row["rss_bytes_per_record"], 1),
            row["rss_bytes_per_record"] <= BYTES_TARGET,
        ),
    ]
    lines = [
        "# The store-held index at scale",
        "",
        f"`{meta['command']}` on {meta.get('date', '')}; machine: {meta['machine'].get('cpu_count', '?')} cores, "
        f"load average "
        f"{meta.get('load_avg_1m_start')} at the start, {meta.get('load_avg_1m_end')} at the end; code at "
        f"{meta.get('git', {}).get('head', '?')}. {meta['records']}.",
        "",
        (__doc__ or "").split("**Measured.**")[0].split("\n\n", 1)[1].strip(),
        "",
        md_table(
            [row],
            [
                "n_records",
                "clean_ndcg@10",
                "ndcg@10",
                "ndcg_ratio",
                "opened_mean",
                "scan_ms_p50",
                "scan_ms_p95",
                "app_ms_p50",
                "app_ms_p95",
                "rss_bytes_per_record",
                "rss_trimmed_bytes_per_record",
                "accounted_faiss_bytes_per_record",
                "accounted_id_table_bytes_per_record",
                "build_and_train_seconds",
                "longest_add_ms",
                "lists",
                "lists_probed",
            ],
            headers=[
                "records",
                "clean NDCG@10",
                "NDCG@10",
                "/ clean",
                "opened",
                "scan p50 ms",
                "scan p95 ms",
                "app p50 ms",
                "app p95 ms",
                "RSS B / rec",
                "after malloc_trim",
                "FAISS B",
                "id table B",
                "build + train s",
                "longest add ms",
                "lists",
                "lists probed",
            ],
        ),
        "",
        "| target | wanted | measured | met |",
        "|---|---:|---:|---:|",
        *(f"| {a} | {b} | {c} | {'**met**' if d else 'not met'} |" for a, b, c, d in checks),
        *_sweep_lines(row),
    ]
    return "\n".join(lines)


def _sweep_lines(row: dict[str, Any]) -> list[str]:
    """The report's table of records opened against quality, on the same index and queries."""
    sweep = row.get("open_sweep") or []
    if not sweep:
        return []
    enough = [s for s in sweep if s["ndcg_ratio"] is not None and s["ndcg_ratio"] >= NDCG_TARGET]
    cheapest = min(enough, key=lambda s: (s["open_k"], s["scan_codes"]), default=None)
    return [
        "",
        "## Records opened and codes scanned against quality",
        "",
        "The same index and queries: each query's first `open_k` records in the scan's order (one scan "
        f"{max(s['open_k'] for s in sweep)} deep), re-ranked by their clean vectors, at each number of codes a "
        "query scans (`scan_codes`: whole inverted lists, nearest first). recall@10: the share of the exact top 10 "
        "among the 10 returned. scan ms: the scan alone, one query at a time.",
        "",
        "| scan_codes | lists probed | scan p50 ms | scan p95 ms | open_k | NDCG@10 / clean | recall@10 |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {s['scan_codes']:,} | {s['lists_probed']} | {fmt(s['scan_ms_p50'], 1)} | "
            f"{fmt(s['scan_ms_p95'], 1)} | {s['open_k']} | {fmt(s['ndcg_ratio'], 3)} | {fmt(s['recall10'], 3)} |"
            for s in sweep
        ),
        "",
        (
            f"Reaching {NDCG_TARGET} of clean NDCG@10 with the fewest records opened: open_k {cheapest['open_k']} "
            f"at scan_codes {cheapest['scan_codes']:,} ({fmt(cheapest['ndcg_ratio'], 3)})."
            if cheapest
            else f"No setting swept reaches {NDCG_TARGET} of clean NDCG@10."
        ),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    ap = base_parser(SCRIPT, __doc__)
    ap.add_argument("--n", type=int, default=10_000_000, help="records in the index (SciFact + distractors)")
    ap.add_argument("--queries", type=int, default=300, help="queries whose app work is timed")
    ap.add_argument(
        "--work-dir", default=None, help="where the float16 rows wait for the re-rank (default: a temp dir)"
    )
    ap.add_argument("--code-bytes", type=int, default=None, help="PQ code bytes a record (default: the shipped size)")
    ap.add_argument("--open-k", type=int, default=None, help="records opened a query (default: the shipped one)")
    ap.add_argument("--scan-codes", type=int, default=None, help="codes a query scans (default: the shipped one)")
    ap.add_argument(
        "--split",
        choices=("test", "train"),
        default="test",
        help="SciFact queries measured: test (reported) or train (apart from them: for choosing a setting)",
    )
    args = ap.parse_args(None if argv is None else list(argv))
    size = resolve_size(args)
    set_threads()
    data_dir = resolve_data_or_none(args.data_dir)
    if data_dir is None:
        return 2
    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[store_index_scale] {msg} ({time.perf_counter() - t_start:.0f} s)", flush=True)

    base = _scifact(
        data_dir,
        cache=cache_dir(args.cache_dir),
        size=size,
        seed=args.seed,
        progress=not args.no_progress,
        split=args.split,
    )
    n = min(args.n, 3_000) if size == "smoke" else args.n
    given = (("code_bytes", args.code_bytes), ("open_k", args.open_k), ("scan_codes", args.scan_codes))
    chosen = {k: v for k, v in given if v is not None}
    options = StoreIndexSearch(train_at=1_000, **chosen) if size == "smoke" else StoreIndexSearch(**chosen)
    load0 = _load()
    work = Path(tempfile.mkdtemp(prefix="tc-scale-", dir=args.work_dir))
    try:
        row = scale_row(base, n, options=options, work_dir=work, seed=args.seed, n_timed=args.queries, log=log)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    meta = make_meta(
        SCRIPT,
        argv,
        size=size,
        seed=args.seed,
        records=f"{base.about} + {row['n_records'] - len(base.doc_ids):,} cluster-preserving fitted distractors",
        options=repr(options),
        load_avg_1m_start=load0,
        load_avg_1m_end=_load(),
        git=_git(),
        targets={
            "ndcg_ratio": NDCG_TARGET,
            "opened": OPENED_TARGET,
            "app_ms_p95": APP_MS_TARGET,
            "bytes_per_record": BYTES_TARGET,
        },
        runtime_seconds=round(time.perf_counter() - t_start, 1),
    )
    jp, mp = write_results(
        NAME, size=size, meta=meta, rows=[row], markdown=render_markdown(row, meta), out_dir=args.out_dir, tag=args.tag
    )
    log(f"wrote {jp}, {mp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
