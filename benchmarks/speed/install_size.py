"""The runtime wheel: install size and time, import time, and protection throughput without torch.

Three installs, each into a fresh virtual environment under a scratch folder, one after the other (never in
parallel: the timings would contend), with no pip cache:

- ``runtime``: ``pip install .`` as a user types it (no constraints file): what ``pip install textcrafter-rag``
  installs;
- ``runtime+langchain``: the same plus ``langchain-textcrafter`` (and its langchain-core);
- ``full``: README command 1's install (``-c constraints.txt -r requirements.txt`` and the ``--no-deps``
  spaCy model): every extra, the tests and both integrations.

For each: the size of site-packages (``du``) and what the install added to a fresh venv's (pip and setuptools
come with every venv), the distributions installed, the install's wall time, and ``import textcrafter_rag``'s
time (best of 5 fresh interpreters). Then the shipped policy's protection throughput on one thread
(``thread_time``, best of 15; vectors/s at batch 1, 32, 1024, 10000): the NumPy runtime in the runtime venv,
and in the full venv both the NumPy runtime and the torch path (the policy as a torch module and the torch
projection, as ``TextCrafter.protect`` ran before the runtime wheel). Writes ``results/install_size.json``/``.md``.

    python -m benchmarks.speed.install_size
    python -m benchmarks.speed.install_size --scratch /tmp/venvs --variant runtime
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common.options import script_parser
from benchmarks.common.reporting import Script

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
#: name -> pip arguments (``{root}`` is this checkout) and whether README command 1's constraints apply.
VARIANTS: dict[str, list[str]] = {
    "runtime": ["{root}"],
    "runtime+langchain": ["{root}", "{root}/integrations/langchain-textcrafter"],
    "full": ["-c", "{root}/constraints.txt", "-r", "{root}/requirements.txt"],
}
#: Installed after the full variant's requirements, as README command 1 does.
NODEPS = ["--no-deps", "-r", "{root}/requirements-nodeps.txt"]
#: What tells the variants apart.
MARKERS = ("torch", "scipy", "scikit-learn", "sentence-transformers", "langchain-core", "llama-index-core")
SCRIPT = Script("install_size", "benchmarks.speed.install_size")
#: Issue 31's target for the runtime plus langchain-textcrafter (with langchain-core).
TARGET_MIB = 150

_IMPORT_TIME = "import time; t = time.perf_counter(); import textcrafter_rag; print(time.perf_counter() - t)"
_THROUGHPUT = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
import numpy as np
from textcrafter_rag.numerics import unit_rows
from textcrafter_rag.textcrafter import TextCrafter
from textcrafter_rag.validation import check_released, check_vectors

tc = TextCrafter.load_shipped(seed=0)
protect = {"numpy": tc.protect}
if sys.argv[1] == "torch":  # the torch path, as TextCrafter.protect ran it before the NumPy runtime
    import torch
    from textcrafter_rag.numerics import plain_torch
    from textcrafter_rag.textcrafter.projection import release

    torch.set_num_threads(1)
    module = TextCrafter.load_shipped().policy

    def torch_protect(x):
        x = check_vectors(x, dim=tc.dim)
        with plain_torch():
            f0 = torch.as_tensor(x)
            out = module(f0)
            delta = out.mu + out.sigma * torch.as_tensor(tc._noise.normal(x.shape), dtype=torch.float32)
            return check_released(release(f0, delta, out.v, tc.radius).numpy(), shape=x.shape, by="TextCrafter")

    protect = {"torch": torch_protect, "numpy": tc.protect}
x = unit_rows(np.random.default_rng(0).standard_normal((10000, tc.dim))).astype(np.float32)
rows = []
for path, run in protect.items():
    for batch in (1, 32, 1024, 10000):
        xb, reps, best = x[:batch], max(1, 2048 // batch), float("inf")
        run(xb)
        for _ in range(15):
            t = time.thread_time()
            for _ in range(reps):
                run(xb)
            best = min(best, (time.thread_time() - t) / reps)
        rows.append({"path": path, "batch": batch, "vectors_per_s": round(batch / best)})
print(json.dumps(rows))
"""
#: One thread for every math library: the throughput is per thread.
_ONE_THREAD = dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1")


def _site_packages(venv: Path) -> Path:
    return sorted(venv.glob("lib/python*/site-packages"))[0]


def _du_bytes(path: Path) -> int:
    """Disk usage as ``du -sk`` reports it (allocated blocks, what `du -sh` shows), in bytes."""
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0]) * 1024


def _largest(site: Path, n: int = 6) -> list[list[Any]]:
    """The ``n`` largest entries of site-packages (MiB), a package and its ``.libs`` folder counted together."""
    sizes: dict[str, int] = {}
    for entry in site.iterdir():
        if entry.name.endswith((".dist-info", ".pth")) or entry.name in {"__pycache__", "_distutils_hack"}:
            continue
        name = entry.name.removesuffix(".libs").removesuffix(".py")
        sizes[name] = sizes.get(name, 0) + _du_bytes(entry)
    return [[k, round(v / 2**20, 1)] for k, v in sorted(sizes.items(), key=lambda kv: -kv[1])[:n]]


def _listed(python: Path) -> list[dict[str, str]]:
    out = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True)
    return json.loads(out.stdout)


def _pip(python: Path, args: list[str]) -> None:
    cmd = [str(python), "-m", "pip", "install", "--no-cache-dir", "-q", *(a.format(root=ROOT) for a in args)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(args)} failed:\n{done.stderr[-3000:]}")


def _best_import_seconds(python: Path) -> float:
    cmd = [str(python), "-c", _IMPORT_TIME]
    return round(min(float(subprocess.run(cmd, capture_output=True, text=True).stdout) for _ in range(5)), 3)


def throughput(python: Path, *, torch_path: bool) -> list[dict[str, Any]]:
    """The shipped policy's protect throughput on one thread (and the torch path's, in a venv with torch)."""
    env = {**os.environ, **_ONE_THREAD}
    cmd = [str(python), "-c", _THROUGHPUT, "torch" if torch_path else "numpy"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise RuntimeError(f"throughput failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(name: str, *, scratch: Path, python: str, baseline: dict[str, Any]) -> dict[str, Any]:
    """Create a venv, install the variant into it, and report its size, distributions and times."""
    venv = scratch / name
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    t0 = time.perf_counter()
    _pip(py, VARIANTS[name])
    if name == "full":
        _pip(py, NODEPS)
    seconds = time.perf_counter() - t0
    listed = _listed(py)
    versions = {d["name"].lower(): d["version"] for d in listed}
    size = _du_bytes(_site_packages(venv))
    return {
        "variant": name,
        "pip_install": " ".join(VARIANTS[name] + (NODEPS if name == "full" else [])).replace("{root}", "."),
        "seconds": round(seconds, 1),
        "site_packages_mib": round(size / 2**20, 1),
        "added_mib": round((size - baseline["bytes"]) / 2**20, 1),
        "distributions": len(listed) - baseline["distributions"],
        "import_seconds": _best_import_seconds(py),
        "present": {m: versions.get(m) for m in MARKERS if m in versions},
        "largest": _largest(_site_packages(venv)),
        "venv": str(venv),
    }


def render_markdown(result: dict[str, Any]) -> str:
    meta, rows = result["meta"], result["rows"]
    lines = [
        "# The runtime wheel: install size, import time, protection throughput",
        "",
        f"Fresh venvs, one install at a time, `pip install --no-cache-dir` ({meta['date']}, Python {meta['python']}, "
        f"{meta['cpus']} CPUs shared with other jobs, load average {meta['load_average_before']} before the first "
        f"install; install times vary with it). An empty venv's site-packages (pip, setuptools) is "
        f"{meta['empty_venv_mib']} MiB; *added* is what the install put there. Written by "
        "`python -m benchmarks.speed.install_size`. pip's own configuration here: "
        + "; ".join(f"`{c}`" for c in meta.get("pip_config", []) if "cert" not in c)
        + ".",
        "",
        "| variant | pip install | added (MiB) | site-packages (MiB) | distributions added | install (s) | "
        "`import textcrafter_rag` (s) | torch | scipy | sentence-transformers |",
        "|---|---|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        p = r["present"]
        lines.append(
            f"| {r['variant']} | `{r['pip_install']}` | {r['added_mib']} | {r['site_packages_mib']} | "
            f"{r['distributions']} | {r['seconds']} | {r['import_seconds']} | {p.get('torch', '-')} | "
            f"{p.get('scipy', '-')} | {p.get('sentence-transformers', '-')} |"
        )
    lines += ["", "Largest parts of each install (MiB; pip and setuptools come with every venv):", ""]
    lines += [f"- {r['variant']}: " + ", ".join(f"{k} {v}" for k, v in r.get("largest", [])) for r in rows]
    both = next((r for r in rows if r["variant"] == "runtime+langchain"), None)
    if both is not None:
        verdict = "met" if both["added_mib"] <= TARGET_MIB else "not met"
        lines += [
            "",
            f"Target: runtime + langchain-textcrafter adds at most {TARGET_MIB} MiB to a venv: {verdict} "
            f"({both['added_mib']} MiB).",
        ]
    speed = result.get("throughput", [])
    if speed:
        lines += [
            "",
            "Protection throughput of the shipped policy (eps 1.0) on one thread, vectors/s (best of 15 timed "
            "repeats, `time.thread_time`, so other jobs on the machine cost little):",
            "",
            "| venv | path | batch 1 | batch 32 | batch 1024 | batch 10000 |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for venv, path in dict.fromkeys((r["venv"], r["path"]) for r in speed):
            cells = {r["batch"]: r["vectors_per_s"] for r in speed if r["venv"] == venv and r["path"] == path}
            lines.append(f"| {venv} | {path} | " + " | ".join(f"{cells[b]:,}" for b in (1, 32, 1024, 10000)) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = script_parser(SCRIPT, __doc__)
    ap.add_argument("--variant", action="append", choices=sorted(VARIANTS), default=None, help="default: all")
    ap.add_argument("--python", default=sys.executable, help="interpreter the venvs are made from")
    ap.add_argument("--scratch", default=None, help="folder for the venvs (default: a temporary one, removed)")
    ap.add_argument("--out", default=str(RESULTS / "install_size"), help="output path without suffix")
    args = ap.parse_args(argv)
    names = args.variant or list(VARIANTS)
    scratch = Path(args.scratch) if args.scratch else Path(tempfile.mkdtemp(prefix="install_size_"))
    scratch.mkdir(parents=True, exist_ok=True)
    empty = scratch / "empty"
    subprocess.run([args.python, "-m", "venv", str(empty)], check=True)
    baseline = {"bytes": _du_bytes(_site_packages(empty)), "distributions": len(_listed(empty / "bin" / "python"))}
    meta = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_before": round(os.getloadavg()[0], 2),
        "empty_venv_mib": round(baseline["bytes"] / 2**20, 1),
        "pip_cache": "disabled (--no-cache-dir)",
        "pip_config": subprocess.run(
            [args.python, "-m", "pip", "config", "list"], capture_output=True, text=True
        ).stdout.splitlines(),
    }
    rows, speed = [], []
    leftover = not (ROOT / "build").exists()  # pip builds the checkout's wheel in ROOT/build: removed after
    try:
        for name in names:
            print(f"installing {name} ...", flush=True)
            rows.append(measure(name, scratch=scratch, python=args.python, baseline=baseline))
            print(json.dumps(rows[-1]), flush=True)
        for row in rows:
            if row["variant"] in {"runtime", "full"}:
                venv = Path(row["venv"]) / "bin" / "python"
                got = throughput(venv, torch_path=row["variant"] == "full")
                speed += [{"venv": row["variant"], **r} for r in got]
                print(json.dumps(got), flush=True)
    finally:
        if not args.scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        if leftover:
            shutil.rmtree(ROOT / "build", ignore_errors=True)
    for row in rows:
        row.pop("venv")
    result = {"meta": meta, "rows": rows, "throughput": speed}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(render_markdown(result), encoding="utf-8")
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
