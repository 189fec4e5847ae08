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

from ..errors import InvalidInputError
from ..metrics import text_privacy_metrics, word_tokens

__all__ = ["best_constant", "constant_token_f1", "floor_metrics", "random_sentences"]


def best_constant(train_texts: Sequence[str], *, n_eval: int = 1000, n_sentences: int = 200, seed: int = 0) -> str:
    """The constant string with the highest mean token-F1 on (a sample of) ``train_texts``."""
    rng = random.Random(seed)
    texts = list(train_texts)
    sample = rng.sample(texts, min(n_eval, len(texts)))
    counts = Counter(t for s in texts for t in word_tokens(s))
    ranked = [t for t, _ in counts.most_common(40)]
    cands = [" ".join(ranked[:k]) for k in range(1, len(ranked) + 1)]
    cands += rng.sample(texts, min(n_sentences, len(texts)))
    return cands[int(np.argmax(constant_token_f1(sample, cands)))]


def constant_token_f1(references: Sequence[str], constants: Sequence[str]) -> np.ndarray:
    """``token_f1(references, [c] * len(references))`` for every ``c`` in ``constants``, in one pass.

    Scoring each candidate constant string sentence by sentence costs a Counter intersection per pair
    (minutes on a benchmark's 1,000 x 240 pairs, once per attacked cell). Here both sides become token
    counts over the candidates' vocabulary (a token no candidate holds can never be shared), and the
    shared count ``sum_t min(r_t, c_t)`` is ``sum_k [r >= k] . [c >= k]``: one matrix product per count level.
    """
    refs, consts = [word_tokens(r) for r in references], [word_tokens(c) for c in constants]
    if not refs or not consts:
        raise InvalidInputError("need references and constants to score")
    vocab = {t: j for j, t in enumerate(dict.fromkeys(t for c in consts for t in c))}

    def counts(rows: list[list[str]]) -> np.ndarray:
        m = np.zeros((len(rows), max(len(vocab), 1)), dtype=np.int32)
        for i, row in enumerate(rows):
            for t in row:
                j = vocab.get(t)
                if j is not None:
                    m[i, j] += 1
        return m

    r, c = counts(refs), counts(consts)
    common = np.zeros((len(consts), len(refs)))
    for k in range(1, int(min(r.max(), c.max())) + 1):
        cols = np.flatnonzero((c >= k).any(axis=0))
        common += (c[:, cols] >= k).astype(np.float64) @ (r[:, cols] >= k).astype(np.float64).T
    len_c = np.array([len(t) for t in consts], dtype=np.float64)[:, None]
    len_r = np.array([len(t) for t in refs], dtype=np.float64)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        prec, rec = common / len_c, common / len_r
        f1 = np.where(common > 0, 2 * prec * rec / (prec + rec), 0.0)
    f1 = np.where((len_c == 0) & (len_r == 0), 1.0, f1)  # two empty token lists agree (as ``token_f1``)
    return 100.0 * f1.mean(axis=1)


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
