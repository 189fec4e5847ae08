"""Peak memory and throughput of ``textcrafter protect`` streaming big .npy, .parquet and .jsonl files.

Generates ``n`` synthetic unit-norm 384-d float32 vectors as a ``.npy``, the same vectors as a
``.parquet`` with an ``id`` column (row groups much larger than a chunk), and the first
``n_jsonl`` of them as a ``.jsonl`` (JSON is slow to parse, so that file is smaller), in a
temporary folder that is deleted afterwards. Each file is protected by ``textcrafter protect``
(shipped eps 1.0 policy) in a fresh subprocess, whose peak resident set size is measured two
ways: the kernel's high-water mark for that process (``ru_maxrss``, read by a minimal launcher
process that starts it: a child's ``ru_maxrss`` also counts the RSS of the process it was forked
from, so it must not be forked from this one), and psutil polling of its process tree every
20 ms (a cross-check that can only miss peaks). A
smaller file of each binary format shows the peak does not grow with the file. Every run must
stay under ``--limit-mb`` (1024); the script exits 1 otherwise.

Usage::

    python -m benchmarks.speed.streaming_memory            # full: 1,000,000 x 384 (about 6 GB of disk while running)
    python -m benchmarks.speed.streaming_memory --quick    # 100,000 x 384, writes streaming_memory_quick.*
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.grid import perturbation_norm
from benchmarks.common.options import base_parser, resolve_size
from benchmarks.common.reporting import Script, make_meta, md_table, write_results
from textcrafter_rag.batches import column_to_matrix, matrix_to_arrow
from textcrafter_rag.numerics import unit_rows
from textcrafter_rag.policies import BUNDLED_MODEL_ID

NAME = "streaming_memory"
SCRIPT = Script(NAME, "benchmarks.speed.streaming_memory")
REPO = Path(__file__).resolve().parents[2]
DIM = 384
SIZES: dict[str, dict[str, int]] = {
    "smoke": {"n": 3000, "n_small": 0, "n_jsonl": 600, "chunk_size": 512, "row_group": 1024},
    "quick": {"n": 100_000, "n_small": 10_000, "n_jsonl": 10_000, "chunk_size": 4096, "row_group": 32_768},
    "full": {"n": 1_000_000, "n_small": 10_000, "n_jsonl": 50_000, "chunk_size": 4096, "row_group": 131_072},
}
_STREAM_LINE = re.compile(r"in ([0-9.]+)s \(([0-9]+) vectors/s\)")


# --------------------------------------------------------------------------- synthetic inputs
def write_npy(path: Path, n: int, *, seed: int, block: int = 65_536) -> None:
    """``n`` random unit vectors as an ``(n, 384)`` float32 ``.npy``, written block by block."""
    rng = np.random.default_rng(seed)
    with path.open("wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": (n, DIM)})
        for start in range(0, n, block):
            x = unit_rows(rng.standard_normal((min(block, n - start), DIM))).astype(np.float32)
            fh.write(x.tobytes())


def write_parquet(path: Path, npy: Path, n: int, *, row_group: int) -> None:
    """The first ``n`` vectors of ``npy`` with an ``id`` column, ``row_group`` rows per row group."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    x = np.load(npy, mmap_mode="r")
    schema = pa.schema([("id", pa.int64()), ("embedding", pa.list_(pa.float32(), DIM))])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, n, row_group):
            stop = min(start + row_group, n)
            writer.write_table(
                pa.table(
                    {"id": pa.array(np.arange(start, stop)), "embedding": matrix_to_arrow(np.asarray(x[start:stop]))},
                    schema=schema,
                )
            )


def write_jsonl(path: Path, npy: Path, n: int) -> None:
    """The first ``n`` vectors of ``npy`` as ``{"id": i, "embedding": [...]}`` lines."""
    x = np.load(npy, mmap_mode="r")
    with path.open("w", encoding="utf-8") as fh:
        for start in range(0, n, 4096):
            for i, v in enumerate(np.asarray(x[start : min(start + 4096, n)]).tolist(), start):
                fh.write(json.dumps({"id": i, "embedding": v}) + "\n")


# --------------------------------------------------------------------------- measurement
#: A minimal launcher: a child's ru_maxrss also counts the RSS of the process it was forked from
#: (Linux keeps the pre-exec high-water mark across exec), so the measured command is started from
#: this ~10 MB process, not from the benchmark, and its peak is read from RUSAGE_CHILDREN here.
_LAUNCHER = (
    "import resource, subprocess, sys\n"
    "rc = subprocess.call(sys.argv[2:])\n"
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
    "sys.exit(rc)\n"
)


def _tree_rss(procs: list[Any]) -> int:
    import psutil

    total = 0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):  # it ended, or is not ours
            total += p.memory_info().rss
    return total


def run_measured(cmd: list[str], *, env: dict[str, str], workdir: Path) -> dict[str, Any]:
    """Run ``cmd`` from a fresh launcher; return exit code, wall seconds, output and peak RSS in MB.

    ``peak_rss_mb`` is the kernel's high-water mark of ``cmd`` (and any children it waited for),
    from the launcher's ``RUSAGE_CHILDREN``; ``peak_rss_mb_polled`` the largest RSS sum of the
    launcher's descendants seen by polling every 20 ms (it can only miss peaks).
    """
    import psutil

    log, rss_file = workdir / "log.txt", workdir / "maxrss.txt"
    rss_file.unlink(missing_ok=True)
    with log.open("wb") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, str(rss_file), *cmd],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
        )
        peak = [0]
        stop = threading.Event()

        def poll() -> None:
            try:
                launcher = psutil.Process(proc.pid)
                while not stop.is_set():
                    peak[0] = max(peak[0], _tree_rss(launcher.children(recursive=True)))
                    stop.wait(0.02)
            except psutil.NoSuchProcess:
                pass

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        returncode = proc.wait()
        seconds = time.perf_counter() - t0
        stop.set()
        thread.join()
    maxrss_kib = float(rss_file.read_text()) if rss_file.is_file() else float("nan")
    return {
        "returncode": returncode,
        "seconds": seconds,
        "output": log.read_text(encoding="utf-8", errors="replace"),
        "peak_rss_mb": maxrss_kib / 1024.0,  # Linux reports KiB
        "peak_rss_mb_polled": peak[0] / 2**20,
    }


def perturbation_sample(src: Path, out: Path, fmt: str, *, n_check: int = 2000) -> float:
    """Mean ``||out - in||`` over the first and last ``n_check`` rows (checks the output is complete and right)."""
    x = np.load(src.with_suffix(".npy"), mmap_mode="r")
    if fmt == "npy":
        y = np.load(out, mmap_mode="r")
        idx = np.r_[0 : min(n_check, len(y)), max(0, len(y) - n_check) : len(y)]
        return perturbation_norm(np.asarray(x[idx]), np.asarray(y[idx]))
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(out)
        t = pf.read_row_group(pf.metadata.num_row_groups - 1, columns=["id", "embedding"])
        ids = np.asarray(t["id"].to_numpy())[-n_check:]
        y = column_to_matrix(t["embedding"], name="embedding")[-n_check:]
        return perturbation_norm(np.asarray(x[ids]), y)
    ids, rows = [], []
    with out.open(encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            ids.append(rec["id"])
            rows.append(rec["embedding"])
            if len(rows) >= n_check:
                break
    return perturbation_norm(np.asarray(x[ids]), np.asarray(rows, dtype=np.float32))


def main(argv: list[str] | None = None) -> int:
    ap = base_parser(SCRIPT, __doc__)
    ap.add_argument("--n", type=int, default=None, help="number of vectors (default: per size)")
    ap.add_argument("--chunk-size", type=int, default=None, help="textcrafter protect --chunk-size (default 4096)")
    ap.add_argument("--formats", nargs="+", default=["npy", "parquet", "jsonl"], choices=["npy", "parquet", "jsonl"])
    ap.add_argument("--limit-mb", type=float, default=1024.0, help="peak RSS every run must stay under (MB)")
    ap.add_argument("--tmp-dir", default=None, help="where the temporary input/output files go (default: system temp)")
    args = ap.parse_args(argv)
    size = resolve_size(args)
    cfg = dict(SIZES[size])
    if args.n is not None:
        cfg["n"] = args.n
        cfg["n_jsonl"] = min(cfg["n_jsonl"], args.n)
        cfg["n_small"] = min(cfg["n_small"], args.n // 10)
    if args.chunk_size is not None:
        cfg["chunk_size"] = args.chunk_size
    n, chunk = cfg["n"], cfg["chunk_size"]
    threads = os.environ.get("TEXTCRAFTER_BENCH_THREADS")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    if threads:
        env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads)
    log = print if not args.no_progress else (lambda *a, **k: None)
    t_all = time.perf_counter()

    plan: list[tuple[str, int]] = [(f, n if f != "jsonl" else cfg["n_jsonl"]) for f in args.formats]
    if cfg["n_small"]:
        plan += [(f, cfg["n_small"]) for f in args.formats if f != "jsonl"]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="textcrafter-streaming-", dir=args.tmp_dir) as tmp:
        d = Path(tmp)
        for fmt, n_rows in plan:
            base = d / f"vectors-{n_rows}"
            npy = base.with_suffix(".npy")
            if not npy.is_file():
                log(f"[{NAME}] generating {n_rows:,} x {DIM} vectors", flush=True)
                write_npy(npy, n_rows, seed=args.seed)
            src = base.with_suffix(f".{fmt}")
            if fmt == "parquet" and not src.is_file():
                write_parquet(src, npy, n_rows, row_group=cfg["row_group"])
            elif fmt == "jsonl" and not src.is_file():
                write_jsonl(src, npy, n_rows)
            out = d / f"protected-{n_rows}.{fmt}"
            cmd = [
                sys.executable,
                "-m",
                "textcrafter_rag.cli",
                "protect",
                "--input",
                str(src),
                "--output",
                str(out),
                "--chunk-size",
                str(chunk),
                "--no-progress",
            ]
            log(f"[{NAME}] {fmt}: {n_rows:,} vectors ...", flush=True)
            res = run_measured(cmd, env=env, workdir=d)
            if res["returncode"] != 0:
                print(res["output"], file=sys.stderr)
                print(f"error: textcrafter protect failed on {src.name} (exit {res['returncode']})", file=sys.stderr)
                return 2
            m = _STREAM_LINE.search(res["output"])
            row: dict[str, Any] = {
                "mechanism": "textcrafter",
                "param_eps": 1.0,
                "format": fmt,
                "output_format": fmt,
                "n_vectors": n_rows,
                "dim": DIM,
                "chunk_size": chunk,
                "input_mb": src.stat().st_size / 1e6,
                "output_mb": out.stat().st_size / 1e6,
                "peak_rss_mb": res["peak_rss_mb"],
                "peak_rss_mb_polled": res["peak_rss_mb_polled"],
                "limit_mb": args.limit_mb,
                "result": "pass" if res["peak_rss_mb"] < args.limit_mb else "fail",
                "seconds": res["seconds"],
                "vectors_per_s": n_rows / res["seconds"],
                "stream_vectors_per_s": n_rows / float(m.group(1)) if m and float(m.group(1)) > 0 else None,
                "perturbation_norm": perturbation_sample(base, out, fmt),
            }
            if fmt == "parquet":
                row["row_group_rows"] = cfg["row_group"]
            rows.append(row)
            log(
                f"[{NAME}] {fmt} n={n_rows:,}: peak RSS {row['peak_rss_mb']:.0f} MB "
                f"(polled {row['peak_rss_mb_polled']:.0f}), {row['vectors_per_s']:.0f} vectors/s end to end, "
                f"norm {row['perturbation_norm']:.4f} -> {row['result']}",
                flush=True,
            )
            out.unlink()

    settings = {
        "dimension": DIM,
        "normalisation": "L2 unit norm",
        "policy": "shipped TextCrafter eps 1.0",
        "limit_mb": args.limit_mb,
        "sizes": cfg,
        "threads": threads or "default",
        "measurement": (
            "peak RSS of the `textcrafter protect` subprocess: its kernel high-water mark (ru_maxrss, "
            "read as RUSAGE_CHILDREN by a minimal launcher process that started it, since a child's "
            "ru_maxrss also counts the process it was forked from), cross-checked by psutil polling its "
            "process tree every 20 ms; vectors_per_s = n / subprocess wall time (interpreter start, "
            "imports and policy load included); stream_vectors_per_s = n / the CLI's own loop time"
        ),
        "attack_config": {"enabled": False},
        "runtime_seconds": round(time.perf_counter() - t_all, 1),
    }
    meta = make_meta(SCRIPT, argv, size=size, seed=args.seed, **settings)
    meta["encoder"] = f"{BUNDLED_MODEL_ID} (synthetic unit vectors of its dimension)"
    jp, mp = write_results(
        NAME, size=size, meta=meta, rows=rows, markdown=render_markdown(rows, meta), out_dir=args.out_dir, tag=args.tag
    )
    print(f"[{NAME}] wrote {jp}, {mp}")
    return 0 if all(r["result"] == "pass" for r in rows) else 1


def render_markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """One table: format, size, peak RSS against the limit, throughput."""
    m = meta["machine"]
    sel = [
        {
            **r,
            "input_mb": round(r["input_mb"]),
            "peak_rss_mb": round(r["peak_rss_mb"]),
            "peak_rss_mb_polled": round(r["peak_rss_mb_polled"]),
            "limit_mb": round(r["limit_mb"]),
            "vectors_per_s": round(r["vectors_per_s"]),
            "stream_vectors_per_s": round(r["stream_vectors_per_s"]) if r.get("stream_vectors_per_s") else None,
        }
        for r in rows
    ]
    cols = [
        "format",
        "n_vectors",
        "chunk_size",
        "input_mb",
        "peak_rss_mb",
        "peak_rss_mb_polled",
        "limit_mb",
        "result",
        "vectors_per_s",
        "stream_vectors_per_s",
        "perturbation_norm",
    ]
    hdr = [
        "format",
        "vectors",
        "chunk",
        "input MB",
        "peak RSS MB",
        "peak RSS MB (polled)",
        "limit MB",
        "result",
        "vectors/s end to end",
        "vectors/s streaming loop",
        "mean perturbation norm",
    ]
    return "\n".join(
        [
            f"# Streaming memory of `textcrafter protect` ({meta['size']})",
            "",
            (
                f"Each file ({DIM}-d float32 unit vectors, synthetic) is protected with the shipped TextCrafter "
                "eps 1.0 policy by `textcrafter protect --chunk-size CHUNK --no-progress` in a fresh subprocess; "
                "output format = input format. Parquet inputs have an `id` column and row groups of "
                f"{meta['sizes']['row_group']:,} rows. Measurement: {meta['measurement']}."
            ),
            "",
            md_table(sel, cols, headers=hdr, digits=4),
            "",
            (
                f"Machine: {m['platform']}, {m['cpu_count']} CPUs (threads: {meta['threads']}; load average "
                f"{m.get('load_avg_1m', '?')} at the end, shared machine), torch {m['torch']}, numpy {m['numpy']}. "
                f"Command: `{meta['command']}`. Runtime {meta['runtime_seconds']} s."
            ),
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
