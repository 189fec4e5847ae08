r"""Calibrate the inversion attacker: how well it reconstructs *undefended* MiniLM embeddings.

Trains the clean inverter on WikiText-2 train (sentences of at most 32 WordPieces), evaluates on
held-out WikiText-2 test sentences (checked not to occur in training, by text) with no defense,
and reports greedy, beam, beam + rerank (black-box re-embedding) and iterative-correction
results next to the floor attackers. Writes ``benchmarks/results/attack_strength.{json,md}``.
Maintained with the attacks package. Results committed before the study folders are a plain list of
rows; runs now write ``{"meta", "rows"}`` as every benchmark does (``--quick --tag T`` now writes
``attack_strength_T_quick.*``).

Usage::

    python -m benchmarks.privacy.attack_strength              # full run (~45 min on 2 CPU cores)
    python -m benchmarks.privacy.attack_strength --quick      # smoke run (< 3 min), writes *_quick.*
    python -m benchmarks.privacy.attack_strength --resume-minutes 15 --tag resumed35   # train it longer
    python -m benchmarks.privacy.attack_strength --train-minutes 65 --threads 2 \
        --extra-texts wikitext-valid bbc --tag parity                                 # the attacker at parity
    python -m benchmarks.privacy.attack_strength --corpus public --layers 6 --train-minutes 240 --threads 2 \
        --tag public6l                                                                # the stronger CPU recipe

Training checkpoints itself every 5 minutes beside its cache entry; a run that is killed goes on from
its last checkpoint when the same command is run again (the time budget counts training time only).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common.options import script_parser
from benchmarks.common.reporting import RESULTS_DIR, Script, make_meta, write_results
from textcrafter_rag.attacks import (
    Inverter,
    InverterConfig,
    InverterTrainingConfig,
    cache_root,
    floor_metrics,
    load_or_train_inverter,
    rerank,
    train_corrector,
)
from textcrafter_rag.attacks.inverter_io import STRENGTH_NAME
from textcrafter_rag.attacks.inverter_model import DEVICES, resolve_device
from textcrafter_rag.attacks.texts import public_corpus
from textcrafter_rag.data import bbc_sentences, wikitext_sentences
from textcrafter_rag.embedding import cached_embeddings
from textcrafter_rag.encoders import bundled_minilm
from textcrafter_rag.metrics import text_privacy_metrics

NAME = "attack_strength"
SCRIPT = Script(NAME, "benchmarks.privacy.attack_strength")
METRICS = ("bleu", "token_f1", "content_f1", "rouge_l", "exact_match", "cosine")


#: Public text an attacker may add to its training set (WikiText-2 valid, BBC News), by name.
EXTRA_TEXTS = {
    "wikitext-valid": lambda data_dir: wikitext_sentences("valid", data_dir=data_dir),
    "bbc": lambda data_dir: bbc_sentences(),
}


def machine() -> str:
    """The machine in words, for the report (time budgets buy fewer steps on a slower or busier one)."""
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"cpu x{torch.get_num_threads()} threads"
    return f"{platform.machine()} {platform.processor() or platform.system()} ({dev}, os.cpu_count={os.cpu_count()})"


def _parser() -> argparse.ArgumentParser:
    ap = script_parser(SCRIPT, __doc__)
    ap.add_argument("--quick", action="store_true", help="small smoke run (< 3 min)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--train-minutes", type=float, default=20.0, help="inverter training time budget")
    ap.add_argument("--corrector-minutes", type=float, default=5.0, help="corrector training time budget")
    ap.add_argument("--corrector-train", type=int, default=1500, help="training sentences for the corrector")
    ap.add_argument(
        "--max-train",
        type=int,
        default=0,
        help="training sentences used (the first N eligible, in file order); 0 = all",
    )
    ap.add_argument("--n-test", type=int, default=300)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--steps", type=int, default=2, help="correction steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--threads", type=int, default=1, help="torch threads (1 is fastest on a shared, oversubscribed 2-core machine)"
    )
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--out-dir", default=str(RESULTS_DIR), help="where the .json/.md results go")
    ap.add_argument(
        "--resume-minutes",
        type=float,
        default=0.0,
        help="continue training the cached inverter this many more minutes (new cosine cycle)",
    )
    ap.add_argument(
        "--extra-texts",
        nargs="*",
        default=[],
        choices=sorted(EXTRA_TEXTS),
        help="public text the attacker trains on besides WikiText-2 train (never the test sentences)",
    )
    ap.add_argument(
        "--corpus",
        choices=("wikitext", "public"),
        default="wikitext",
        help="train on WikiText-2 train, or on every public corpus (texts.public_corpus: the datasets' train "
        "splits, BBC News, SciFact abstracts, deduplicated against every test split)",
    )
    ap.add_argument("--layers", type=int, default=3, help="decoder layers (6: every MiniLM layer reused)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--device", choices=DEVICES, default="auto", help="auto: CUDA when present")
    ap.add_argument("--tag", default="", help="suffix of the result file names")
    return ap


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """The options, with ``--quick`` replacing the budgets and sizes by a smoke run's."""
    args = _parser().parse_args(argv)
    if args.quick:
        args.train_minutes, args.corrector_minutes, args.corrector_train = 1.0, 0.3, 300
        args.n_test, args.steps, args.max_train = 100, 1, 2000
    return args


def _short(texts: list[str], tokenizer: Any, max_len: int) -> list[str]:
    """The texts of at most ``max_len`` WordPieces (what the inverter can reproduce)."""
    return [t for t, n in zip(texts, Inverter.token_lengths(texts, tokenizer)) if n <= max_len]


def split_sentences(
    args: argparse.Namespace, tokenizer: Any, max_len: int
) -> tuple[list[str], list[str], int, list[str]]:
    """``(train, test, n_eligible, sources)``: the training sentences (WikiText-2 train, or every public
    corpus with ``--corpus public``; plus ``--extra-texts``) and held-out WikiText-2 test sentences.

    The test sentences are sampled from WikiText-2 test sentences that do not occur in training, by
    text; extra texts lose any sentence they share with the test pool, so adding them never changes
    the test set.
    """
    train = _short(wikitext_sentences("train", data_dir=args.data_dir), tokenizer, max_len)
    if args.max_train:
        train = train[: args.max_train]
    train_set = set(train)
    test_all = _short(wikitext_sentences("test", data_dir=args.data_dir), tokenizer, max_len)
    test_all = [t for t in test_all if t not in train_set]
    test = random.Random(args.seed).sample(test_all, min(args.n_test, len(test_all)))
    sources = ["WikiText-2 train"]
    if args.corpus == "public":  # the same test sentences; the corpus excludes every test split's texts
        fits = lambda texts: [n <= max_len for n in Inverter.token_lengths(texts, tokenizer)]
        corpus = public_corpus(args.data_dir, fits=fits, max_per_source=500 if args.quick else None)
        train = corpus.train[: args.max_train] if args.max_train else corpus.train
        train_set, sources = set(train), [k for k, v in corpus.report["sources"].items() if v["kept"]]
        print(json.dumps(corpus.report, indent=1))
    held_out = set(test_all)
    for name in args.extra_texts:
        extra = [t for t in EXTRA_TEXTS[name](args.data_dir) if t not in held_out and t not in train_set]
        extra = _short(extra, tokenizer, max_len)
        extra = extra[:500] if args.quick else extra
        train_set.update(extra)
        train += extra
        print(f"+ {len(extra)} {name} sentences")
    assert not set(test) & train_set
    return train, test, len(test_all), sources


def _train_minutes(inv: Inverter) -> float:
    return sum(s["train_minutes"] for s in inv.meta.get("training", []))


def inverter_for(
    enc: Any, train: list[str], cfg: InverterConfig, args: argparse.Namespace
) -> tuple[Inverter, Path, float]:
    """``(inverter, its folder, training minutes)``: the cached clean inverter, trained longer with
    ``--resume-minutes`` (into a sibling folder, so the original entry stays as it was)."""
    tc = InverterTrainingConfig(time_budget_min=args.train_minutes, seed=args.seed, batch_size=args.batch_size)
    inv, inv_dir, cached = load_or_train_inverter(
        enc, train, config=cfg, train_config=tc, cache_dir=args.cache_dir, device=resolve_device(args.device)
    )
    how = "loaded from" if cached else "trained and saved to"
    print(f"inverter {how} {inv_dir} ({_train_minutes(inv):.1f} train min)")
    if args.resume_minutes <= 0:
        return inv, inv_dir, _train_minutes(inv)
    rdir = inv_dir.with_name(f"{inv_dir.name}-resume{args.resume_minutes:g}")
    if (rdir / "model.safetensors").is_file():
        inv = Inverter.load(rdir)
    else:
        inv.fit(
            cached_embeddings(enc, train, cache_dir=cache_root(args.cache_dir)),
            train,
            train_config=InverterTrainingConfig(
                time_budget_min=args.resume_minutes, lr=2.5e-4, warmup_steps=10, seed=args.seed + 1
            ),
        )
        inv.save(rdir)
    print(f"resumed training: {_train_minutes(inv):.1f} train min in total, saved to {rdir}")
    return inv, rdir, _train_minutes(inv)


class AttackTable:
    """The rows of one run: each attack's metrics on the test sentences, beside the run's settings."""

    def __init__(self, enc: Any, test: list[str], test_emb: np.ndarray, base: dict[str, Any]) -> None:
        self.enc, self.test, self.test_emb, self.base = enc, test, test_emb, base
        self.rows: list[dict[str, Any]] = []
        self.examples: dict[str, list[str]] = {}

    def add(self, attack: str, preds: list[str], **extra: object) -> None:
        """Score ``preds`` (one per test sentence) as the row of ``attack``."""
        m = text_privacy_metrics(self.test, preds, encoder=self.enc, clean_embeddings=self.test_emb)
        self.rows.append({**self.base, "attack": attack, **{k: round(float(m[k]), 2) for k in METRICS}, **extra})
        self.examples[attack] = preds[:5]
        print(attack, {k: round(float(m[k]), 2) for k in METRICS})

    def add_floors(self, train: list[str], *, seed: int) -> None:
        """The floor attackers (they ignore the vector): what the metrics give for free."""
        floors = floor_metrics(train, self.test, encoder=self.enc, clean_embeddings=self.test_emb, seed=seed)
        for name, m in floors.items():
            self.rows.append(
                {
                    **self.base,
                    "attack": f"floor-{name}",
                    **{k: round(float(m[k]), 2) for k in METRICS},
                    **({"floor_text": m["text"]} if "text" in m else {}),
                }
            )


def _minutes_since(t: float) -> float:
    return round((time.time() - t) / 60, 2)


def decode(table: AttackTable, inv: Inverter, beam: int) -> list[str]:
    """Greedy, beam and beam + re-embedding rerank rows; returns the reranked texts (the corrector's start)."""
    t = time.time()
    table.add("inverter-greedy", inv.invert(table.test_emb, progress=True), eval_minutes=_minutes_since(t))
    t = time.time()
    cands = inv.generate(table.test_emb, beam=beam, num_return=beam, progress=True)
    table.add(f"inverter-beam{beam}", [c[0] for c in cands], eval_minutes=_minutes_since(t))
    t = time.time()
    best, _ = rerank(cands, table.test_emb, table.enc.encode)
    table.add(f"inverter-beam{beam}-rerank", best, eval_minutes=_minutes_since(t))
    return best


def correct(table: AttackTable, inv: Inverter, train: list[str], start: list[str], args: argparse.Namespace) -> None:
    """Iterative correction rows, one per step, each with its gain over the previous row.

    The corrector is trained on the inverter's greedy hypotheses for a sample of training sentences.
    """
    enc = table.enc
    corr_texts = random.Random(args.seed + 1).sample(train, min(args.corrector_train, len(train)))
    corr_emb = cached_embeddings(enc, corr_texts, cache_dir=cache_root(args.cache_dir))
    t = time.time()
    corr = train_corrector(
        inv,
        corr_emb,
        corr_texts,
        enc.encode,
        train_config=InverterTrainingConfig(
            time_budget_min=args.corrector_minutes, lr=2e-4, warmup_steps=20, seed=args.seed
        ),
    )
    corr_min = (time.time() - t) / 60
    print(f"corrector trained in {corr_min:.1f} min (incl. hypothesis generation)")

    def on_step(step: int, texts: list[str], cos: np.ndarray) -> None:
        table.add(f"corrector-step{step}", texts, corrector_train_minutes=round(corr_min, 2))
        rows = table.rows
        rows[-1]["gain_token_f1"] = round(rows[-1]["token_f1"] - rows[-2]["token_f1"], 2)
        rows[-1]["gain_bleu"] = round(rows[-1]["bleu"] - rows[-2]["bleu"], 2)

    corr.correct(table.test_emb, start, enc.encode, steps=args.steps, beam=args.beam, on_step=on_step)


def render_markdown(table: AttackTable, args: argparse.Namespace) -> str:
    """The report: the setting, one line per attack, and the first test sentences beside each attack's text."""
    base, rows, test = table.base, table.rows, table.test
    lines = [
        "# Inversion-attack strength (no defense)",
        "",
        f"Encoder `{base['encoder']}` ({base['dim']}-d); inverter {base['inverter']}, trained "
        f"{base['train_minutes']} min ({base['train_steps']} steps, {base['epochs']} epochs) on {base['n_train']} "
        f"sentences ({' + '.join([*base['corpus'], *args.extra_texts])}); {base['n_test']} held-out WikiText-2 "
        f"test sentences (<= 32 WordPieces, none in training). Machine: {base['machine']}; 5-min load average "
        f"{rows[-1]['load_avg_5min_start_end'][0]} at start, {rows[-1]['load_avg_5min_start_end'][1]} at end "
        "(above the core count, other jobs shared the machine and the time budgets bought fewer steps). "
        f"Seed {args.seed}. Total wall time {rows[-1]['total_minutes']} min.",
        "",
        "| attack | BLEU | token-F1 | content-F1 | ROUGE-L | exact | cosine |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['attack']} | "
            + " | ".join(f"{r[k]:.2f}" for k in ("bleu", "token_f1", "content_f1", "rouge_l", "exact_match", "cosine"))
            + " |"
        )
    lines += ["", "Examples (first 3 test sentences):", ""]
    for i in range(min(3, len(test))):
        lines.append(f"* reference: {test[i]}")
        for a, preds in table.examples.items():
            lines.append(f"  * {a}: {preds[i]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    torch.set_num_threads(args.threads)
    t_all = time.time()
    load_start = os.getloadavg()[1]
    enc = bundled_minilm()
    cfg = InverterConfig(max_len=32, n_layers=args.layers)
    train, test, n_eligible, sources = split_sentences(args, enc.model.tokenizer, cfg.max_len)
    print(f"train {len(train)} sentences, test {len(test)} (of {n_eligible} eligible)")
    inv, inv_dir, train_min = inverter_for(enc, train, cfg, args)
    history = inv.meta["training"]

    test_emb = enc.encode(test)
    base = {
        "encoder": enc.model_id,
        "dim": int(test_emb.shape[1]),
        "mechanism": "none",
        "seed": args.seed,
        "n_train": len(train),
        "extra_texts": list(args.extra_texts),
        "corpus": sources,
        "n_test": len(test),
        "train_minutes": round(train_min, 2),
        "train_steps": sum(h["steps"] for h in history),
        "epochs": round(sum(h["epochs_done"] for h in history), 3),
        "inverter": f"{cfg.n_layers}L-d{cfg.d_model}-prefix{cfg.n_prefix}-vocab{len(inv.vocab_ids)}",
        "machine": machine(),
        "quick": args.quick,
        "inverter_dir": str(inv_dir),
    }
    table = AttackTable(enc, test, test_emb, base)
    best = decode(table, inv, args.beam)
    if args.corrector_minutes > 0 and args.steps > 0:
        correct(table, inv, train, best, args)
    table.add_floors(train, seed=args.seed)
    for r in table.rows:
        r["total_minutes"] = _minutes_since(t_all)
        r["load_avg_5min_start_end"] = [round(load_start, 1), round(os.getloadavg()[1], 1)]

    settings = {
        "inverter": base["inverter"],
        "inverter_dir": base["inverter_dir"],
        "n_train": len(train),
        "extra_texts": list(args.extra_texts),
        "n_test": len(test),
        "budgets_minutes": {
            "train": args.train_minutes,
            "resume": args.resume_minutes,
            "corrector": args.corrector_minutes,
        },
        "beam": args.beam,
        "correction_steps": args.steps,
        "attack_config": {"enabled": True, "mechanism": "none"},
    }
    size = "quick" if args.quick else "full"
    meta = make_meta(SCRIPT, argv, size=size, seed=args.seed, encoder=enc, **settings)
    md = render_markdown(table, args)
    write_results(NAME, size=size, meta=meta, rows=table.rows, markdown=md, out_dir=args.out_dir, tag=args.tag)
    (Path(inv_dir) / STRENGTH_NAME).write_text(json.dumps(table.rows, indent=2), encoding="utf-8")  # for the audit
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
