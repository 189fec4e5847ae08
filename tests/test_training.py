from __future__ import annotations

import numpy as np
import pytest
import torch
from _textcrafter_helpers import make_textcrafter

from textcrafter_rag.encoders import Encoder
from textcrafter_rag.errors import FingerprintMismatch
from textcrafter_rag.textcrafter import CalibrationConfig, TextCrafter, fit_textcrafter
from textcrafter_rag.textcrafter.reward import RewardWeights, reward
from textcrafter_rag.textcrafter.training import PolicyTrainingConfig, train_policy


def _synthetic_task(tc: TextCrafter, n: int = 400) -> np.ndarray:
    x = np.random.default_rng(0).standard_normal((n, tc.dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_alpha_term_is_the_constant_eps(unit_vectors: np.ndarray) -> None:
    tc = make_textcrafter(eps=2.5)
    x = torch.as_tensor(unit_vectors)
    f1, _ = tc.release_with_noise(unit_vectors, np.random.default_rng(0).standard_normal(unit_vectors.shape))
    f2, _ = tc.release_with_noise(unit_vectors, np.random.default_rng(1).standard_normal(unit_vectors.shape))
    only_alpha = RewardWeights(alpha=1.0, beta=0.0, gamma=0.0)
    r1 = reward(torch.as_tensor(f1), x, pii=tc.pii, prior=tc.prior, weights=only_alpha)
    r2 = reward(torch.as_tensor(f2), x, pii=tc.pii, prior=tc.prior, weights=only_alpha)
    torch.testing.assert_close(r1, torch.full_like(r1, -2.5), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(r1, r2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("direction_gradient", [False, True])
def test_branch_two_learns_only_with_the_pathwise_term(direction_gradient: bool) -> None:
    tc = make_textcrafter()
    x = _synthetic_task(tc)
    before = {k: v.clone() for k, v in tc.policy.direction_branch.state_dict().items()}
    before_mean = tc.policy.mean_branch.head.weight.clone()
    cfg = PolicyTrainingConfig(steps=5, batch_size=32, eval_every=100, direction_gradient=direction_gradient)
    train_policy(tc.policy, x, eps=2.5, pii=tc.pii, prior=tc.prior, weights=tc.weights, config=cfg, progress=False)
    after = tc.policy.direction_branch.state_dict()
    changed = any(not torch.equal(before[k], after[k]) for k in before)
    assert changed is direction_gradient
    assert not torch.equal(before_mean, tc.policy.mean_branch.head.weight)  # REINFORCE always trains branch 1


def test_training_raises_validation_reward_and_is_reproducible() -> None:
    results = []
    for _ in range(2):
        tc = make_textcrafter()
        x = _synthetic_task(tc)
        cfg = PolicyTrainingConfig(steps=120, batch_size=64, eval_every=10, patience=50, lr=3e-3, seed=4)
        rep = train_policy(
            tc.policy, x, eps=2.5, pii=tc.pii, prior=tc.prior, weights=tc.weights, config=cfg, progress=False
        )
        results.append((rep.initial_val_reward, rep.best_val_reward, tc.policy.log_sigma.detach().clone()))
    (i0, b0, s0), (i1, b1, s1) = results
    assert b0 > i0 + 0.05
    assert (i0, b0) == (i1, b1) and torch.equal(s0, s1)


def test_training_stops_on_plateau() -> None:
    tc = make_textcrafter()
    cfg = PolicyTrainingConfig(steps=500, batch_size=16, eval_every=1, patience=2, lr=1e-9)
    rep = train_policy(
        tc.policy,
        _synthetic_task(tc),
        eps=2.5,
        pii=tc.pii,
        prior=tc.prior,
        weights=tc.weights,
        config=cfg,
        progress=False,
    )
    assert rep.stopped_early and rep.steps_run < 500


@pytest.fixture(scope="module")
def fitted(minilm, tmp_path_factory):
    from textcrafter_rag.data import bbc_sentences

    corpus = bbc_sentences()[:400]
    tc = fit_textcrafter(
        minilm,
        eps=2.5,
        calibration=CalibrationConfig(corpus=tuple(corpus), n_pii=60, n_calibration=300, clusters=4),
        progress=False,
        log=None,
        training=PolicyTrainingConfig(steps=60, batch_size=64, eval_every=5, patience=100, lr=3e-3),
    )
    path = tc.save(tmp_path_factory.mktemp("policy") / "minilm")
    return tc, path


def test_fit_on_real_encoder_raises_reward(fitted) -> None:
    tc, _ = fitted
    rep = tc.training_report
    assert rep.best_val_reward > rep.initial_val_reward
    meta = tc.get_config_dict()
    assert meta["encoder"]["model_id"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert meta["encoder"]["dimension"] == 384 and meta["encoder"]["normalized"] is True
    assert 0.5 < meta["pii_classifier"]["auc"] <= 1.0
    assert meta["provenance"]["corpus"] == "user corpus"


def test_loading_checks_the_encoder_fingerprint(fitted, minilm) -> None:
    _, path = fitted
    assert TextCrafter.load(path, encoder=minilm).dim == 384
    rng = np.random.default_rng(0)
    other_384 = Encoder(lambda texts: rng.standard_normal((len(texts), 384)), model_id="other")
    with pytest.raises(FingerprintMismatch, match="different encoder"):
        TextCrafter.load(path, encoder=other_384)
    other_8 = Encoder(lambda texts: np.ones((len(texts), 8)), model_id="tiny")
    with pytest.raises(FingerprintMismatch, match="384-d"):
        TextCrafter.load(path, encoder=other_8)
