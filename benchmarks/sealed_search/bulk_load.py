"""A Ray Data bulk load into the store-held index: records and index segments written in parallel, records/s.

``ray.data.range(N)`` becomes synthetic records (``r0``, ``r1``, ...: a short distinct text each, and a random
unit 384-d clean vector drawn from a seed per 1,000 records, so the encoder is not what is timed), then
``map_batches(SealedLoad, ...)`` with ``workers`` actors writes them into one collection of a Chroma server
(``chroma run``, started per run on a fresh data folder and stopped after). Each actor is one
:class:`~langchain_textcrafter.SealedVectorStore`, so one writer of the index log: each batch (``batch``
records) is one sealed add, its index segment and head first, then its records.

**Timed** (end to end): from building the dataset to the last output row in the driver (Ray's actor start,
record generation, sealing, the segments' and the records' writes); also the seconds to the first output, and
within the actors the seconds of their ``add_documents`` calls split into index-log writes and data-record
writes (the rest is sealing, the keyed vectors and Ray's batch handling in the actor).

**Checked** after the timer: every id is returned exactly once and the number of writers equals ``workers``;
then a fresh Python process given only the key opens the store, reads the whole log (timed: the first search
of any new process does the same), and reports how many of the ``N`` ids the index holds, how many records the
store holds under their keyed ids, the number of log heads (one a writer), and how many of a sample of records
a search by their own clean vector returns top-1 with their own text.

Usage::

    python -m benchmarks.sealed_search.bulk_load            # full: 20,000 records, 1 and 2 workers; 1,000,000, 2
    python -m benchmarks.sealed_search.bulk_load --quick    # 20,000 records, 1 and 2 workers; bulk_load_quick.*
    python -m benchmarks.sealed_search.bulk_load --records 1000000 --workers 2   # only this run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import ray

from benchmarks.common.options import base_parser, resolve_size
from benchmarks.common.reporting import Timer, make_meta, write_results
from benchmarks.two_stage.engines import _chroma_server
from textcrafter_rag.sealing import generate_key

from .bulk_load_parts import DIM, NAME, SCRIPT, SIZES, Config, load_once, verify_child, verify_in_fresh_process
from .bulk_load_report import render_markdown
from .store_index import _git, _load

__all__ = ["NAME", "SCRIPT", "SIZES", "main", "run"]

#: The repository root: the actors import the benchmark's own modules from it (and the caller's PYTHONPATH).
ROOT = Path(__file__).resolve().parents[2]


def _parser() -> argparse.ArgumentParser:
    ap = base_parser(SCRIPT, __doc__)
    ap.add_argument("--records", type=int, default=None, help="records per run (with --workers: only these runs)")
    ap.add_argument("--workers", type=int, nargs="+", default=None, help="actors per run")
    ap.add_argument("--batch", type=int, default=None, help="records per batch (one sealed add)")
    ap.add_argument("--verify-child", default=None, help=argparse.SUPPRESS)
    return ap


def _config(args: argparse.Namespace, size: str) -> Config:
    cfg = SIZES[size]
    if args.records is not None or args.workers is not None:
        n = args.records if args.records is not None else max(r[0] for r in cfg.runs)
        runs = tuple((n, w) for w in (args.workers or sorted({r[1] for r in cfg.runs})))
        cfg = Config(**{**asdict(cfg), "runs": runs})
    if args.batch is not None:
        cfg = Config(**{**asdict(cfg), "batch": args.batch})
    return cfg


def run(cfg: Config, *, seed: int, progress: bool, work_dir: Path, log: Any = print) -> list[dict[str, Any]]:
    """Every ``(records, workers)`` run of ``cfg``, each into a fresh Chroma server; one row each."""
    key = generate_key()
    key_file = work_dir / "textcrafter.key"
    key_file.write_text(key)
    key_file.chmod(0o600)
    rows = []
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    ray.init(
        num_cpus=os.cpu_count() or 2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": python_path}},
    )
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.wait_for_min_actors_s = 600  # every actor is up before the first batch is handed out
    try:
        for i, (n, workers) in enumerate(cfg.runs):
            data = work_dir / f"chroma-{i}"
            data.mkdir(parents=True)
            load0 = _load()
            with _chroma_server(data) as (host, port):
                log(f"loading {n:,} records with {workers} worker(s) into {host}:{port}")
                row = load_once(
                    host=host,
                    port=port,
                    collection="bulk",
                    key_file=key_file,
                    n=n,
                    workers=workers,
                    batch=cfg.batch,
                    seed=seed,
                    progress=progress,
                    log=log,
                )
                row["load_avg_1m_start"], row["load_avg_1m_end_of_load"] = load0, _load()
                log(f"{n:,} records, {workers} worker(s): {row['records_per_s']:,.0f} records/s; verifying")
                with Timer() as t:
                    row.update(
                        verify_in_fresh_process(
                            host=host, port=port, collection="bulk", n=n, sample=cfg.sample, seed=seed, key=key, log=log
                        )
                    )
                row["verify_s"] = round(t.seconds, 1)
                row["data_dir_bytes"] = sum(p.stat().st_size for p in data.rglob("*") if p.is_file())
            shutil.rmtree(data, ignore_errors=True)
            rows.append(row)
            log(
                f"verified: {row['indexed']:,} indexed, {row['stored']:,} stored, "
                f"{row['sample_found_top1']}/{row['sample']} found top-1"
            )
    finally:
        ray.shutdown()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(None if argv is None else list(argv))
    if args.verify_child is not None:
        print(json.dumps(verify_child(**json.loads(args.verify_child))), flush=True)
        return 0
    size = resolve_size(args)
    cfg = _config(args, size)
    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[bulk_load] {msg} ({time.perf_counter() - t_start:.0f} s)", flush=True)

    with tempfile.TemporaryDirectory(prefix="bulk-load-") as tmp:
        rows = run(cfg, seed=args.seed, progress=not args.no_progress, work_dir=Path(tmp), log=log)
    meta = make_meta(
        SCRIPT,
        argv,
        size=size,
        seed=args.seed,
        config=asdict(cfg),
        dimension=DIM,
        engine="Chroma server (chroma run, one per run, on this machine)",
        ray=ray.__version__,
        git=_git(),
        runtime_seconds=round(time.perf_counter() - t_start, 1),
    )
    jp, mp = write_results(
        NAME, size=size, meta=meta, rows=rows, markdown=render_markdown(rows, meta), out_dir=args.out_dir, tag=args.tag
    )
    log(f"wrote {jp}, {mp}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
