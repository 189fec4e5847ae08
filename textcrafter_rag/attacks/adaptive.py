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

from ..artifacts import CONFIG_NAME
from ..errors import ArtifactError, InvalidInputError
from .cache import adapted_key, attacker_embeddings, cache_root
from .config import DEFAULT_ADAPT_CONFIG
from .inverter import Inverter, InverterTrainingConfig

__all__ = ["DEFAULT_ADAPT_CONFIG", "adapt_inverter", "protected_pairs", "query_defense"]

_INFO_KEYS = ("n_pairs", "pairs_seen", "adapt_train_minutes", "adapt_minutes")


def query_defense(defense: Any, vectors: np.ndarray, *, batch: int = 4096) -> np.ndarray:
    """``defense.protect(vectors)`` in batches of ``batch`` rows: the attacker's black-box access.

    Batching bounds the memory of a learned policy on many rows; the defense is called exactly
    once per row, so a randomised defense draws fresh noise for every row.
    """
    x = np.asarray(vectors)
    return np.concatenate([defense.protect(x[s : s + batch]) for s in range(0, len(x), batch)], 0)


def protected_pairs(
    defense: Any,
    *,
    encoder: Any,
    texts: Sequence[str],
    n_pairs: int,
    seed: int = 0,
    cache_dir: str | os.PathLike[str] | None = None,
    batch: int = 4096,
    progress: bool = True,
) -> tuple[list[str], np.ndarray]:
    """``n_pairs`` ``(text, defense.protect(encoder.encode(text)))`` pairs from the attacker's ``texts``."""
    if n_pairs <= 0:
        raise InvalidInputError("n_pairs must be positive")
    texts = list(texts)
    if not texts:
        raise InvalidInputError("the adaptive attacker needs some texts of its own")
    rng = np.random.default_rng(seed)
    idx = np.concatenate([rng.permutation(len(texts)) for _ in range(-(-n_pairs // len(texts)))])[:n_pairs]
    # Only the texts drawn are embedded (all of them once the budget covers the corpus): a few pairs from a
    # large corpus must not cost the whole corpus's encoding.
    drawn, where = np.unique(idx, return_inverse=True)
    clean = attacker_embeddings(encoder, [texts[i] for i in drawn], cache_dir=cache_dir, progress=progress)
    prot = query_defense(defense, clean[where], batch=batch)
    return [texts[i] for i in idx], prot.astype(np.float32)


def adapt_inverter(
    inverter: Inverter,
    defense: Any,
    *,
    encoder: Any,
    texts: Sequence[str],
    n_pairs: int = 30_000,
    train_config: InverterTrainingConfig | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
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
    key = adapted_key(inverter, defense, texts, n_pairs=n_pairs, seed=seed, train_config=tc)
    d = cache_root(cache_dir) / f"adapted-{key}"
    if (d / CONFIG_NAME).is_file():  # written last by save(): a complete entry (a corrupted one is refused)
        cached = Inverter.load(d, device=inverter.device)
        try:
            return cached, {k: cached.meta["adaptive"][k] for k in _INFO_KEYS}
        except (KeyError, TypeError):
            raise ArtifactError(f"{d} holds no adaptive-attack record; it is not an adapted inverter") from None
    t0 = time.time()
    pair_texts, prot = protected_pairs(
        defense, encoder=encoder, texts=texts, n_pairs=n_pairs, seed=seed, cache_dir=cache_dir, progress=progress
    )
    adapted = Inverter(
        copy.deepcopy(inverter.model),
        inverter.tokenizer,
        inverter.vocab_ids,
        meta=copy.deepcopy(inverter.meta),
        device=inverter.device,
    )
    summary = adapted.fit(prot, pair_texts, train_config=tc, progress=progress, desc="adapt inverter")
    info = {
        "n_pairs": int(n_pairs),
        "pairs_seen": int(min(summary["steps"] * tc.batch_size, n_pairs * max(tc.epochs, 1))),
        "adapt_train_minutes": summary["train_minutes"],
        "adapt_minutes": (time.time() - t0) / 60,
    }
    adapted.meta["adaptive"] = {**info, "defense": getattr(defense, "spec", lambda: repr(defense))()}
    adapted.save(d)
    return adapted, info
