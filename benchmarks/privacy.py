"""Privacy under both attackers at the settings that matter, with the reporting standard of issue 8.

For each defense (none; TextCrafter at the shipped eps 1.0 and 2.5; Gaussian noise at the same
perturbation norms) the inversion, keyword and PII attacks run on held-out WikiText-2 test sentences
(the attacker's own domain, where it is strongest) in two modes:

* ``non-adaptive``: the clean-trained inverter (the paper's setting);
* ``adaptive``: that inverter fine-tuned on a fixed budget of ``--n-pairs`` (default 30,000)
  ``(text, protected vector)`` pairs of the attacker's own texts, one full pass, no time cap.

Every table carries the ``none`` row and the ``floor`` (best trivial attacker that ignores the
vector) measured in the same run, and the retrieval NDCG@10 kept at each setting, read from
``results/retrieval.json`` (SciFact, protected documents, clean queries).

Each defense's result is cached, so the work can be split over processes::

    python benchmarks/privacy.py --only textcrafter:eps=1 &   # one process per defense label ...
    python benchmarks/privacy.py                             # ... then collect everything
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import common

NAME = "privacy"
EPS = (1.0, 2.5)
SIZES: dict[str, dict[str, Any]] = {
    "smoke": {"n_test": 6, "n_train": 300, "n_pairs": 64},
    "quick": {"n_test": 64, "n_train": 2000, "n_pairs": 2000},
    "full": {"n_test": 300, "n_train": None, "n_pairs": 30_000},
}


def _defenses(encoder: Any) -> dict[str, Any]:
    from textcrafter_rag.mechanisms import GaussianNoise, NoDefense, TextCrafter

    out: dict[str, Any] = {"none": NoDefense()}
    with common.quiet_seed_warnings():
        for eps in EPS:
            out[f"textcrafter:eps={eps:g}"] = TextCrafter.load_shipped(eps=eps, seed=0)
            out[f"gaussian@norm={eps:g}"] = GaussianNoise.at_norm(eps, dim=encoder.dimension, seed=0)
    return out


def _retrieval_ndcg(label: str) -> float | None:
    """NDCG@10 of the same defense in ``results/retrieval.json`` (flat index, protected docs, clean queries)."""
    path = common.RESULTS_DIR / "retrieval.json"
    if not path.is_file():
        return None
    want = {"none": ("none", "grid", "clean"), "textcrafter": ("textcrafter", "grid", "protected_docs"),
            "gaussian": ("gaussian", "equal_norm", "protected_docs")}
    defense, comparison, scenario = want[label.split(":")[0].split("@")[0]]
    eps = float(label.split("=")[1]) if "=" in label else None
    for r in json.loads(path.read_text())["rows"]:
        if (r.get("index"), r.get("defense"), r.get("comparison"), r.get("scenario")) != (
            "flat", defense, comparison, scenario
        ):
            continue
        if eps is not None and abs(float(r.get("perturbation_norm", -1)) - eps) > 0.02:
            continue
        return r.get("ndcg@10")
    return None


def _attack(label: str, defense: Any, mode: str, *, encoder: Any, train: list[str], test: list[str],
            size: str, n_pairs: int, cache: Path, seed: int, progress: bool,
            cached_only: bool = False) -> dict[str, Any] | None:
    from textcrafter_rag.attacks import evaluate_attacks
    from textcrafter_rag.attacks.inverter import TrainConfig

    key = common._hash(NAME, label, mode, size, n_pairs, len(train), len(test), seed)
    part = cache / "privacy" / f"{key}.json"
    if part.is_file():
        return json.loads(part.read_text())
    if cached_only:
        return None
    kwargs: dict[str, Any] = {}
    if size == "smoke":
        kwargs.update(train_config=TrainConfig(max_steps=2, time_budget_min=None, epochs=1.0, bf16=False),
                      adapt_config=TrainConfig(max_steps=2, time_budget_min=None, epochs=1.0, bf16=False),
                      keyword=False, pii=False, beam=1, cache_dir=cache / "attacks")
    else:
        # The fixed budget: every one of the n_pairs pairs is seen once, however long it takes.
        kwargs.update(adapt_config=common.fixed_adapt_config())
    t0 = time.perf_counter()
    result = evaluate_attacks(defense, encoder=encoder, train_texts=train, test_texts=test, mode=mode,
                              n_pairs=n_pairs, quick=size == "quick", seed=seed, progress=progress, **kwargs)
    row = {"dataset": "wikitext2", "defense": label.split(":")[0].split("@")[0], "defense_label": label,
           "param_eps": float(label.split("=")[1]) if "=" in label else None,
           "perturbation_norm": None, "attacker": mode, "minutes": (time.perf_counter() - t0) / 60,
           **common.privacy_fields(result), "pairs_seen": result.get("pairs_seen", 0)}
    part.parent.mkdir(parents=True, exist_ok=True)
    part.write_text(json.dumps(common._clean(row)))
    return row


def _plot(rows: list[dict[str, Any]], path: Path) -> bool:
    """Retrieval NDCG@10 against adaptive and non-adaptive content-F1, one marker per defense."""
    pts = [r for r in rows if r.get("ndcg@10") is not None and r.get("content_f1") is not None]
    if not pts:
        return False
    plt = common.setup_matplotlib()
    fig, ax = plt.subplots(figsize=(7, 5))
    style = {"none": ("k", "*"), "textcrafter": ("tab:red", "D"), "gaussian": ("tab:blue", "o")}
    for r in pts:
        color, marker = style.get(r["defense"], ("gray", "s"))
        adaptive = str(r.get("attacker", "")).startswith("adaptive")
        ax.scatter(r["content_f1"], r["ndcg@10"], c=color if adaptive or r["defense"] == "none" else "white",
                   edgecolors=color, marker=marker, s=70, zorder=3)
        if adaptive or r["defense"] == "none":  # one label per defense, at its adaptive point
            ax.annotate(r["defense_label"], (r["content_f1"], r["ndcg@10"]),
                        textcoords="offset points", xytext=(6, -12), fontsize=8)
    floor = next((r.get("floor_content_f1") for r in rows if r.get("floor_content_f1") is not None), None)
    if floor is not None:
        ax.axvline(floor, color="gray", ls=":", label=f"floor content-F1 {floor:.2f}")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel("inversion content-F1 (lower = more private; hollow = non-adaptive, filled = adaptive)")
    ax.set_ylabel("SciFact NDCG@10, protected documents")
    ax.set_title("Privacy (WikiText-2 inversion) vs retrieval at the same setting")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    cols = ["defense_label", "attacker", "content_f1", "bleu", "token_f1", "rouge_l", "cosine", "keyword_f1",
            "pii_auc", "ndcg@10", "n_pairs", "pairs_seen", "minutes"]
    floor = next((r for r in rows if r["defense_label"] == "none"), {})
    lines = [
        "# Privacy under the non-adaptive and the adaptive attacker (WikiText-2)",
        "",
        f"Encoder {meta['encoder']} ({meta['dimension']}-d); {meta['n_test']} held-out WikiText-2 test sentences "
        f"(<= 32 WordPieces); attacker trained on {meta['n_train']} WikiText-2 train sentences; adaptive budget "
        f"{meta['n_pairs']} (text, protected vector) pairs, one full pass. Seed {meta['seeds']['seed']}. "
        "Metrics in percent (cosine and AUC in [0, 1]). `ndcg@10`: SciFact retrieval kept at the same setting "
        "(results/retrieval.json, protected documents, clean queries).",
        "",
        "**Floor** (best trivial attacker ignoring the vector, same run): content-F1 "
        f"{common.fmt(floor.get('floor_content_f1'))}, token-F1 {common.fmt(floor.get('floor_token_f1'))}, "
        f"BLEU {common.fmt(floor.get('floor_bleu'))}, ROUGE-L {common.fmt(floor.get('floor_rouge_l'))}.",
        "",
        common.md_table(rows, cols),
        "",
        "Read content-F1 first: function words give token-F1 and ROUGE-L a high floor, content-F1 does not.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = common.base_parser(__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="run one defense label (e.g. textcrafter:eps=1) and cache it")
    ap.add_argument("--n-pairs", type=int, default=None, help="adaptive budget (default 30,000; smaller sizes less)")
    ap.add_argument("--collect", action="store_true",
                    help="only collect the cached per-defense results (missing ones are listed, not run)")
    args = ap.parse_args(argv)
    size = common.resolve_size(args)
    data_dir = common.resolve_data_or_none(args.data_dir)
    if data_dir is None:
        return 2
    common.set_threads()
    from textcrafter_rag.data import wikitext_sentences
    from textcrafter_rag.encoders import bundled_minilm

    cfg = SIZES[size]
    encoder = bundled_minilm()
    train = wikitext_sentences("train", data_dir=data_dir)
    test = wikitext_sentences("test", data_dir=data_dir)
    if cfg["n_train"]:
        train = train[: cfg["n_train"]]
    test = [t for t in test if len(t.split()) <= 24][: max(cfg["n_test"] * 2, cfg["n_test"])]
    test = test[: cfg["n_test"]]
    n_pairs = args.n_pairs or cfg["n_pairs"]
    cache = common.cache_dir(args.cache_dir)
    defenses = _defenses(encoder)
    labels = [args.only] if args.only else list(defenses)
    if args.only and args.only not in defenses:
        ap.error(f"--only must be one of {list(defenses)}")
    rows, missing = [], []
    for label in labels:
        modes = ("non-adaptive",) if label == "none" else ("non-adaptive", "adaptive")
        for mode in modes:
            row = _attack(label, defenses[label], mode, encoder=encoder, train=train, test=test, size=size,
                          n_pairs=n_pairs, cache=cache, seed=args.seed, progress=not args.no_progress,
                          cached_only=args.collect)
            if row is None:
                missing.append(f"{label} ({mode})")
                continue
            row["perturbation_norm"] = defenses[label].expected_norm(encoder.dimension)
            row["ndcg@10"] = _retrieval_ndcg(label) if size == "full" else None
            rows.append(row)
            print(f"{label:22s} {mode:13s} content-F1 {common.fmt(row.get('content_f1'))} "
                  f"BLEU {common.fmt(row.get('bleu'))} ({row['minutes']:.1f} min)", flush=True)
    if args.only:
        return 0
    meta = common.make_meta(name=NAME, size=size, seed=args.seed, argv=argv, encoder=encoder,
                            n_test=len(test), n_train=len(train), n_pairs=n_pairs,
                            attack_config={"inverter": "textcrafter_rag.attacks defaults", "beam": 4, "rerank": True,
                                           "adaptive": f"fine-tune, {n_pairs} pairs, 1 pass, no time cap"},
                            dataset_sizes={"train": len(train), "test": len(test)}, not_measured=missing)
    md = _markdown(rows, meta) + (f"\n\nNot measured in this run: {', '.join(missing)}." if missing else "")
    png = Path(args.out_dir) / f"{common.result_name(NAME, size, args.tag)}.png"
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    if _plot(rows, png):
        md += f"\n\n![privacy vs retrieval]({png.name})\n"
    common.write_results(NAME, size=size, meta=meta, rows=rows, markdown=md,
                         out_dir=args.out_dir, tag=args.tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
