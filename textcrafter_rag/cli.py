"""The ``textcrafter`` command line: fit, protect, demo, attack."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["main", "build_parser"]


def _cmd_fit(args: argparse.Namespace) -> int:
    from .encoders import as_encoder
    from .mechanisms.textcrafter import TextCrafter
    from .reward import RewardWeights

    base = None
    if args.encoder:
        from sentence_transformers import SentenceTransformer

        base = as_encoder(SentenceTransformer(args.encoder), model_id=args.encoder)
    t0 = time.perf_counter()
    tc = TextCrafter.fit(
        base, eps=args.eps, quick=args.quick, seed=args.seed, data_dir=args.data_dir,
        weights=RewardWeights(alpha=args.alpha, beta=args.beta, gamma=args.gamma), progress=not args.no_progress,
    )
    path = tc.save(args.out)
    print(f"Saved policy to {path} (fit took {time.perf_counter() - t0:.1f}s)")
    return 0


def _read_texts(path: Path) -> list[str]:
    texts: list[str] = []
    with path.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise SystemExit(f"error: {path}:{i} is not valid JSON") from None
            text = obj.get("text") if isinstance(obj, dict) else obj
            if not isinstance(text, str):
                raise SystemExit(f"error: {path}:{i} has no string 'text' field")
            texts.append(text)
    return texts


def _cmd_protect(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from .encoders import as_encoder, bundled_minilm
    from .protector import Protector

    inp, out = Path(args.input), Path(args.output)
    if not inp.is_file():
        raise SystemExit(f"error: input file {inp} does not exist")
    if inp.suffix == ".npy":
        vectors = np.load(inp, mmap_mode="r", allow_pickle=False)
        encoder = None
    elif inp.suffix == ".jsonl":
        if args.encoder in (None, "bundled"):
            encoder = bundled_minilm()
        else:
            from sentence_transformers import SentenceTransformer

            encoder = as_encoder(SentenceTransformer(args.encoder), model_id=args.encoder)
        vectors = None
    else:
        raise SystemExit("error: --input must be a .npy file of vectors or a .jsonl file of texts")
    policy: Any = args.policy
    if policy is None and encoder is None:  # bare vectors: assume they come from the bundled MiniLM
        from .mechanisms.textcrafter import TextCrafter

        policy = TextCrafter.load_shipped(secure_mode=args.secure)
    protector = Protector(base=encoder, policy=policy, secure_mode=args.secure, chunk_size=args.chunk_size)
    if vectors is None:
        texts = _read_texts(inp)
        chunks = [texts[i : i + args.chunk_size] for i in range(0, len(texts), args.chunk_size)]
        result = np.concatenate([protector.embed_documents(c) for c in tqdm(chunks, desc="Embedding + protecting")])
    else:
        if vectors.ndim != 2:
            raise SystemExit(f"error: {inp} must hold a 2-D array, got {vectors.ndim}-D")
        result = np.empty(vectors.shape, dtype=np.float32)
        for start in tqdm(range(0, vectors.shape[0], args.chunk_size), desc="Protecting"):
            stop = start + args.chunk_size
            result[start:stop] = protector.protect(np.asarray(vectors[start:stop]))
    tmp = out.with_name(out.name + ".partial.npy")
    np.save(tmp, result)
    tmp.replace(out)
    print(f"Protected {result.shape[0]} vectors ({result.shape[1]}-d) with {protector.mechanism!r} -> {out}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(n_docs=args.docs, queries=args.query or None, refit=args.refit, eps=args.eps)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``textcrafter`` command."""
    parser = argparse.ArgumentParser(prog="textcrafter", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    fit = sub.add_parser("fit", help="fit a TextCrafter policy for an encoder and save it")
    fit.add_argument("--out", required=True, help="directory to save the policy to")
    fit.add_argument("--eps", type=float, default=1.0,
                     help="perturbation norm (default 1.0, the retrieval benchmark's recommendation; the paper uses 2.5)")
    fit.add_argument("--encoder", default=None, help="sentence-transformers model name or path (default: bundled MiniLM)")
    fit.add_argument("--alpha", type=float, default=1.0)
    fit.add_argument("--beta", type=float, default=1.0)
    fit.add_argument("--gamma", type=float, default=1.0)
    fit.add_argument("--seed", type=int, default=0)
    fit.add_argument("--data-dir", default=None, help="datasets folder (WikiText-2 is used when present)")
    fit.add_argument("--quick", action="store_true", help="small, fast fit (for trying things out)")
    fit.add_argument("--no-progress", action="store_true")
    fit.set_defaults(func=_cmd_fit)

    prot = sub.add_parser("protect", help="protect vectors (.npy) or texts (.jsonl) with a saved policy")
    prot.add_argument("--policy", default=None,
                      help="policy directory (default: the shipped eps=1.0 policy for the bundled MiniLM)")
    prot.add_argument("--input", required=True, help=".npy of vectors (n, D) or .jsonl with a 'text' field")
    prot.add_argument("--output", required=True, help=".npy file to write")
    prot.add_argument("--encoder", default=None, help="for .jsonl input: 'bundled' (default) or a sentence-transformers model")
    prot.add_argument("--chunk-size", type=int, default=4096)
    prot.add_argument("--secure", action="store_true", help="draw noise from the OS CSPRNG")
    prot.set_defaults(func=_cmd_protect)

    demo = sub.add_parser("demo", help="the quickstart: protect a BBC News index and compare retrieval")
    demo.add_argument("--docs", type=int, default=500, help="number of BBC News articles to index")
    demo.add_argument("--query", action="append", help="a query to run (repeatable)")
    demo.add_argument("--eps", type=float, default=1.0,
                      help="perturbation norm: 1.0 (default) and 2.5 ship; other values fit a quick policy")
    demo.add_argument("--refit", action="store_true", help="fit a fresh quick policy instead of the shipped one")
    demo.set_defaults(func=_cmd_demo)

    try:
        from .attacks.cli import add_attack_command
    except ImportError:  # the attack suite is optional at import time
        pass
    else:
        add_attack_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``textcrafter`` command."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
