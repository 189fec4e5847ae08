"""Ray Data throughput: vectors/s of ``ds.map_batches(Protect, ...)`` against the number of workers.

Protects ``n`` synthetic unit-norm 384-d vectors (Ray tensor column plus an ``id`` column, one
input block per batch) with the shipped eps 1.0 TextCrafter policy on a local Ray instance (or an
existing cluster with ``--address``), for each worker count and batch size; every run is
verified (each id exactly once, ``||out - in|| == eps`` on every row) outside the timed part.
The single-process :class:`~textcrafter_rag.Protector` on the same vectors, in the same run, is
the baseline.

Timings: ``vectors_per_s`` is end to end (from submitting the job to its last output block in the
object store: actor start, policy load, protection), the median of ``--repeats`` runs.
``startup_s`` is the time to the first output block in the same run and
``vectors_per_s_excl_startup`` the rows after it over the time after it: the steady-state rate a
long job approaches. Each actor runs one torch thread (``Protect(threads=1)``);
the baseline runs ``$TEXTCRAFTER_BENCH_THREADS`` threads (default: every core).

Usage::

    python -m benchmarks.speed.ray_throughput                       # full: 200k vectors, workers 1 2
    python -m benchmarks.speed.ray_throughput --quick               # writes ray_throughput_quick.*
    python -m benchmarks.speed.ray_throughput --workers 1 2 4 8 --address auto   # on a running cluster
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common.grid import perturbation_norm
from benchmarks.common.options import base_parser, resolve_size, set_threads
from benchmarks.common.reporting import Script, Timer, make_meta, md_table, setup_matplotlib, write_results
from textcrafter_rag import Protector
from textcrafter_rag.batches import column_to_matrix
from textcrafter_rag.numerics import row_norms, unit_rows
from textcrafter_rag.policies import BUNDLED_MODEL_ID, shipped_policy_path
from textcrafter_rag.ray_data import Protect
from textcrafter_rag.textcrafter import TextCrafter

NAME = "ray_throughput"
SCRIPT = Script(NAME, "benchmarks.speed.ray_throughput")
DIM = 384
EPS = 1.0
SIZES: dict[str, dict[str, Any]] = {
    "smoke": {"n": 4096, "workers": (2,), "batch_sizes": (1024,), "repeats": 1},
    "quick": {"n": 50_000, "workers": (1, 2), "batch_sizes": (4096,), "repeats": 1},
    "full": {"n": 200_000, "workers": (1, 2), "batch_sizes": (1024, 4096), "repeats": 3},
}


def _vectors(n: int, *, seed: int) -> np.ndarray:
    return unit_rows(np.random.default_rng(seed).standard_normal((n, DIM))).astype(np.float32)


def _dataset(x: np.ndarray, *, block_rows: int) -> Any:
    """``x`` as a Ray dataset with ``id`` and a tensor ``embedding`` column, in blocks of ``block_rows``.

    One block per batch, so an output block is ready after each batch and the time to the first
    one measures the start-up (actor start, policy load, one batch).
    """
    import pyarrow as pa
    import ray
    from ray.data.extensions import ArrowTensorArray

    table = pa.table({"id": np.arange(len(x), dtype=np.int64), "embedding": ArrowTensorArray.from_numpy(x)})
    return ray.data.from_arrow([table.slice(i, block_rows) for i in range(0, len(x), block_rows)])


def _protect_job(ds: Any, *, policy: str, workers: int, batch_size: int) -> Any:
    return ds.map_batches(
        Protect, fn_constructor_kwargs={"mechanism": policy}, batch_size=batch_size, concurrency=workers
    )


def _verify(blocks: list[Any], x: np.ndarray) -> dict[str, float]:
    """Every id exactly once and ``||out - in|| == eps`` on every row; raises otherwise."""
    import ray

    seen = np.zeros(len(x), dtype=np.int64)
    norms: list[np.ndarray] = []
    for ref in blocks:
        table = ray.get(ref)
        ids = np.asarray(table["id"])
        out = column_to_matrix(table["embedding"]).astype(np.float64)
        np.add.at(seen, ids, 1)
        norms.append(row_norms(out - x[ids].astype(np.float64)))
    if not (seen == 1).all():
        raise RuntimeError(f"{int((seen != 1).sum())} ids missing or duplicated in the Ray output")
    nr = np.concatenate(norms)
    err = float(np.abs(nr - EPS).max())
    if not np.isfinite(nr).all() or err > 1e-4:
        raise RuntimeError(f"perturbation norm off eps by up to {err}")
    return {"perturbation_norm": float(nr.mean()), "max_norm_error": err}


def _run_once(job: Any) -> tuple[float, float, int, list[Any]]:
    """Execute ``job`` leaving its output blocks in the object store.

    Returns ``(seconds, seconds_to_first_output, rows_in_first_output, block_refs)``.
    """
    refs: list[Any] = []
    first, first_rows = float("nan"), 0
    with Timer() as t:
        for bundle in job.iter_internal_ref_bundles():  # block references only: nothing is fetched
            if not refs:
                first, first_rows = time.perf_counter() - t.t0, bundle.num_rows()
            refs.extend(bundle.block_refs)
    return t.seconds, first, first_rows, refs


def _time_ray(x: np.ndarray, *, policy: str, workers: int, batch_size: int, repeats: int) -> dict[str, Any]:
    ds = _dataset(x, block_rows=batch_size)
    n = len(x)
    runs: list[tuple[float, float, int]] = []
    check: dict[str, float] = {}
    for _ in range(repeats):
        sec, first, first_rows, refs = _run_once(
            _protect_job(ds, policy=policy, workers=workers, batch_size=batch_size)
        )
        runs.append((sec, first, first_rows))
        check = _verify(refs, x)
        del refs
    times = [r[0] for r in runs]
    mid = sorted(runs)[(len(runs) - 1) // 2]  # the median run (lower middle)
    sec, first, first_rows = mid
    steady = (n - first_rows) / (sec - first) if sec > first else None
    return {
        "seconds": sec,
        "vectors_per_s": n / sec,
        "vectors_per_s_min": n / max(times),
        "vectors_per_s_max": n / min(times),
        "startup_s": first,
        "vectors_per_s_excl_startup": steady,
        **check,
    }


def _time_single(x: np.ndarray, *, policy: str, batch_size: int, repeats: int) -> tuple[list[float], float]:
    protector = Protector(mechanism=TextCrafter.load(policy), chunk_size=batch_size)
    protector.protect(x[:batch_size])  # warm-up
    times: list[float] = []
    out = x
    for _ in range(repeats):
        with Timer() as t:
            out = protector.protect(x)
        times.append(t.seconds)
    return times, perturbation_norm(x, out)


def main(argv: list[str] | None = None) -> int:
    ap = base_parser(SCRIPT, __doc__)
    ap.add_argument(
        "--workers", type=int, nargs="+", default=None, help="actor counts (default: 1 2; the smoke size: 2)"
    )
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=None, help="map_batches batch sizes")
    ap.add_argument("--n-vectors", type=int, default=None, help="vectors per run (default: by size)")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per setting (median reported)")
    ap.add_argument(
        "--address", default=None, help="an existing Ray cluster ('auto' or ray://...); default: a local instance"
    )
    args = ap.parse_args(argv)
    size = resolve_size(args)
    cfg = SIZES[size]
    args.workers = list(args.workers or cfg["workers"])
    if min(args.workers) < 1:
        ap.error("--workers must be >= 1")
    n = args.n_vectors or cfg["n"]
    batch_sizes = tuple(args.batch_sizes or cfg["batch_sizes"])
    repeats = args.repeats or cfg["repeats"]
    set_threads()
    t_all = time.perf_counter()

    import ray

    policy_path = shipped_policy_path(BUNDLED_MODEL_ID, eps=EPS)
    if policy_path is None:
        print("error: the shipped eps 1.0 policy is missing from textcrafter_rag/policies", file=sys.stderr)
        return 2
    policy = str(policy_path)
    cores = os.cpu_count() or 1
    owned = not ray.is_initialized()  # reuse a Ray the caller started (and leave it running)
    if owned and args.address:
        ray.init(address=args.address, log_to_driver=False)
    elif owned:
        ray.init(
            address="local",
            num_cpus=max(cores, max(args.workers)),
            include_dashboard=False,
            log_to_driver=False,
            object_store_memory=int(max(300 * 2**20, 4 * n * DIM * 4)),
            configure_logging=False,
        )
    ray.data.DataContext.get_current().enable_progress_bars = False
    ray_cpus = int(ray.cluster_resources().get("CPU", 0))
    x = _vectors(n, seed=args.seed)
    print(
        f"[ray] {n} vectors, workers {args.workers}, batch sizes {list(batch_sizes)}, Ray CPUs {ray_cpus}", flush=True
    )

    rows: list[dict[str, Any]] = []
    try:
        for bs in batch_sizes:
            times, norm = _time_single(x, policy=policy, batch_size=bs, repeats=repeats)
            base_vps = n / statistics.median(times)
            rows.append(
                {
                    "mode": "single_process",
                    "mechanism": "textcrafter",
                    "param_eps": EPS,
                    "workers": 1,
                    "threads_per_worker": torch.get_num_threads(),
                    "batch_size": bs,
                    "n_vectors": n,
                    "seconds": statistics.median(times),
                    "vectors_per_s": base_vps,
                    "vectors_per_s_min": n / max(times),
                    "vectors_per_s_max": n / min(times),
                    "speedup_vs_single_process": 1.0,
                    "repeats": repeats,
                    "perturbation_norm": norm,
                }
            )
            print(f"[ray] single process, batch {bs}: {base_vps:.0f} vectors/s", flush=True)
            for w in args.workers:
                res = _time_ray(x, policy=policy, workers=w, batch_size=bs, repeats=repeats)
                rows.append(
                    {
                        "mode": "ray_data",
                        "mechanism": "textcrafter",
                        "param_eps": EPS,
                        "workers": w,
                        "threads_per_worker": 1,
                        "batch_size": bs,
                        "n_vectors": n,
                        **res,
                        "speedup_vs_single_process": res["vectors_per_s"] / base_vps,
                        "repeats": repeats,
                    }
                )
                steady = res["vectors_per_s_excl_startup"]
                extra = f", first output after {res['startup_s']:.1f}s, then {steady:.0f}/s" if steady else ""
                print(
                    f"[ray] {w} worker(s), batch {bs}: {res['vectors_per_s']:.0f} vectors/s end to end{extra}",
                    flush=True,
                )
    finally:
        if owned:
            ray.shutdown()

    seconds = time.perf_counter() - t_all
    settings = {
        "n_vectors": n,
        "workers": list(args.workers),
        "batch_sizes": list(batch_sizes),
        "repeats": repeats,
        "policy": f"shipped all-MiniLM-L6-v2 eps {EPS:g}",
        "ray": {
            "version": ray.__version__,
            "cluster": args.address or ("local" if owned else "existing"),
            "cpus": ray_cpus,
            "oversubscribed": (not args.address) and max(args.workers) > cores,
        },
        "timing": (
            "end to end: wall time from submitting the job to its last output block in the object store "
            "(actor start, policy load, protection), the median of the repeats; startup_s: time to the first "
            "output block in the same run; vectors_per_s_excl_startup: the rows after it over the time after it; "
            "verification (every id once, every norm == eps) runs after the timer"
        ),
        "attack_config": {"enabled": False},
        "runtime_seconds": round(seconds, 1),
    }
    meta = make_meta(SCRIPT, argv, size=size, seed=args.seed, **settings)
    meta.update(
        {
            "encoder": "synthetic unit-norm vectors (policy of all-MiniLM-L6-v2)",
            "dimension": DIM,
            "normalisation": "L2 unit norm",
        }
    )
    out = Path(args.out_dir)
    jp, mp = write_results(
        NAME, size=size, meta=meta, rows=rows, markdown=render_markdown(rows, meta), out_dir=out, tag=args.tag
    )
    plot(rows, mp.with_suffix(".png"))
    print(f"[ray] wrote {jp}, {mp} in {seconds:.0f}s")
    return 0


def render_markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """One table: single-process baseline and Ray Data per worker count and batch size."""
    m = meta["machine"]
    table = [
        {
            **r,
            "vectors_per_s": round(r["vectors_per_s"]),
            "vectors_per_s_excl_startup": None
            if r.get("vectors_per_s_excl_startup") is None
            else round(r["vectors_per_s_excl_startup"]),
        }
        for r in rows
    ]
    cols = [
        "mode",
        "workers",
        "batch_size",
        "n_vectors",
        "vectors_per_s",
        "speedup_vs_single_process",
        "seconds",
        "startup_s",
        "vectors_per_s_excl_startup",
        "max_norm_error",
    ]
    hdr = [
        "mode",
        "workers",
        "batch",
        "vectors",
        "vectors/s (end to end)",
        "x single process",
        "seconds",
        "s to first output",
        "vectors/s after first output",
        "max abs(norm - eps)",
    ]
    note = " (more workers than cores: oversubscribed)" if meta["ray"]["oversubscribed"] else ""
    return "\n".join(
        [
            f"# Ray Data throughput ({meta['size']})",
            "",
            (
                f"`ds.map_batches(Protect, fn_constructor_kwargs={{'policy': DIR}}, batch_size=B, concurrency=W)` over "
                f"{meta['n_vectors']:,} synthetic unit-norm {meta['dimension']}-d vectors with the {meta['policy']} "
                "policy, "
                f"one torch thread per actor; Ray {meta['ray']['version']} ({meta['ray']['cluster']}, "
                f"{meta['ray']['cpus']} CPUs{note}). Baseline: `Protector.protect` in one process with "
                f"{rows[0]['threads_per_worker']} torch thread(s), same vectors, same run."
            ),
            "",
            (
                f"Machine: {m['platform']}, {m['cpu_count']} CPUs, load average {m.get('load_avg_1m', '?')} at the end "
                "(the machine was shared, so absolute numbers are noisy). "
                f"Timing: {meta['timing']}. Command: `{meta['command']}`."
            ),
            "",
            md_table(table, cols, headers=hdr, digits=3),
            "",
            (
                "Every Ray run was checked after timing: each id exactly once and `||out - in|| == eps` on every row "
                "(last column)."
            ),
        ]
    )


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """vectors/s against workers, one line per batch size, the single-process baseline dashed."""
    plt = setup_matplotlib()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for bs in sorted({r["batch_size"] for r in rows}):
        ray_rows = sorted(
            (r for r in rows if r["mode"] == "ray_data" and r["batch_size"] == bs), key=lambda r: r["workers"]
        )
        line = ax.plot(
            [r["workers"] for r in ray_rows],
            [r["vectors_per_s"] for r in ray_rows],
            "o-",
            label=f"Ray Data, batch {bs}",
        )[0]
        base = next(r for r in rows if r["mode"] == "single_process" and r["batch_size"] == bs)
        ax.axhline(
            base["vectors_per_s"], ls="--", color=line.get_color(), alpha=0.6, label=f"single process, batch {bs}"
        )
    ax.set_xlabel("Ray workers (actors)")
    ax.set_ylabel("vectors / s (end to end)")
    ax.set_xticks(sorted({r["workers"] for r in rows if r["mode"] == "ray_data"}))
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.set_title("TextCrafter eps 1.0 on Ray Data")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
