"""``textcrafter attack``: run every attack against one mechanism and write the metrics as JSON.

The main CLI (``textcrafter_rag/cli.py``) registers it with :func:`add_attack_command`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any

import torch

from ..deprecation import add_renamed_flag
from ..encoders import bundled_minilm
from ..errors import InvalidInputError
from ..specs import from_spec
from .config import AttackConfig
from .evaluate import evaluate_attacks
from .texts import attack_texts

__all__ = ["add_attack_command", "attack_config", "attack_texts", "run_attack_command"]


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if hasattr(x, "item"):
        return _jsonable(x.item())
    return x


def attack_config(args: argparse.Namespace) -> AttackConfig:
    """The :class:`AttackConfig` of ``textcrafter attack``'s flags."""
    return AttackConfig(
        mode=args.mode,
        n_pairs=args.n_pairs,
        quick=args.quick,
        beam=args.beam,
        seed=args.seed,
        cache_dir=args.cache_dir,
        data_dir=args.data_dir,
    )


def run_attack_command(args: argparse.Namespace) -> int:
    """Handler of ``textcrafter attack``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.threads:
        torch.set_num_threads(args.threads)
    attack = attack_config(args)
    encoder = bundled_minilm()
    if args.mechanism is None:
        raise InvalidInputError("attack needs --mechanism SPEC (e.g. none, gaussian:s=0.01, textcrafter:DIR)")
    mechanism = from_spec(args.mechanism, seed=args.mechanism_seed, encoder=encoder)
    train, test, source = attack_texts(attack.data_dir, seed=attack.seed)
    result = evaluate_attacks(
        mechanism, encoder=encoder, train_texts=train, test_texts=test[: args.n_test], attack=attack
    )
    result.update(
        mechanism_spec=args.mechanism,
        data=source,
        encoder=encoder.model_id,
        dim=encoder.dimension,
        seed=args.seed,
        quick=args.quick,
    )
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(_jsonable(result), indent=2), encoding="utf-8")
    keys = ("bleu", "token_f1", "content_f1", "rouge_l", "cosine", "keyword_f1", "pii_auc", "floor_token_f1")
    print(" ".join(f"{k}={result[k]:.3g}" for k in keys if k in result))
    print(f"wrote {out}")
    return 0


def add_attack_command(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``attack`` on an ``argparse`` subparsers object; its handler is ``args.func(args)``."""
    p = subparsers.add_parser(
        "attack", help="run inversion / keyword / PII attacks against a mechanism", description=__doc__.splitlines()[0]
    )
    p.add_argument("--mechanism", default=None, help="mechanism spec, e.g. none, gaussian:s=0.01, textcrafter:DIR")
    add_renamed_flag(p, "--defense", "--mechanism", dest="mechanism")
    p.add_argument("--mode", choices=("non-adaptive", "adaptive"), default="non-adaptive")
    p.add_argument("--quick", action="store_true", help="small smoke run; numbers are not meaningful")
    p.add_argument("--data-dir", default=None, help="benchmark datasets (WikiText-2); else BBC + synthetic PII")
    p.add_argument("--output", required=True, help="JSON file for the metrics")
    p.add_argument("--n-pairs", type=int, default=30_000, help="adaptive attacker's query budget")
    p.add_argument("--n-test", type=int, default=400, help="victim sentences attacked")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--seed", type=int, default=0, help="attacker seed")
    p.add_argument("--mechanism-seed", type=int, default=None, help="mechanism seed (default: unseeded)")
    add_renamed_flag(p, "--defense-seed", "--mechanism-seed", dest="mechanism_seed", type=int)
    p.add_argument("--cache-dir", default=None, help="attack cache (default ~/.cache/textcrafter_rag/attacks)")
    p.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (1 is fastest on a shared, oversubscribed machine)"
    )
    p.set_defaults(func=run_attack_command)
    return p
