"""Fixtures for the llama-index-embeddings-textcrafter tests (no network, no HF hub)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from textcrafter_rag import GaussianNoise
from textcrafter_rag.autofit import AUTO_FIT_ENV, HOME_ENV
from textcrafter_rag.testing import RecordingMechanism

from ._llama_textcrafter_fakes import EmbeddingEventRecorder, FakeBase, SpanResultRecorder, instrumented

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _no_policy_fitting(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No test fits a policy (minutes of CPU) or touches the user's policy cache: "auto" finds shipped ones only."""
    monkeypatch.setenv(AUTO_FIT_ENV, "0")
    monkeypatch.setenv(HOME_ENV, str(tmp_path_factory.getbasetemp() / "textcrafter-home"))


@pytest.fixture
def fake_base() -> FakeBase:
    return FakeBase(model_name="fake", embed_batch_size=4)


@pytest.fixture
def recording() -> RecordingMechanism:
    return RecordingMechanism(GaussianNoise(s=0.05))


@pytest.fixture
def instrumentation() -> Iterator[tuple[EmbeddingEventRecorder, SpanResultRecorder]]:
    """Event and span handlers on the root dispatcher, removed afterwards."""
    with instrumented() as handlers:
        yield handlers


@pytest.fixture(scope="session")
def minilm() -> Any:
    from textcrafter_rag import bundled_minilm

    return bundled_minilm()
