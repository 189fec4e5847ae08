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

    python -m benchmarks.privacy --only textcrafter:eps=1 &   # one process per defense label ...
    python -m benchmarks.privacy                              # ... then collect everything
    python -m benchmarks.privacy --collect                    # (or only what is cached)
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.common.attack_rows import SMOKE_TRAIN, AttackRun, fixed_adapt_config, privacy_fields, run_attack
from benchmarks.common.caches import cache_dir, cache_key
from benchmarks.common.options import base_parser, quiet_seed_warnings, resolve_data_or_none, resolve_size, set_threads
from benchmarks.common.reporting import (
    RESULTS_DIR,
    Script,
    clean_json,
    current_row,
    fmt,
    load_results,
    make_meta,
    md_table,
    result_name,
    setup_matplotlib,
    write_results,
)
from textcrafter_rag.attacks import AttackConfig
from textcrafter_rag.data import wikitext_sentences
from textcrafter_rag.encoders import bundled_minilm
from textcrafter_rag.mechanisms import GaussianNoise, Mechanism, NoDefense
from textcrafter_rag.textcrafter import TextCrafter

NAME = "privacy"
SCRIPT = Script(NAME, "benchmarks.privacy")
EPS = (1.0, 2.5)
SIZES: dict[str, dict[str, Any]] = {
    "smoke": {"n_test": 6, "n_train": 300, "n_pairs": 64},
    "quick": {"n_test": 64, "n_train": 2000, "n_pairs": 2000},
    "full": {"n_test": 300, "n_train": None, "n_pairs": 30_000},
}
#: Two optimiser steps: the smoke size checks the plumbing, not the attack.


def _defenses(dim: int) -> dict[str, Mechanism]:
    out: dict[str, Mechanism] = {"none": NoDefense()}
    with quiet_seed_warnings():
        for eps in EPS:
            out[f"textcrafter:eps={eps:g}"] = TextCrafter.load_shipped(eps=eps, seed=0)
            out[f"gaussian@norm={eps:g}"] = GaussianNoise.at_norm(eps, dim=dim, seed=0)
    return out


def _family(label: str) -> str:
    return label.split(":")[0].split("@")[0]


def _eps(label: str) -> float | None:
    return float(label.split("=")[1]) if "=" in label else None


def _retrieval_ndcg(label: str) -> float | None:
    """NDCG@10 of the same defense in ``results/retrieval.json`` (flat index, protected docs, clean queries)."""
    path = RESULTS_DIR / "retrieval.json"
    if not path.is_file():
        return None
    want = {
        "none": ("none", "grid", "clean"),
        "textcrafter": ("textcrafter", "grid", "protected_docs"),
        "gaussian": ("gaussian", "equal_norm", "protected_docs"),
    }
    defense, comparison, scenario = want[_family(label)]
    eps = _eps(label)
    for r in load_results(path)[1]:
        if (r.get("index"), r.get("mechanism"), r.get("comparison"), r.get("scenario")) != (
            "flat",
            defense,
            comparison,
            scenario,
        ):
            continue
        if eps is not None and abs(float(r.get("perturbation_norm", -1)) - eps) > 0.02:
            continue
        return r.get("ndcg@10")
    return None


@dataclass(frozen=True)
class PrivacyPlan:
    """One run's attacks and the cache of their per-defense results.

    Attributes:
        run: What every attack shares (texts, budget, attacker settings).
        size: The benchmark size (part of the cache key).
        cache: The benchmark cache folder.
        cached_only: Only read cached results (``--collect``).
    """

    run: AttackRun
    size: str
    cache: Path
    cached_only: bool = False

    def attack(self, label: str, defense: Mechanism, mode: str) -> dict[str, Any] | None:
        """The row of ``defense`` under ``mode``, from the cache or measured now (``None``: not cached, collecting)."""
        run = self.run
        key = cache_key(
            NAME, label, mode, self.size, run.attack.n_pairs, len(run.train_texts), len(run.test_texts), run.seed
        )
        part = self.cache / "privacy" / f"{key}.json"
        if part.is_file():
            return current_row(json.loads(part.read_text()))
        if self.cached_only:
            return None
        t0 = time.perf_counter()
        result = run_attack(defense, mode, run=run)
        row = {
            "dataset": "wikitext2",
            "mechanism": _family(label),
            "mechanism_label": label,
            "param_eps": _eps(label),
            "perturbation_norm": None,
            "attacker": mode,
            "minutes": (time.perf_counter() - t0) / 60,
            **privacy_fields(result),
            "pairs_seen": result.get("pairs_seen", 0),
        }
        part.parent.mkdir(parents=True, exist_ok=True)
        part.write_text(json.dumps(clean_json(row)))
        return row


def _plot(rows: list[dict[str, Any]], path: Path) -> bool:
    """Retrieval NDCG@10 against adaptive and non-adaptive content-F1, one marker per defense."""
    pts = [r for r in rows if r.get("ndcg@10") is not None and r.get("content_f1") is not None]
    if not pts:
        return False
    plt = setup_matplotlib()
    fig, ax = plt.subplots(figsize=(7, 5))
    style = {"none": ("k", "*"), "textcrafter": ("tab:red", "D"), "gaussian": ("tab:blue", "o")}
    for r in pts:
        color, marker = style.get(r["mechanism"], ("gray", "s"))
        filled = str(r.get("attacker", "")).startswith("adaptive") or r["mechanism"] == "none"
        ax.scatter(
            r["content_f1"],
            r["ndcg@10"],
            c=color if filled else "white",
            edgecolors=color,
            marker=marker,
            s=70,
            zorder=3,
        )
        if filled:  # one label per defense, at its adaptive point
            ax.annotate(
                r["mechanism_label"],
                (r["content_f1"], r["ndcg@10"]),
                textcoords="offset points",
                xytext=(6, -12),
                fontsize=8,
            )
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
    cols = [
        "mechanism_label",
        "attacker",
        "content_f1",
        "bleu",
        "token_f1",
        "rouge_l",
        "cosine",
        "keyword_f1",
        "pii_auc",
        "ndcg@10",
        "n_pairs",
        "pairs_seen",
        "minutes",
    ]
    floor = next((r for r in rows if r["mechanism_label"] == "none"), {})
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
        f"{fmt(floor.get('floor_content_f1'))}, token-F1 {fmt(floor.get('floor_token_f1'))}, "
        f"BLEU {fmt(floor.get('floor_bleu'))}, ROUGE-L {fmt(floor.get('floor_rouge_l'))}.",
        "",
        md_table(rows, cols),
        "",
        "Read content-F1 first: function words give token-F1 and ROUGE-L a high floor, content-F1 does not.",
    ]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    ap = base_parser(SCRIPT, __doc__)
    ap.add_argument("--only", default=None, help="run one defense label (e.g. textcrafter:eps=1) and cache it")
    ap.add_argument("--n-pairs", type=int, default=None, help="adaptive budget (default 30,000; smaller sizes less)")
    ap.add_argument(
        "--collect",
        action="store_true",
        help="only collect the cached per-defense results (missing ones are listed, not run)",
    )
    return ap


def _plan(args: argparse.Namespace, *, size: str, data_dir: Path, encoder: Any) -> PrivacyPlan:
    """The attacker's texts and settings at ``size``."""
    cfg = SIZES[size]
    train = wikitext_sentences("train", data_dir=data_dir)
    train = train[: cfg["n_train"]] if cfg["n_train"] else train
    test = [t for t in wikitext_sentences("test", data_dir=data_dir) if len(t.split()) <= 24][: cfg["n_test"]]
    cache = cache_dir(args.cache_dir)
    attack = AttackConfig(n_pairs=args.n_pairs or cfg["n_pairs"], quick=size == "quick", seed=args.seed)
    if size == "smoke":
        attack = replace(
            attack,
            train_config=SMOKE_TRAIN,
            adapt_config=SMOKE_TRAIN,
            keyword=False,
            pii=False,
            beam=1,
            cache_dir=cache / "attacks",
        )
    else:  # the fixed budget: every one of the n_pairs pairs is seen once, however long it takes
        attack = replace(attack, adapt_config=fixed_adapt_config())
    run = AttackRun(encoder=encoder, train_texts=train, test_texts=test, attack=attack, progress=not args.no_progress)
    return PrivacyPlan(run=run, size=size, cache=cache, cached_only=args.collect)


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    size = resolve_size(args)
    data_dir = resolve_data_or_none(args.data_dir)
    if data_dir is None:
        return 2
    set_threads()
    encoder = bundled_minilm()
    defenses = _defenses(encoder.dimension)
    if args.only and args.only not in defenses:
        ap.error(f"--only must be one of {list(defenses)}")
    plan = _plan(args, size=size, data_dir=data_dir, encoder=encoder)
    rows, missing = [], []
    for label in [args.only] if args.only else list(defenses):
        for mode in ("non-adaptive",) if label == "none" else ("non-adaptive", "adaptive"):
            row = plan.attack(label, defenses[label], mode)
            if row is None:
                missing.append(f"{label} ({mode})")
                continue
            row["perturbation_norm"] = defenses[label].expected_norm(encoder.dimension)
            row["ndcg@10"] = _retrieval_ndcg(label) if size == "full" else None
            rows.append(row)
            print(
                f"{label:22s} {mode:13s} content-F1 {fmt(row.get('content_f1'))} "
                f"BLEU {fmt(row.get('bleu'))} ({row['minutes']:.1f} min)",
                flush=True,
            )
    if args.only:
        return 0
    run = plan.run
    settings = {
        "n_test": len(run.test_texts),
        "n_train": len(run.train_texts),
        "n_pairs": run.attack.n_pairs,
        "attack_config": {
            "inverter": "textcrafter_rag.attacks defaults",
            "beam": 4,
            "rerank": True,
            "adaptive": f"fine-tune, {run.attack.n_pairs} pairs, 1 pass, no time cap",
        },
        "dataset_sizes": {"train": len(run.train_texts), "test": len(run.test_texts)},
        "not_measured": missing,
    }
    meta = make_meta(SCRIPT, argv, size=size, seed=args.seed, encoder=encoder, **settings)
    md = _markdown(rows, meta) + (f"\n\nNot measured in this run: {', '.join(missing)}." if missing else "")
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png = out / f"{result_name(NAME, size, args.tag)}.png"
    if _plot(rows, png):
        md += f"\n\n![privacy vs retrieval]({png.name})\n"
    write_results(NAME, size=size, meta=meta, rows=rows, markdown=md, out_dir=out, tag=args.tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
