"""The command line: sizes, parts, the part cache, and the results files."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.caches import cache_dir, cache_key, embed_cached
from benchmarks.common.options import base_parser, resolve_data_or_none, resolve_size, set_threads
from benchmarks.common.reporting import Script, Timer, clean_json, make_meta, result_name, write_results
from benchmarks.common.scifact import subsample
from benchmarks.privacy.frontier.attacks import AttackSizes
from textcrafter_rag.data import load_scifact
from textcrafter_rag.encoders import bundled_minilm
from textcrafter_rag.sealed.candidates import TwoStage, TwoStageSearch

from . import __doc__ as PACKAGE_DOC
from .averaging import averaging_rows
from .budget import ADAPT_MINUTES, CLEAN_MINUTES, N_PAIRS, N_TRAIN
from .candidates import candidate_vectors, nullspace_basis
from .cost import cost_rows
from .engines import engine_latency_rows
from .plot import make_plot
from .privacy import make_plan, privacy_jobs, run_privacy
from .report import annotate, render_markdown
from .scale import ScaleGrid, gaussian_fit_distractors, scale_rows, wikitext_distractors
from .tables import REFERENCE
from .utility import DOC_STREAM, Corpus, UtilityGrid, one_stage_strength, utility_rows

__all__ = ["NAME", "PARTS", "SCRIPT", "SIZES", "main"]

NAME = "two_stage"
SCRIPT = Script(NAME, "benchmarks.two_stage")
PARTS = ("utility", "scale", "averaging", "privacy", "cost", "engines")
#: Bump a part's version when its code changes, so its cached rows are measured again.
PART_VERSIONS = {"utility": "2", "scale": "3", "averaging": "2", "privacy": "3", "cost": "2", "engines": "2"}

#: A fixed, public key for the keyed rows of the averaging part (what matters is that one key is reused).
AVERAGING_KEY = bytes(range(32))

SIZES: dict[str, dict[str, Any]] = {
    "smoke": {
        "n_docs": 64,
        "n_queries": 16,
        "utility": UtilityGrid(
            doc_strengths=(2.0,),
            query_strengths=(None, 1.0),
            fetch_ks=(5, 20, 64),
            seeds=(0,),
            other_mechanisms=("textcrafter-eps1.0", "textcrafter-eps1.0-dir"),
            other_strengths=(2.0,),
            other_query_strengths=(None,),
            encoding_probe=(2.0, None, 20),
        ),
        "scale": ScaleGrid(
            stores=(("gaussian-fit", 200),),
            doc_strengths=(2.0,),
            query_strengths=(None,),
            fetch_ks=(5, 20),
            seeds=(0,),
        ),
        "averaging": {"strengths": (2.0,), "copies": (1, 2)},
        "privacy": {
            "n_test": 4,
            "n_train": 300,
            "n_pii_train": 300,
            "pairs": 64,
            "doc_strengths": (2.0,),
            "query_strengths": (),
            "pii_strengths": (),
        },
        "cost": {"fetch_k": 20, "n_queries": 8},
        "engines": {"fetch_k": 20, "n_queries": 8, "n_docs": 200, "engines": ("qdrant",)},
    },
    "quick": {
        "n_docs": 0,
        "n_queries": 0,
        "utility": UtilityGrid(
            doc_strengths=(1.5, 2.0, 2.5),
            query_strengths=(None, 1.0),
            fetch_ks=(50, 100, 200, 500, 1000),
            seeds=(0,),
            other_mechanisms=("textcrafter-eps1.0", "textcrafter-eps2.5", "textcrafter-eps1.0-dir", "nullspace"),
            other_strengths=(2.0,),
            other_query_strengths=(None,),
            encoding_probe=(2.0, 1.0, 200),
        ),
        "scale": ScaleGrid(
            stores=(("gaussian-fit", 50_000),),
            doc_strengths=(1.5, 2.0),
            query_strengths=(None, 1.0),
            fetch_ks=(50, 100, 200, 500, 1000, 2000),
            seeds=(0,),
        ),
        "averaging": {"strengths": (2.0,), "copies": (1, 2, 4, 8)},
        "privacy": {
            "n_test": 32,
            "n_train": 2000,
            "n_pii_train": 500,
            "pairs": 500,
            "doc_strengths": (2.0,),
            "query_strengths": (1.0,),
            "pii_strengths": (2.0,),
        },
        "cost": {"fetch_k": 200, "n_queries": 100},
        "engines": {"fetch_k": 200, "n_queries": 50, "n_docs": 0, "engines": ("qdrant", "chroma")},
    },
    "full": {
        "n_docs": 0,
        "n_queries": 0,
        "utility": UtilityGrid(
            doc_strengths=(1.0, 1.5, 2.0, 2.5, 3.0),
            query_strengths=(None, 0.5, 1.0, 1.5),
            fetch_ks=(50, 100, 200, 500, 1000),
            seeds=(0, 1, 2),
            other_mechanisms=(
                "textcrafter-eps1.0",
                "textcrafter-eps2.5",
                "textcrafter-eps1.0-dir",
                "textcrafter-eps2.5-dir",
                "nullspace",
            ),
            other_strengths=(1.5, 2.0, 2.5),
            other_query_strengths=(None, 1.0),
            encoding_probe=(2.0, 1.0, 200),
        ),
        "scale": ScaleGrid(
            stores=(("wikitext2", 50_000), ("gaussian-fit", 50_000), ("gaussian-fit", 500_000)),
            doc_strengths=(1.0, 1.5, 2.0, 2.5),
            query_strengths=(None, 1.0),
            fetch_ks=(50, 100, 200, 500, 1000, 2000, 5000),
            seeds=(0,),
        ),
        "averaging": {"strengths": (1.0, 1.5, 2.0, 2.5), "copies": (1, 2, 4, 8)},
        "privacy": {
            "n_test": 50,
            "n_train": N_TRAIN,
            "n_pii_train": 10_000,
            "pairs": N_PAIRS,
            "doc_strengths": (2.0, 1.5, 2.5, 1.0),
            "query_strengths": (0.5, 1.0, 1.5),
            "pii_strengths": (2.0,),
        },
        "cost": {"fetch_k": 200, "n_queries": 300},
        "engines": {"fetch_k": 200, "n_queries": 300, "n_docs": 0, "engines": ("qdrant", "chroma")},
    },
}


def _parser() -> argparse.ArgumentParser:
    ap = base_parser(SCRIPT, PACKAGE_DOC)
    ap.add_argument(
        "--parts",
        nargs="+",
        choices=PARTS,
        default=list(PARTS),
        help="parts to measure (others are reported from the part cache when measured before)",
    )
    ap.add_argument("--redo", action="store_true", help="measure the selected parts again, ignoring the part cache")
    ap.add_argument(
        "--inverter",
        type=Path,
        default=None,
        help="privacy: a saved clean inverter (e.g. attack_strength's parity one); the attacker is then at parity",
    )
    ap.add_argument("--adapt-pairs", type=int, default=None, help="privacy: adaptive pairs (with --inverter: 30,000)")
    ap.add_argument("--n-test", type=int, default=None, help="privacy: victim texts per corpus")
    ap.add_argument(
        "--max-minutes",
        type=float,
        default=None,
        help="start no new attack after this many minutes of the run (cached attack rows still count)",
    )
    return ap


class PartCache:
    """Each part's rows as JSON under the benchmark cache, keyed by size, seed and the part's version."""

    def __init__(self, root: Path, *, size: str, seed: int, variants: dict[str, str] | None = None) -> None:
        self.root = root / "two_stage" / "parts"
        self.size, self.seed = size, seed
        self.variants = variants or {}

    def path(self, part: str) -> Path:
        variant = self.variants.get(part)  # only parts with variants add one (the others keep their keys)
        key = cache_key(part, PART_VERSIONS[part], self.size, self.seed, *([variant] if variant else []))
        return self.root / f"{part}-{key}.json"

    def load(self, part: str) -> dict[str, Any] | None:
        p = self.path(part)
        return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None

    def save(self, part: str, rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
        p = self.path(part)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(clean_json({"rows": rows, "meta": meta})), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    size = resolve_size(args)
    data_dir = resolve_data_or_none(args.data_dir)
    if data_dir is None:
        return 2
    cfg = SIZES[size]
    progress = not args.no_progress
    set_threads()
    t_start = time.perf_counter()
    deadline = None if args.max_minutes is None else t_start + 60 * args.max_minutes
    cache = cache_dir(args.cache_dir)
    privacy_cfg = _privacy_settings(cfg["privacy"], args)
    parts = PartCache(cache, size=size, seed=args.seed, variants={"privacy": repr(sorted(privacy_cfg.items()))})
    encoder = bundled_minilm()
    full = load_scifact(data_dir=data_dir)
    rs = subsample(full, n_queries=cfg["n_queries"], n_docs=cfg["n_docs"], seed=args.seed)
    with Timer() as t_enc:
        docs = embed_cached(encoder, rs.docs, cache=cache, desc="Embedding docs", progress=progress, superset=full.docs)
        queries = embed_cached(
            encoder, rs.queries, cache=cache, desc="Embedding queries", progress=progress, superset=full.queries
        )
    corpus = Corpus(doc_ids=rs.doc_ids, query_ids=rs.query_ids, qrels=rs.qrels, docs=docs, queries=queries)
    print(f"[two_stage] SciFact: {corpus.n_docs} docs, {len(rs.queries)} queries ({size})", flush=True)
    done: dict[str, dict[str, Any]] = {p: got for p in PARTS if (got := parts.load(p)) is not None}
    out = Path(args.out_dir)

    def write(note: str = "") -> None:
        rows = annotate([r for p in PARTS if p in done for r in done[p]["rows"]])
        part_meta = {p: done[p]["meta"] for p in PARTS if p in done}
        meta = make_meta(
            SCRIPT,
            argv,
            size=size,
            seed=args.seed,
            encoder=encoder,
            dataset={
                "name": "BEIR SciFact (test qrels)",
                "n_docs": corpus.n_docs,
                "n_queries": len(rs.queries),
                "doc_text": "title + '. ' + abstract, truncated by the encoder at 256 WordPieces",
            },
            core=_core_note(),
            parts=part_meta,
            parts_missing=[p for p in PARTS if p not in done],
            attack_config=part_meta.get("privacy", {}),
            embedding_seconds=round(t_enc.seconds, 1),
            runtime_seconds=round(time.perf_counter() - t_start, 1),
            status=note,
        )
        plot = out / f"{result_name(NAME, size, args.tag)}.png"
        out.mkdir(parents=True, exist_ok=True)
        make_plot(rows, plot, frontier=Path(__file__).resolve().parents[1] / "results" / "frontier_parity.json")
        jp, mp = write_results(
            NAME,
            size=size,
            meta=meta,
            rows=rows or [_placeholder()],
            markdown=render_markdown(rows, meta, plot.name),
            out_dir=out,
            tag=args.tag,
        )
        print(f"[two_stage] wrote {jp}, {mp}, {plot} ({note})", flush=True)

    for part in PARTS:
        if part not in args.parts or (part in done and not args.redo):
            continue
        with Timer() as t_part:
            rows, meta = _run_part(
                part,
                {**cfg, "privacy": privacy_cfg},
                corpus=corpus,
                rs=rs,
                full=full,
                encoder=encoder,
                cache=cache,
                data_dir=data_dir,
                size=size,
                seed=args.seed,
                progress=progress,
                deadline=deadline,
                partial=lambda r, m, p=part: (done.update({p: {"rows": r, "meta": m}}), write(f"{p} running")),
            )
        meta["seconds"] = round(t_part.seconds, 1)
        if not meta.get("incomplete"):
            parts.save(part, rows, meta)
        done[part] = {"rows": rows, "meta": meta}
        write(f"after {part}")
    write("done")
    return 0


def _privacy_settings(base: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The privacy part's settings: the size's, or the parity attacker's with ``--inverter`` (30,000 pairs drawn
    from all WikiText-2 train sentences, one uncapped pass), then the explicit options."""
    p = dict(base, inverter=None)
    if args.inverter is not None:
        p.update(inverter=str(args.inverter.resolve()), pairs=30_000, n_train=None)
    if args.adapt_pairs:
        p["pairs"] = args.adapt_pairs
    if args.n_test:
        p["n_test"] = args.n_test
    return p


def _placeholder() -> dict[str, Any]:
    return {"part": "none", "n_docs": 0}


def _core_note() -> str:
    return "textcrafter_rag.sealed.candidates (noise_to_norm, random_directions, TwoStage)"


def _run_part(
    part: str,
    cfg: dict[str, Any],
    *,
    corpus: Corpus,
    rs: Any,
    full: Any,
    encoder: Any,
    cache: Path,
    data_dir: Path,
    size: str,
    seed: int,
    progress: bool,
    deadline: float | None,
    partial: Any,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Measure one part: its rows and its ``meta`` entry."""
    if part == "utility":
        grid: UtilityGrid = cfg["utility"]
        basis = nullspace_basis(encoder, cache=cache, seed=seed) if "nullspace" in grid.other_mechanisms else None
        rows = utility_rows(corpus, grid, seed=seed, basis=basis, progress=progress)
        return rows, {
            "grid": repr(grid),
            "nullspace_removed_directions": None if basis is None else int(basis.shape[1]),
        }
    if part == "scale":
        sg: ScaleGrid = cfg["scale"]
        kinds = {k for k, _ in sg.stores}
        biggest = max(n for _, n in sg.stores)
        pools: dict[str, np.ndarray] = {}
        if "gaussian-fit" in kinds:
            pools["gaussian-fit"] = gaussian_fit_distractors(corpus.docs, biggest - corpus.n_docs, seed=seed)
        if "wikitext2" in kinds:
            pools["wikitext2"] = wikitext_distractors(encoder, data_dir, n=None, progress=progress)
        rows = scale_rows(corpus, sg, distractors=pools, seed=seed, progress=progress)
        return rows, {"grid": repr(sg), "distractor_pool_sizes": {k: len(v) for k, v in pools.items()}}
    if part == "averaging":
        a = cfg["averaging"]
        about = (
            "textcrafter_rag.sealed.candidates.TwoStage.protect_documents (keyed PRF of the quantized clean direction)"
        )

        def keyed(docs: np.ndarray, r: float) -> np.ndarray:
            two = TwoStage(AVERAGING_KEY, context="benchmark", search=TwoStageSearch(doc_strength=r))
            return two.protect_documents(docs)

        rows = averaging_rows(
            corpus, strengths=a["strengths"], copies=a["copies"], seed=seed, keyed=keyed, keyed_about=about
        )
        return rows, {"settings": a, "keyed": about}
    if part == "cost":
        c = cfg["cost"]
        cand, _ = candidate_vectors(corpus.docs, mechanism="gaussian", strength=2.0, seed=seed + DOC_STREAM)
        rows = cost_rows(corpus, rs.docs, candidate_docs=cand, fetch_k=c["fetch_k"], k=10, n_queries=c["n_queries"])
        return rows, {"settings": c, "doc_strength": 2.0}
    if part == "engines":
        e = cfg["engines"]
        n = e["n_docs"] or corpus.n_docs
        rows = engine_latency_rows(
            rs.docs[:n],
            corpus.docs[:n],
            rs.queries[: e["n_queries"]],
            corpus.queries[: e["n_queries"]],
            fetch_k=e["fetch_k"],
            engines=e["engines"],
            key=AVERAGING_KEY,
        )
        return rows, {"settings": {**e, "engines": list(e["engines"])}, "defaults": "TwoStageSearch() strengths"}
    if part == "privacy":
        p = cfg["privacy"]
        sizes = AttackSizes(n_test=p["n_test"], n_train=p["n_train"], n_pii_train=p["n_pii_train"], pairs=p["pairs"])
        pplan = make_plan(
            encoder=encoder,
            data_dir=data_dir,
            scifact_docs=full.docs,
            queries=full.queries,
            size=size,
            sizes=sizes,
            seed=seed,
            cache=cache,
            progress=progress,
            inverter=None if p["inverter"] is None else Path(p["inverter"]),
        )
        r95, kept = one_stage_strength(corpus, ratio=0.95, seed=seed)
        jobs = privacy_jobs(
            p["doc_strengths"],
            p["query_strengths"],
            pii_strengths=p["pii_strengths"],
            reference=(REFERENCE, round(r95, 4)),
        )
        parity = p["inverter"] is not None
        meta: dict[str, Any] = {
            "parity": parity,
            "attacker": pplan.attacker_note()
            if parity
            else "the frontier's attack plan (AttackPlan, beam 4 + "
            "rerank) with a smaller training budget than its parity attacker (~65 min on ~63,000 public sentences, "
            "30,000 adaptive pairs)",
            "clean_inverter_training": "see attacker"
            if parity
            else (f"{CLEAN_MINUTES:g} min wall clock" if size != "smoke" else "2 steps (smoke)"),
            "adaptive_pairs": p["pairs"],
            "adaptive_training": "one pass, no time cap"
            if parity
            else (f"one pass, capped at {ADAPT_MINUTES:g} min" if size != "smoke" else "2 steps"),
            "reference": {"name": REFERENCE, "doc_strength": r95, "one_stage_ndcg_ratio": kept},
            "n_test": p["n_test"],
            "n_train": p["n_train"] or "all WikiText-2 train sentences that fit",
            "n_pii_train": p["n_pii_train"],
            "attack": repr(pplan.plan.attack),
        }
        rows, skipped = run_privacy(
            pplan, jobs, deadline=deadline, on_row=lambda r: partial(r, {**meta, "incomplete": True})
        )
        meta.update(skipped=skipped, incomplete=bool(skipped))
        return rows, meta
    raise ValueError(f"unknown part {part!r}")
