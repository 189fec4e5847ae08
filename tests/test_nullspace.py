"""Sensitive-subspace removal (INLP + noise): it removes what a linear probe reads, and nothing breaks around it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from _textcrafter_helpers import trigram_encoder
from sklearn.linear_model import LogisticRegression

from textcrafter_rag import from_spec
from textcrafter_rag.errors import ArtifactError
from textcrafter_rag.mechanisms import NullspaceConfig, NullspaceNoise, fit_nullspace_noise, fit_spectral_noise
from textcrafter_rag.noise_fitting import entity_kind_corpus, fit_nullspace_for_encoder
from textcrafter_rag.textcrafter import CalibrationConfig


def _planted(n: int, *, classes: int = 2, dim: int = 24, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gaussian embeddings whose label shifts them along ``classes - 1`` fixed (planted) directions."""
    rng = np.random.default_rng(seed)
    planted = np.linalg.qr(np.random.default_rng(99).standard_normal((dim, classes - 1)))[0]
    y = rng.integers(0, classes, n)
    shifts = np.vstack([np.zeros(classes - 1), 4.0 * np.eye(classes - 1)])  # class 0 at the origin
    x = rng.standard_normal((n, dim)) + shifts[y] @ planted.T + 1.0
    return x.astype(np.float32), y, planted


def _probe_accuracy(train: np.ndarray, y_train: np.ndarray, test: np.ndarray, y_test: np.ndarray) -> float:
    return float(LogisticRegression(max_iter=2000).fit(train, y_train).score(test, y_test))


@pytest.mark.parametrize("classes", [2, 4])
def test_inlp_removes_the_planted_direction_from_a_held_out_probe(classes: int) -> None:
    x, y, planted = _planted(3000, classes=classes)
    mech = fit_nullspace_noise(x, y, config=NullspaceConfig(s=0.01, tolerance=0.02))
    rounds = mech.metadata["inlp"]["rounds"]
    chance = mech.metadata["inlp"]["chance"]
    assert rounds[0]["held_out_accuracy"] > chance + 0.3  # the attribute was linearly readable
    assert rounds[-1]["held_out_accuracy"] <= chance + 0.02  # and no longer is
    assert rounds[-1]["removed_before"] == mech.removed >= classes - 1
    # The planted directions lie (almost) entirely in the removed subspace.
    assert np.linalg.norm(mech.basis.T @ planted, axis=0).min() > 0.95
    # A probe trained and tested on fresh data (not the fit's) drops from near-perfect to near chance
    # (measured: 0.976 -> 0.533 for 2 classes, chance 0.500; 0.964 -> 0.310 for 4, chance 0.258: INLP
    # on 3,000 rows leaves a sliver of the planted directions, about 0.3% of their energy).
    xa, ya, _ = _planted(3000, classes=classes, seed=1)
    xb, yb, _ = _planted(3000, classes=classes, seed=2)
    before = _probe_accuracy(xa, ya, xb, yb)
    after = _probe_accuracy(mech.project(xa), ya, mech.project(xb), yb)
    fresh_chance = np.bincount(yb).max() / yb.size
    assert before > 0.9 and after < fresh_chance + 0.1 and before - after > 0.4


def test_release_noise_norms_and_strength() -> None:
    x, y, _ = _planted(800)
    base = fit_nullspace_noise(x, y, config=NullspaceConfig(renormalize=False))
    for s in (0.05, 0.5):
        out = base.with_strength(s, seed=4).protect(x).astype(np.float64)
        z = (out - base.project(x)) / s
        n = z.size
        assert abs(z.mean()) < 5 / np.sqrt(n) and abs(z.var() - 1.0) < 5 * np.sqrt(2 / n)
    dist = [np.linalg.norm(base.with_strength(s, seed=4).protect(x) - x, axis=1).mean() for s in (0.01, 0.1, 1.0)]
    assert dist[0] < dist[1] < dist[2]  # more noise, further from the input
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    kept = base.with_strength(0.1, seed=0)
    renorm = NullspaceNoise(basis=kept.basis, s=0.1, renormalize=True, seed=0)
    out = renorm.protect(unit)
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
    assert renorm.params() == {"s": 0.1} and renorm.removed == base.removed
    assert renorm.expected_norm(24) is None  # depends on the input: the projection is not noise


def test_save_load_round_trip_is_bit_exact(tmp_path) -> None:
    x, y, _ = _planted(600)
    mech = fit_nullspace_noise(x, y, config=NullspaceConfig(s=0.02), metadata={"note": "x"})
    path = mech.save(tmp_path / "nullspace")
    config = json.loads((path / "config.json").read_text())
    assert [r["held_out_accuracy"] for r in config["inlp"]["rounds"]] == [
        r["held_out_accuracy"] for r in mech.metadata["inlp"]["rounds"]
    ]
    loaded = NullspaceNoise.load(path, seed=7)
    assert np.array_equal(loaded.basis, mech.basis) and loaded.s == 0.02 and loaded.metadata["note"] == "x"
    assert np.array_equal(loaded.protect(x), mech.with_strength(0.02, seed=7).protect(x))
    assert NullspaceNoise.load(path, s=0.3).s == 0.3
    assert from_spec(f"nullspace:{path}").s == 0.02
    again = from_spec(f"nullspace:{path},s=0.5", seed=0)
    assert isinstance(again, NullspaceNoise) and again.s == 0.5 and from_spec(again.spec()).s == 0.5


def test_nothing_to_remove_keeps_an_empty_basis(tmp_path) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((400, 8)).astype(np.float32)
    y = rng.integers(0, 2, 400)  # labels independent of the embeddings
    mech = fit_nullspace_noise(x, y, config=NullspaceConfig(tolerance=0.1))
    assert mech.removed == 0 and len(mech.metadata["inlp"]["rounds"]) == 1
    loaded = NullspaceNoise.load(mech.save(tmp_path / "empty"))
    assert loaded.basis.shape == (8, 0) and loaded.protect(x).shape == x.shape


def test_limits_and_bad_input(tmp_path) -> None:
    x, y, _ = _planted(600, classes=4)
    capped = fit_nullspace_noise(x, y, config=NullspaceConfig(max_directions=2, tolerance=0.0))
    assert capped.removed == 2 and len(capped.metadata["inlp"]["rounds"]) == 2
    one = fit_nullspace_noise(x, y, config=NullspaceConfig(max_iterations=1, tolerance=0.0))
    assert len(one.metadata["inlp"]["rounds"]) == 2  # one removal, then the probe after it
    with pytest.raises(TypeError):
        fit_nullspace_noise(x, y.astype(float))
    with pytest.raises(ValueError):
        fit_nullspace_noise(x, y[:-1])
    with pytest.raises(ValueError):
        fit_nullspace_noise(x, np.zeros_like(y))
    with pytest.raises(ValueError):
        fit_nullspace_noise(x[:, :0], y)
    for cfg in [{"s": 0.0}, {"max_directions": 0}, {"tolerance": 1.0}, {"test_fraction": 0.0}, {"C": -1.0}]:
        with pytest.raises(ValueError):
            NullspaceConfig(**cfg)
    with pytest.raises(ValueError):
        NullspaceNoise(basis=np.ones((3, 2)), s=0.1)  # not orthonormal
    with pytest.raises(ValueError):
        NullspaceNoise(basis=np.eye(3), s=0.1, secure_mode=True, seed=0)
    with pytest.raises(ValueError):
        capped.protect(x[:, :5])
    secure = capped.with_strength(0.1, secure_mode=True)
    assert secure._noise.secure and not np.array_equal(secure.protect(x), secure.protect(x))
    assert secure.with_strength(0.2)._noise.secure  # a new strength keeps the CSPRNG
    spectral_dir = fit_spectral_noise(x).save(tmp_path / "spectral")
    with pytest.raises(ArtifactError):  # another kind of artifact
        NullspaceNoise.load(spectral_dir)
    for spec in ["nullspace", "nullspace:s=0.1", f"nullspace:{spectral_dir},budget=1"]:
        with pytest.raises(ValueError):
            from_spec(spec)


def test_entity_kind_corpus_labels() -> None:
    plain = [f"The market closed higher on day {i} of trading." for i in range(50)]
    texts, labels, names = entity_kind_corpus(plain, n_pii=40, seed=0)
    assert labels.shape == (len(texts),) and names[0] == "plain"
    n_pii = len(texts) - 40  # rare kind signatures may be left out
    assert n_pii > 30 and (labels[n_pii:] == 0).all() and (labels[:n_pii] > 0).all()
    assert set(np.unique(labels[:n_pii])) <= set(range(1, len(names)))
    fields = {"name", "phone", "email", "address", "card", "dob", "date", "iban", "ssn", "ip", "company", "account"}
    fields |= {"expiry", "passport", "city"}
    assert len(names) > 2 and all(n == "other" or set(n.split("+")) <= fields for n in names[1:])
    assert all(t in plain for t in texts[n_pii:]) and not any(t in plain for t in texts[:n_pii])
    with pytest.raises(ValueError):
        entity_kind_corpus(plain[:10], n_pii=40)


def test_fit_for_an_encoder(tmp_path) -> None:
    corpus = tuple(f"The council met on day {i} to discuss the budget and the roads." for i in range(200))
    mech = fit_nullspace_for_encoder(
        trigram_encoder(32),
        config=NullspaceConfig(max_iterations=3),
        calibration=CalibrationConfig(corpus=corpus, n_pii=120),
        progress=False,
    )
    assert mech.dim == 32 and mech.removed >= 1
    assert mech.metadata["provenance"]["label_names"][0] == "plain"
    assert NullspaceNoise.load(mech.save(tmp_path / "fitted"), encoder=trigram_encoder(32)).removed == mech.removed
