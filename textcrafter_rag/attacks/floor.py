"""Floor attackers: what an attacker scores without looking at the embedding at all.

* ``constant``: one fixed string, chosen on the attacker's training text as the best (by mean
  token-F1) among frequent-token strings and frequent training sentences.
* ``random_sentence``: a random training sentence for each target.

A defense is only meaningful down to these floors: an inverter at floor level learned nothing.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..metrics import text_privacy_metrics, token_f1, word_tokens

__all__ = ["best_constant", "floor_metrics", "random_sentences"]


def best_constant(train_texts: Sequence[str], *, n_eval: int = 1000, n_sentences: int = 200, seed: int = 0) -> str:
    """The constant string with the highest mean token-F1 on (a sample of) ``train_texts``."""
    rng = random.Random(seed)
    texts = list(train_texts)
    sample = rng.sample(texts, min(n_eval, len(texts)))
    counts = Counter(t for s in texts for t in word_tokens(s))
    ranked = [t for t, _ in counts.most_common(40)]
    cands = [" ".join(ranked[:k]) for k in range(1, len(ranked) + 1)]
    cands += rng.sample(texts, min(n_sentences, len(texts)))
    scores = [token_f1(sample, [c] * len(sample)) for c in cands]
    return cands[int(np.argmax(scores))]


def random_sentences(train_texts: Sequence[str], n: int, *, seed: int = 0) -> list[str]:
    """``n`` training sentences drawn at random (with replacement)."""
    rng = random.Random(seed)
    texts = list(train_texts)
    return [rng.choice(texts) for _ in range(n)]


def floor_metrics(
    train_texts: Sequence[str],
    test_texts: Sequence[str],
    *,
    encoder: Any = None,
    clean_embeddings: np.ndarray | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Metrics of both floor attackers on ``test_texts``: ``{"constant": {...}, "random_sentence": {...}}``.

    The ``constant`` entry also holds the chosen string under ``text``.
    """
    const = best_constant(train_texts, seed=seed)
    test = list(test_texts)
    out: dict[str, Any] = {
        "constant": {
            **text_privacy_metrics(test, [const] * len(test), encoder=encoder, clean_embeddings=clean_embeddings),
            "text": const,
        },
        "random_sentence": text_privacy_metrics(
            test,
            random_sentences(train_texts, len(test), seed=seed),
            encoder=encoder,
            clean_embeddings=clean_embeddings,
        ),
    }
    return out


def flat_floor(floor: dict[str, Any]) -> dict[str, float]:
    """``floor_<metric>``: the best of the floor attackers per metric (flat keys for result rows)."""
    keys = ("bleu", "token_f1", "exact_match", "rouge_l", "content_f1", "cosine")
    return {f"floor_{k}": max(float(floor[a][k]) for a in ("constant", "random_sentence")) for k in keys}


__all__.append("flat_floor")
