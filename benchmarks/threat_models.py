"""Threat-model matrix: which protection survives which attacker, next to what it costs retrieval.

Rows (:mod:`benchmarks.threat_releases`): none, Gaussian noise at the shipped TextCrafter's norm,
TextCrafter (shipped default eps), a secret rotation (key only), key + TextCrafter, key + whitening
(the owner whitens with its own calibration data, then rotates), IronCore Cloaked AI DCPE at af 1 and
2.5 (``ironcore-alloy``, optional), and the same DCPE construction in NumPy (shuffle + noise).

Columns, what the attacker has besides the clean inverter (trained on WikiText-2, cached):

* the store only: un-key it by aligning it with the attacker's own embeddings of public text
  (``align_rotation`` / ``align_permutation``), from the store's domain or from another one;
* the store + ``k`` known (text, stored vector) pairs: Procrustes (rotations) or coordinate
  matching (permutations) on the pairs;
* query access: the adaptive inverter fine-tuned on the protected releases of its own texts.

Victim store: sentences of one half of the SciFact abstracts; the attacked vectors are the first
sentences (<= 32 WordPieces). Same-domain public text: sentences of the other half; other domain:
AG News. Retrieval: SciFact NDCG@10 with documents and queries transformed. Every cell is cached,
so a run stopped by ``--max-minutes`` resumes where it stopped, and a finished run re-renders in seconds::

    python -m benchmarks.threat_models --max-minutes 170     # full; re-run until "0 pending"
    python -m benchmarks.threat_models --quick               # writes threat_models_quick.*
    python -m benchmarks.threat_models --smoke               # seconds; numbers are not meaningful
    python -m benchmarks.threat_models --from-json benchmarks/results/threat_models.json
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from textcrafter_rag.attacks import AttackConfig, Inverter, clean_inverter, evaluate_attacks
from textcrafter_rag.attacks.keys import (
    align_permutation,
    align_rotation,
    permutation_from_pairs,
    procrustes_from_pairs,
    recovery_report,
    unkey,
)
from textcrafter_rag.data import load_classification, load_scifact, split_sentences, wikitext_sentences
from textcrafter_rag.encoders import bundled_minilm
from textcrafter_rag.mechanisms import NoDefense
from textcrafter_rag.metrics import retrieval_metrics
from textcrafter_rag.numerics import row_cosines, row_norms

from .attack_rows import SMOKE_TRAIN, AttackRun, fixed_adapt_config, privacy_fields
from .caches import cache_dir, cache_key, embed_cached
from .options import (
    add_rerender_option,
    base_parser,
    quiet_seed_warnings,
    resolve_data_or_none,
    resolve_size,
    set_threads,
)
from .reporting import clean_json, load_results, make_meta, write_markdown, write_results
from .retrieval import subsample
from .threat_releases import Release, build_releases, ironcore_status
from .threat_report import render_markdown

NAME = "threat_models"
SIZES: dict[str, dict[str, Any]] = {
    "smoke": {"victims": 8, "store": 400, "public": 500, "ks": (10,), "pairs": 64, "docs": 64, "queries": 16},
    "quick": {"victims": 64, "store": 2400, "public": 5000, "ks": (10, 50, 400, 2000), "pairs": 2000, "docs": 1200},
    "full": {"victims": 300, "store": 2400, "public": 20000, "ks": (10, 50, 400, 2000), "pairs": 30000, "docs": 0},
}
SIZES["quick"]["queries"], SIZES["full"]["queries"] = 100, 0
ATTACK_FIELDS = ("content_f1", "bleu", "token_f1", "rouge_l", "exact_match", "cosine", "n_test", "n_pairs")


@dataclass(frozen=True)
class Column:
    """One attacker: ``store`` (zero pairs, public text of ``domain``), ``pairs`` (``k`` known) or ``query``."""

    kind: str
    k: int = 0
    domain: str = ""

    @property
    def label(self) -> str:
        if self.kind == "store":
            return f"store only ({self.domain} domain)"
        return f"store + {self.k} pairs" if self.kind == "pairs" else "query access (adaptive)"


@dataclass
class Setting:
    """Everything the cells share: victims, the clean store, public texts, the attacker, the cache."""

    victims: list[str]
    store_clean: np.ndarray
    public: dict[str, np.ndarray]
    run: AttackRun
    cache: Path
    ident: str
    inverter: Inverter


def columns(ks: tuple[int, ...]) -> list[Column]:
    """The matrix's columns in table order."""
    return (
        [Column("store", domain="same"), Column("store", domain="other")]
        + [Column("pairs", k=k) for k in ks]
        + [Column("query")]
    )


def _sentences(abstracts: list[str], *, first: bool) -> list[str]:
    out = []
    for doc in abstracts:
        sents = [s for s in split_sentences(doc.split(". ", 1)[-1]) if 5 <= len(s.split()) <= 40]
        out += sents[:1] if first else sents[1:]
    return out


def store_texts(
    abstracts: list[str], *, tokenizer: Any, size: dict[str, Any], seed: int
) -> tuple[list[str], list[str], list[str]]:
    """``(victims, store, same-domain public)``: SciFact abstracts split in two halves at random.

    Victims are first sentences (<= 32 WordPieces) of the owner's half; the store is the victims
    plus other sentences of that half; the public text is sentences of the other half.
    """
    order = list(range(len(abstracts)))
    random.Random(seed).shuffle(order)
    owner = [abstracts[i] for i in order[: len(order) // 2]]
    public = [abstracts[i] for i in order[len(order) // 2 :]]
    victims = []
    for s in _sentences(owner, first=True):
        ids = tokenizer(s, add_special_tokens=False, truncation=True, max_length=32)["input_ids"]
        text = tokenizer.decode(ids, skip_special_tokens=True).strip()
        if text and text not in victims:
            victims.append(text)
        if len(victims) == size["victims"]:
            break
    rest = list(dict.fromkeys(_sentences(owner, first=False)))
    store = victims + rest[: size["store"] - len(victims)]
    same = list(dict.fromkeys(_sentences(public, first=True) + _sentences(public, first=False)))
    random.Random(seed + 1).shuffle(same)
    return victims, store, same[: size["public"]]


def _ndcg(docs: np.ndarray, queries: np.ndarray, rs: Any) -> float:
    index = faiss.IndexFlatIP(docs.shape[1])
    index.add(np.ascontiguousarray(docs, dtype=np.float32))
    _, top = index.search(np.ascontiguousarray(queries, dtype=np.float32), 10)
    ranked = {q: [rs.doc_ids[j] for j in row] for q, row in zip(rs.query_ids, top)}
    return float(retrieval_metrics(ranked, rs.qrels, ks=(10,))["ndcg@10"])


def retrieval_cell(
    rel: Release, docs: np.ndarray, queries: np.ndarray, rs: Any, *, cache: Path, ident: str
) -> dict[str, Any]:
    """SciFact NDCG@10: documents and queries released alike, and documents released with key-only queries."""
    path = cache / f"ndcg-{cache_key(ident, rel.spec())}.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    rel = rel.with_whitening(docs)  # the owner whitens with its own corpus
    released = rel.protect(docs)
    out = {
        "ndcg10": _ndcg(released, rel.protect(queries), rs),
        "ndcg10_key_only_queries": _ndcg(released, rel.query(queries), rs),
    }
    path.write_text(json.dumps(out), encoding="utf-8")
    return out


def estimate_key(rel: Release, col: Column, stored: np.ndarray, st: Setting) -> tuple[Any, str]:
    """The attacker's estimate of the secret transform and the method's name."""
    if col.kind == "store":
        public = rel.attacker_pre(st.public[col.domain])
        if rel.family == "permutation":
            return align_permutation(stored, public), "align_permutation"
        init = "ica" if rel.whitening is not None else "eigen"
        return align_rotation(stored, public, init=init, seed=st.run.seed), f"align_rotation(init={init})"
    n_v = len(st.victims)
    known = slice(n_v, n_v + col.k)  # store entries the attacker knows (never the victims)
    clean = rel.attacker_pre(st.store_clean[known])
    if rel.family == "permutation":
        return permutation_from_pairs(clean, stored[known]), "permutation_from_pairs"
    return procrustes_from_pairs(clean, stored[known]), "procrustes_from_pairs"


def _attack(defense: Any, mode: str, victims: np.ndarray, st: Setting) -> dict[str, Any]:
    """The attacks package on ``victims`` (row ``i`` belongs to ``st.victims[i]``): the scalar fields kept."""
    attack = replace(st.run.attack, mode=mode)
    with quiet_seed_warnings():
        res = evaluate_attacks(
            defense,
            encoder=st.run.encoder,
            train_texts=st.run.train_texts,
            test_texts=list(st.victims),
            attack=attack,
            inverter=st.inverter,  # loaded once, not per cell
            victim_vectors=victims,
            progress=st.run.progress,
        )
    keep = set(ATTACK_FIELDS) | {"adapt_minutes", "attack_minutes"}
    out = {k: v for k, v in privacy_fields(res).items() if k in keep or k.startswith("floor_")}
    return {**out, "inverter": res.get("attacker")}  # "attacker" is the column in the rows


def _cell_path(rel: Release, col: Column, st: Setting) -> Path:
    # Without a key every store column is the same attack (the inverter on the store): one cache entry.
    which = col.label if rel.keyed or col.kind == "query" else "store"
    return st.cache / f"cell-{cache_key(st.ident, rel.spec(), which)}.json"


def compute_cell(rel: Release, col: Column, stored: np.ndarray, st: Setting) -> dict[str, Any]:
    """One cell: recover the key (keyed rows), un-key, invert; or the adaptive attacker on the releases."""
    n_v = len(st.victims)
    clean_victims = st.store_clean[:n_v]
    if col.kind == "query":
        return {"method": "adapt_inverter on the releases", **_attack(rel, "adaptive", stored[:n_v], st)}
    out: dict[str, Any] = {}
    est = stored[:n_v]
    method = "none (no key)"
    if rel.keyed:
        t0 = time.perf_counter()
        t_hat, method = estimate_key(rel, col, stored, st)
        out["key_attack_s"] = time.perf_counter() - t0
        est = rel.attacker_post(unkey(est, t_hat))
        if rel.family == "permutation":  # DCPE scales by a secret s: match the public text's norms
            est = est * float(np.median(row_norms(st.public["same"])) / max(np.median(row_norms(est)), 1e-12))
        rec = recovery_report(rel.true_transform(), t_hat, rel.attacker_pre(st.store_clean))
        out.update({f"key_{k}": v for k, v in rec.as_dict().items()})
    out["unkeyed_cosine"] = float(np.mean(row_cosines(est, clean_victims)))
    return {"method": method, **out, **_attack(NoDefense(), "non-adaptive", est.astype(np.float32), st)}


def attack_rows(releases: list[Release], cols: list[Column], st: Setting, *, budget_s: float) -> list[dict[str, Any]]:
    """Every cell, cached; cells not started within ``budget_s`` are ``pending`` (the next run does them)."""
    t_start = time.perf_counter()
    stored: dict[str, np.ndarray] = {}
    rows = []
    order = [(r, c) for c in cols if c.kind != "query" for r in releases] + [
        (r, c) for r in releases for c in cols if c.kind == "query"
    ]
    for rel, col in order:
        row: dict[str, Any] = {"protection": rel.label, "family": rel.family, "attacker": col.label, "column": col.kind}
        row.update(
            {"k": col.k, "domain": col.domain or None, "defense": rel.spec() if rel.unavailable is None else rel.label}
        )
        path = _cell_path(rel, col, st) if rel.unavailable is None else None
        if rel.unavailable is not None:
            row["status"] = f"unavailable: {rel.unavailable}"
        elif col.kind == "query" and rel.family == "none":
            row["status"] = "n/a (nothing to adapt to)"
        elif path is not None and path.is_file():
            row.update(json.loads(path.read_text(encoding="utf-8")), status="done")
        elif time.perf_counter() - t_start > budget_s:
            row["status"] = "pending"
        else:
            if rel.label not in stored:
                stored[rel.label] = rel.protect(st.store_clean)
            print(f"[{NAME}] {rel.label} / {col.label}", flush=True)
            res = compute_cell(rel, col, stored[rel.label], st)
            path.write_text(json.dumps(clean_json(res)), encoding="utf-8")
            row.update(res, status="done")
        rows.append(row)
    return rows


def _parser() -> argparse.ArgumentParser:
    ap = base_parser(NAME, __doc__)
    ap.add_argument(
        "--max-minutes", type=float, default=None, help="start no new cell after this long (resume by re-running)"
    )
    ap.add_argument(
        "--adapt-pairs", type=int, default=None, help="adaptive attacker's (text, release) pairs (default 30,000)"
    )
    ap.add_argument("--victims", type=int, default=None, help="override: attacked store sentences")
    ap.add_argument("--ks", type=int, nargs="+", default=None, help="override: known-pair counts (columns)")
    add_rerender_option(ap)
    return ap


def _embed(encoder: Any, texts: list[str], cache: Path, desc: str, progress: bool) -> np.ndarray:
    return embed_cached(encoder, texts, cache=cache, desc=desc, progress=progress)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.from_json:
        meta, rows = load_results(args.from_json)
        Path(args.out_dir).mkdir(parents=True, exist_ok=True)
        md_path = Path(args.out_dir) / Path(args.from_json).with_suffix(".md").name
        write_markdown(md_path, render_markdown(rows, meta))
        print(f"[{NAME}] re-rendered {md_path}")
        return 0
    size = resolve_size(args)
    data_dir = resolve_data_or_none(args.data_dir)
    if data_dir is None:
        return 2
    cfg = dict(SIZES[size])
    cfg["victims"] = args.victims or cfg["victims"]
    cfg["pairs"] = args.adapt_pairs or cfg["pairs"]
    cfg["ks"] = tuple(args.ks or cfg["ks"])
    set_threads()
    progress = not args.no_progress
    t0 = time.perf_counter()
    cache = cache_dir(args.cache_dir)
    encoder = bundled_minilm()
    full = load_scifact(data_dir=data_dir)
    rs = subsample(full, n_queries=cfg["queries"], n_docs=cfg["docs"], seed=args.seed)
    docs = embed_cached(encoder, rs.docs, cache=cache, desc="Embedding docs", progress=progress, superset=full.docs)
    queries = embed_cached(
        encoder, rs.queries, cache=cache, desc="Embedding queries", progress=progress, superset=full.queries
    )
    victims, store, same = store_texts(full.docs, tokenizer=encoder.model.tokenizer, size=cfg, seed=args.seed)
    other = load_classification("ag_news", "train", data_dir=data_dir)[0]
    other = random.Random(args.seed + 2).sample(other, min(cfg["public"], len(other)))
    store_clean = _embed(encoder, store, cache, "Embedding the store", progress)
    public = {"same": _embed(encoder, same, cache, "Embedding same-domain public text", progress)}
    public["other"] = _embed(encoder, other, cache, "Embedding other-domain public text", progress)

    dim = docs.shape[1]
    with quiet_seed_warnings():  # seeded noise on purpose: reproducible rows
        releases = build_releases(dim=dim, seed=args.seed, calibration=docs)
    ident = cache_key(NAME, size, args.seed, victims, len(store), len(same), len(other), cfg["pairs"])
    ndcg = {
        r.label: retrieval_cell(r, docs, queries, rs, cache=cache, ident=cache_key(ident, rs.doc_ids, rs.query_ids))
        for r in releases
        if r.unavailable is None
    }
    attack = AttackConfig(
        quick=size != "full",
        keyword=False,
        pii=False,
        seed=args.seed,
        n_pairs=cfg["pairs"],
        adapt_config=fixed_adapt_config() if size == "full" else None,
    )
    if size == "smoke":  # two steps, in the run's own cache: never the user's trained inverter
        attack = replace(
            attack,
            beam=1,
            rerank=False,
            train_config=SMOKE_TRAIN,
            adapt_config=SMOKE_TRAIN,
            cache_dir=cache / "attacks",
        )
    ident = cache_key(ident, attack)  # the attacker is part of every cell's identity
    train = wikitext_sentences("train", data_dir=data_dir)
    run = AttackRun(encoder=encoder, train_texts=train, test_texts=victims, attack=attack, progress=progress)
    inverter = clean_inverter(encoder, train, attack=attack, progress=progress)[0]
    st = Setting(
        victims=victims, store_clean=store_clean, public=public, run=run, cache=cache, ident=ident, inverter=inverter
    )
    cols = columns(tuple(cfg["ks"]))
    # the budget counts from the start (embedding and retrieval included)
    budget = float("inf") if args.max_minutes is None else 60.0 * args.max_minutes - (time.perf_counter() - t0)
    store_releases = [r.with_whitening(store_clean) for r in releases]  # the owner whitens with its own store
    rows = attack_rows(store_releases, cols, st, budget_s=budget)
    for r in rows:
        r.update(ndcg.get(r["protection"], {}))
    floor = next((r for r in rows if r.get("floor_content_f1") is not None), None)
    if floor is not None:
        rows.append(
            {
                "protection": "floor (ignores the vector)",
                "family": "floor",
                "attacker": "best trivial",
                "column": "floor",
            }
            | {k: floor[f"floor_{k}"] for k in ("content_f1", "bleu", "token_f1", "cosine") if f"floor_{k}" in floor}
            | {"status": "done", "k": 0}
        )
    meta = make_meta(
        name=NAME,
        size=size,
        seed=args.seed,
        argv=argv,
        encoder=encoder,
        columns=[c.label for c in cols],
        domains={
            "victim_store": f"{len(store)} SciFact sentences from a random half of the abstracts; the {len(victims)} "
            "attacked ones are first sentences, <= 32 WordPieces",
            "same_domain_public": f"{len(same)} sentences of the other half of the SciFact abstracts",
            "other_domain_public": f"{len(other)} AG News train texts",
            "known_pairs": "store entries other than the attacked ones",
        },
        retrieval={
            "dataset": "BEIR SciFact (test qrels)",
            "n_docs": len(rs.docs),
            "n_queries": len(rs.queries),
            "index": "faiss.IndexFlatIP",
        },
        attack_config={
            "inverter": "clean inverter trained on WikiText-2 train (cached), beam 4 + rerank"
            if size == "full"
            else "quick attacker (numbers not meaningful)",
            "adapt_pairs": attack.pairs_budget,
            "n_victims": len(victims),
            "keyword_and_pii_probes": False,
        },
        ironcore=ironcore_status() or "ironcore-alloy available",
        pending=sum(r.get("status") == "pending" for r in rows),
        runtime_seconds=round(time.perf_counter() - t0, 1),
    )
    jp, mp = write_results(
        NAME,
        size=size,
        meta=meta,
        rows=rows,
        markdown=render_markdown(rows, meta),
        out_dir=Path(args.out_dir),
        tag=args.tag,
    )
    print(f"[{NAME}] wrote {jp} and {mp}; {meta['pending']} pending cells in {meta['runtime_seconds']:.0f}s")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
