"""Retrieval quality under protection: BEIR SciFact in FAISS (exact inner product and HNSW).

For every defense of the grid the 5,183 SciFact abstracts are embedded with the bundled
all-MiniLM-L6-v2, protected, and indexed in ``IndexFlatIP`` and ``IndexHNSWFlat`` (inner
product); the 300 test queries are searched clean and protected. Reports Recall@1/10/100,
MRR@10 and NDCG@10 (``textcrafter_rag.metrics.retrieval_metrics``) per scenario:

* ``clean``: no defense (reference);
* ``protected_docs``: protected documents, clean queries (``Protector(protect_queries=False)``);
* ``protected_docs_queries``: documents and queries protected by the same mechanism instance.

With ``--privacy`` (default for the full size) the same run measures inversion of protected
document vectors (first sentence of a sample of abstracts, truncated to 32 tokens) with
``textcrafter_rag.attacks.evaluate_attacks``, non-adaptive and adaptive.

Usage::

    python -m benchmarks.retrieval                 # full grid
    python -m benchmarks.retrieval --quick         # ~3 min on 2 cores, writes retrieval_quick.*
    python -m benchmarks.retrieval --from-json benchmarks/results/retrieval.json   # re-render only
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from benchmarks.common.attack_rows import AttackRun, privacy_fields, privacy_subset, run_attack, timed_adapt_config
from benchmarks.common.caches import cache_dir
from benchmarks.common.fitted_policies import PolicySource
from benchmarks.common.grid import MechanismSpec, add_grid_options, build_grid, perturbation_norm
from benchmarks.common.options import (
    add_rerender_option,
    base_parser,
    quiet_seed_warnings,
    resolve_data_or_none,
    resolve_size,
    set_threads,
)
from benchmarks.common.reporting import Script, Timer, make_meta, result_name, write_results
from benchmarks.common.scifact import IndexConfig, build_index, embedded_scifact, search
from textcrafter_rag.attacks import AttackConfig
from textcrafter_rag.data import RetrievalSet, split_sentences, wikitext_sentences
from textcrafter_rag.encoders import bundled_minilm
from textcrafter_rag.metrics import retrieval_metrics
from textcrafter_rag.numerics import row_cosines

from .report import make_plot, protect_queries_verdict, render_markdown, rerender

NAME = "retrieval"
SCRIPT = Script(NAME, "benchmarks.retrieval")
SCENARIOS = ("clean", "protected_docs", "protected_docs_queries")
SIZES: dict[str, dict[str, int]] = {
    # n_queries / n_docs: 0 = all. privacy_docs: documents whose first sentence is attacked.
    "smoke": {"n_queries": 8, "n_docs": 32, "privacy_docs": 8},
    "quick": {"n_queries": 100, "n_docs": 1200, "privacy_docs": 100},
    "full": {"n_queries": 0, "n_docs": 0, "privacy_docs": 300},
}


def score_diagnostics(docs: np.ndarray, docs_p: np.ndarray, queries: np.ndarray) -> dict[str, float]:
    """How the perturbation interacts with retrieval.

    ``cosine_to_clean``: mean cos(x', x). ``score_noise_corr``: per query, the correlation over documents of
    the clean score ``<q, x>`` with the score change ``<q, x' - x>`` (0 for isotropic noise; negative means
    the perturbation systematically lowers the scores of the documents most similar to the query).
    """
    d64, p64, q64 = docs.astype(np.float64), docs_p.astype(np.float64), queries.astype(np.float64)
    s, ds = q64 @ d64.T, q64 @ (p64 - d64).T
    s, ds = s - s.mean(1, keepdims=True), ds - ds.mean(1, keepdims=True)
    den = np.linalg.norm(s, axis=1) * np.linalg.norm(ds, axis=1)
    corr = np.where(den > 0, np.sum(s * ds, 1) / np.maximum(den, 1e-300), 0.0)
    return {"cosine_to_clean": float(row_cosines(d64, p64).mean()), "score_noise_corr": float(corr.mean())}


def privacy_texts(docs: list[str], *, n: int, tokenizer: Any, max_tokens: int, seed: int) -> list[str]:
    """First sentence of ``n`` random abstracts (title dropped), truncated to ``max_tokens`` WordPieces."""
    rng = random.Random(seed + 1)
    out: list[str] = []
    for i in rng.sample(range(len(docs)), min(n, len(docs))):
        body = docs[i].split(". ", 1)[-1]
        sents = split_sentences(body) or [body]
        ids = tokenizer(sents[0], add_special_tokens=False, truncation=True, max_length=max_tokens)["input_ids"]
        text = tokenizer.decode(ids, skip_special_tokens=True).strip()
        if text:
            out.append(text)
    return out


def measure_retrieval(
    grid: list[MechanismSpec],
    rs: RetrievalSet,
    docs: np.ndarray,
    queries: np.ndarray,
    *,
    seed: int,
    index: IndexConfig,
    progress: bool,
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """One row per defense, index and scenario; and the policy folder of each TextCrafter defense."""
    rows: list[dict[str, Any]] = []
    policies: dict[str, str] = {}
    dim = docs.shape[1]
    for spec in tqdm(grid, desc="Mechanisms", disable=not progress):
        with quiet_seed_warnings():
            mech = spec.build(seed)
        if spec.family == "textcrafter":
            policies[spec.label] = str(getattr(mech, "path", None))
        t0 = time.perf_counter()
        docs_p = mech.protect(docs)
        vps = len(docs) / max(time.perf_counter() - t0, 1e-9)
        queries_p = mech.protect(queries)  # same instance: shuffle keeps its permutation
        shared = {
            "dataset": "scifact",
            **spec.row_fields(),
            "perturbation_norm": perturbation_norm(docs, docs_p),
            "expected_norm": mech.expected_norm(dim),
            **score_diagnostics(docs, docs_p, queries),
            "vectors_per_s": vps,
            "n_docs": len(rs.docs),
            "n_queries": len(rs.queries),
        }
        scenarios = ("clean",) if spec.family == "none" else SCENARIOS[1:]
        for kind in ("flat", "hnsw"):
            with Timer() as t_idx:
                idx = build_index(kind, docs_p, config=index)
            for scen in scenarios:
                q = queries_p if scen == "protected_docs_queries" else queries
                with Timer() as t_s:
                    ranked = search(idx, q, rs.doc_ids, rs.query_ids, 100)
                m = retrieval_metrics(ranked, rs.qrels, ks=(1, 10, 100))
                rows.append(
                    {
                        **shared,
                        "scenario": scen,
                        "index": kind,
                        "index_build_s": t_idx.seconds,
                        "search_s": t_s.seconds,
                        **m,
                    }
                )
    return rows, policies


def measure_privacy(
    specs: list[MechanismSpec], *, run: AttackRun, modes: tuple[str, ...], rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Inversion metrics of protected document sentences per defense and attacker mode.

    The retrieval ``rows`` of the same defense get the headline metrics too (``bleu_adaptive``, ...), for the plot.
    """
    privacy_rows = []
    for spec in tqdm(specs, desc="Privacy", disable=not run.progress):
        for mode in modes:
            res = privacy_fields(run_attack(spec.build(run.seed), mode, run=run))
            privacy_rows.append({"dataset": "scifact", **spec.row_fields(), "mode": mode, **res})
            suffix = mode.replace("-", "_")
            for r in rows:
                if r["mechanism_label"] == spec.label:
                    r.update({f"{k}_{suffix}": res.get(k) for k in ("bleu", "token_f1", "content_f1")})
    return privacy_rows


def _parser() -> argparse.ArgumentParser:
    ap = base_parser(SCRIPT, __doc__)
    ap.add_argument(
        "--privacy",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also run the inversion attacks on protected document vectors (default: on for the full "
        "size, off for --quick/--smoke; --quick --privacy uses the attacks' quick mode)",
    )
    ap.add_argument("--n-queries", type=int, default=None, help="override: number of test queries (0 = all)")
    ap.add_argument("--n-docs", type=int, default=None, help="override: number of documents (0 = all)")
    ap.add_argument("--privacy-docs", type=int, default=None, help="override: abstracts attacked for privacy")
    ap.add_argument("--hnsw-m", type=int, default=32)
    ap.add_argument("--ef-construction", type=int, default=200)
    ap.add_argument("--ef-search", type=int, default=128)
    ap.add_argument(
        "--adapt-minutes",
        type=float,
        default=None,
        help="time budget of the adaptive attacker's fine-tuning (default: the attacks package's)",
    )
    add_grid_options(ap)
    add_rerender_option(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.from_json:
        rerender(args.from_json, args.out_dir)
        print(f"[retrieval] re-rendered the report of {args.from_json} into {args.out_dir}")
        return 0
    size = resolve_size(args)
    privacy = size == "full" if args.privacy is None else args.privacy
    data_dir = resolve_data_or_none(args.data_dir)
    if data_dir is None:
        return 2
    cfg = {k: v if getattr(args, k) is None else getattr(args, k) for k, v in SIZES[size].items()}
    progress = not args.no_progress
    set_threads()
    t_all = time.perf_counter()

    cache = cache_dir(args.cache_dir)
    encoder = bundled_minilm()
    with Timer() as t_enc:
        _, rs, docs, queries = embedded_scifact(
            encoder, args, cfg["n_queries"], cfg["n_docs"], data_dir=data_dir, cache=cache
        )
    print(f"[retrieval] SciFact: {len(rs.docs)} docs, {len(rs.queries)} queries ({size})", flush=True)
    policies = PolicySource.from_args(args, size=size, encoder=encoder, data_dir=data_dir)
    grid = build_grid(args, policies=policies, dim=docs.shape[1])
    index = IndexConfig(hnsw_m=args.hnsw_m, ef_construction=args.ef_construction, ef_search=args.ef_search)
    rows, used = measure_retrieval(grid, rs, docs, queries, seed=args.seed, index=index, progress=progress)

    privacy_rows: list[dict[str, Any]] = []
    priv_meta: dict[str, Any] = {"enabled": privacy}
    if privacy:
        texts = privacy_texts(
            rs.docs, n=cfg["privacy_docs"], tokenizer=encoder.model.tokenizer, max_tokens=32, seed=args.seed
        )
        train_texts = wikitext_sentences("train", data_dir=data_dir)
        adapt = timed_adapt_config(args.adapt_minutes) if args.adapt_minutes is not None else None
        attack = AttackConfig(quick=size != "full", keyword=False, pii=False, seed=args.seed, adapt_config=adapt)
        run = AttackRun(encoder=encoder, train_texts=train_texts, test_texts=texts, attack=attack, progress=progress)
        priv_meta.update(
            {
                "n_test_texts": len(texts),
                "n_train_texts": len(train_texts),
                "modes": list(args.attack_modes),
                "test_texts": "first sentence of random SciFact abstracts, <= 32 WordPieces",
                "train_texts": "WikiText-2 train sentences",
                "quick_attack": size != "full",
                "mechanisms": args.privacy_mechanisms,
                "keyword_and_pii_probes": False,
                "evaluator": "textcrafter_rag.attacks.evaluate_attacks (beam 4 + rerank)",
                "adapt_minutes": args.adapt_minutes,
            }
        )
        privacy_rows = measure_privacy(
            privacy_subset(grid, args.privacy_mechanisms), run=run, modes=tuple(args.attack_modes), rows=rows
        )

    seconds = time.perf_counter() - t_all
    settings = {
        "dataset": {
            "name": "BEIR SciFact (test qrels)",
            "n_docs": len(rs.docs),
            "n_queries": len(rs.queries),
            "doc_text": "title + '. ' + abstract, truncated by the encoder at 256 WordPieces",
        },
        "index": index.describe(),
        "attack_config": priv_meta,
        "textcrafter_policies": used,
        "textcrafter_fit": policies.fit_size.as_dict(),
        "embedding_seconds": round(t_enc.seconds, 1),
        "runtime_seconds": round(seconds, 1),
        "protect_queries_verdict": protect_queries_verdict(rows)[0],
    }
    meta = make_meta(SCRIPT, argv, size=size, seed=args.seed, encoder=encoder, **settings)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plot = out / f"{result_name(NAME, size, args.tag)}.png"
    make_plot(rows, plot, privacy_rows=privacy_rows)
    md = render_markdown(rows, privacy_rows, meta, plot.name)
    all_rows = rows + [{**r, "kind": "privacy"} for r in privacy_rows]
    jp, mp = write_results(NAME, size=size, meta=meta, rows=all_rows, markdown=md, out_dir=out, tag=args.tag)
    print(f"[retrieval] wrote {jp}, {mp}, {plot} in {seconds:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
