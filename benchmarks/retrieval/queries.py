"""Queries, honestly: what an inverter recovers from the query vectors the store host sees.

Documents are protected before upsert, but every search sends a query vector to the vector
database, where its host (or anyone who logs the traffic) can invert it. This runs the package's
inverter on the vectors of the 300 SciFact test queries (scientific claims) as the store host
sees them, next to what it costs retrieval to protect them:

* ``clean`` — the default (``protect_queries=False``): the host sees the raw query vector;
* ``gaussian@N`` — Gaussian noise of expected norm N on each query (``protect_queries`` with a
  noise mechanism), retrieval against the default-protected documents;
* ``floor`` — an attacker that ignores the vector.

Retrieval: SciFact NDCG@10 over the whole corpus (5,183 abstracts) stored with the shipped
default policy (TextCrafter eps 1.0), queried with each variant. The attacker's inverter is the
privacy benchmark's (trained on WikiText-2 train sentences, cached); ``--modes adaptive`` adds the
attacker fine-tuned on 30,000 (text, noisy vector) pairs::

    python -m benchmarks.retrieval.queries                       # writes benchmarks/results/queries.{json,md}
    python -m benchmarks.retrieval.queries --smoke               # seconds; numbers are not meaningful
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from benchmarks.common.attack_rows import AttackRun, fixed_adapt_config, floor_row, privacy_fields, run_attack
from benchmarks.common.caches import cache_dir, embed_cached
from benchmarks.common.options import base_parser, resolve_data_or_none, resolve_size, set_threads
from benchmarks.common.reporting import Script, fmt, make_meta, md_table, write_results
from textcrafter_rag.attacks import AttackConfig
from textcrafter_rag.data import load_scifact, wikitext_sentences
from textcrafter_rag.encoders import bundled_minilm
from textcrafter_rag.mechanisms import GaussianNoise, Mechanism, NoDefense
from textcrafter_rag.metrics import retrieval_metrics
from textcrafter_rag.textcrafter import TextCrafter

NAME = "queries"
SCRIPT = Script(NAME, "benchmarks.retrieval.queries")
NOISE_NORMS = (0.25, 0.5, 1.0)


def _parser() -> argparse.ArgumentParser:
    ap = base_parser(SCRIPT, __doc__)
    ap.add_argument("--modes", nargs="+", default=["non-adaptive"], choices=["non-adaptive", "adaptive"])
    ap.add_argument("--noise-norms", nargs="*", type=float, default=list(NOISE_NORMS))
    return ap


def _ndcg(doc_index: Any, queries: np.ndarray, rs: Any) -> float:
    _, top = doc_index.search(np.ascontiguousarray(queries, dtype=np.float32), 10)
    ranked = {q: [rs.doc_ids[j] for j in row] for q, row in zip(rs.query_ids, top)}
    return retrieval_metrics(ranked, rs.qrels, ks=(10,))["ndcg@10"]


def _variants(norms: list[float], dim: int, seed: int) -> list[tuple[str, Mechanism]]:
    out: list[tuple[str, Mechanism]] = [("clean", NoDefense())]
    out += [(f"gaussian@{n:g}", GaussianNoise.at_norm(n, dim=dim, seed=seed)) for n in norms]
    return out


def _markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    cols = ["queries", "mode", "ndcg10", "content_f1", "bleu", "token_f1", "cosine"]
    heads = [
        "query vectors the host sees",
        "attacker",
        "NDCG@10 (docs: TextCrafter eps 1.0)",
        "content-F1",
        "BLEU",
        "token-F1",
        "cos(recon, query)",
    ]
    return "\n".join(
        [
            "# Query inversion: what the vector-database host recovers from query vectors",
            "",
            f"SciFact: {meta['n_queries']} test queries, {meta['n_docs']} documents; documents stored with the shipped "
            "TextCrafter eps 1.0 policy, queries as listed. Attacker: the package's inverter "
            f"({meta['attacker']}); content-F1 first (token-F1 without stop words and punctuation).",
            "",
            md_table(rows, cols, headers=heads),
            "",
            f"Command: `{meta['command']}`",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    size = resolve_size(args)
    data_dir = resolve_data_or_none(args.data_dir)
    if data_dir is None:
        return 2
    set_threads()
    progress = not args.no_progress
    cache = cache_dir(args.cache_dir)
    encoder = bundled_minilm()
    rs = load_scifact(data_dir=data_dir)
    queries_text = rs.queries[:32] if size == "smoke" else rs.queries
    docs = embed_cached(encoder, rs.docs, cache=cache, desc="Embedding docs", progress=progress)
    queries = embed_cached(encoder, rs.queries, cache=cache, desc="Embedding queries", progress=progress)
    index = faiss.IndexFlatIP(docs.shape[1])
    index.add(TextCrafter.load_shipped(seed=args.seed).protect(docs))

    train = wikitext_sentences("train", data_dir=data_dir)
    attack = AttackConfig(
        quick=size != "full",
        keyword=False,
        pii=False,
        seed=args.seed,
        adapt_config=fixed_adapt_config() if size == "full" else None,
    )
    run = AttackRun(encoder=encoder, train_texts=train, test_texts=queries_text, attack=attack, progress=progress)
    rows: list[dict[str, Any]] = []
    for label, mech in _variants(args.noise_norms, docs.shape[1], args.seed):
        ndcg = _ndcg(index, mech.protect(queries), rs)
        for mode in args.modes:
            if mode == "adaptive" and label == "clean":
                continue  # nothing to adapt to
            res = privacy_fields(run_attack(mech, mode, run=run))
            rows.append({"queries": label, "mode": mode, "ndcg10": ndcg, **res})
    floor = floor_row(rows, queries="floor (ignores the vector)")
    if floor is not None:
        rows.append({**floor, "queries": "floor (ignores the vector)", "ndcg10": None})
    attacker = (
        "beam 4 + re-embedding rerank, trained on WikiText-2 train; adaptive: 30,000 pairs, one pass"
        if size == "full"
        else "quick attacker (numbers not meaningful)"
    )
    settings = {
        "n_queries": len(queries_text),
        "n_docs": len(rs.docs),
        "attacker": attacker,
        "modes": list(args.modes),
        "noise_norms": args.noise_norms,
    }
    meta = make_meta(SCRIPT, argv, size=size, seed=args.seed, encoder=encoder, **settings)
    md = _markdown(
        [{**r, **{k: fmt(r.get(k)) for k in ("ndcg10", "content_f1", "bleu", "token_f1", "cosine")}} for r in rows],
        meta,
    )
    jp, mp = write_results(NAME, size=size, meta=meta, rows=rows, markdown=md, out_dir=Path(args.out_dir))
    print(md)
    print(f"wrote {jp} and {mp}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
