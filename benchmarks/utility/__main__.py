"""Downstream utility under protection (the paper's Table I utility columns and Fig. 3 trade-offs).

For Financial PhraseBank, ADE, SST-2 and AG News: embed a stratified subsample with the bundled
all-MiniLM-L6-v2, protect it with every defense of the grid, and fit a logistic regression:

* ``development``: trained and tested on protected vectors (the owner trains on what is stored);
* ``deployment``: trained on clean vectors, applied to protected ones.

Reports accuracy and macro-F1 (``textcrafter_rag.metrics.classification_metrics``), the measured
perturbation norm, and Gaussian noise at the same expected norm as each TextCrafter eps
(``s = eps / E||z||``, about ``eps / sqrt(D)``). With ``--privacy`` the inversion metrics of
protected test sentences (``textcrafter_rag.attacks.evaluate_attacks``) are added.

Usage::

    python -m benchmarks.utility                   # full: train <= 4000, test <= 1000 per dataset
    python -m benchmarks.utility --quick           # writes utility_quick.*
    python -m benchmarks.utility --datasets sst2 --privacy --attack-modes non-adaptive --tag privacy_sst2
"""

from __future__ import annotations

import argparse
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from tqdm.auto import tqdm

from benchmarks.common.attack_rows import AttackRun, fixed_adapt_config, privacy_fields, privacy_subset, run_attack
from benchmarks.common.caches import embed_cached
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
from benchmarks.common.reporting import Script, make_meta, result_name, write_results
from textcrafter_rag.attacks import AttackConfig
from textcrafter_rag.data import load_classification, wikitext_sentences
from textcrafter_rag.encoders import bundled_minilm
from textcrafter_rag.metrics import classification_metrics

from .report import make_plots, render_markdown, rerender

NAME = "utility"
SCRIPT = Script(NAME, "benchmarks.utility")
DATASETS = ("financial_phrasebank", "ade", "sst2", "ag_news")
SIZES: dict[str, dict[str, int]] = {
    "smoke": {"n_train": 40, "n_test": 20, "privacy_n": 8},
    "quick": {"n_train": 800, "n_test": 300, "privacy_n": 100},
    "full": {"n_train": 4000, "n_test": 1000, "privacy_n": 200},
}
PAPER_REFERENCE = (
    "The paper's Table I used GTR-base (768-d) with Vec2Text; this benchmark uses all-MiniLM-L6-v2 "
    "(384-d) and the package's own inverter, so absolute numbers are not comparable."
)


def stratified_sample(texts: list[str], labels: list[str], n: int, *, seed: int) -> tuple[list[str], list[str]]:
    """At most ``n`` rows with class proportions kept, in file order.

    Each class is shuffled once with ``seed`` and a prefix is taken, so smaller samples are subsets of
    larger ones (the quick size reuses the full size's cached embeddings).
    """
    if n >= len(texts):
        return list(texts), list(labels)
    by: dict[str, list[int]] = defaultdict(list)
    for i, y in enumerate(labels):
        by[y].append(i)
    rng = random.Random(seed)
    chosen: list[int] = []
    for y in sorted(by):
        idx = list(by[y])
        rng.shuffle(idx)
        k = max(1, round(n * len(idx) / len(texts)))
        chosen += idx[:k]
    chosen = sorted(chosen)
    return [texts[i] for i in chosen], [labels[i] for i in chosen]


def make_classifier(seed: int) -> LogisticRegression:
    """Logistic regression on the raw vectors (lbfgs, C=1).

    No feature standardisation: MiniLM has near-constant coordinates, and a StandardScaler fitted on
    clean vectors blows tiny noise on them up, so a clean-trained model collapsed to near-constant
    predictions under any noise (deployment accuracy 42% on FPB even at s=0.001).
    """
    return LogisticRegression(C=1.0, max_iter=2000, random_state=seed)


def fit_predict(x_tr: np.ndarray, y_tr: list[str], x_te: np.ndarray, *, seed: int) -> np.ndarray:
    """Train :func:`make_classifier` on ``x_tr`` and predict ``x_te``."""
    return make_classifier(seed).fit(x_tr, y_tr).predict(x_te)


class DatasetRun:
    """One dataset's clean embeddings and labels, and the classifier trained on the clean vectors."""

    def __init__(self, name: str, *, n_train: int, n_test: int, policies: PolicySource) -> None:
        train_all = load_classification(name, "train", data_dir=policies.data_dir)
        test_all = load_classification(name, "test", data_dir=policies.data_dir)
        seed, full = policies.seed, SIZES["full"]
        self.name = name
        self.train_texts, self.train_y = stratified_sample(*train_all, n_train, seed=seed)
        self.test_texts, self.test_y = stratified_sample(*test_all, n_test, seed=seed)
        sup_tr = stratified_sample(*train_all, max(n_train, full["n_train"]), seed=seed)[0]
        sup_te = stratified_sample(*test_all, max(n_test, full["n_test"]), seed=seed)[0]
        kw = {"cache": policies.cache, "progress": policies.progress}
        self.train_x = embed_cached(
            policies.encoder, self.train_texts, desc=f"Embedding {name} train", superset=sup_tr, **kw
        )
        self.test_x = embed_cached(
            policies.encoder, self.test_texts, desc=f"Embedding {name} test", superset=sup_te, **kw
        )
        self.clean_classifier = make_classifier(seed).fit(self.train_x, self.train_y)  # deployment's model

    def sizes(self) -> dict[str, int]:
        """Rows and classes, for the results ``meta``."""
        return {"train": len(self.train_texts), "test": len(self.test_texts), "classes": len(set(self.train_y))}

    def measure(self, spec: MechanismSpec, *, seed: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The defense columns shared by this dataset's rows, and its development and deployment rows."""
        with quiet_seed_warnings():
            mech = spec.build(seed)
        t0 = time.perf_counter()
        p_tr, p_te = mech.protect(self.train_x), mech.protect(self.test_x)
        vps = (len(p_tr) + len(p_te)) / max(time.perf_counter() - t0, 1e-9)
        clean = np.concatenate([self.train_x, self.test_x])
        base = {
            "dataset": self.name,
            **spec.row_fields(),
            "perturbation_norm": perturbation_norm(clean, np.concatenate([p_tr, p_te])),
            "expected_norm": mech.expected_norm(clean.shape[1]),
            "vectors_per_s": vps,
            "n_train": len(p_tr),
            "n_test": len(p_te),
        }
        dev = classification_metrics(self.test_y, fit_predict(p_tr, self.train_y, p_te, seed=seed))
        dep = classification_metrics(self.test_y, self.clean_classifier.predict(p_te))
        return base, [{**base, "scenario": "development", **dev}, {**base, "scenario": "deployment", **dep}]


def _parser() -> argparse.ArgumentParser:
    ap = base_parser(SCRIPT, __doc__)
    ap.add_argument("--datasets", nargs="*", default=list(DATASETS), choices=DATASETS)
    ap.add_argument("--n-train", type=int, default=None, help="override: training rows per dataset")
    ap.add_argument("--n-test", type=int, default=None, help="override: test rows per dataset")
    ap.add_argument(
        "--privacy",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="add inversion metrics of protected test sentences (textcrafter_rag.attacks)",
    )
    add_grid_options(ap)
    add_rerender_option(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.from_json:
        n_plots = rerender(args.from_json, args.out_dir)
        print(f"[utility] re-rendered the report and {n_plots} plots of {args.from_json} into {args.out_dir}")
        return 0
    size = resolve_size(args)
    data_dir = resolve_data_or_none(args.data_dir)
    if data_dir is None:
        return 2
    cfg = dict(SIZES[size])
    cfg["n_train"] = cfg["n_train"] if args.n_train is None else args.n_train
    cfg["n_test"] = cfg["n_test"] if args.n_test is None else args.n_test
    progress = not args.no_progress
    set_threads()
    t_all = time.perf_counter()

    encoder = bundled_minilm()
    policies = PolicySource.from_args(args, size=size, encoder=encoder, data_dir=data_dir)
    grid = build_grid(args, policies=policies, dim=encoder.dimension)
    attacked = privacy_subset(grid, args.privacy_mechanisms) if args.privacy else []
    train_texts = wikitext_sentences("train", data_dir=data_dir) if args.privacy else []
    # The full size uses the fixed adaptive budget of the privacy tables; smaller ones the quick attacker.
    attack = AttackConfig(
        quick=size != "full", seed=args.seed, adapt_config=fixed_adapt_config() if size == "full" else None
    )
    rows: list[dict[str, Any]] = []
    sizes: dict[str, dict[str, int]] = {}
    for ds in args.datasets:
        data = DatasetRun(ds, n_train=cfg["n_train"], n_test=cfg["n_test"], policies=policies)
        sizes[ds] = data.sizes()
        print(
            f"[utility] {ds}: train {sizes[ds]['train']}, test {sizes[ds]['test']}, {sizes[ds]['classes']} classes",
            flush=True,
        )
        run = AttackRun(
            encoder=encoder,
            train_texts=train_texts,
            test_texts=data.test_texts[: cfg["privacy_n"]],
            attack=attack,
            progress=progress,
        )
        for spec in tqdm(grid, desc=f"{ds} defenses", disable=not progress):
            base, util_rows = data.measure(spec, seed=args.seed)
            rows += util_rows
            if spec not in attacked:
                continue
            for mode in args.attack_modes:
                if mode == "adaptive" and spec.family == "none":
                    continue  # nothing to adapt to: the non-adaptive attacker is trained on clean vectors
                res = run_attack(spec.build(args.seed), mode, run=run)
                rows.append({**base, "kind": "privacy", "mode": mode, **privacy_fields(res)})

    seconds = time.perf_counter() - t_all
    adaptive = (
        "fine-tuned from the clean inverter on 30,000 protected WikiText-2 train pairs, one pass, no time "
        "cap (cached per defense and reused across datasets)"
        if size == "full"
        else "quick"
    )
    settings = {
        "dataset_sizes": sizes,
        "classifier": "LogisticRegression(C=1, lbfgs, max_iter=2000) on the raw vectors",
        "scenarios": {
            "development": "train and test on protected vectors",
            "deployment": "train on clean vectors, test on protected vectors",
        },
        "attack_config": {
            "enabled": args.privacy,
            "modes": list(args.attack_modes) if args.privacy else [],
            "n_test_texts": cfg["privacy_n"] if args.privacy else 0,
            "adaptive": adaptive,
            "mechanisms": args.privacy_mechanisms,
            "quick_attack": size != "full",
        },
        "textcrafter_fit": policies.fit_size.as_dict(),
        "runtime_seconds": round(seconds, 1),
        "paper_reference": PAPER_REFERENCE,
    }
    meta = make_meta(SCRIPT, argv, size=size, seed=args.seed, encoder=encoder, **settings)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = make_plots(rows, out, result_name(NAME, size, args.tag))
    md = render_markdown(rows, meta, [p.name for p in plots])
    jp, mp = write_results(NAME, size=size, meta=meta, rows=rows, markdown=md, out_dir=out, tag=args.tag)
    print(f"[utility] wrote {jp}, {mp} and {len(plots)} plots in {seconds:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
