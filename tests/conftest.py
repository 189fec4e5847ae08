from __future__ import annotations

import os

import numpy as np
import pytest
from _textcrafter_helpers import make_textcrafter
from hypothesis import settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Hypothesis: a random search for developers (new examples every run, failures printed with a
# reproduction blob), a fixed one in CI (`.ci/run` sets HYPOTHESIS_PROFILE=ci) so the same commit
# always runs the same examples. Regression examples found by the random search are pinned with
# @example in the tests themselves.
settings.register_profile("dev", print_blob=True)
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(autouse=True)
def _no_auto_fit(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test fits a policy on first use or touches the user's cache unless it asks to (test_autofit)."""
    monkeypatch.setenv("TEXTCRAFTER_AUTO_FIT", "0")
    monkeypatch.setenv("TEXTCRAFTER_HOME", str(tmp_path_factory.mktemp("textcrafter-home")))


@pytest.fixture
def tiny_textcrafter():
    return make_textcrafter()


@pytest.fixture
def unit_vectors():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 32)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="session")
def minilm():
    from textcrafter_rag.encoders import bundled_minilm

    return bundled_minilm()


@pytest.fixture(scope="session")
def tiny_inverter(minilm):
    """The tiny inverter of ``_textcrafter_helpers`` (read-only: tests copy before fine-tuning)."""
    from _textcrafter_helpers import train_tiny_inverter

    return train_tiny_inverter(minilm)
