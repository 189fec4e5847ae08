"""The attacker's own texts: WikiText-2 when the benchmark data is present, else BBC News plus synthetic PII.

``textcrafter attack`` and ``textcrafter audit`` both draw the attacker's training texts here, so an
audit's attacker is the one the benchmarks measure. :func:`public_corpus` assembles the stronger
attacker's training set: every public corpus available offline (the train splits of the benchmark
datasets, WikiText-2 valid, BBC News, SciFact abstracts), deduplicated against every test split.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..data import (
    DatasetNotFoundError,
    bbc_sentences,
    find_data_dir,
    load_classification,
    load_scifact,
    split_sentences,
    wikitext_sentences,
)
from ..errors import InvalidInputError
from .pii_probe import pii_sentences

__all__ = ["PUBLIC_SOURCES", "TEST_SETS", "PublicCorpus", "attack_texts", "normalise", "public_corpus"]


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


def _sentences(texts: Sequence[str], *, min_words: int = 5, max_words: int = 40) -> list[str]:
    """Sentences of ``texts`` with ``min_words``..``max_words`` words (the rule of the WikiText-2 loader)."""
    out = []
    for text in texts:
        for sent in split_sentences(" ".join(text.split())):
            if min_words <= len(sent.split()) <= max_words:
                out.append(sent)
    return out


def _classification(name: str, split: str) -> Callable[[Any], list[str]]:
    return lambda data_dir: _sentences(load_classification(name, split, data_dir=data_dir)[0])


def _scifact_abstracts(data_dir: Any) -> list[str]:
    return _sentences(load_scifact(data_dir=data_dir).docs)


def _scifact_queries(data_dir: Any) -> list[str]:
    out: list[str] = []
    for split in ("train", "test"):
        try:
            out += load_scifact(data_dir=data_dir, split=split).queries
        except DatasetNotFoundError:
            continue
    if not out:
        raise DatasetNotFoundError("no SciFact queries")
    return out


#: Public training text, by name: never a test split. SciFact's abstracts are its retrieval corpus (the
#: benchmarks' ``scifact`` victims are sentences of them): leave ``scifact-abstracts`` out to attack those.
PUBLIC_SOURCES: dict[str, Callable[[Any], list[str]]] = {
    "wikitext2-train": lambda data_dir: wikitext_sentences("train", data_dir=data_dir),
    "wikitext2-valid": lambda data_dir: wikitext_sentences("valid", data_dir=data_dir),
    "bbc": lambda data_dir: bbc_sentences(),
    "sst2-train": _classification("sst2", "train"),
    "ag_news-train": _classification("ag_news", "train"),
    "financial_phrasebank-train": _classification("financial_phrasebank", "train"),
    "ade-train": _classification("ade", "train"),
    "scifact-abstracts": _scifact_abstracts,
}

#: Every test split a victim may come from; no training text matches one of them (exactly or normalised).
TEST_SETS: dict[str, Callable[[Any], list[str]]] = {
    "wikitext2-test": lambda data_dir: wikitext_sentences("test", data_dir=data_dir),
    "sst2-dev": lambda data_dir: [
        " ".join(t.split()) for t in load_classification("sst2", "test", data_dir=data_dir)[0]
    ],
    "ag_news-test": lambda data_dir: load_classification("ag_news", "test", data_dir=data_dir)[0],
    "financial_phrasebank-test": lambda data_dir: load_classification(
        "financial_phrasebank", "test", data_dir=data_dir
    )[0],
    "ade-test": lambda data_dir: load_classification("ade", "test", data_dir=data_dir)[0],
    "scifact-queries": _scifact_queries,
}


def normalise(text: str) -> str:
    """The form texts are deduplicated in: whitespace collapsed, lowercased."""
    return " ".join(text.split()).lower()


@dataclass
class PublicCorpus:
    """The attacker's public training sentences, the test splits they were checked against, and the counts.

    Attributes:
        train: Training sentences, deduplicated (normalised) and none equal to a test text or sentence.
        tests: Each test split's texts (whole texts and their sentences were both excluded from ``train``).
        report: Per source ``raw`` (sentences read), ``kept`` (after deduplication) and the removals:
            ``dup_exact`` / ``dup_normalised`` (an earlier training sentence), ``test_exact`` /
            ``test_normalised`` (a test text), ``too_long`` (over ``max_tokens`` when a length filter is given);
            plus ``missing`` sources and the test-split sizes.
    """

    train: list[str]
    tests: dict[str, list[str]]
    report: dict[str, Any] = field(default_factory=dict)


def public_corpus(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    sources: Sequence[str] | None = None,
    tests: Sequence[str] | None = None,
    fits: Callable[[list[str]], list[bool]] | None = None,
    max_per_source: int | None = None,
) -> PublicCorpus:
    """Every public training sentence available offline, deduplicated against every test split.

    Args:
        data_dir: The benchmark datasets (see :func:`textcrafter_rag.data.find_data_dir`).
        sources: Names of :data:`PUBLIC_SOURCES` (default all); a source whose files are missing is skipped
            and listed in ``report["missing"]``.
        tests: Names of :data:`TEST_SETS` to exclude (default all; a missing one is listed too).
        fits: Keeps a sentence when true (e.g. at most the inverter's ``max_len`` WordPieces).
        max_per_source: Look at most this many deduplicated sentences per source (smoke runs), in source order.

    A test text matches when equal to a training sentence exactly or after :func:`normalise`; the
    sentences of multi-sentence test texts are excluded as well.
    """
    names = list(PUBLIC_SOURCES) if sources is None else list(sources)
    test_names = list(TEST_SETS) if tests is None else list(tests)
    unknown = sorted(set(names) - set(PUBLIC_SOURCES)) + sorted(set(test_names) - set(TEST_SETS))
    if unknown:
        raise InvalidInputError(
            f"unknown corpus names {unknown}; sources: {sorted(PUBLIC_SOURCES)}, tests: {sorted(TEST_SETS)}"
        )
    missing: list[str] = []
    held: dict[str, list[str]] = {}
    for name in test_names:
        try:
            held[name] = TEST_SETS[name](data_dir)
        except (DatasetNotFoundError, ImportError):
            missing.append(name)
    test_exact = {t for texts in held.values() for t in texts}
    test_exact |= {s for texts in held.values() for t in texts for s in _sentences([t], min_words=1, max_words=10**6)}
    test_norm = {normalise(t) for t in test_exact}
    seen_exact: set[str] = set()
    seen_norm: set[str] = set()
    train: list[str] = []
    per_source: dict[str, dict[str, int]] = {}
    for name in names:
        try:
            raw = PUBLIC_SOURCES[name](data_dir)
        except (DatasetNotFoundError, ImportError):
            missing.append(name)
            continue
        counts = dict.fromkeys(("dup_exact", "dup_normalised", "test_exact", "test_normalised", "too_long"), 0)
        counts["raw"] = len(raw)
        kept: list[str] = []
        for text in raw:
            norm = normalise(text)
            if text in test_exact:
                counts["test_exact"] += 1
            elif norm in test_norm:
                counts["test_normalised"] += 1
            elif text in seen_exact:
                counts["dup_exact"] += 1
            elif norm in seen_norm:
                counts["dup_normalised"] += 1
            else:
                seen_exact.add(text)
                seen_norm.add(norm)
                kept.append(text)
        if max_per_source is not None:
            kept = kept[:max_per_source]
        if fits is not None and kept:
            ok = fits(kept)
            counts["too_long"] = len(kept) - sum(bool(k) for k in ok)
            kept = [t for t, k in zip(kept, ok) if k]
        counts["kept"] = len(kept)
        per_source[name] = counts
        train.extend(kept)
    report = {
        "sources": per_source,
        "n_train": len(train),
        "tests": {name: len(texts) for name, texts in held.items()},
        "missing": missing,
        "dedup": "exact and normalised (whitespace collapsed, lowercased) against every test text and its "
        "sentences, and across training sources",
    }
    return PublicCorpus(train=train, tests=held, report=report)
