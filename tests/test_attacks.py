from __future__ import annotations

import argparse
import os

import numpy as np
import pytest
from _textcrafter_helpers import TINY_INVERTER_SENTENCES

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from textcrafter_rag.attacks import (
    AttackConfig,
    Inverter,
    InverterTrainingConfig,
    KeywordAttack,
    PIIProbe,
    adapt_inverter,
    best_constant,
    constant_token_f1,
    evaluate_attacks,
    pii_dataset,
    protected_pairs,
    rerank,
)
from textcrafter_rag.attacks.cli import add_attack_command
from textcrafter_rag.attacks.correction import Corrector
from textcrafter_rag.encoders import bundled_minilm
from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.mechanisms import GaussianNoise, Mechanism
from textcrafter_rag.metrics import token_f1

SENTENCES = TINY_INVERTER_SENTENCES


@pytest.fixture(scope="module")
def encoder():
    return bundled_minilm()


@pytest.fixture(scope="module")
def tiny(encoder, tiny_inverter):
    return tiny_inverter, encoder.encode(SENTENCES)


def test_tiny_inverter_overfits(tiny):
    inv, emb = tiny
    assert inv.invert(emb) == SENTENCES
    assert inv.invert(emb, beam=3) == SENTENCES


def test_save_load_round_trip(tiny, tmp_path):
    inv, emb = tiny
    d = inv.save(tmp_path / "inv")
    assert (d / "config.json").is_file() and (d / "model.safetensors").is_file()
    assert not list(d.rglob("*.bin")) and not list(d.rglob("*.pkl"))
    loaded = Inverter.load(d, device="cpu")
    assert loaded.config == inv.config
    assert loaded.invert(emb, beam=2) == inv.invert(emb, beam=2)


def test_rerank_picks_closest(encoder):
    target = encoder.encode(["a dog barks loudly."])
    best, cos = rerank([["stock markets fell.", "a dog barks loudly.", "rain"]], target, encoder.encode)
    assert best == ["a dog barks loudly."] and cos[0] == pytest.approx(1.0, abs=1e-4)


def test_corrector_shapes(tiny, encoder):
    inv, emb = tiny
    corr = Corrector.from_inverter(inv)
    steps = []
    out = corr.correct(
        emb, ["x"] * len(SENTENCES), encoder.encode, steps=1, beam=2, on_step=lambda s, t, c: steps.append((s, c))
    )
    assert len(out) == len(SENTENCES) and steps[0][0] == 1 and len(steps[0][1]) == len(SENTENCES)


class RecordingDefense(Mechanism):
    name = "recording"

    def __init__(self) -> None:
        super().__init__(seed=0)
        self.calls: list[np.ndarray] = []

    def _protect(self, x):
        self.calls.append(x.copy())
        return x + 0.01


def test_a_few_pairs_from_a_large_corpus_encode_only_the_texts_drawn(encoder, tmp_path):
    class CountingEncoder:
        model_id = "counting"

        def __init__(self) -> None:
            self.seen: list[str] = []

        def encode(self, texts, **kwargs):
            self.seen += list(texts)
            return encoder.encode(list(texts))

    corpus = [f"sentence number {i} of the attacker." for i in range(200)]
    counting, defense = CountingEncoder(), RecordingDefense()
    texts, prot = protected_pairs(defense, encoder=counting, texts=corpus, n_pairs=4, cache_dir=tmp_path)
    assert len(texts) == 4 and prot.shape == (4, 384) and len(set(texts)) == 4
    assert sorted(counting.seen) == sorted(texts)
    np.testing.assert_allclose(np.concatenate(defense.calls), encoder.encode(texts), atol=1e-5)


def test_adaptive_queries_defense_on_attacker_texts(tiny, encoder, tmp_path):
    inv, _ = tiny
    attacker_texts = ["a cat sat on a wall.", "ships sail at dawn.", "the bank raised rates."]
    defense = RecordingDefense()
    texts, prot = protected_pairs(defense, encoder=encoder, texts=attacker_texts, n_pairs=5, cache_dir=tmp_path)
    assert len(texts) == 5 and prot.shape == (5, 384) and set(texts) <= set(attacker_texts)
    seen = np.concatenate(defense.calls)
    np.testing.assert_allclose(seen, encoder.encode(texts), atol=1e-5)
    np.testing.assert_allclose(prot, seen + 0.01, atol=1e-6)

    defense.calls.clear()
    adapted, info = adapt_inverter(
        inv,
        defense,
        encoder=encoder,
        texts=attacker_texts,
        n_pairs=6,
        cache_dir=tmp_path,
        train_config=InverterTrainingConfig(batch_size=3, epochs=1, time_budget_min=None, bf16=False),
        progress=False,
    )
    assert defense.calls and sum(len(c) for c in defense.calls) == 6
    assert info["n_pairs"] == 6 and adapted is not inv and adapted.model is not inv.model


def _bow_embed(texts, vocab, dim=64, seed=0):
    rng = np.random.default_rng(seed)
    vecs = {w: rng.normal(size=dim) for w in vocab}
    return np.asarray([sum(vecs[w] for w in t.split() if w in vecs) + 1e-3 for t in texts], dtype=np.float32)


def test_keyword_attack_easy_task():
    rng = np.random.default_rng(0)
    vocab = [f"word{i}" for i in range(20)]
    texts = [" ".join(rng.choice(vocab, size=3, replace=False)) for _ in range(600)]
    emb = _bow_embed(texts, vocab)
    ka = KeywordAttack(vocab_size=20, epochs=40, batch_size=64, seed=0).fit(emb[:500], texts[:500])
    m = ka.evaluate(emb[500:], texts[500:])
    assert m["keyword_f1"] > 80 and set(m) == {"keyword_precision", "keyword_recall", "keyword_f1"}
    assert all(p <= set(vocab) for p in ka.predict(emb[500:510]))


def test_pii_probe_easy_task():
    from sklearn.feature_extraction.text import HashingVectorizer

    texts, labels = pii_dataset(400, ["plain sentence number one.", "another plain line here."], seed=0)
    assert 0.45 < labels.mean() < 0.55
    hv = HashingVectorizer(n_features=256, analyzer="char_wb", ngram_range=(1, 2), alternate_sign=False)
    x = hv.transform(texts).toarray().astype(np.float32)
    probe = PIIProbe(seed=0).fit(x[:300], labels[:300])
    auc = probe.evaluate(x[300:], labels[300:])["pii_auc"]
    assert auc > 0.9
    noise = np.random.default_rng(1).normal(size=x.shape).astype(np.float32)
    assert (
        abs(PIIProbe(seed=0).fit(noise[:300], labels[:300]).evaluate(noise[300:], labels[300:])["pii_auc"] - 0.5) < 0.2
    )


def test_best_constant_is_frequent_text():
    const = best_constant(["the cat sat", "the dog ran", "the sun rose"] * 5)
    assert "the" in const.split()


def test_constant_token_f1_is_token_f1_of_each_constant():
    refs = ["The cat sat on the mat, the end.", "", "a a a b", "Dogs!", "the the the", "no overlap here", "mat cat"]
    consts = ["the the", "", "a b b", "the cat sat on the mat", "dogs ! !", "zebra", "the , the . a"]
    got = constant_token_f1(refs, consts)
    want = [token_f1(refs, [c] * len(refs)) for c in consts]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    with pytest.raises(InvalidInputError):
        constant_token_f1(refs, [])


def test_evaluate_attacks_end_to_end(tiny, encoder, tmp_path):
    inv, _ = tiny
    res = evaluate_attacks(
        GaussianNoise(s=0.001, seed=0),
        encoder=encoder,
        train_texts=SENTENCES * 3,
        test_texts=SENTENCES[:2],
        inverter=inv,
        progress=False,
        attack=AttackConfig(beam=2, n_pii=40, cache_dir=tmp_path),
    )
    for k in (
        "bleu",
        "token_f1",
        "exact_match",
        "rouge_l",
        "content_f1",
        "cosine",
        "keyword_f1",
        "pii_auc",
        "attacker",
        "n_pairs",
        "train_minutes",
        "floor_token_f1",
    ):
        assert k in res
    assert res["token_f1"] == pytest.approx(100.0) and res["n_pairs"] == 0
    assert set(res["floor"]) == {"constant", "random_sentence"}
    with pytest.raises(ValueError, match="mode must be one of"):
        AttackConfig(mode="bogus")


def test_cli_registers_attack_command():
    parser = argparse.ArgumentParser()
    add_attack_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["attack", "--mechanism", "gaussian:s=0.01", "--mode", "adaptive", "--quick", "--output", "out.json"]
    )
    assert args.mode == "adaptive" and args.quick and args.mechanism == "gaussian:s=0.01" and callable(args.func)


def test_evaluate_attacks_adaptive_queries_defense(tiny, encoder, tmp_path):
    inv, _ = tiny
    defense = RecordingDefense()
    attacker = SENTENCES[2:]
    attack = AttackConfig(
        mode="adaptive",
        n_pairs=4,
        beam=1,
        keyword=False,
        pii=False,
        cache_dir=tmp_path,
        adapt_config=InverterTrainingConfig(batch_size=2, epochs=1, time_budget_min=None, bf16=False),
    )
    res = evaluate_attacks(
        defense,
        encoder=encoder,
        train_texts=attacker,
        test_texts=SENTENCES[:2],
        inverter=inv,
        attack=attack,
        progress=False,
    )
    assert res["n_pairs"] == 4 and res["mode"] == "adaptive" and res["attacker"].startswith("adaptive-")
    seen = np.concatenate(defense.calls)
    attacker_emb = encoder.encode(attacker)
    # every attacker text was sent through the defense during fine-tuning
    for row in attacker_emb:
        assert np.min(np.abs(seen - row).max(axis=1)) < 1e-5
