"""The adaptive attacker is cached per (clean inverter, defense, texts, budget, seed, config)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from _textcrafter_helpers import make_textcrafter

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from textcrafter_rag.attacks import Inverter, InverterConfig, TrainConfig, adapt_inverter  # noqa: E402
from textcrafter_rag.attacks.cache import defense_key  # noqa: E402
from textcrafter_rag.encoders import bundled_minilm  # noqa: E402
from textcrafter_rag.mechanisms import GaussianNoise, Mechanism  # noqa: E402

TEXTS = ["a cat sat on a wall.", "ships sail at dawn.", "the bank raised rates.", "snow covers the hills."]
TINY = InverterConfig(d_model=32, n_layers=1, n_heads=2, d_ff=64, n_prefix=1, max_len=10, init_from_encoder=False)
FAST = TrainConfig(batch_size=2, epochs=1, time_budget_min=None, bf16=False, threads=1)


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
    inv = Inverter.train(enc.encode(TEXTS), TEXTS, config=TINY, encoder=enc, device="cpu", progress=False,
                         train_config=TrainConfig(batch_size=4, epochs=2, time_budget_min=None, bf16=False, threads=1))
    return enc, inv


def test_second_adaptation_is_loaded_not_retrained(setup, tmp_path):
    enc, inv = setup
    first_def = Counting()
    a1, info1 = adapt_inverter(inv, first_def, encoder=enc, texts=TEXTS, n_pairs=6, cache_dir=tmp_path,
                               train_config=FAST, progress=False)
    assert first_def.rows == 6
    again = Counting()
    a2, info2 = adapt_inverter(inv, again, encoder=enc, texts=TEXTS, n_pairs=6, cache_dir=tmp_path,
                               train_config=FAST, progress=False)
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
    adapt_inverter(inv, Counting(), encoder=enc, texts=TEXTS, n_pairs=4, cache_dir=tmp_path, train_config=FAST,
                   progress=False)
    adapt_inverter(inv, other, encoder=enc, texts=TEXTS, n_pairs=4, cache_dir=tmp_path, train_config=FAST,
                   progress=False)
    assert other.rows == 4
    bigger = Counting()
    adapt_inverter(inv, bigger, encoder=enc, texts=TEXTS, n_pairs=5, cache_dir=tmp_path, train_config=FAST,
                   progress=False)
    assert bigger.rows == 5


def test_policy_weights_enter_the_key():
    a, b = make_textcrafter(init_seed=0), make_textcrafter(init_seed=1)
    assert a.spec() == b.spec()
    assert defense_key(a) != defense_key(b)
