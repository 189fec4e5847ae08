"""Retrieval quality under protection: BEIR SciFact in FAISS (exact inner product and HNSW).

For every defense of the grid the 5,183 SciFact abstracts are embedded with the bundled
all-MiniLM-L6-v2, protected, and indexed in ``IndexFlatIP`` and ``IndexHNSWFlat`` (inner
product); the 300 test queries are searched clean and protected. Reports Recall@1/10/100,
MRR@10 and NDCG@10 (``textcrafter_rag.metrics.retrieval_metrics``) per scenario:

* ``clean``: no defense (reference);
* ``protected_docs``: protected documents, clean queries (``Protector(protect_queries=False)``);
* ``protected_docs_queries``: documents and queries protected by the same mechanism instance.

With ``--privacy`` (default) and the attacks package's ``evaluate_attacks`` available, the same run
measures inversion of protected document vectors (first sentence of a sample of abstracts,
truncated to 32 tokens), non-adaptive and adaptive.

Usage::

    python benchmarks/retrieval.py                 # full grid
    python benchmarks/retrieval.py --quick         # ~3 min on 2 cores, writes retrieval_quick.*
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import random
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import common
import numpy as np

NAME = "retrieval"
SCENARIOS = ("clean", "protected_docs", "protected_docs_queries")
SIZES: dict[str, dict[str, int]] = {
    # n_queries / n_docs: 0 = all. privacy_docs: documents whose first sentence is attacked.
    "smoke": {"n_queries": 8, "n_docs": 32, "privacy_docs": 8},
    "quick": {"n_queries": 100, "n_docs": 1200, "privacy_docs": 100},
    "full": {"n_queries": 0, "n_docs": 0, "privacy_docs": 300},
}


def subsample(rs: Any, *, n_queries: int, n_docs: int, seed: int) -> Any:
    """A smaller retrieval set: ``n_queries`` queries, all their relevant docs, and random other docs."""
    from textcrafter_rag.data import RetrievalSet

    rng = random.Random(seed)
    qidx = list(range(len(rs.query_ids)))
    if n_queries and n_queries < len(qidx):
        qidx = sorted(rng.sample(qidx, n_queries))
    qids = [rs.query_ids[i] for i in qidx]
    if not n_docs or n_docs >= len(rs.doc_ids):
        didx = list(range(len(rs.doc_ids)))
    else:
        pos = {d: i for i, d in enumerate(rs.doc_ids)}
        rel = sorted({pos[d] for q in qids for d in rs.qrels[q] if d in pos})
        others = [i for i in range(len(rs.doc_ids)) if i not in set(rel)]
        didx = sorted(rel + rng.sample(others, max(0, n_docs - len(rel))))
    return RetrievalSet(
        doc_ids=[rs.doc_ids[i] for i in didx], docs=[rs.docs[i] for i in didx], query_ids=qids,
        queries=[rs.queries[i] for i in qidx], qrels={q: rs.qrels[q] for q in qids},
    )


def build_index(kind: str, vectors: np.ndarray, *, hnsw_m: int, ef_construction: int, ef_search: int) -> Any:
    """An inner-product FAISS index (``flat`` or ``hnsw``) holding ``vectors``."""
    import faiss

    d = vectors.shape[1]
    if kind == "flat":
        index = faiss.IndexFlatIP(d)
    else:
        index = faiss.IndexHNSWFlat(d, hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = ef_construction
        index.hnsw.efSearch = ef_search
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return index


def search(index: Any, queries: np.ndarray, doc_ids: list[str], query_ids: list[str], k: int) -> dict[str, list[str]]:
    """Ranked doc ids per query id."""
    _, idx = index.search(np.ascontiguousarray(queries, dtype=np.float32), min(k, len(doc_ids)))
    return {q: [doc_ids[j] for j in row if j >= 0] for q, row in zip(query_ids, idx)}


def score_diagnostics(docs: np.ndarray, docs_p: np.ndarray, queries: np.ndarray) -> dict[str, float]:
    """How the perturbation interacts with retrieval.

    ``cosine_to_clean``: mean cos(x', x). ``score_noise_corr``: per query, the correlation over documents of
    the clean score ``<q, x>`` with the score change ``<q, x' - x>`` (0 for isotropic noise; negative means
    the perturbation systematically lowers the scores of the documents most similar to the query).
    """
    d64, p64, q64 = docs.astype(np.float64), docs_p.astype(np.float64), queries.astype(np.float64)
    cos = np.sum(d64 * p64, 1) / np.maximum(np.linalg.norm(d64, axis=1) * np.linalg.norm(p64, axis=1), 1e-12)
    s, ds = q64 @ d64.T, q64 @ (p64 - d64).T
    s, ds = s - s.mean(1, keepdims=True), ds - ds.mean(1, keepdims=True)
    den = np.linalg.norm(s, axis=1) * np.linalg.norm(ds, axis=1)
    corr = np.where(den > 0, np.sum(s * ds, 1) / np.maximum(den, 1e-300), 0.0)
    return {"cosine_to_clean": float(cos.mean()), "score_noise_corr": float(corr.mean())}


def privacy_texts(docs: list[str], *, n: int, tokenizer: Any, max_tokens: int, seed: int) -> list[str]:
    """First sentence of ``n`` random abstracts (title dropped), truncated to ``max_tokens`` WordPieces."""
    from textcrafter_rag.data import split_sentences

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


def run_privacy(evaluate: Any, spec: common.DefenseSpec, *, encoder: Any, train_texts: list[str],
                test_texts: list[str], seed: int, quick: bool, modes: tuple[str, ...],
                progress: bool, adapt_minutes: float | None = None) -> list[dict[str, Any]]:
    """Inversion metrics of protected document sentences for each attacker mode (keyword/PII probes off)."""
    extra: dict[str, Any] = {}
    if adapt_minutes is not None:
        from textcrafter_rag.attacks.adaptive import DEFAULT_ADAPT_CONFIG

        extra["adapt_config"] = dataclasses.replace(DEFAULT_ADAPT_CONFIG, time_budget_min=adapt_minutes)
    rows = []
    for mode in modes:
        with common.quiet_seed_warnings():
            res = evaluate(spec.build(seed), encoder=encoder, train_texts=train_texts, test_texts=test_texts,
                           mode=mode, quick=quick, keyword=False, pii=False, seed=seed, progress=progress,
                           **(extra if mode == "adaptive" else {}))
        rows.append({"mode": mode, **common.privacy_fields(res)})
    return rows


def make_plot(rows: list[dict[str, Any]], path: Path, *, privacy_rows: list[dict[str, Any]]) -> None:
    """NDCG@10 (flat index, protected docs) vs perturbation norm, and vs inversion BLEU / content-F1 with the floor."""
    plt = common.setup_matplotlib()
    ret = [r for r in rows if r.get("index") == "flat" and r["scenario"] in ("clean", "protected_docs")]
    clean = next((r["ndcg@10"] for r in ret if r["scenario"] == "clean"), None)
    panels: list[tuple[str, str, str | None]] = [("perturbation_norm", "measured perturbation norm ||x' - x|| (log)",
                                                  None)]
    for metric, name in (("bleu", "BLEU"), ("content_f1", "content-F1")):
        for mode in ("non_adaptive", "adaptive"):
            if any(r.get(f"{metric}_{mode}") is not None for r in ret):
                panels.append((f"{metric}_{mode}", f"inversion {name}, {mode.replace('_', '-')} attacker "
                               "(lower = more private)", metric))
    floor = common.floor_row(privacy_rows) or {}
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.6), squeeze=False)
    styles = {"gaussian": "o-", "ldp": "s-", "purkayastha": "^-", "textcrafter": "D-", "shuffle": "x", "none": "*"}
    colors = {"gaussian": "C0", "ldp": "C1", "purkayastha": "C2", "textcrafter": "C3", "shuffle": "C4", "none": "k"}
    for ax, (xkey, xlabel, metric) in zip(axes[0], panels):
        for fam, st in styles.items():
            pts = sorted((r[xkey], r["ndcg@10"]) for r in ret if r["defense"] == fam and r.get("comparison") == "grid"
                         and r.get(xkey) is not None and r["scenario"] != "clean")
            if fam == "none":
                pts = [(r[xkey], r["ndcg@10"]) for r in ret if r["scenario"] == "clean" and r.get(xkey) is not None]
            if not pts:
                continue
            xs, ys = zip(*pts)
            if xkey == "perturbation_norm":
                xs = tuple(max(x, 1e-3) for x in xs)
            ax.plot(xs, ys, st, label=fam, ms=7, color=colors[fam])
        eq = sorted((r[xkey], r["ndcg@10"]) for r in ret if r.get("comparison") == "equal_norm"
                    and r.get(xkey) is not None)
        if eq:
            ax.plot(*zip(*eq), "o--", color="grey", label="gaussian @ TextCrafter norm")
        if xkey == "perturbation_norm":
            ax.set_xscale("log")
        elif floor.get(metric) is not None:
            fval = floor[metric]
            ax.axvline(fval, color="gray", ls=":", label=f"floor (ignores the vector) {fval:.2f}")
        if clean is not None:
            ax.axhline(clean, color="k", lw=0.6, ls=":")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("NDCG@10 (SciFact, exact IP, protected docs)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("At a given level of protection, how much retrieval quality is kept?")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def protect_queries_verdict(rows: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Compare NDCG@10 with and without query protection per defense (flat index)."""
    by: dict[str, dict[str, float]] = {}
    for r in rows:
        if r.get("index") == "flat" and r["scenario"] in ("protected_docs", "protected_docs_queries"):
            by.setdefault(r["defense_label"], {})[r["scenario"]] = r["ndcg@10"]
    table = [{"defense_label": k, "docs_only": v.get("protected_docs"), "docs_and_queries": v.get("protected_docs_queries"),
              "delta": (v.get("protected_docs_queries", np.nan) - v.get("protected_docs", np.nan))}
             for k, v in by.items()]
    tc = [t for t in table if t["defense_label"].startswith("textcrafter")]
    noisy = [t for t in table if not t["defense_label"].startswith(("shuffle", "none"))]
    better_off = sum(1 for t in noisy if t["delta"] < -0.5)
    text = (f"Protecting queries as well lowers NDCG@10 for {better_off} of {len(noisy)} noise-based settings "
            f"(by more than 0.5 point); ")
    mean_tc = float(np.nanmean([t["delta"] for t in tc])) if tc else float("nan")
    if tc:
        text += ("for TextCrafter the change is "
                 + ", ".join(f"{t['defense_label']}: {t['delta']:+.2f}" for t in tc)
                 + f" NDCG@10 points (mean {mean_tc:+.2f}). ")
    shuf = next((t for t in table if t["defense_label"] == "shuffle"), None)
    if shuf:
        text += (f"Shuffling is the exception: it only works when queries get the same permutation "
                 f"(docs only {common.fmt(shuf['docs_only'])} vs both {common.fmt(shuf['docs_and_queries'])}). ")
    if tc and math.isfinite(mean_tc):
        if mean_tc < 0:
            text += ("**Recommendation: keep `protect_queries=False` as the default** for TextCrafter: queries are "
                     "not stored, and adding independent noise to them only costs retrieval quality.")
        else:
            text += ("**Recommendation: consider `protect_queries=True`**: in this run query protection did not "
                     "cost TextCrafter retrieval quality.")
    return text, table


def main(argv: list[str] | None = None) -> int:
    ap = common.base_parser(__doc__.splitlines()[0])
    ap.add_argument("--privacy", action=argparse.BooleanOptionalAction, default=None,
                    help="also run the inversion attacks on protected document vectors (default: on for the full "
                    "size, off for --quick/--smoke; --quick --privacy uses the attacks' quick mode)")
    ap.add_argument("--n-queries", type=int, default=None, help="override: number of test queries (0 = all)")
    ap.add_argument("--n-docs", type=int, default=None, help="override: number of documents (0 = all)")
    ap.add_argument("--privacy-docs", type=int, default=None, help="override: abstracts attacked for privacy")
    ap.add_argument("--hnsw-m", type=int, default=32)
    ap.add_argument("--ef-construction", type=int, default=200)
    ap.add_argument("--ef-search", type=int, default=128)
    ap.add_argument("--adapt-minutes", type=float, default=None,
                    help="time budget of the adaptive attacker's fine-tuning (default: the attacks package's)")
    common.add_grid_options(ap)
    common.add_rerender_option(ap)
    args = ap.parse_args(argv)
    if args.from_json:
        meta, all_rows = common.load_results(args.from_json)
        rows = [r for r in all_rows if r.get("kind") != "privacy"]
        privacy_rows = [r for r in all_rows if r.get("kind") == "privacy"]
        out, base = Path(args.out_dir), Path(args.from_json).stem
        make_plot(rows, out / f"{base}.png", privacy_rows=privacy_rows)
        verdict, pq_table = protect_queries_verdict(rows)
        common.write_markdown(out / f"{base}.md",
                              render_markdown(rows, privacy_rows, pq_table, verdict, meta, f"{base}.png"))
        print(f"[retrieval] re-rendered {base}.md and {base}.png from {args.from_json}")
        return 0
    size = common.resolve_size(args)
    if args.privacy is None:
        args.privacy = size == "full"
    data_dir = common.resolve_data_or_none(args.data_dir)
    if data_dir is None:
        return 2
    cfg = dict(SIZES[size])
    for k in ("n_queries", "n_docs", "privacy_docs"):
        if getattr(args, k) is not None:
            cfg[k] = getattr(args, k)
    progress = not args.no_progress
    common.set_threads()
    t_all = time.perf_counter()

    from tqdm.auto import tqdm

    from textcrafter_rag.data import load_scifact
    from textcrafter_rag.encoders import bundled_minilm
    from textcrafter_rag.metrics import retrieval_metrics

    cache = common.cache_dir(args.cache_dir)
    encoder = bundled_minilm()
    full = load_scifact(data_dir=data_dir)
    rs = subsample(full, n_queries=cfg["n_queries"], n_docs=cfg["n_docs"], seed=args.seed)
    print(f"[retrieval] SciFact: {len(rs.docs)} docs, {len(rs.queries)} queries ({size})", flush=True)
    with common.Timer() as t_enc:
        docs = common.embed_cached(encoder, rs.docs, cache=cache, desc="Embedding docs", progress=progress,
                                   superset=full.docs)
        queries = common.embed_cached(encoder, rs.queries, cache=cache, desc="Embedding queries", progress=progress,
                                      superset=full.queries)
    dim = docs.shape[1]

    grid = common.build_grid(args, size=size, encoder=encoder, dim=dim, data_dir=data_dir, cache=cache,
                             progress=progress)
    evaluate = common.privacy_evaluator() if args.privacy else None
    if args.privacy and evaluate is None:
        print("[retrieval] privacy: textcrafter_rag.attacks.evaluate_attacks is not available; "
              "reporting retrieval only", flush=True)

    rows: list[dict[str, Any]] = []
    policies: dict[str, str] = {}
    index_kw = {"hnsw_m": args.hnsw_m, "ef_construction": args.ef_construction, "ef_search": args.ef_search}
    for spec in tqdm(grid, desc="Defenses", disable=not progress):
        with common.quiet_seed_warnings():
            mech = spec.build(args.seed)
        if spec.defense == "textcrafter":
            policies[spec.label] = str(getattr(mech, "path", None))
        t0 = time.perf_counter()
        docs_p = mech.protect(docs)
        vps = len(docs) / max(time.perf_counter() - t0, 1e-9)
        queries_p = mech.protect(queries)  # same instance: shuffle keeps its permutation
        norm = common.perturbation_norm(docs, docs_p)
        diag = score_diagnostics(docs, docs_p, queries)
        scenarios = ("clean",) if spec.defense == "none" else SCENARIOS[1:]
        for kind in ("flat", "hnsw"):
            with common.Timer() as t_idx:
                index = build_index(kind, docs_p, **index_kw)
            for scen in scenarios:
                q = queries_p if scen == "protected_docs_queries" else queries
                with common.Timer() as t_s:
                    ranked = search(index, q, rs.doc_ids, rs.query_ids, 100)
                m = retrieval_metrics(ranked, rs.qrels, ks=(1, 10, 100))
                rows.append({
                    "dataset": "scifact", **spec.row_fields(), "scenario": scen, "index": kind,
                    "perturbation_norm": norm, "expected_norm": mech.expected_norm(dim), **diag,
                    "vectors_per_s": vps, "index_build_s": t_idx.seconds, "search_s": t_s.seconds,
                    "n_docs": len(rs.docs), "n_queries": len(rs.queries), **m,
                })

    privacy_rows: list[dict[str, Any]] = []
    priv_meta: dict[str, Any] = {"enabled": bool(evaluate)}
    if evaluate is not None:
        from textcrafter_rag.data import wikitext_sentences

        texts = privacy_texts(rs.docs, n=cfg["privacy_docs"], tokenizer=encoder.model.tokenizer, max_tokens=32,
                              seed=args.seed)
        train_texts = wikitext_sentences("train", data_dir=data_dir)
        modes = tuple(args.attack_modes)
        priv_meta.update({"n_test_texts": len(texts), "n_train_texts": len(train_texts), "modes": list(modes),
                          "test_texts": "first sentence of random SciFact abstracts, <= 32 WordPieces",
                          "train_texts": "WikiText-2 train sentences", "quick_attack": size != "full",
                          "defenses": args.privacy_defenses, "keyword_and_pii_probes": False,
                          "evaluator": "textcrafter_rag.attacks.evaluate_attacks (beam 4 + rerank)",
                          "adapt_minutes": args.adapt_minutes})
        for spec in tqdm(common.privacy_subset(grid, args.privacy_defenses), desc="Privacy", disable=not progress):
            for pr in run_privacy(evaluate, spec, encoder=encoder, train_texts=train_texts, test_texts=texts,
                                  seed=args.seed, quick=size != "full", modes=modes, progress=progress,
                                  adapt_minutes=args.adapt_minutes):
                privacy_rows.append({"dataset": "scifact", **spec.row_fields(), **pr})
                suffix = pr["mode"].replace("-", "_")
                for r in rows:
                    if r["defense_label"] == spec.label:
                        r.update({f"{k}_{suffix}": pr.get(k) for k in ("bleu", "token_f1", "content_f1")})
    all_rows = rows + [{**r, "kind": "privacy"} for r in privacy_rows]

    verdict, pq_table = protect_queries_verdict(rows)
    seconds = time.perf_counter() - t_all
    meta = common.make_meta(
        name=NAME, size=size, seed=args.seed, argv=argv, encoder=encoder,
        dataset={"name": "BEIR SciFact (test qrels)", "n_docs": len(rs.docs), "n_queries": len(rs.queries),
                 "doc_text": "title + '. ' + abstract, truncated by the encoder at 256 WordPieces"},
        index={"flat": "faiss.IndexFlatIP", "hnsw": f"faiss.IndexHNSWFlat(M={args.hnsw_m}, METRIC_INNER_PRODUCT, "
               f"efConstruction={args.ef_construction}, efSearch={args.ef_search})",
               "similarity": "inner product on the released vectors (no re-normalisation)"},
        attack_config=priv_meta, textcrafter_policies=policies,
        textcrafter_fit=dict(zip(("n_pii", "n_calibration", "clusters", "steps", "batch_size"),
                                 common.CALIBRATION_SIZES[size])),
        embedding_seconds=round(t_enc.seconds, 1), runtime_seconds=round(seconds, 1),
        protect_queries_verdict=verdict,
    )
    out = Path(args.out_dir)
    base = common.result_name(NAME, size, args.tag)
    plot = out / f"{base}.png"
    out.mkdir(parents=True, exist_ok=True)
    make_plot(rows, plot, privacy_rows=privacy_rows)
    md = render_markdown(rows, privacy_rows, pq_table, verdict, meta, plot.name)
    jp, mp = common.write_results(NAME, size=size, meta=meta, rows=all_rows, markdown=md, out_dir=out, tag=args.tag)
    print(f"[retrieval] wrote {jp}, {mp}, {plot} in {seconds:.0f}s")
    return 0


def render_markdown(rows: list[dict[str, Any]], privacy_rows: list[dict[str, Any]], pq_table: list[dict[str, Any]],
                    verdict: str, meta: dict[str, Any], plot_name: str) -> str:
    """The human-readable report."""
    ds = meta["dataset"]
    cols = ["defense_label", "perturbation_norm", "recall@1", "recall@10", "mrr@10", "ndcg@10"]
    hdr = ["defense", "‖x'−x‖", "R@1", "R@10", "MRR@10", "NDCG@10"]
    parts = [
        f"# Retrieval under protection (SciFact, {meta['size']})", "",
        (f"Encoder {meta['encoder']} ({meta['dimension']}-d, {meta['normalisation']}); {ds['n_docs']} documents, "
        f"{ds['n_queries']} test queries; FAISS inner product. Metrics in percent. Seed {meta['seeds']['seed']}. "
        f"Runtime {meta['runtime_seconds']:.0f} s on {meta['machine']['cpu_count']} CPUs "
        f"(torch {meta['machine']['torch']}). Command: `{meta['command']}`."), "",
        f"![NDCG@10 vs protection]({plot_name})", "",
        "## `protect_queries`", "", verdict, "",
        common.md_table(pq_table, ["defense_label", "docs_only", "docs_and_queries", "delta"],
                        headers=["defense", "NDCG@10 docs only", "NDCG@10 docs + queries", "Δ"]), "",
    ]
    for kind, title in (("flat", "Exact inner product (IndexFlatIP)"), ("hnsw", "HNSW (IndexHNSWFlat, inner product)")):
        for scen, stitle in (("protected_docs", "protected documents, clean queries"),
                             ("protected_docs_queries", "protected documents and queries")):
            sel = [r for r in rows if r["index"] == kind and r["scenario"] in ("clean", scen)]
            parts += [f"## {title}: {stitle}", "", common.md_table(sel, cols, headers=hdr), ""]
    eq = [r for r in rows if r["index"] == "flat" and r["scenario"] == "protected_docs"
          and (r["defense"] == "textcrafter" or r.get("comparison") == "equal_norm")]
    if eq:
        eq.sort(key=lambda r: (r.get("param_eps") or r.get("matched_textcrafter_eps") or 0, r["defense"]))
        parts += ["## TextCrafter vs Gaussian at equal perturbation norm (exact IP, protected docs)", "",
                  common.md_table(eq, ["defense_label", "perturbation_norm", "cosine_to_clean", "score_noise_corr",
                                       "recall@10", "ndcg@10"],
                                  headers=["defense", "‖x'−x‖", "cos(x', x)", "corr(<q,x>, <q,x'−x>)", "R@10",
                                           "NDCG@10"]), "",
                  ("`cos(x', x)` is the mean cosine of a release with its clean vector; the correlation column is, "
                  "per query, the correlation over documents of the clean score with the score change caused by the "
                  "perturbation (0 for isotropic noise). A negative value means the perturbation is not noise-like: "
                  "it systematically lowers the scores of the documents closest to the query, which is what the "
                  "reward's pull toward the nearest 'safe' cluster centroid (`-gamma*||f_adv - f_mu||`) does once eps "
                  "is comparable to ||x|| = 1."), ""]
    if privacy_rows:
        pcols = ["defense_label", "mode", "attacker", "bleu", "token_f1", "content_f1", "cosine"]
        floor = common.floor_row(privacy_rows)
        parts += ["## Inversion of protected document sentences", "",
                  f"Attack config: {meta['attack_config']}", "",
                  common.md_table([*privacy_rows, *([floor] if floor else [])], pcols), ""]
    else:
        parts += ["## Privacy", "", ("Inversion metrics were not measured in this run "
                  "(`--no-privacy`, or `textcrafter_rag.attacks.evaluate_attacks` unavailable); "
                  "the plot uses the measured perturbation norm as the protection axis."), ""]
    parts += ["## Notes", "",
              ("* Similarity is the inner product of the released vectors as stored: Gaussian, LDP and TextCrafter "
              "outputs are not re-normalised (Purkayastha releases are unit vectors). Measured norms are in the JSON."),
              ("* `shuffle` is only usable when queries get the same secret permutation; with clean queries it "
              "breaks retrieval (its 'protection' is the secrecy of the permutation, not noise)."),
              f"* TextCrafter policies: {meta.get('textcrafter_policies')}; fit sizes {meta.get('textcrafter_fit')}."]
    return "\n".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
