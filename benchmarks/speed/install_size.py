"""Install size and time of the lean wheel (`pip install textcrafter-rag`) against the full one.

Each variant gets a fresh virtual environment under a scratch folder; pip installs this checkout with
the repository's constraints (CPU torch) and no pip cache, one variant after the other (never in
parallel: the timings would contend). Writes ``results/install_size.json`` and ``.md``.

    python -m benchmarks.speed.install_size            # lean vs full (audit, bench extras)
    python -m benchmarks.speed.install_size --variant lean=. --variant audit=.[audit]
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
#: name -> what pip installs, relative to the repository root.
DEFAULT_VARIANTS = {"lean": ".", "full": ".[audit,bench]"}
#: Packages whose presence tells which extras an environment holds.
RESEARCH_PACKAGES = ("matplotlib", "sacrebleu", "rouge_score", "ray", "pyarrow", "psutil")

SCRIPT = Script("install_size", "benchmarks.speed.install_size")


def _site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python*/site-packages"))
    if not found:
        raise RuntimeError(f"no site-packages in {venv}")
    return found[0]


def _du_bytes(path: Path) -> int:
    """Disk usage as ``du -sk`` reports it (allocated blocks, what `du -sh` shows), in bytes."""
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0]) * 1024


def measure(name: str, spec: str, *, scratch: Path, python: str) -> dict[str, Any]:
    """Create a venv, install ``spec`` into it, and report the install's wall time and size."""
    venv = scratch / name
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    target = spec.replace(".", str(ROOT), 1) if spec.startswith(".") else spec
    cmd = [*pip, "install", "--no-cache-dir", "-q", "-c", str(ROOT / "constraints.txt"), target]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"pip install {spec} failed:\n{done.stderr[-3000:]}")
    site = _site_packages(venv)
    listed = json.loads(subprocess.run([*pip, "list", "--format=json"], capture_output=True, text=True).stdout)
    names = {d["name"].lower().replace("-", "_") for d in listed}
    torch = next((d["version"] for d in listed if d["name"].lower() == "torch"), None)
    return {
        "variant": name,
        "pip_install": spec,
        "seconds": round(seconds, 1),
        "site_packages_bytes": _du_bytes(site),
        "site_packages_mib": round(_du_bytes(site) / 2**20, 1),
        "distributions": len(listed),
        "torch": torch,
        "research_packages": sorted(p for p in RESEARCH_PACKAGES if p in names),
    }


def render_markdown(result: dict[str, Any]) -> str:
    rows = result["rows"]
    lines = [
        "# Install size and time: lean wheel vs full",
        "",
        f"`pip install --no-cache-dir -c constraints.txt <spec>` into a fresh venv, one variant at a time "
        f"({result['meta']['date']}, Python {result['meta']['python']}, {result['meta']['cpus']} CPUs, "
        f"load average {result['meta']['load_average_before']} before the first install). "
        "Written by `python -m benchmarks.speed.install_size`.",
        "",
        "| variant | pip install | time (s) | site-packages (MiB) | distributions | research packages present |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | `{r['pip_install']}` | {r['seconds']} | {r['site_packages_mib']} | "
            f"{r['distributions']} | {', '.join(r['research_packages']) or '-'} |"
        )
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        lines += [
            "",
            f"The {a['variant']} install is {b['site_packages_mib'] - a['site_packages_mib']:.1f} MiB and "
            f"{b['distributions'] - a['distributions']} distributions smaller than the {b['variant']} one and took "
            f"{b['seconds'] - a['seconds']:.1f} s less (one run each; install times vary with the machine's load).",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = script_parser(SCRIPT, __doc__)
    ap.add_argument("--variant", action="append", default=None, metavar="NAME=SPEC", help="what to install")
    ap.add_argument("--python", default=sys.executable, help="interpreter the venvs are made from")
    ap.add_argument("--scratch", default=None, help="folder for the venvs (default: a temporary one, removed)")
    ap.add_argument("--out", default=str(RESULTS / "install_size"), help="output path without suffix")
    args = ap.parse_args(argv)
    variants = dict(v.split("=", 1) for v in args.variant) if args.variant else DEFAULT_VARIANTS
    scratch = Path(args.scratch) if args.scratch else Path(tempfile.mkdtemp(prefix="install_size_"))
    scratch.mkdir(parents=True, exist_ok=True)
    meta = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_before": round(os.getloadavg()[0], 2),
        "constraints": "constraints.txt",
        "pip_cache": "disabled (--no-cache-dir)",
    }
    try:
        rows = []
        for name, spec in variants.items():
            print(f"installing {name}: {spec} ...", flush=True)
            rows.append(measure(name, spec, scratch=scratch, python=args.python))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        if not args.scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    result = {"meta": meta, "rows": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(render_markdown(result), encoding="utf-8")
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
