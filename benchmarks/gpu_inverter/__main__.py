"""The device step and its unpacking: ``python -m benchmarks.gpu_inverter train|unpack``.

Usage::

    python -m benchmarks.gpu_inverter.prepare            # here first: writes .cache/gpu_bundle, prints the device call
    python -m benchmarks.gpu_inverter train --bundle .cache/gpu_bundle --out $OUT       # on the GPU machine
    python -m benchmarks.gpu_inverter train ... --adaptive --deadline-minutes 7    # ... and the attack jobs
    python -m benchmarks.gpu_inverter unpack --from DIR --to ~/.cache/textcrafter_rag/attacks/gpu-inverter

This module imports only what the GPU machine has (see :mod:`.lean`); ``prepare`` is its own entry point
because it needs the whole package.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

from .adaptive import JOBS, AdaptiveRun
from .bundle import DEFAULT_BUNDLE
from .train import DeviceRun, train_and_measure, unpack


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_inverter", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="step", required=True)
    t = sub.add_parser("train", help="train and measure the inverter from a bundle (the device step)")
    t.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    t.add_argument("--out", type=Path, required=True, help="output folder ($OUT on the device)")
    d = DeviceRun()
    t.add_argument("--device", default=d.device, choices=("auto", "cuda", "cpu"))
    t.add_argument("--train-minutes", type=float, default=d.train_minutes, help="time budget (0: stop at --max-steps)")
    t.add_argument("--layers", type=int, default=d.layers)
    t.add_argument("--dropout", type=float, default=d.dropout)
    t.add_argument("--batch-size", type=int, default=d.batch_size)
    t.add_argument("--lr", type=float, default=d.lr)
    t.add_argument("--warmup-steps", type=int, default=d.warmup_steps)
    t.add_argument("--max-steps", type=int, default=d.max_steps)
    t.add_argument("--max-train", type=int, default=d.max_train, help="first N training sentences (smoke runs)")
    t.add_argument("--n-test", type=int, default=d.n_test, help="first N test sentences (smoke runs)")
    t.add_argument("--beam", type=int, default=d.beam)
    t.add_argument("--seed", type=int, default=d.seed)
    t.add_argument("--no-progress", action="store_true")
    a = AdaptiveRun()
    t.add_argument(
        "--adaptive", action="store_true", help="then run the attack jobs (benchmarks.gpu_inverter.adaptive)"
    )
    t.add_argument("--n-pairs", type=int, default=a.n_pairs, help="adaptive attacker's pairs (one pass)")
    t.add_argument("--attack-beam", type=int, default=a.beam, help="beam of the attack jobs (reranked)")
    t.add_argument("--deadline-minutes", type=float, default=None, help="no attack job starts after this")
    t.add_argument("--jobs", nargs="*", default=[], choices=[j.label for j in JOBS], help="default: all")
    u = sub.add_parser("unpack", help="a verified inverter artifact from the device step's files (run here)")
    u.add_argument("--from", dest="source", type=Path, required=True, help="the files the device step wrote")
    u.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE, help="for the tokenizer")
    u.add_argument("--to", dest="dest", type=Path, required=True)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.step == "train":
        run = DeviceRun(**{f.name: getattr(args, f.name) for f in fields(DeviceRun)})
        adaptive = None
        if args.adaptive:
            deadline = None if args.deadline_minutes is None else 60 * args.deadline_minutes
            adaptive = AdaptiveRun(
                n_pairs=args.n_pairs, beam=args.attack_beam, seed=args.seed, deadline_s=deadline, jobs=tuple(args.jobs)
            )
        train_and_measure(args.bundle, args.out, run, adaptive=adaptive, progress=not args.no_progress)
        print(f"wrote {', '.join(sorted(p.name for p in args.out.iterdir()))} to {args.out}")
    else:
        print(f"inverter written to {unpack(args.source, args.bundle, args.dest)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
