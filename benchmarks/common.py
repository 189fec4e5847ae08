"""Shared plumbing for the benchmark scripts: CLI, defense grids, caches, metadata, result files.

Every benchmark writes ``<out-dir>/<name>.json`` (``{"meta": {...}, "rows": [...]}``, one flat row
per measurement) and ``<out-dir>/<name>.md`` (plus ``.png`` plots). Sizes: ``--smoke`` (tests,
seconds), ``--quick`` (a few minutes on 2 cores, writes ``<name>_quick.*``) and the default full
size. Expensive, deterministic inputs (clean embeddings, the calibration and the fitted
TextCrafter policies) are cached under ``~/.cache/textcrafter_rag/bench/`` (``--cache-dir`` or
``$TEXTCRAFTER_BENCH_CACHE`` to override); the keys include everything they depend on.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import hashlib
import json
import math
import os
import platform
import resource
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Self

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np

__all__ = [
    "RESULTS_DIR",
    "DefenseSpec",
    "Timer",
    "add_grid_options",
    "add_rerender_option",
    "base_parser",
    "build_grid",
    "cache_dir",
    "check_rows",
    "defense_grid",
    "embed_cached",
    "fixed_adapt_config",
    "floor_row",
    "fmt",
    "get_textcrafter",
    "load_calibration",
    "load_results",
    "machine_info",
    "make_meta",
    "md_table",
    "perturbation_norm",
    "privacy_evaluator",
    "privacy_fields",
    "privacy_subset",
    "quiet_seed_warnings",
    "resolve_data_or_none",
    "resolve_size",
    "write_markdown",
    "write_results",
]

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SIZES = ("smoke", "quick", "full")

#: The paper's defense grid, adapted to a unit-norm 384-d encoder (see README.md).
GAUSSIAN_S: tuple[float, ...] = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0)
LDP_EPS: tuple[float, ...] = (1.0, 4.0, 8.0, 12.0)
PURKAYASTHA_EPS: tuple[float, ...] = (8.0, 32.0, 128.0, 512.0, 2048.0)
TEXTCRAFTER_EPS: tuple[float, ...] = (0.5, 1.0, 2.5, 4.0)


# --------------------------------------------------------------------------- CLI
def base_parser(description: str) -> argparse.ArgumentParser:
    """The options every benchmark shares: sizes, ``--data-dir``, ``--out-dir``, ``--seed``, ``--cache-dir``."""
    ap = argparse.ArgumentParser(description=description)
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small run (a few minutes on 2 cores); writes <name>_quick.*")
    size.add_argument("--smoke", action="store_true", help="tiny run for the test suite (seconds); writes <name>_smoke.*")
    ap.add_argument("--data-dir", default=None,
                    help="benchmark datasets (default: $TEXTCRAFTER_DATA, else ../shared/datasets if present)")
    ap.add_argument("--out-dir", default=str(RESULTS_DIR), help="where results go (default: benchmarks/results)")
    ap.add_argument("--seed", type=int, default=0, help="seed for sampling, noise and policy fitting")
    ap.add_argument("--cache-dir", default=None, help="cache for embeddings and fitted policies "
                    "(default: $TEXTCRAFTER_BENCH_CACHE or ~/.cache/textcrafter_rag/bench)")
    ap.add_argument("--tag", default="", help="suffix of the result file names (e.g. a privacy-only run)")
    ap.add_argument("--no-progress", action="store_true", help="hide progress bars")
    return ap


def resolve_size(args: argparse.Namespace) -> str:
    """``smoke``, ``quick`` or ``full`` from the parsed flags."""
    return "smoke" if getattr(args, "smoke", False) else "quick" if getattr(args, "quick", False) else "full"


def result_name(name: str, size: str, tag: str = "") -> str:
    """``name[_tag]`` for full runs, ``name[_tag]_quick`` / ``_smoke`` otherwise (full results are never overwritten)."""
    base = f"{name}_{tag}" if tag else name
    return base if size == "full" else f"{base}_{size}"


def resolve_data_or_none(data_dir: str | None) -> Path | None:
    """The data directory, or ``None`` after printing the clear not-found message to stderr."""
    from textcrafter_rag.data import DatasetNotFoundError, resolve_data_dir

    try:
        return resolve_data_dir(data_dir)
    except DatasetNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def cache_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The benchmark cache folder (created)."""
    root = Path(path or os.environ.get("TEXTCRAFTER_BENCH_CACHE") or Path.home() / ".cache" / "textcrafter_rag" / "bench")
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def quiet_seed_warnings() -> Iterator[None]:
    """Silence the expected ``SeedWarning`` (benchmarks seed their noise on purpose)."""
    from textcrafter_rag.randomness import SeedWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SeedWarning)
        yield


# --------------------------------------------------------------------------- caches
def _hash(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, (list, tuple)):
            for t in p:
                h.update(str(t).encode("utf-8"))
                h.update(b"\x00")
        else:
            h.update(str(p).encode("utf-8"))
        h.update(b"\x01")
    return h.hexdigest()[:20]


def embed_cached(encoder: Any, texts: Sequence[str], *, cache: Path, desc: str = "Embedding",
                 batch_size: int = 256, progress: bool = True, superset: Sequence[str] | None = None) -> np.ndarray:
    """``encoder.encode(texts)`` in batches, cached as ``.npy`` keyed by encoder id and texts.

    Args:
        superset: A larger text list ``texts`` is drawn from; if its embeddings are cached, rows are
            taken from there instead of encoding again.
    """
    from tqdm.auto import tqdm

    path = cache / f"emb-{_hash(getattr(encoder, 'model_id', '?'), list(texts))}.npy"
    if path.is_file():
        return np.load(path, allow_pickle=False)
    if superset is not None:
        sup = cache / f"emb-{_hash(getattr(encoder, 'model_id', '?'), list(superset))}.npy"
        if sup.is_file():
            pos = {t: i for i, t in enumerate(superset)}
            if all(t in pos for t in texts):
                return np.load(sup, allow_pickle=False)[[pos[t] for t in texts]]
    chunks = [list(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)]
    emb = np.concatenate([encoder.encode(c) for c in tqdm(chunks, desc=desc, disable=not progress)], 0)
    emb = emb.astype(np.float32)
    tmp = path.with_name(path.stem + ".tmp.npy")
    np.save(tmp, emb, allow_pickle=False)
    tmp.replace(path)
    return emb


#: Calibration sizes per benchmark size: (n_pii, n_calibration, clusters, training steps, batch size).
#: The full size uses the package defaults (those of the shipped policies); the shipped eps 1.0 and
#: 2.5 policies are used as they are when installed.
CALIBRATION_SIZES: dict[str, tuple[int, int, int, int, int]] = {
    "full": (1000, 6000, 16, 800, 256),
    "quick": (300, 1500, 8, 150, 128),
    "smoke": (60, 300, 4, 20, 64),
}


def load_calibration(*, size: str, encoder: Any, data_dir: Path | None, seed: int, cache: Path,
                     progress: bool = True) -> Any:
    """:func:`textcrafter_rag.calibration.calibrate` at the benchmark size, cached on disk.

    Calibration (Presidio relabelling + embedding) is the slow, ``eps``-independent part of fitting;
    it is computed once and shared by every ``eps`` of the grid.
    """
    import torch

    from textcrafter_rag.textcrafter.calibration import Calibration, calibrate
    from textcrafter_rag.textcrafter.pii import PIIClassifier
    from textcrafter_rag.textcrafter.priors import ClusterPrior

    n_pii, n_cal, k, _, _ = CALIBRATION_SIZES[size]
    key = _hash("calibration-v1", encoder.model_id, size, n_pii, n_cal, k, seed, str(data_dir))
    d = cache / "calibration" / key
    if (d / "meta.json").is_file():
        meta = json.loads((d / "meta.json").read_text())
        t = torch.load(d / "tensors.pt", weights_only=True)
        return Calibration(encoder=encoder, pii=PIIClassifier.from_tensors(t, meta["pii_metrics"]),
                           prior=ClusterPrior.from_tensors(t), embeddings=t["embeddings"].numpy(),
                           provenance=meta["provenance"])
    cal = calibrate(encoder, n_pii=n_pii, n_calibration=n_cal, clusters=k, data_dir=data_dir, seed=seed,
                    progress=progress, log=print if progress else None)
    d.mkdir(parents=True, exist_ok=True)
    torch.save({**cal.pii.tensors(), **cal.prior.tensors(), "embeddings": torch.as_tensor(cal.embeddings)},
               d / "tensors.pt")
    (d / "meta.json").write_text(json.dumps({"pii_metrics": cal.pii.metrics, "provenance": cal.provenance}))
    return cal


def get_textcrafter(eps: float, *, size: str, encoder: Any, data_dir: Path | None, seed: int, cache: Path,
                    noise_seed: int | None = None, progress: bool = True) -> Any:
    """A TextCrafter policy for the bundled MiniLM at ``eps``, fitted once per (size, seed) and cached.

    The full size with ``eps`` 1.0 or 2.5 reuses the shipped policy when it is installed.

    Args:
        noise_seed: Seed of the returned mechanism's release noise (``None``: fresh randomness).
    """
    from textcrafter_rag.mechanisms import TextCrafter
    from textcrafter_rag.textcrafter.training import TrainingConfig

    if size == "full" and any(math.isclose(eps, e) for e in (1.0, 2.5)):
        with contextlib.suppress(Exception), quiet_seed_warnings():
            return TextCrafter.load_shipped(eps=eps, seed=noise_seed)
    n_pii, n_cal, k, steps, bs = CALIBRATION_SIZES[size]
    key = _hash("textcrafter-v1", encoder.model_id, size, n_pii, n_cal, k, steps, bs, seed, eps, str(data_dir))
    d = cache / "policies" / f"minilm-{size}-eps{eps:g}-seed{seed}-{key[:8]}"
    if (d / "config.json").is_file():
        with quiet_seed_warnings():
            return TextCrafter.load(d, seed=noise_seed)
    cal = load_calibration(size=size, encoder=encoder, data_dir=data_dir, seed=seed, cache=cache, progress=progress)
    training = TrainingConfig(steps=steps, batch_size=bs, eval_every=min(20, steps), seed=seed)
    tc = TextCrafter.fit(eps=eps, calibration=cal, training=training, seed=seed, progress=progress,
                         log=print if progress else None)
    tc.save(d)
    with quiet_seed_warnings():
        return TextCrafter.load(d, seed=noise_seed)


# --------------------------------------------------------------------------- defenses
@dataclass
class DefenseSpec:
    """One entry of a defense grid.

    Attributes:
        defense: Family name (``none``, ``shuffle``, ``gaussian``, ``ldp``, ``purkayastha``, ``textcrafter``).
        params: Public parameters for the result rows (``s``, ``eps``, ``delta``, ...).
        build: ``seed -> Mechanism`` (a fresh, seeded instance).
        comparison: ``grid`` or ``equal_norm`` (a Gaussian matched to a TextCrafter eps).
    """

    defense: str
    params: dict[str, Any]
    build: Callable[[int], Any]
    comparison: str = "grid"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        p = ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.params.items())
        tag = f"{self.defense}:{p}" if p else self.defense
        return tag + ("@norm" if self.comparison == "equal_norm" else "")

    def row_fields(self) -> dict[str, Any]:
        """The defense columns of a result row."""
        return {"defense": self.defense, **{f"param_{k}": v for k, v in self.params.items()},
                "comparison": self.comparison, "defense_label": self.label, **self.extra}


def defense_grid(
    *,
    size: str,
    dim: int,
    textcrafter: Callable[[float, int], Any] | None,
    gaussian_s: Sequence[float] | None = None,
    ldp_eps: Sequence[float] | None = None,
    purkayastha_eps: Sequence[float] | None = None,
    textcrafter_eps: Sequence[float] | None = None,
    equal_norm: bool = True,
    only: Sequence[str] | None = None,
) -> list[DefenseSpec]:
    """The benchmark defense grid.

    Args:
        size: ``smoke`` keeps one or two settings; ``quick`` trims each family; ``full`` is the whole grid.
        dim: Embedding dimension (for the equal-norm Gaussian).
        textcrafter: ``(eps, seed) -> TextCrafter`` (loads or fits a cached policy, noise seeded with
            ``seed``); ``None`` leaves TextCrafter out.
        equal_norm: Add a Gaussian at the expected norm of each TextCrafter eps.
        only: Keep only these families.
    """
    from textcrafter_rag.mechanisms import (
        GaussianNoise,
        LDPGaussian,
        NoDefense,
        Purkayastha,
        Shuffle,
    )

    if size == "smoke":
        gs, le, pe, te = (0.05,), (8.0,), (), ()
    elif size == "quick":
        gs, le, pe, te = (0.01, 0.05, 0.1), (4.0, 12.0), (128.0, 2048.0), (1.0, 2.5)
    else:
        gs, le, pe, te = GAUSSIAN_S, LDP_EPS, PURKAYASTHA_EPS, TEXTCRAFTER_EPS
    gs = tuple(gaussian_s) if gaussian_s is not None else gs
    le = tuple(ldp_eps) if ldp_eps is not None else le
    pe = tuple(purkayastha_eps) if purkayastha_eps is not None else pe
    te = tuple(textcrafter_eps) if textcrafter_eps is not None else te
    if textcrafter is None:
        te = ()

    specs: list[DefenseSpec] = [DefenseSpec("none", {}, lambda seed: NoDefense())]
    if size != "smoke":
        specs.append(DefenseSpec("shuffle", {}, lambda seed: Shuffle(seed=seed)))
    specs += [DefenseSpec("gaussian", {"s": s}, lambda seed, s=s: GaussianNoise(s=s, seed=seed)) for s in gs]
    specs += [DefenseSpec("ldp", {"eps": e, "delta": 1e-5}, lambda seed, e=e: LDPGaussian(epsilon=e, seed=seed))
              for e in le]
    specs += [DefenseSpec("purkayastha", {"eps": e}, lambda seed, e=e: Purkayastha(epsilon=e, seed=seed)) for e in pe]
    specs += [DefenseSpec("textcrafter", {"eps": e}, lambda seed, e=e: textcrafter(e, seed))  # type: ignore[misc]
              for e in te]
    if equal_norm:
        for e in te:
            g = GaussianNoise.at_norm(e, dim=dim)
            specs.append(DefenseSpec("gaussian", {"s": g.s}, lambda seed, s=g.s: GaussianNoise(s=s, seed=seed),
                                     comparison="equal_norm", extra={"matched_textcrafter_eps": e}))
    if only:
        specs = [s for s in specs if s.defense in set(only)]
    return specs


def add_grid_options(ap: argparse.ArgumentParser) -> None:
    """The defense-grid and privacy-attack options ``retrieval.py`` and ``utility.py`` share."""
    ap.add_argument("--privacy-defenses", choices=("core", "all"), default="core",
                    help="attack 'core' (none, TextCrafter, Gaussian at TextCrafter's norm) or 'all' defenses")
    ap.add_argument("--attack-modes", nargs="+", choices=("non-adaptive", "adaptive"),
                    default=["non-adaptive", "adaptive"], help="attacker modes to run with privacy")
    ap.add_argument("--defenses", nargs="*", default=None, help="keep only these families")
    ap.add_argument("--textcrafter-eps", nargs="+", type=float, default=None,
                    help="override the TextCrafter eps grid (and the matched Gaussians)")


def build_grid(args: argparse.Namespace, *, size: str, encoder: Any, dim: int, data_dir: Path | None, cache: Path,
               progress: bool) -> list[DefenseSpec]:
    """:func:`defense_grid` with the options of :func:`add_grid_options` and cached TextCrafter policies."""

    def textcrafter(eps: float, seed: int) -> Any:
        return get_textcrafter(eps, size=size, encoder=encoder, data_dir=data_dir, seed=args.seed, cache=cache,
                               noise_seed=seed, progress=progress)

    return defense_grid(size=size, dim=dim, textcrafter=textcrafter, only=args.defenses,
                        textcrafter_eps=args.textcrafter_eps)


def perturbation_norm(x: np.ndarray, x_prot: np.ndarray) -> float:
    """Measured mean ``||x' - x||`` over rows."""
    return float(np.mean(np.linalg.norm(x_prot.astype(np.float64) - x.astype(np.float64), axis=1)))


# --------------------------------------------------------------------------- privacy seam
def privacy_evaluator() -> Callable[..., dict[str, Any]] | None:
    """The attacks helper's ``evaluate_attacks`` if the package provides it, else ``None``.

    The benchmarks call it as ``fn(defense, encoder=..., train_texts=..., test_texts=..., mode=...,
    quick=...)`` and copy the returned metric keys into their rows.
    """
    try:
        from textcrafter_rag.attacks import evaluate_attacks  # type: ignore[attr-defined]
    except ImportError:  # absent, or still being written
        return None
    return evaluate_attacks


def fixed_adapt_config() -> Any:
    """The fixed adaptive budget of the privacy tables: each of the ``n_pairs`` pairs is seen once, no time cap."""
    from textcrafter_rag.attacks.adaptive import DEFAULT_ADAPT_CONFIG

    return replace(DEFAULT_ADAPT_CONFIG, time_budget_min=None, epochs=1.0)


def privacy_subset(grid: list[DefenseSpec], which: str) -> list[DefenseSpec]:
    """``all`` defenses, or ``core``: none, TextCrafter and the equal-norm Gaussians (the comparison that matters)."""
    if which == "all":
        return list(grid)
    return [s for s in grid if s.defense in ("none", "textcrafter") or s.comparison == "equal_norm"]


PRIVACY_KEYS = ("bleu", "token_f1", "exact_match", "rouge_l", "content_f1", "cosine", "keyword_f1", "pii_auc",
                "attacker", "n_pairs", "pairs_seen", "adapt_minutes", "n_train", "n_test", "train_minutes",
                "attack_minutes")


FLOOR_KEYS = ("bleu", "token_f1", "exact_match", "rouge_l", "content_f1", "cosine")


def floor_row(privacy_rows: Sequence[dict[str, Any]], **fields: Any) -> dict[str, Any] | None:
    """The ``floor`` reference row (best trivial attacker, ignores the vector) measured with ``privacy_rows``.

    Every privacy result carries the floor of its own run (``floor_*`` keys, same test texts); the first
    one is used. ``fields`` are extra columns (e.g. ``dataset``). ``None`` when no row has a floor.
    """
    first = next((r for r in privacy_rows if r.get("floor_content_f1") is not None), None)
    if first is None:
        return None
    return {**fields, "defense_label": "floor (ignores the vector)", "mode": "–", "attacker": "best trivial",
            **{k: first.get(f"floor_{k}") for k in FLOOR_KEYS}, "pii_auc": 0.5}


def load_results(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(meta, rows)`` of a results JSON written by :func:`write_results` (for re-rendering reports)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "meta" not in data or "rows" not in data:
        raise ValueError(f"{path} is not a benchmark results file (expected 'meta' and 'rows')")
    return data["meta"], data["rows"]


def add_rerender_option(ap: argparse.ArgumentParser) -> None:
    """``--from-json``: rebuild the Markdown and plots of an earlier run from its JSON, measuring nothing."""
    ap.add_argument("--from-json", default=None, metavar="RESULTS_JSON",
                    help="re-render the .md/.png of an earlier run from its results JSON (no measurement)")


def privacy_fields(result: dict[str, Any]) -> dict[str, Any]:
    """The flat, scalar part of an ``evaluate_attacks`` result (known keys and ``floor_*``)."""
    return {k: v for k, v in result.items()
            if (k in PRIVACY_KEYS or k.startswith("floor_")) and not isinstance(v, (dict, list, tuple))}


# --------------------------------------------------------------------------- metadata and results
class Timer:
    """``with Timer() as t: ...; t.seconds``."""

    def __enter__(self) -> Self:
        self.t0 = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0


def machine_info() -> dict[str, Any]:
    """Platform, CPU count, thread count, library versions and peak RSS so far."""
    import torch

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
    }
    with contextlib.suppress(Exception):
        import faiss

        info["faiss"] = faiss.__version__
    with contextlib.suppress(Exception):
        import sklearn

        info["sklearn"] = sklearn.__version__
    with contextlib.suppress(Exception):
        info["load_avg_1m"] = round(os.getloadavg()[0], 2)
    return info


def make_meta(*, name: str, size: str, seed: int, argv: Sequence[str] | None, encoder: Any = None,
              **extra: Any) -> dict[str, Any]:
    """The ``meta`` block of a results file."""
    meta: dict[str, Any] = {"benchmark": name, "size": size, "seeds": {"seed": seed}}
    if encoder is not None:
        meta["encoder"] = getattr(encoder, "model_id", str(encoder))
        meta["dimension"] = int(encoder.dimension)
        meta["normalisation"] = "L2 unit norm" if getattr(encoder, "normalize", None) else "none"
    meta.update(extra)
    meta["machine"] = machine_info()
    meta["date"] = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    args = list(sys.argv[1:] if argv is None else argv)
    meta["command"] = " ".join(["python", f"benchmarks/{name}.py", *args])
    return meta


def _clean(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
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
    """Every row has a ``defense`` (or ``mechanism``) and at least one finite numeric metric."""
    if not rows:
        raise ValueError("no result rows")
    for r in rows:
        if not any(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in r.values()):
            raise ValueError(f"row without a finite number: {r}")


def write_results(name: str, *, size: str, meta: dict[str, Any], rows: list[dict[str, Any]], markdown: str,
                  out_dir: str | os.PathLike[str], tag: str = "") -> tuple[Path, Path]:
    """Write ``<out>/<name>[_tag][_size].json`` and ``.md``; non-finite numbers become ``null``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    check_rows(rows)
    base = result_name(name, size, tag)
    jp, mp = out / f"{base}.json", out / f"{base}.md"
    jp.write_text(json.dumps(_clean({"meta": meta, "rows": rows}), indent=1) + "\n", encoding="utf-8")
    write_markdown(mp, markdown)
    return jp, mp


def write_markdown(path: Path, markdown: str) -> None:
    """Write a report's Markdown (one trailing newline)."""
    path.write_text(markdown.rstrip() + "\n", encoding="utf-8")


def fmt(v: Any, digits: int = 2) -> str:
    """Format a table cell."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return "–"
        if v != 0 and (abs(v) < 10 ** (-digits) or abs(v) >= 1e6):
            return f"{v:.2e}"
        return f"{v:.{digits}f}"
    return str(v)


def md_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], *, headers: Sequence[str] | None = None,
             digits: int = 2) -> str:
    """A GitHub markdown table of ``columns`` from ``rows``."""
    headers = list(headers or columns)
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c), digits) for c in columns) + " |")
    return "\n".join(lines)


def setup_matplotlib() -> Any:
    """``matplotlib.pyplot`` on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def set_threads() -> None:
    """Torch threads: ``$TEXTCRAFTER_BENCH_THREADS`` if set (use 1 on a crowded machine), else every core."""
    import torch

    n = int(os.environ.get("TEXTCRAFTER_BENCH_THREADS") or 0) or max(1, min(os.cpu_count() or 1, 16))
    torch.set_num_threads(n)
