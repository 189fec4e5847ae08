"""The privacy–retrieval frontier: how much each mechanism leaks at equal SciFact retrieval quality.

For each candidate mechanism (:mod:`.frontier_candidates`) and each target share of clean SciFact
NDCG@10 (0.95, 0.9, 0.8; clean queries, protected documents, exact IndexFlatIP), a bisection on a
seeded noise draw finds the strength that keeps that share (:mod:`.frontier_search`, cached). At each
point the inverter attacks three corpora (:mod:`.frontier_attacks`): WikiText-2 test sentences,
sentences of the SciFact abstracts themselves, and synthetic PII notes (:mod:`.pii_sentences`, with
PII-entity recovery and an attacker fine-tuned on its own in-domain notes). The non-adaptive attacker
runs everywhere; the adaptive one (``--adapt-pairs`` pairs, one pass) at the 0.9 target for every
mechanism and at every target for Gaussian and ``--best``. Every row and every adaptive attacker is
cached, so a run can stop (``--max-minutes``) and a later one continues; with everything cached a
rerun only re-renders (seconds). The report's headline is content-F1 relative to Gaussian noise at
the same target and attacker, and the issue's aims as verdicts computed from the rows.

Usage::

    python -m benchmarks.privacy.frontier --attackers non-adaptive          # every point, non-adaptive (first pass)
    python -m benchmarks.privacy.frontier --max-minutes 120                  # then everything, resumable
    python -m benchmarks.privacy.frontier --adapt-pairs 10000 --best textcrafter   # a smaller adaptive budget
    python -m benchmarks.privacy.frontier --candidates gaussian ldp --targets 0.9
    python -m benchmarks.privacy.frontier --smoke                           # seconds; numbers are not meaningful
    python -m benchmarks.privacy.frontier --from-json benchmarks/results/frontier.json   # re-render only
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.common.attack_rows import SMOKE_TRAIN, fixed_adapt_config
from benchmarks.common.caches import cache_dir
from benchmarks.common.fitted_policies import PolicySource
from benchmarks.common.options import add_rerender_option, base_parser, resolve_data_or_none, resolve_size, set_threads
from benchmarks.common.reporting import Script, make_meta, result_name, write_results
from benchmarks.common.scifact import embedded_scifact
from textcrafter_rag.attacks import AttackConfig
from textcrafter_rag.encoders import bundled_minilm
from textcrafter_rag.mechanisms import NoDefense

from .attacks import CORPORA, AttackPlan, AttackSizes
from .candidates import CANDIDATES, DEFAULT_CANDIDATES, FrontierContext
from .report import make_plot, render_markdown, rerender
from .search import FrontierPoint, RetrievalProbe, SearchConfig, find_point

NAME = "frontier"
SCRIPT = Script(NAME, "benchmarks.privacy.frontier")
TARGETS = (0.95, 0.9, 0.8)
#: The target at which every mechanism meets the adaptive attacker.
ADAPT_ALL = 0.9
SIZES: dict[str, dict[str, Any]] = {
    # n_docs / n_queries: 0 = all of SciFact. n_train: WikiText-2 train sentences (None = all).
    "smoke": {
        "n_docs": 200,
        "n_queries": 64,
        "n_test": 6,
        "n_train": 300,
        "n_pii_train": 300,
        "pairs": 64,
        "tolerance": 0.04,
        "max_iter": 10,
    },
    "quick": {
        "n_docs": 1200,
        "n_queries": 0,
        "n_test": 64,
        "n_train": 2000,
        "n_pii_train": 2000,
        "pairs": 2000,
        "tolerance": 0.01,
        "max_iter": 12,
    },
    "full": {
        "n_docs": 0,
        "n_queries": 0,
        "n_test": 300,
        "n_train": None,
        "n_pii_train": 10_000,
        "pairs": 30_000,
        "tolerance": 0.005,
        "max_iter": 12,
    },
}
CORPORA_ABOUT = (
    "`wikitext`: WikiText-2 test sentences of <= 24 words (as the privacy study; attacker trained on WikiText-2 "
    "train); `scifact`: one random sentence (5-40 words, <= 32 WordPieces) of each of random SciFact abstracts, the "
    "retrieval corpus itself (same attacker); `pii`: synthetic support tickets, clinical, HR and bank notes "
    "(Faker en_GB, templates and values disjoint from the policy's PII corpus and from the attacker's), attacked "
    "by the clean inverter extended with the WordPieces of the attacker's own in-domain notes and fine-tuned on "
    "them (one pass), which also adapts on those notes."
)
CAVEATS = [
    "An inverter decodes into a fixed WordPiece vocabulary (the clean one: 12,000 pieces of WikiText-2); the PII "
    "attacker adds the pieces of its own PII notes before fine-tuning, so entity tokens made of other pieces "
    "cannot be recovered by it (its recovery is a lower bound on leakage).",
    "The textcrafter candidate is the shipped default policy used at other radii, not a policy refitted per radius.",
]


def _parser() -> argparse.ArgumentParser:
    ap = base_parser(SCRIPT, __doc__)
    ap.add_argument("--candidates", nargs="+", default=list(DEFAULT_CANDIDATES), choices=sorted(CANDIDATES))
    ap.add_argument("--targets", nargs="+", type=float, default=list(TARGETS), help="shares of clean NDCG@10")
    ap.add_argument(
        "--attackers", nargs="+", choices=("non-adaptive", "adaptive"), default=["non-adaptive", "adaptive"]
    )
    ap.add_argument("--corpora", nargs="+", choices=CORPORA, default=list(CORPORA))
    ap.add_argument("--adapt-pairs", type=int, default=None, help="adaptive budget (default 30,000; recorded as pairs)")
    ap.add_argument(
        "--best",
        default="auto",
        help="candidate that meets the adaptive attacker at every target besides Gaussian: a name, 'auto' (lowest "
        "adaptive content-F1 at 0.9 among those measured) or 'none'",
    )
    ap.add_argument("--max-minutes", type=float, default=None, help="start no new attack after this; rerun to resume")
    ap.add_argument("--tolerance", type=float, default=None, help="bisection tolerance on NDCG/clean")
    ap.add_argument("--max-iter", type=int, default=None, help="bisection evaluations inside the bracket")
    ap.add_argument("--n-test", type=int, default=None, help="victim texts per corpus")
    ap.add_argument("--inverter", type=Path, default=None, help="a saved clean inverter to attack with instead")
    add_rerender_option(ap)
    return ap


def _attack_config(size: str, *, seed: int, pairs: int, cache: Path) -> AttackConfig:
    """The attacker's settings: the package defaults at the full size (so the cached inverter is reused)."""
    attack = AttackConfig(n_pairs=pairs, quick=size != "full", pii=False, seed=seed, adapt_config=fixed_adapt_config())
    if size == "smoke":
        attack = replace(
            attack, train_config=SMOKE_TRAIN, adapt_config=SMOKE_TRAIN, beam=1, cache_dir=cache / "attacks"
        )
    return attack


def _row(res: dict[str, Any], *, mechanism: str, corpus: str, mode: str, point: FrontierPoint | None) -> dict[str, Any]:
    """A flat result row: the issue's fields first, then every measured metric."""
    rest = {k: v for k, v in res.items() if k not in ("examples", "attacker")}
    return {
        "mechanism": mechanism,
        "ndcg_target": point.target if point else None,
        "ndcg10": point.ndcg10 if point else None,
        "ndcg_ratio": point.ratio if point else None,
        "hit": point.hit if point else None,
        "attacker": mode,
        "pairs": res.get("pairs", 0),
        "corpus": corpus,
        "content_f1": res.get("content_f1"),
        "pii_entity_recovery": res.get("pii_entity_recovery"),
        "strength": point.strength if point else None,
        "strength_name": point.strength_name if point else None,
        "perturbation_norm": point.perturbation_norm if point else 0.0,
        **rest,
    }


def _floor_row(none: dict[str, Any]) -> dict[str, Any]:
    """The ``floor`` row of a corpus (best trivial attacker that ignores the vector), from its ``none`` row."""
    keys = ("content_f1", "bleu", "token_f1", "rouge_l", "cosine", "pii_entity_recovery", "pii_entity_exact")
    return {
        "mechanism": "floor",
        "ndcg_target": None,
        "ndcg10": None,
        "attacker": "floor",
        "pairs": 0,
        "corpus": none["corpus"],
        **{k: none.get(f"floor_{k}") for k in keys},
        "floor_text": none.get("floor_text"),
        "mechanism_spec": "floor (ignores the vector)",
    }


def _pick_best(rows: list[dict[str, Any]], choice: str, corpora: list[str]) -> str | None:
    """``--best``: the named candidate, or the lowest adaptive content-F1 at the 0.9 target (first corpus measured)."""
    if choice == "none":
        return None
    if choice != "auto":
        return choice
    for corpus in corpora:
        sel = [
            r
            for r in rows
            if r["mechanism"] not in ("gaussian", "none")
            and (r["attacker"], r["corpus"], r["ndcg_target"]) == ("adaptive", corpus, ADAPT_ALL)
        ]
        if sel:
            return min(sel, key=lambda r: r["content_f1"])["mechanism"]
    return None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.from_json:
        rerender(args.from_json, args.out_dir)
        print(f"[frontier] re-rendered {args.from_json} into {args.out_dir}")
        return 0
    if args.best not in ("auto", "none", *CANDIDATES):
        raise SystemExit(f"--best must be 'auto', 'none' or a candidate ({', '.join(CANDIDATES)}), got {args.best!r}")
    size = resolve_size(args)
    data_dir = resolve_data_or_none(args.data_dir)
    if data_dir is None:
        return 2
    cfg = dict(SIZES[size])
    for k in ("tolerance", "max_iter", "n_test"):
        cfg[k] = cfg[k] if getattr(args, k) is None else getattr(args, k)
    cfg["pairs"] = args.adapt_pairs or cfg["pairs"]
    set_threads()
    progress = not args.no_progress
    t_start = time.perf_counter()
    deadline = None if args.max_minutes is None else t_start + 60 * args.max_minutes
    cache = cache_dir(args.cache_dir)
    encoder = bundled_minilm()
    full, rs, docs, queries = embedded_scifact(
        encoder, args, cfg["n_queries"], cfg["n_docs"], data_dir=data_dir, cache=cache
    )
    probe = RetrievalProbe(rs=rs, docs=docs, queries=queries)
    clean = probe.clean_ndcg()
    policies = PolicySource(
        size=size, encoder=encoder, data_dir=data_dir, cache=cache, seed=args.seed, progress=progress
    )
    ctx = FrontierContext(encoder=encoder, dim=docs.shape[1], policies=policies)
    search = SearchConfig(tolerance=cfg["tolerance"], max_iter=cfg["max_iter"])
    candidates = [CANDIDATES[n] for n in dict.fromkeys(args.candidates)]
    points = {
        (c.name, t): find_point(c, t, probe=probe, ctx=ctx, seed=args.seed, config=search, cache=cache)
        for c in candidates
        for t in args.targets
    }
    for p in points.values():
        print(
            f"[frontier] {p.mechanism} @{p.target}: {p.strength_name}={p.strength:.4g}, NDCG@10 {p.ndcg10:.2f} "
            f"({p.ratio:.3f} of clean{'' if p.hit else ', off target'})",
            flush=True,
        )

    sizes = AttackSizes(
        n_test=cfg["n_test"], n_train=cfg["n_train"], n_pii_train=cfg["n_pii_train"], pairs=cfg["pairs"]
    )
    attack = _attack_config(size, seed=args.seed, pairs=cfg["pairs"], cache=cache)
    plan = AttackPlan(
        encoder=encoder,
        data_dir=data_dir,
        scifact_docs=full.docs,
        sizes=sizes,
        attack=attack,
        cache=cache,
        pii_tuning=SMOKE_TRAIN if size == "smoke" else fixed_adapt_config(),
        inverter=args.inverter,
        progress=progress,
    )
    rows: list[dict[str, Any]] = []
    missing: list[str] = []
    examples: dict[str, Any] = {}

    def attack_point(name: str, point: FrontierPoint | None, mode: str, corpus: str) -> None:
        label = f"{name}@{point.target if point else 'clean'}/{mode}/{corpus}"
        cand = CANDIDATES.get(name)
        mech = cand.mechanism(point.strength, seed=args.seed, ctx=ctx) if cand and point else NoDefense()
        if plan.cached_row(mech, mode, corpus)[1] is None and deadline is not None and time.perf_counter() > deadline:
            missing.append(label)
            return
        res = plan.measure(mech, mode, corpus)
        examples[label] = res.get("examples")
        row = _row(res, mechanism=name, corpus=corpus, mode=mode, point=point)
        if point is None:
            row.update(ndcg10=clean, ndcg_ratio=1.0)
        row["mechanism_spec"] = mech.spec()
        rows.append(row)
        print(f"[frontier] {label}: content-F1 {row['content_f1']:.2f} ({res['minutes']:.1f} min)", flush=True)

    for corpus in args.corpora:
        attack_point("none", None, "non-adaptive", corpus)
    if "non-adaptive" in args.attackers:
        for (name, _), p in points.items():
            for corpus in args.corpora:
                attack_point(name, p, "non-adaptive", corpus)
    best = None
    if "adaptive" in args.attackers:
        for (name, t), p in points.items():
            if t == ADAPT_ALL:
                for corpus in args.corpora:
                    attack_point(name, p, "adaptive", corpus)
        best = _pick_best(rows, args.best, list(args.corpora))
        for (name, t), p in points.items():
            if t != ADAPT_ALL and name in ("gaussian", best):
                for corpus in args.corpora:
                    attack_point(name, p, "adaptive", corpus)
    rows += [_floor_row(r) for r in rows if r["mechanism"] == "none"]
    caveats = list(CAVEATS)
    if "pii" in args.corpora:
        clean_cov, pii_cov = plan.pii_vocab_coverage()
        caveats.append(
            f"Of the PII victims' entity tokens, {clean_cov:.1f}% can be written with the clean inverter's vocabulary "
            f"and {pii_cov:.1f}% with the PII attacker's (the clean one plus the pieces of its own PII notes)."
        )

    seconds = time.perf_counter() - t_start
    settings = {
        "n_docs": len(rs.docs),
        "n_queries": len(rs.queries),
        "clean_ndcg10": clean,
        "targets": list(args.targets),
        "tolerance": search.tolerance,
        "max_iter": search.max_iter,
        "candidates": {
            c.name: {"strength": c.strength, "about": c.about, "bracket": list(c.bracket)} for c in candidates
        },
        "points": [p.as_dict() for p in points.values()],
        "corpora": list(args.corpora),
        "corpora_about": CORPORA_ABOUT,
        "n_test": sizes.n_test,
        "n_pii_train": sizes.n_pii_train,
        "pairs": attack.pairs_budget,
        "best": best,
        "attack_config": {
            "inverter": f"{args.inverter.name} (weights sha256 {plan.inverter_id[:16]})"
            if args.inverter
            else "textcrafter_rag.attacks defaults (cached)",
            "beam": attack.beam,
            "rerank": attack.rerank,
            "keyword": attack.keyword,
            "adaptive": f"fine-tune on {attack.pairs_budget} pairs, one pass, no time cap",
            "pii_attacker": f"clean inverter fine-tuned on {sizes.n_pii_train} own PII notes, one pass",
            "quick": attack.quick,
        },
        "examples": examples,
        "caveats": caveats,
        "not_measured": missing,
        "seconds": {**plan.seconds, "total": round(seconds, 1)},
    }
    meta = make_meta(SCRIPT, argv, size=size, seed=args.seed, encoder=encoder, **settings)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plot = out / f"{result_name(NAME, size, args.tag)}.png"
    md = render_markdown(rows, meta, plot.name if make_plot(rows, plot) else None)
    jp, mp = write_results(NAME, size=size, meta=meta, rows=rows, markdown=md, out_dir=out, tag=args.tag)
    print(f"[frontier] wrote {jp}, {mp}, {plot} in {seconds:.0f}s" + (f"; {len(missing)} left" if missing else ""))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
