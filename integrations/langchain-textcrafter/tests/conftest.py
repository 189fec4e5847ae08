"""Shared fixtures for the langchain-textcrafter tests (no network, no HF hub)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from _langchain_textcrafter_fakes import FakeAsymmetricEmbeddings

from textcrafter_rag import GaussianNoise
from textcrafter_rag.autofit import AUTO_FIT_ENV, HOME_ENV
from textcrafter_rag.testing import RecordingMechanism

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _no_policy_fitting(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No test fits a policy (minutes of CPU) or touches the user's policy cache: "auto" finds shipped ones only."""
    monkeypatch.setenv(AUTO_FIT_ENV, "0")
    monkeypatch.setenv(HOME_ENV, str(tmp_path_factory.getbasetemp() / "textcrafter-home"))


@pytest.fixture
def fake_base() -> FakeAsymmetricEmbeddings:
    return FakeAsymmetricEmbeddings()


@pytest.fixture
def recording() -> RecordingMechanism:
    return RecordingMechanism(GaussianNoise(s=0.05))


@pytest.fixture(scope="session")
def minilm() -> Any:
    from textcrafter_rag import bundled_minilm

    return bundled_minilm()
