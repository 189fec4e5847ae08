"""The attacker's own texts: WikiText-2 when the benchmark data is present, else BBC News plus synthetic PII.

``textcrafter attack`` and ``textcrafter audit`` both draw the attacker's training texts here, so an
audit's attacker is the one the benchmarks measure.
"""

from __future__ import annotations

import os
import random

from ..data import DatasetNotFoundError, bbc_sentences, find_data_dir, wikitext_sentences
from .pii_probe import pii_sentences

__all__ = ["attack_texts"]


def attack_texts(data_dir: str | os.PathLike[str] | None, *, seed: int = 0) -> tuple[list[str], list[str], str]:
    """``(train_texts, test_texts, source)``: WikiText-2 when the data directory exists, else BBC + synthetic PII."""
    path = find_data_dir(data_dir)
    if path is not None and (path / "wikitext2").is_dir():
        try:
            return wikitext_sentences("train", data_dir=path), wikitext_sentences("test", data_dir=path), "wikitext2"
        except DatasetNotFoundError:
            pass
    texts = bbc_sentences() + pii_sentences(3000, seed=seed + 101)
    random.Random(seed).shuffle(texts)
    n_test = min(1000, len(texts) // 10)
    return texts[n_test:], texts[:n_test], "bbc+synthetic-pii"
