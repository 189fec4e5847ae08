"""Attack caches: the adaptive attacker per (clean inverter, defense, texts, budget, seed, config), the clean
inverter and the attacker's embeddings; a tampered cache entry is refused."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from _textcrafter_helpers import make_textcrafter

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from textcrafter_rag import embedding
from textcrafter_rag.artifacts import CONFIG_NAME, WEIGHTS_NAME
from textcrafter_rag.attacks import (
    Inverter,
    InverterConfig,
    InverterTrainingConfig,
    adapt_inverter,
    attacker_embeddings,
    load_or_train_inverter,
)
from textcrafter_rag.attacks.cache import defense_key
from textcrafter_rag.encoders import bundled_minilm
from textcrafter_rag.errors import ArtifactError
from textcrafter_rag.mechanisms import GaussianNoise, Mechanism

TEXTS = ["a cat sat on a wall.", "ships sail at dawn.", "the bank raised rates.", "snow covers the hills."]
TINY = InverterConfig(d_model=32, n_layers=1, n_heads=2, d_ff=64, n_prefix=1, max_len=10, init_from_encoder=False)
FAST = InverterTrainingConfig(batch_size=2, epochs=1, time_budget_min=None, bf16=False, threads=1)


class Counting(Mechanism):
    name = "counting"

    def __init__(self, *, shift: float = 0.01) -> None:
        super().__init__(seed=0)
        self.shift = shift
        self.rows = 0

    def _protect(self, x):
        self.rows += len(x)
        return x + self.shift

    def params(self):
        return {"shift": self.shift}


@pytest.fixture(scope="module")
def setup():
    enc = bundled_minilm()
    inv = Inverter.train(
        enc.encode(TEXTS),
        TEXTS,
        config=TINY,
        encoder=enc,
        device="cpu",
        progress=False,
        train_config=InverterTrainingConfig(batch_size=4, epochs=2, time_budget_min=None, bf16=False, threads=1),
    )
    return enc, inv


def test_second_adaptation_is_loaded_not_retrained(setup, tmp_path):
    enc, inv = setup
    first_def = Counting()
    a1, info1 = adapt_inverter(
        inv, first_def, encoder=enc, texts=TEXTS, n_pairs=6, cache_dir=tmp_path, train_config=FAST, progress=False
    )
    assert first_def.rows == 6
    again = Counting()
    a2, info2 = adapt_inverter(
        inv, again, encoder=enc, texts=TEXTS, n_pairs=6, cache_dir=tmp_path, train_config=FAST, progress=False
    )
    assert again.rows == 0, "a cached adaptive attacker must not query the defense again"
    assert info2 == info1
    for (k, v1), v2 in zip(a1.model.state_dict().items(), a2.model.state_dict().values()):
        np.testing.assert_array_equal(v1.numpy(), v2.numpy(), err_msg=k)
    assert a2.meta["adaptive"]["defense"] == first_def.spec()


def test_cache_key_separates_defenses_budgets_and_policies(setup, tmp_path):
    enc, inv = setup
    assert defense_key(Counting(shift=0.01)) != defense_key(Counting(shift=0.02))
    assert defense_key(GaussianNoise(s=0.01, seed=1)) == defense_key(GaussianNoise(s=0.01, seed=2))  # noise state
    other = Counting(shift=0.02)
    adapt_inverter(
        inv, Counting(), encoder=enc, texts=TEXTS, n_pairs=4, cache_dir=tmp_path, train_config=FAST, progress=False
    )
    adapt_inverter(
        inv, other, encoder=enc, texts=TEXTS, n_pairs=4, cache_dir=tmp_path, train_config=FAST, progress=False
    )
    assert other.rows == 4
    bigger = Counting()
    adapt_inverter(
        inv, bigger, encoder=enc, texts=TEXTS, n_pairs=5, cache_dir=tmp_path, train_config=FAST, progress=False
    )
    assert bigger.rows == 5


def test_policy_weights_enter_the_key():
    a, b = make_textcrafter(init_seed=0), make_textcrafter(init_seed=1)
    assert a.spec() == b.spec()
    assert defense_key(a) != defense_key(b)


def test_clean_inverter_cache_round_trip_and_tampering(setup, tmp_path):
    enc, _ = setup
    tc = InverterTrainingConfig(batch_size=4, epochs=1, time_budget_min=None, bf16=False, threads=1)
    first, d, loaded = load_or_train_inverter(
        enc, TEXTS, config=TINY, train_config=tc, cache_dir=tmp_path, progress=False
    )
    assert not loaded and (d / CONFIG_NAME).is_file() and d.parent == tmp_path
    again, d2, loaded2 = load_or_train_inverter(
        enc, TEXTS, config=TINY, train_config=tc, cache_dir=tmp_path, progress=False
    )
    assert loaded2 and d2 == d and again.meta == first.meta
    for (k, v1), v2 in zip(first.model.state_dict().items(), again.model.state_dict().values()):
        np.testing.assert_array_equal(v1.numpy(), v2.numpy(), err_msg=k)
    # a tampered entry is refused, not silently retrained
    weights = d / WEIGHTS_NAME
    weights.write_bytes(weights.read_bytes()[:-16])
    with pytest.raises(ArtifactError, match="truncated or modified"):
        load_or_train_inverter(enc, TEXTS, config=TINY, train_config=tc, cache_dir=tmp_path, progress=False)
    # an interrupted save leaves no config.json: the entry is retrained
    (d / CONFIG_NAME).unlink()
    _, _, loaded3 = load_or_train_inverter(enc, TEXTS, config=TINY, train_config=tc, cache_dir=tmp_path, progress=False)
    assert not loaded3 and Inverter.load(d).config == first.config


def test_tampered_adapted_attacker_is_refused(setup, tmp_path):
    enc, inv = setup
    adapt_inverter(
        inv, Counting(), encoder=enc, texts=TEXTS, n_pairs=4, cache_dir=tmp_path, train_config=FAST, progress=False
    )
    (entry,) = tmp_path.glob("adapted-*")
    cfg = json.loads((entry / CONFIG_NAME).read_text())
    cfg["architecture"]["n_layers"] = 2
    (entry / CONFIG_NAME).write_text(json.dumps(cfg))
    again = Counting()
    with pytest.raises(ArtifactError, match="config_sha256"):  # the edit is caught by the config's digest
        adapt_inverter(
            inv, again, encoder=enc, texts=TEXTS, n_pairs=4, cache_dir=tmp_path, train_config=FAST, progress=False
        )
    assert again.rows == 0


def test_embedding_cache_delegates_to_core_helper(setup, tmp_path):
    enc, _ = setup
    first = attacker_embeddings(enc, TEXTS, cache_dir=tmp_path, batch=3, progress=False)
    np.testing.assert_allclose(first, enc.encode(TEXTS), atol=1e-6)
    (cached,) = tmp_path.glob("emb-*.npy")
    np.testing.assert_array_equal(np.load(cached), first)
    # the same file the core helper writes for the same encoder and texts
    np.testing.assert_array_equal(embedding.cached_embeddings(enc, TEXTS, cache_dir=tmp_path, progress=False), first)
    assert sorted(p.name for p in tmp_path.iterdir()) == [cached.name]
