"""``textcrafter audit``: attack a sample of stored vectors before and after protection and write a report.

The main CLI (``textcrafter_rag/cli.py``) registers it with :func:`add_audit_command`. Bad input exits with code 2.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import torch

from ..attacks.config import AttackConfig
from ..deprecation import add_renamed_flag
from ..options import ProtectionOptions
from .report import summary, write_report
from .run import run_audit

__all__ = ["add_audit_command", "audit_attack_config", "run_audit_command"]


def audit_attack_config(args: argparse.Namespace) -> AttackConfig:
    """The :class:`AttackConfig` of ``textcrafter audit``'s flags (``--adaptive`` adds the adaptive attacker)."""
    return AttackConfig(
        mode="adaptive" if args.adaptive else "non-adaptive",
        n_pairs=args.n_pairs,
        quick=args.quick,
        beam=args.beam,
        n_pii=args.n_pii,
        n_examples=args.examples,
        seed=args.seed,
        cache_dir=args.cache_dir,
        data_dir=args.data_dir,
    )


def run_audit_command(args: argparse.Namespace) -> int:
    """Handler of ``textcrafter audit``: run the audit, write the reports, print the summary."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.threads:
        torch.set_num_threads(args.threads)
    result = run_audit(
        args.vectors,
        texts=args.texts,
        column=args.column,
        encoder=args.encoder,
        options=ProtectionOptions(mechanism=args.mechanism, seed=args.mechanism_seed),
        n=args.n,
        inverter=args.inverter,
        attack=audit_attack_config(args),
        progress=not args.no_progress,
    )
    paths = write_report(result, args.out)
    print(summary(result))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def add_audit_command(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``audit`` on an ``argparse`` subparsers object; its handler is ``args.func(args)``."""
    p = subparsers.add_parser(
        "audit",
        help="measure the inversion risk of a vector store before and after protection",
        description=__doc__.splitlines()[0],
        epilog="Reports: OUT/audit.json, audit.md, audit.html, audit.png. Reconstructions in the reports may "
        "contain sensitive data from the store (--examples 0 leaves them out).",
    )
    p.add_argument(
        "--vectors",
        required=True,
        metavar="STORE",
        help=".npy (n, D) array, or .parquet / .jsonl with an embedding column",
    )
    p.add_argument("--column", default="embedding", help="embedding column of a .parquet / .jsonl store")
    p.add_argument(
        "--texts",
        default=None,
        metavar="SAMPLE.jsonl",
        help="texts of the store's first rows (a 'text' field per line; row i <-> store row i): "
        "enables BLEU / token-F1 / content-F1, keyword F1, the floor and the store-is-raw check",
    )
    p.add_argument(
        "--encoder",
        default="bundled",
        help="encoder that built the store: 'bundled' (MiniLM, default) or a sentence-transformers name",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--mechanism",
        default=None,
        metavar="SPEC|DIR",
        help="mechanism for 'after': a spec (e.g. gaussian:s=0.05, textcrafter:eps=2.5) or a TextCrafter policy "
        "directory (default: the policy shipped for the encoder)",
    )
    add_renamed_flag(which, "--policy", "--mechanism", dest="mechanism")
    add_renamed_flag(which, "--defense", "--mechanism", dest="mechanism")
    p.add_argument("--mechanism-seed", type=int, default=None, help="seed of the mechanism's noise (default: unseeded)")
    add_renamed_flag(p, "--defense-seed", "--mechanism-seed", dest="mechanism_seed", type=int)
    p.add_argument("--n", type=int, default=200, help="stored vectors sampled (default 200)")
    p.add_argument(
        "--adaptive",
        action="store_true",
        help="also attack 'after' with an inverter fine-tuned on protected pairs (slower)",
    )
    p.add_argument("--n-pairs", type=int, default=30_000, help="adaptive attacker's query budget")
    p.add_argument("--quick", action="store_true", help="small smoke run (n <= 64); numbers are not meaningful")
    p.add_argument("--data-dir", default=None, help="benchmark datasets (attacker texts: WikiText-2 train if present)")
    p.add_argument(
        "--attacker",
        "--inverter",
        dest="inverter",
        default=None,
        metavar="DIR",
        help="a saved inverter to attack with instead of the cached clean one, e.g. the stronger one of "
        "`python -m benchmarks.gpu_inverter unpack`; the report quotes its strength.json when present",
    )
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--n-pii", type=int, default=4000, help="size of the PII probe's synthetic sets (600 when --quick)")
    p.add_argument("--examples", type=int, default=5, help="reconstructions shown in the report (0: none)")
    p.add_argument("--seed", type=int, default=0, help="sampling and attacker seed")
    p.add_argument("--cache-dir", default=None, help="attack cache (default ~/.cache/textcrafter_rag/attacks)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", required=True, metavar="REPORT_DIR", help="folder for the reports")
    p.set_defaults(func=run_audit_command)
    return p
