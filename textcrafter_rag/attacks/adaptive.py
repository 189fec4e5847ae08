"""Adaptive attacker: fine-tune an inverter on the defense's own outputs.

The attacker encodes its own texts, sends the embeddings through the deployed defense (a
black box: only ``defense.protect`` is called, its parameters are never read) and fine-tunes
the clean inverter on ``(protected embedding, text)`` pairs. With fewer texts than
``n_pairs`` the texts are reused; each reuse gets a fresh call to the defense, so a randomised
defense yields fresh noise.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .cache import adapted_key, cache_root, cached_embeddings
from .inverter import Inverter, TrainConfig

__all__ = ["protected_pairs", "adapt_inverter", "DEFAULT_ADAPT_CONFIG"]

#: Fine-tuning defaults: one pass over the pairs, capped at 20 minutes.
DEFAULT_ADAPT_CONFIG = TrainConfig(epochs=1.0, time_budget_min=20.0, lr=3e-4, warmup_steps=20)


def protected_pairs(
    defense: Any, *, encoder: Any, texts: Sequence[str], n_pairs: int, seed: int = 0,
    cache_dir: str | os.PathLike[str] | None = None, batch: int = 4096, progress: bool = True,
) -> tuple[list[str], np.ndarray]:
    """``n_pairs`` ``(text, defense.protect(encoder.encode(text)))`` pairs from the attacker's ``texts``."""
    if n_pairs <= 0:
        raise ValueError("n_pairs must be positive")
    texts = list(texts)
    if not texts:
        raise ValueError("the adaptive attacker needs some texts of its own")
    clean = cached_embeddings(encoder, texts, cache_dir=cache_dir, progress=progress)
    rng = np.random.default_rng(seed)
    idx = np.concatenate([rng.permutation(len(texts)) for _ in range(-(-n_pairs // len(texts)))])[:n_pairs]
    prot = np.concatenate([defense.protect(clean[idx[s : s + batch]]) for s in range(0, len(idx), batch)], 0)
    return [texts[i] for i in idx], prot.astype(np.float32)


def adapt_inverter(
    inverter: Inverter, defense: Any, *, encoder: Any, texts: Sequence[str], n_pairs: int = 30_000,
    train_config: TrainConfig | None = None, cache_dir: str | os.PathLike[str] | None = None, seed: int = 0,
    progress: bool = True,
) -> tuple[Inverter, dict[str, Any]]:
    """Fine-tune a copy of ``inverter`` on ``n_pairs`` protected pairs of the attacker's texts.

    The result is cached under ``cache_dir`` keyed by the clean inverter, the defense (spec and policy
    weights), the texts, ``n_pairs``, ``seed`` and ``train_config`` (:func:`~.cache.adapted_key`), so one
    attacker adapted to a deployed defense is reused on every victim set, as a real attacker would.

    Returns:
        ``(adapted_inverter, info)`` with ``n_pairs``, ``pairs_seen``, ``adapt_minutes`` (incl. querying the
        defense) and ``adapt_train_minutes``.
    """
    tc = train_config or DEFAULT_ADAPT_CONFIG
    d = cache_root(cache_dir) / f"adapted-{adapted_key(inverter, defense, texts, n_pairs=n_pairs, seed=seed, train_config=tc)}"
    if (d / "model.safetensors").is_file() and (d / "config.json").is_file():
        cached = Inverter.load(d, device=inverter.device)
        return cached, {k: cached.meta["adaptive"][k] for k in ("n_pairs", "pairs_seen", "adapt_train_minutes",
                                                                "adapt_minutes")}
    t0 = time.time()
    pair_texts, prot = protected_pairs(defense, encoder=encoder, texts=texts, n_pairs=n_pairs, seed=seed,
                                       cache_dir=cache_dir, progress=progress)
    adapted = Inverter(copy.deepcopy(inverter.model), inverter.tokenizer, inverter.vocab_ids,
                       meta=copy.deepcopy(inverter.meta), device=inverter.device)
    summary = adapted.fit(prot, pair_texts, train_config=tc, progress=progress, desc="adapt inverter")
    info = {
        "n_pairs": int(n_pairs), "pairs_seen": int(min(summary["steps"] * tc.batch_size, n_pairs * max(tc.epochs, 1))),
        "adapt_train_minutes": summary["train_minutes"], "adapt_minutes": (time.time() - t0) / 60,
    }
    adapted.meta["adaptive"] = {**info, "defense": getattr(defense, "spec", lambda: repr(defense))()}
    adapted.save(d)
    return adapted, info
