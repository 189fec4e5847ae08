"""Threat-model matrix: which protection survives which attacker, next to what it costs retrieval.

Rows (:mod:`benchmarks.threat_models.releases`): none, Gaussian noise at the shipped TextCrafter's norm,
TextCrafter (shipped default eps), a secret rotation (key only), key + TextCrafter, key + whitening
(the owner whitens with its own calibration data, then rotates), IronCore Cloaked AI DCPE at af 1 and
2.5 (``ironcore-alloy``, optional), and the same DCPE construction in NumPy (shuffle + noise).

Columns, what the attacker has besides the clean inverter (trained on WikiText-2, cached):

* the store only: un-key it by aligning it with the attacker's own embeddings of public text
  (``align_rotation`` / ``align_permutation``), from the store's domain or from another one;
* the store + ``k`` known (text, stored vector) pairs: Procrustes (rotations) or coordinate
  matching (permutations) on the pairs;
* query access: the adaptive inverter fine-tuned on the protected releases of its own texts; for
  keyed rows also the stronger composite (an attacker who can have texts protected holds pairs):
  estimate the key from ``KEY_PAIRS`` of its own (text, release) pairs, un-key, then adapt.

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
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.attack_rows import SMOKE_TRAIN, AttackRun, fixed_adapt_config
from benchmarks.common.caches import cache_dir, cache_key, embed_cached
from benchmarks.common.options import (
    add_rerender_option,
    base_parser,
    quiet_seed_warnings,
    resolve_data_or_none,
    resolve_size,
    set_threads,
)
from benchmarks.common.reporting import Script, load_results, make_meta, write_markdown, write_results
from benchmarks.common.scifact import abstract_sentences, embedded_scifact, ndcg10_flat
from textcrafter_rag.attacks import AttackConfig, clean_inverter
from textcrafter_rag.attacks.keys import ICA_MAX_ITER
from textcrafter_rag.data import load_classification, wikitext_sentences
from textcrafter_rag.encoders import bundled_minilm

from .cells import KEY_PAIRS, Setting, attack_rows, columns
from .releases import Release, build_releases, ironcore_status
from .report import render_markdown

NAME = "threat_models"
SCRIPT = Script(NAME, "benchmarks.threat_models")
SIZES: dict[str, dict[str, Any]] = {
    "smoke": {"victims": 8, "store": 400, "public": 500, "ks": (10,), "pairs": 64, "docs": 64, "queries": 16},
    "quick": {"victims": 64, "store": 2400, "public": 5000, "ks": (10, 50, 400, 2000), "pairs": 2000, "docs": 1200},
    "full": {"victims": 300, "store": 2400, "public": 20000, "ks": (10, 50, 400, 2000), "pairs": 30000, "docs": 0},
}
SIZES["quick"]["queries"], SIZES["full"]["queries"] = 100, 0
# FastICA's iteration cap (store-only un-keying of whitened rows): the attack's default, except in the
# smoke size, where each of its four fits would otherwise run ~25 s of 384 x 384 eigendecompositions.
for _size, _cap in (("smoke", 20), ("quick", ICA_MAX_ITER), ("full", ICA_MAX_ITER)):
    SIZES[_size]["ica_max_iter"] = _cap


def _sentences(abstracts: list[str], *, first: bool) -> list[str]:
    out = []
    for doc in abstracts:
        sents = abstract_sentences(doc)
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
        "ndcg10": ndcg10_flat(released, rel.protect(queries), rs),
        "ndcg10_key_only_queries": ndcg10_flat(released, rel.query(queries), rs),
    }
    path.write_text(json.dumps(out), encoding="utf-8")
    return out


def _parser() -> argparse.ArgumentParser:
    ap = base_parser(SCRIPT, __doc__)
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
    full, rs, docs, queries = embedded_scifact(
        encoder, args, cfg["queries"], cfg["docs"], data_dir=data_dir, cache=cache
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
    ident = cache_key(
        NAME, size, args.seed, victims, len(store), len(same), len(other), cfg["pairs"], cfg["ica_max_iter"]
    )
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
        victims=victims,
        store_clean=store_clean,
        public=public,
        run=run,
        cache=cache,
        ident=ident,
        inverter=inverter,
        ica_max_iter=cfg["ica_max_iter"],
    )
    cols = columns(tuple(cfg["ks"]))
    # the budget counts from the start (embedding and retrieval included)
    budget = float("inf") if args.max_minutes is None else 60.0 * args.max_minutes - (time.perf_counter() - t0)

    def fresh(label: str) -> Release:  # the owner whitens with its own store
        with quiet_seed_warnings():
            again = build_releases(dim=dim, seed=args.seed, calibration=docs)
        return next(r for r in again if r.label == label).with_whitening(store_clean)

    store_releases = [r.with_whitening(store_clean) for r in releases]
    rows = attack_rows(store_releases, cols, st, budget_s=budget, fresh=fresh)
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
    settings = {
        "columns": [c.label for c in cols],
        "domains": {
            "victim_store": f"{len(store)} SciFact sentences from a random half of the abstracts; the {len(victims)} "
            "attacked ones are first sentences, <= 32 WordPieces",
            "same_domain_public": f"{len(same)} sentences of the other half of the SciFact abstracts",
            "other_domain_public": f"{len(other)} AG News train texts",
            "known_pairs": "store entries other than the attacked ones",
        },
        "retrieval": {
            "dataset": "BEIR SciFact (test qrels)",
            "n_docs": len(rs.docs),
            "n_queries": len(rs.queries),
            "index": "faiss.IndexFlatIP",
        },
        "attack_config": {
            "inverter": "clean inverter trained on WikiText-2 train (cached), beam 4 + rerank"
            if size == "full"
            else "quick attacker (numbers not meaningful)",
            "adapt_pairs": attack.pairs_budget,
            "key_pairs": min(KEY_PAIRS, attack.pairs_budget, len(train)),
            "n_victims": len(victims),
            "keyword_and_pii_probes": False,
            "ica_max_iter": cfg["ica_max_iter"],
        },
        "ironcore": ironcore_status() or "ironcore-alloy available",
        "pending": sum(r.get("status") == "pending" for r in rows),
        "runtime_seconds": round(time.perf_counter() - t0, 1),
    }
    meta = make_meta(SCRIPT, argv, size=size, seed=args.seed, encoder=encoder, **settings)
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
