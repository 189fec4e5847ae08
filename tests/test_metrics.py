from __future__ import annotations

import math

import numpy as np
import pytest

from textcrafter_rag.metrics import (
    classification_metrics,
    content_f1,
    corpus_bleu,
    embedding_cosine,
    exact_match,
    retrieval_metrics,
    rouge_l,
    text_privacy_metrics,
    token_f1,
)


def test_token_f1_hand_checked():
    # ref tokens: the cat sat on the mat . (7); pred: the cat sat . (4) -> P=1, R=4/7, F1=8/11
    assert token_f1(["The cat sat on the mat."], ["the cat sat."]) == pytest.approx(100 * 8 / 11)
    assert token_f1(["a b", "x"], ["a b", "y"]) == pytest.approx(50.0)


def test_content_f1_drops_stop_words_and_punctuation():
    # content: cat sat mat vs cat sat -> P=1, R=2/3, F1=0.8
    assert content_f1(["The cat sat on the mat."], ["the cat sat."]) == pytest.approx(80.0)
    assert content_f1(["The cat."], ["the the of , ."]) == pytest.approx(0.0)


def test_exact_match_ignores_case_and_spacing():
    assert exact_match(["Hello, world!", "a b"], ["hello , world !", "a c"]) == pytest.approx(50.0)


def test_bleu_hand_checked():
    # all n-gram precisions are 1; brevity penalty exp(1 - 5/4)
    assert corpus_bleu(["a b c d e"], ["a b c d"]) == pytest.approx(100 * math.exp(-0.25), abs=0.01)
    assert corpus_bleu(["The cat sat."], ["the cat sat."]) == pytest.approx(100.0)
    assert corpus_bleu(["one two three four"], ["five six seven eight"]) == pytest.approx(0.0)


def test_rouge_l_hand_checked():
    # LCS 3, P=1, R=3/4 -> F=6/7
    assert rouge_l(["the quick brown fox"], ["the brown fox"]) == pytest.approx(100 * 6 / 7)


def test_length_mismatch_raises():
    with pytest.raises(ValueError):
        token_f1(["a"], ["a", "b"])


class _FakeEncoder:
    def encode(self, texts):
        return np.asarray([[len(t), 1.0] for t in texts], dtype=np.float32)


def test_text_privacy_metrics_keys_and_cosine():
    m = text_privacy_metrics(["abc", "de"], ["abc", "de"], encoder=_FakeEncoder())
    assert set(m) == {"bleu", "token_f1", "exact_match", "rouge_l", "content_f1", "cosine"}
    assert m["token_f1"] == pytest.approx(100.0) and m["cosine"] == pytest.approx(1.0)
    assert math.isnan(text_privacy_metrics(["a"], ["b"])["cosine"])
    assert embedding_cosine(np.array([[1.0, 0.0]]), np.array([[0.0, 2.0]])) == pytest.approx(0.0)


def test_classification_hand_checked():
    m = classification_metrics([0, 1, 1, 0], [0, 1, 0, 0])
    assert m["accuracy"] == pytest.approx(75.0)
    assert m["macro_f1"] == pytest.approx(100 * (0.8 + 2 / 3) / 2)


def test_retrieval_hand_checked():
    qrels = {"q1": {"d1"}, "q2": {"d2", "d3"}}
    ranked = {"q1": ["d5", "d1", "d7"], "q2": ["d2", "d9", "d3"]}
    m = retrieval_metrics(ranked, qrels, ks=(1, 5))
    assert m["recall@1"] == pytest.approx(25.0)
    assert m["recall@5"] == pytest.approx(100.0)
    assert m["mrr@10"] == pytest.approx(75.0)
    q1 = 1 / math.log2(3)
    q2 = (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    assert m["ndcg@10"] == pytest.approx(100 * (q1 + q2) / 2)
