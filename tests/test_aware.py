"""The opt-in utility- and attack-aware reward terms (textcrafter_rag.textcrafter.aware)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from _textcrafter_helpers import make_textcrafter

from textcrafter_rag.artifacts import load_artifact
from textcrafter_rag.policies import BUNDLED_MODEL_ID, SHIPPED, shipped_policy_path
from textcrafter_rag.textcrafter import AwareRewardConfig, TextCrafter
from textcrafter_rag.textcrafter.aware import (
    AwareObjective,
    content_vocabulary,
    neighbour_indices,
    retrieval_drop,
)
from textcrafter_rag.textcrafter.policy import PolicyConfig, TextCrafterPolicy
from textcrafter_rag.textcrafter.projection import release
from textcrafter_rag.textcrafter.reward import reward
from textcrafter_rag.textcrafter.training import PolicyTrainingConfig, train_policy

DIM = 32
WORDS = [f"tok{i:02d}" for i in range(30)]


@pytest.fixture(autouse=True)
def _one_thread():
    """Training runs on one thread (reproducible sums); the caller's setting is restored afterwards."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _planted(n: int = 400, *, seed: int = 0, noise: float = 0.05) -> tuple[torch.Tensor, list[str]]:
    """Texts of 3 distinct planted words; each embedding is the normalised sum of its words' vectors."""
    rng = np.random.default_rng(seed)
    word_vec = rng.standard_normal((len(WORDS), DIM))
    texts, rows = [], []
    for _ in range(n):
        pick = rng.choice(len(WORDS), size=3, replace=False)
        texts.append(" ".join(WORDS[i] for i in pick))
        rows.append(word_vec[pick].sum(0) + noise * rng.standard_normal(DIM))
    x = np.asarray(rows, dtype=np.float32)
    return torch.as_tensor(x / np.linalg.norm(x, axis=1, keepdims=True)), texts


def _clusters(n_per: int = 10, k: int = 4, *, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    centres = torch.nn.functional.normalize(torch.randn(k, DIM, generator=g), dim=-1) * 4
    x = centres.repeat_interleave(n_per, 0) + 0.3 * torch.randn(k * n_per, DIM, generator=g)
    return torch.nn.functional.normalize(x, dim=-1)


def test_neighbours_exclude_the_row_itself_and_stay_in_its_cluster() -> None:
    x = _clusters()
    nn_idx = neighbour_indices(x, 3)
    assert nn_idx.shape == (40, 3)
    rows = torch.arange(40)[:, None]
    assert not bool((nn_idx == rows).any())
    assert torch.equal(nn_idx // 10, (rows // 10).expand(-1, 3))


def test_retrieval_term_is_zero_for_identity_and_positive_when_neighbours_are_swapped() -> None:
    x = _clusters()
    obj = AwareObjective(AwareRewardConfig(retrieval_weight=2.0, neighbours=3), x)
    rows = torch.arange(40)
    same = obj.penalty(x, x, rows)
    torch.testing.assert_close(same["total"], torch.zeros(40), atol=1e-6, rtol=0)
    swapped = x[(rows + 10) % 40]  # every document released as one from another cluster
    parts = obj.penalty(swapped, x, rows)
    assert bool((parts["retrieval_drop"] > 0.1).all())
    torch.testing.assert_close(parts["total"], 2.0 * parts["retrieval_drop"])
    q = x[neighbour_indices(x, 3)]
    torch.testing.assert_close(retrieval_drop(swapped, x, q), parts["retrieval_drop"])


def test_content_vocabulary_orders_by_frequency_and_builds_multi_hot_targets() -> None:
    vocab, y = content_vocabulary(["the river flows", "a river and the sea", "sea sea river"], 2)
    assert vocab == ["river", "sea"]
    np.testing.assert_array_equal(y, [[1, 0], [1, 1], [1, 1]])


def test_bag_of_words_adversary_learns_a_planted_vocabulary() -> None:
    x, texts = _planted()
    cfg = AwareRewardConfig(adversary_weight=1.0, vocab_size=50, adversary_epochs=60, adversary_hidden=64)
    obj = AwareObjective(cfg, x, texts, seed=0)
    assert obj.targets is not None and obj.targets.shape == (400, 30) and obj.adversary is not None
    rows = torch.arange(400)
    before = obj.adversary.recall_at_k(x, obj.targets, k=3)
    gain_before = float(obj.penalty(x, x, rows)["adversary_gain"].mean())
    train, test = rows[:300], rows[300:]
    obj.retrain(x[train], train)
    after = obj.adversary.recall_at_k(x[test], obj.targets[test], k=3)
    gain_after = float(obj.penalty(x[test], x[test], test)["adversary_gain"].mean())
    shuffled = float(obj.penalty(x[test.flip(0)], x[test], test)["adversary_gain"].mean())
    assert before < 0.2 and after > 0.75  # held-out recall@3 of the 3 true words; chance is 0.1
    assert abs(gain_before) < 0.05 and gain_after > 1.0 > shuffled
    assert not any(p.requires_grad for p in obj.adversary.parameters())  # frozen for the policy


def test_adversary_term_needs_row_aligned_texts() -> None:
    x, texts = _planted(20)
    with pytest.raises(ValueError, match="calibration texts"):
        AwareObjective(AwareRewardConfig(adversary_weight=1.0), x, texts[:-1])
    with pytest.raises(ValueError, match=">= 0"):
        AwareRewardConfig(retrieval_weight=-1.0)


def _train(aware_cfg: AwareRewardConfig | None, x: torch.Tensor, texts: list[str]):
    tc = make_textcrafter(DIM, eps=1.0)
    cfg = PolicyTrainingConfig(steps=60, batch_size=64, eval_every=10, patience=100, lr=3e-3, seed=3)
    aware = AwareObjective(aware_cfg, x, texts, seed=3) if aware_cfg is not None else None
    kw = {"eps": 1.0, "pii": tc.pii, "prior": tc.prior, "weights": tc.weights, "config": cfg, "progress": False}
    report = train_policy(tc.policy, x.numpy(), aware=aware, **kw)
    return tc, report


def _aware_score(tc: TextCrafter, cfg: AwareRewardConfig, x: torch.Tensor, texts: list[str]) -> float:
    """The aware objective of ``tc``'s releases, against an adversary retrained on those releases."""
    obj = AwareObjective(cfg, x, texts, seed=11)
    z = torch.randn(x.shape, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        out = tc.policy(x)
        f_adv = release(x, out.mu + out.sigma * z, out.v, 1.0)
    rows = torch.arange(x.shape[0])
    obj.retrain(f_adv, rows)
    with torch.no_grad():
        r = reward(f_adv, x, pii=tc.pii, prior=tc.prior, weights=tc.weights) - obj.penalty(f_adv, x, rows)["total"]
    return float(r.mean())


def test_aware_training_beats_the_paper_reward_on_its_own_objective() -> None:
    x, texts = _planted(300)
    cfg = AwareRewardConfig(
        retrieval_weight=4.0, adversary_weight=1.0, vocab_size=50, adversary_hidden=0, adversary_every=20
    )
    paper, _ = _train(None, x, texts)
    aware, report = _train(cfg, x, texts)
    assert report.best_val_reward > report.initial_val_reward
    assert any("adversary_recall_at_10" in h and "retrieval_drop" in h for h in report.history)
    assert _aware_score(aware, cfg, x, texts) > _aware_score(paper, cfg, x, texts) + 0.02


def test_zero_weights_train_exactly_the_paper_reward() -> None:
    x, texts = _planted(200)
    off = AwareRewardConfig()
    assert not off.enabled
    a, ra = _train(None, x, texts)
    b, rb = _train(off, x, texts)
    assert torch.equal(a.policy.log_sigma, b.policy.log_sigma) and ra.best_val_reward == rb.best_val_reward


def test_aware_config_round_trips_through_a_saved_policy(tmp_path) -> None:
    cfg = AwareRewardConfig(retrieval_weight=0.5, adversary_weight=0.25, adversary_every=300)
    assert AwareRewardConfig(**cfg.to_dict()) == cfg
    tc = make_textcrafter(eps=1.0, metadata={"reward": cfg.to_dict()})
    assert tc.label == "textcrafter-aware"
    assert tc.spec() == "textcrafter-aware:eps=1.0,retrieval=0.5,adversary=0.25"
    loaded = TextCrafter.load(tc.save(tmp_path / "aware"), seed=0)
    assert loaded.aware_reward == cfg.to_dict() and loaded.label == "textcrafter-aware"
    assert loaded.spec() == f"textcrafter:{tmp_path / 'aware'}"
    assert AwareRewardConfig(**loaded.aware_reward) == cfg
    plain = make_textcrafter(eps=1.0)
    assert plain.aware_reward is None and plain.label == "textcrafter" and plain.spec() == "textcrafter"


@pytest.mark.parametrize("eps", sorted(SHIPPED[BUNDLED_MODEL_ID]))
def test_shipped_policies_load_unchanged_and_release_as_their_tensors_say(eps: float) -> None:
    path = shipped_policy_path(BUNDLED_MODEL_ID, eps=eps)
    tc = TextCrafter.load(path, seed=0)
    assert tc.aware_reward is None and tc.label == "textcrafter" and tc.params() == {"eps": eps}
    config, tensors = load_artifact(path, kind="textcrafter-policy")
    policy = TextCrafterPolicy(PolicyConfig(**config["policy"])).float().eval()
    policy.load_state_dict({k[len("policy.") :]: v for k, v in tensors.items() if k.startswith("policy.")})
    x = np.random.default_rng(1).standard_normal((8, tc.dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    z = np.random.default_rng(2).standard_normal(x.shape).astype(np.float32)
    with torch.no_grad():
        out = policy(torch.as_tensor(x))
        expected = release(torch.as_tensor(x), out.mu + out.sigma * torch.as_tensor(z), out.v, tc.radius).numpy()
    # Protection runs the same network in NumPy (folded first sub-layers): equal to float32 rounding.
    np.testing.assert_allclose(tc.release_with_noise(x, z)[0], expected, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(tc.protect(x), TextCrafter.load(path, seed=0).protect(x))


def test_calibration_texts_must_align_with_embeddings() -> None:
    from textcrafter_rag.textcrafter import Calibration

    tc = make_textcrafter()
    with pytest.raises(ValueError, match="calibration texts"):
        Calibration(encoder=None, pii=tc.pii, prior=tc.prior, embeddings=np.zeros((3, 32)), texts=("a", "b"))
    assert Calibration(encoder=None, pii=tc.pii, prior=tc.prior, embeddings=np.zeros((3, 32))).texts is None


def _toy_encoder():
    from textcrafter_rag.encoders import Encoder

    def encode(texts):
        rows = [np.random.default_rng(sum(map(ord, t))).standard_normal(DIM) for t in texts]
        return np.asarray(rows, dtype=np.float32)

    return Encoder(encode, model_id="toy", dimension=DIM)


def test_fit_textcrafter_with_an_aware_reward_records_it_and_keeps_the_norm() -> None:
    from textcrafter_rag.textcrafter import Calibration, fit_textcrafter

    x, texts = _planted(200)
    base = make_textcrafter(DIM)
    cal = Calibration(encoder=_toy_encoder(), pii=base.pii, prior=base.prior, embeddings=x.numpy(), texts=tuple(texts))
    cfg = AwareRewardConfig(retrieval_weight=1.0, adversary_weight=1.0, vocab_size=50, adversary_every=5)
    kw = {"eps": 1.0, "calibration": cal, "progress": False, "log": None, "policy_config": {"heads": 4}}
    tc = fit_textcrafter(training=PolicyTrainingConfig(steps=10, batch_size=32, eval_every=5), reward=cfg, **kw)
    assert tc.get_config_dict()["reward"] == cfg.to_dict() and tc.label == "textcrafter-aware"
    assert tc.spec().startswith("textcrafter-aware:eps=1.0")
    out = tc.protect(x.numpy()[:16])
    np.testing.assert_allclose(np.linalg.norm(out - x.numpy()[:16], axis=1), 1.0, rtol=1e-5)
    with pytest.raises(ValueError, match="calibration texts"):
        fit_textcrafter(reward=cfg, **{**kw, "calibration": dataclasses.replace(cal, texts=None)})
    off = fit_textcrafter(training=PolicyTrainingConfig(steps=2, batch_size=32), reward=AwareRewardConfig(), **kw)
    assert "reward" not in off.get_config_dict() and off.label == "textcrafter"
