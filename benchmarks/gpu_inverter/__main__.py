"""Command line of :mod:`benchmarks.gpu_inverter` (see its docstring and ``benchmarks/README.md``).

Usage::

    python -m benchmarks.gpu_inverter prepare          # here: writes .cache/gpu_bundle, prints the device call
    python -m benchmarks.gpu_inverter train --bundle .cache/gpu_bundle --out $OUT       # on the GPU machine
    python -m benchmarks.gpu_inverter unpack --from DIR --to ~/.cache/textcrafter_rag/attacks/gpu-inverter
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .prepare import DEFAULT_BUNDLE, device_command


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_inverter", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare", help="write the bundle the device step reads (run here, on the CPU)")
    p.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--sources", nargs="*", default=None, help="public corpora (default all; see texts.PUBLIC_SOURCES)")
    p.add_argument("--n-test", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-per-source", type=int, default=None, help="cap per source (smoke runs)")
    t = sub.add_parser("train", help="train and measure the inverter from a bundle (the device step)")
    t.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    t.add_argument("--out", type=Path, required=True, help="output folder ($OUT on the device)")
    t.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    t.add_argument(
        "--train-minutes",
        type=float,
        default=4.0,
        help="training time budget (4 min: ~5.5 min in all; 0: none, stop at --max-steps)",
    )
    t.add_argument("--layers", type=int, default=6)
    t.add_argument("--batch-size", type=int, default=512)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--warmup-steps", type=int, default=200)
    t.add_argument("--max-steps", type=int, default=None)
    t.add_argument("--max-train", type=int, default=None, help="first N training sentences (smoke runs)")
    t.add_argument("--n-test", type=int, default=None, help="first N test sentences (smoke runs)")
    t.add_argument("--beam", type=int, default=8)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--no-progress", action="store_true")
    u = sub.add_parser("unpack", help="a verified inverter artifact from the device step's files (run here)")
    u.add_argument("--from", dest="source", type=Path, required=True, help="the files the device step wrote")
    u.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE, help="for the tokenizer")
    u.add_argument("--to", dest="dest", type=Path, required=True)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.step == "prepare":
        from .prepare import prepare

        manifest = prepare(
            args.bundle,
            data_dir=args.data_dir,
            sources=args.sources,
            n_test=args.n_test,
            seed=args.seed,
            max_per_source=args.max_per_source,
        )
        print(json.dumps({k: manifest[k] for k in ("n_train", "n_test", "corpus", "encoder", "bytes")}, indent=2))
        print(f"bundle: {args.bundle} ({manifest['bytes'] / 2**20:.1f} MiB); on the GPU machine run:")
        print(device_command(args.bundle))
    elif args.step == "train":
        from .train import train_and_measure

        train_and_measure(
            args.bundle,
            args.out,
            device=args.device,
            train_minutes=args.train_minutes,
            layers=args.layers,
            batch_size=args.batch_size,
            lr=args.lr,
            warmup_steps=args.warmup_steps,
            max_steps=args.max_steps,
            max_train=args.max_train,
            n_test=args.n_test,
            beam=args.beam,
            seed=args.seed,
            progress=not args.no_progress,
        )
        print(f"wrote {', '.join(sorted(p.name for p in args.out.iterdir()))} to {args.out}")
    else:
        from .train import unpack

        print(f"inverter written to {unpack(args.source, args.bundle, args.dest)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
