"""Results files and their presentation: metadata, ``<name>.json`` / ``.md``, tables and plots.

Every benchmark writes ``{"meta": {...}, "rows": [...]}`` with one flat row per measurement, so
that reports can be re-rendered from the JSON alone (``--from-json``) and rows compared across runs.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import platform
import resource
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import sklearn
import torch

__all__ = [
    "RESULTS_DIR",
    "Script",
    "Timer",
    "check_rows",
    "clean_json",
    "current_row",
    "fmt",
    "load_results",
    "machine_info",
    "make_meta",
    "md_table",
    "result_name",
    "setup_matplotlib",
    "write_markdown",
    "write_results",
]

RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"


@dataclass(frozen=True)
class Script:
    """A benchmark script: ``name`` names its results files, ``module`` is what ``python -m`` runs.

    They differ since the scripts live in a folder per study: ``benchmarks.utility.table1`` writes
    ``results/table1.*``, and the study's main script is the package itself (``benchmarks.utility``).
    """

    name: str
    module: str

    def command(self, argv: Sequence[str] | None) -> str:
        """The command line that reproduces this run (``argv`` as parsed; ``None``: this process's)."""
        return " ".join(["python", "-m", self.module, *(sys.argv[1:] if argv is None else argv)])


class Timer:
    """``with Timer() as t: ...; t.seconds`` (``t.t0`` is the start, for times inside the block)."""

    def __enter__(self) -> Timer:
        self.t0 = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0


def machine_info() -> dict[str, Any]:
    """Platform, CPU count, thread count, library versions and peak RSS so far (timings are noisy without it)."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "cuda": torch.cuda.is_available(),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "faiss": faiss.__version__,
        "sklearn": sklearn.__version__,
    }
    with contextlib.suppress(OSError):  # no load average on some platforms
        info["load_avg_1m"] = round(os.getloadavg()[0], 2)
    return info


def make_meta(
    script: Script, argv: Sequence[str] | None, *, size: str, seed: int, encoder: Any = None, **extra: Any
) -> dict[str, Any]:
    """The ``meta`` block of a results file: what ran, on what, when, and the command that reproduces it.

    The one metadata helper of every script: ``extra`` holds the script's own settings (sizes,
    attack configuration, runtime), recorded beside the shared keys.
    """
    meta: dict[str, Any] = {"benchmark": script.name, "size": size, "seeds": {"seed": seed}}
    if encoder is not None:
        meta["encoder"] = getattr(encoder, "model_id", str(encoder))
        meta["dimension"] = int(encoder.dimension)
        meta["normalisation"] = "L2 unit norm" if getattr(encoder, "normalize", None) else "none"
    meta.update(extra)
    meta["machine"] = machine_info()
    meta["date"] = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta["command"] = script.command(argv)
    return meta


def clean_json(v: Any) -> Any:
    """``v`` with NumPy scalars and paths made JSON-native and non-finite floats as ``None`` (valid JSON)."""
    if isinstance(v, dict):
        return {k: clean_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean_json(x) for x in v]
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return f if math.isfinite(f) else None
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, Path):
        return str(v)
    return v


def check_rows(rows: Sequence[dict[str, Any]]) -> None:
    """Refuse an empty result or a row without a finite number (a silent failure would look like a result)."""
    if not rows:
        raise ValueError("no result rows")
    for r in rows:
        if not any(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in r.values()):
            raise ValueError(f"row without a finite number: {r}")


def result_name(name: str, size: str, tag: str = "") -> str:
    """``name[_tag]`` for full runs, ``name[_tag]_quick`` / ``_smoke`` otherwise (never overwrite full results)."""
    base = f"{name}_{tag}" if tag else name
    return base if size == "full" else f"{base}_{size}"


def write_results(
    name: str,
    *,
    size: str,
    meta: dict[str, Any],
    rows: list[dict[str, Any]],
    markdown: str,
    out_dir: str | os.PathLike[str],
    tag: str = "",
) -> tuple[Path, Path]:
    """Write ``<out>/<name>[_tag][_size].json`` and ``.md``; non-finite numbers become ``null``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    check_rows(rows)
    base = result_name(name, size, tag)
    jp, mp = out / f"{base}.json", out / f"{base}.md"
    jp.write_text(json.dumps(clean_json({"meta": meta, "rows": rows}), indent=1) + "\n", encoding="utf-8")
    write_markdown(mp, markdown)
    return jp, mp


def write_markdown(path: Path, markdown: str) -> None:
    """Write a report's Markdown with exactly one trailing newline."""
    path.write_text(markdown.rstrip() + "\n", encoding="utf-8")


def load_results(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(meta, rows)`` of a results JSON written by :func:`write_results` (for re-rendering reports).

    Rows of files written before the rename carry today's keys (:func:`current_row`).
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "meta" not in data or "rows" not in data:
        raise ValueError(f"{path} is not a benchmark results file (expected 'meta' and 'rows')")
    return data["meta"], [current_row(r) for r in data["rows"]]


#: Row keys renamed when the project picked one name, *mechanism*, for a protection.
RENAMED_KEYS = {"defense": "mechanism", "defense_label": "mechanism_label"}


def current_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with the keys of results written before the rename replaced by today's.

    Older rows named the mechanism family ``defense`` (and its label ``defense_label``); the frontier's
    rows, which already had ``mechanism``, used ``defense`` for the mechanism's spec string.
    """
    renamed = {**RENAMED_KEYS, "defense": "mechanism_spec"} if "mechanism" in row else RENAMED_KEYS
    return {renamed.get(k, k): v for k, v in row.items()}


def fmt(v: Any, digits: int = 2) -> str:
    """A table cell: ``–`` for missing or non-finite values, scientific notation for tiny or huge ones."""
    if v is None:
        return "–"
    if isinstance(v, (bool, int)):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return "–"
        if v != 0 and (abs(v) < 10 ** (-digits) or abs(v) >= 1e6):
            return f"{v:.2e}"
        return f"{v:.{digits}f}"
    return str(v)


def md_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[str], *, headers: Sequence[str] | None = None, digits: int = 2
) -> str:
    """A GitHub Markdown table of ``columns`` from ``rows`` (first column left-aligned, numbers right-aligned)."""
    headers = list(headers or columns)
    align = "|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|"
    lines = ["| " + " | ".join(headers) + " |", align]
    lines += ["| " + " | ".join(fmt(r.get(c), digits) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def setup_matplotlib() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (benchmarks run headless; the backend must be set first)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
