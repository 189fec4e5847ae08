"""Evaluation metrics: text reconstruction (privacy), classification and retrieval (utility).

Text metrics are case-insensitive (an inverter built on an uncased tokenizer cannot recover
case). BLEU is sacrebleu's corpus BLEU (``13a`` tokenisation, lowercased); ROUGE-L is
``rouge-score``'s F-measure. Token-F1 is the SQuAD-style multiset F1 per sentence over
lowercased word/punctuation tokens (``\\w+|[^\\w\\s]``), averaged over sentences; content-F1 is
the same after removing scikit-learn's English stop words and punctuation. All text metrics
are on a 0-100 scale.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .errors import InvalidInputError
from .extras import missing_extra

__all__ = [
    "word_tokens",
    "content_tokens",
    "corpus_bleu",
    "token_f1",
    "content_f1",
    "exact_match",
    "rouge_l",
    "embedding_cosine",
    "text_privacy_metrics",
    "classification_metrics",
    "retrieval_metrics",
]

_TOKEN = re.compile(r"\w+|[^\w\s]")


def word_tokens(text: str) -> list[str]:
    """Lowercased word and punctuation tokens."""
    return _TOKEN.findall(text.lower())


def content_tokens(text: str) -> list[str]:
    """Lowercased word tokens without English stop words and punctuation."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return [t for t in word_tokens(text) if re.search(r"\w", t) and t not in ENGLISH_STOP_WORDS and t != "_"]


def _check_pair(references: Sequence[str], predictions: Sequence[str]) -> None:
    if len(references) != len(predictions):
        raise InvalidInputError(f"{len(references)} references but {len(predictions)} predictions")
    if not references:
        raise InvalidInputError("no sentences to score")


def _f1(ref: list[str], pred: list[str]) -> float:
    if not ref and not pred:
        return 1.0
    if not ref or not pred:
        return 0.0
    common = sum((Counter(ref) & Counter(pred)).values())
    if common == 0:
        return 0.0
    p, r = common / len(pred), common / len(ref)
    return 2 * p * r / (p + r)


def corpus_bleu(references: Sequence[str], predictions: Sequence[str]) -> float:
    """Corpus BLEU (sacrebleu, lowercased, 0-100)."""
    try:
        import sacrebleu
    except ImportError as exc:
        raise missing_extra("sacrebleu", extra="audit", purpose="BLEU") from exc

    _check_pair(references, predictions)
    return float(sacrebleu.corpus_bleu(list(predictions), [list(references)], lowercase=True).score)


def token_f1(references: Sequence[str], predictions: Sequence[str]) -> float:
    """Mean per-sentence token F1 over lowercased word tokens (0-100)."""
    _check_pair(references, predictions)
    return 100.0 * float(np.mean([_f1(word_tokens(r), word_tokens(p)) for r, p in zip(references, predictions)]))


def content_f1(references: Sequence[str], predictions: Sequence[str]) -> float:
    """Mean per-sentence token F1 after removing stop words and punctuation (0-100)."""
    _check_pair(references, predictions)
    return 100.0 * float(np.mean([_f1(content_tokens(r), content_tokens(p)) for r, p in zip(references, predictions)]))


def exact_match(references: Sequence[str], predictions: Sequence[str]) -> float:
    """Share of predictions whose lowercased token sequence equals the reference's (0-100)."""
    _check_pair(references, predictions)
    return 100.0 * float(np.mean([word_tokens(r) == word_tokens(p) for r, p in zip(references, predictions)]))


def rouge_l(references: Sequence[str], predictions: Sequence[str]) -> float:
    """Mean ROUGE-L F-measure (rouge-score, 0-100)."""
    try:
        from rouge_score import rouge_scorer
    except ImportError as exc:
        raise missing_extra("rouge-score", extra="audit", purpose="ROUGE-L") from exc

    _check_pair(references, predictions)
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    return 100.0 * float(np.mean([scorer.score(r, p)["rougeL"].fmeasure for r, p in zip(references, predictions)]))


def embedding_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Mean row-wise cosine similarity of two ``(n, D)`` arrays."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise InvalidInputError(f"shape mismatch {a.shape} vs {b.shape}")
    num = np.sum(a * b, axis=1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return float(np.mean(num / np.maximum(den, 1e-12)))


def text_privacy_metrics(
    references: Sequence[str],
    predictions: Sequence[str],
    *,
    encoder: Any = None,
    clean_embeddings: np.ndarray | None = None,
) -> dict[str, float]:
    """All reconstruction metrics: ``bleu, token_f1, exact_match, rouge_l, content_f1, cosine``.

    Args:
        references: The true texts.
        predictions: The attacker's reconstructions.
        encoder: Re-embeds the predictions for ``cosine`` (``nan`` when ``None``).
        clean_embeddings: Clean embeddings of ``references``; computed with ``encoder`` if ``None``.
    """
    _check_pair(references, predictions)
    out = {
        "bleu": corpus_bleu(references, predictions),
        "token_f1": token_f1(references, predictions),
        "exact_match": exact_match(references, predictions),
        "rouge_l": rouge_l(references, predictions),
        "content_f1": content_f1(references, predictions),
        "cosine": math.nan,
    }
    if encoder is not None:
        clean = clean_embeddings if clean_embeddings is not None else encoder.encode(list(references))
        preds = [p if p.strip() else "." for p in predictions]
        out["cosine"] = embedding_cosine(encoder.encode(preds), clean)
    return out


def classification_metrics(y_true: Sequence[Any], y_pred: Sequence[Any]) -> dict[str, float]:
    """Accuracy and macro-F1 (scikit-learn, 0-100)."""
    from sklearn.metrics import accuracy_score, f1_score

    return {
        "accuracy": 100.0 * float(accuracy_score(y_true, y_pred)),
        "macro_f1": 100.0 * float(f1_score(y_true, y_pred, average="macro")),
    }


def retrieval_metrics(
    ranked: Mapping[str, Sequence[str]], qrels: Mapping[str, set[str]], *, ks: Sequence[int] = (1, 5, 10, 100)
) -> dict[str, float]:
    """Recall@k, MRR@10 and NDCG@10 (binary relevance, 0-100), averaged over judged queries.

    Args:
        ranked: Query id -> doc ids, best first.
        qrels: Query id -> relevant doc ids. Queries without relevant docs are skipped; a judged
            query missing from ``ranked`` scores 0.
    """
    qids = [q for q, rel in qrels.items() if rel]
    if not qids:
        raise InvalidInputError("qrels has no query with a relevant document")
    recall = {k: [] for k in ks}
    mrr, ndcg = [], []
    for q in qids:
        rel = qrels[q]
        docs = list(ranked.get(q, []))
        for k in ks:
            recall[k].append(len(rel & set(docs[:k])) / len(rel))
        rr = 0.0
        for i, d in enumerate(docs[:10]):
            if d in rel:
                rr = 1.0 / (i + 1)
                break
        mrr.append(rr)
        dcg = sum(1.0 / math.log2(i + 2) for i, d in enumerate(docs[:10]) if d in rel)
        idcg = sum(1.0 / math.log2(i + 2) for i in range(min(len(rel), 10)))
        ndcg.append(dcg / idcg)
    out = {f"recall@{k}": 100.0 * float(np.mean(v)) for k, v in recall.items()}
    out["mrr@10"] = 100.0 * float(np.mean(mrr))
    out["ndcg@10"] = 100.0 * float(np.mean(ndcg))
    return out
