"""Shared fixtures for the langchain-textcrafter tests (no network, no HF hub)."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings

from textcrafter_rag import GaussianNoise
from textcrafter_rag.testing import RecordingMechanism

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _vec(text: str, dim: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).normal(size=dim)
    return (v / np.linalg.norm(v)).tolist()


class FakeAsymmetricEmbeddings(Embeddings):
    """A LangChain base whose query vectors differ from its document vectors; counts native async calls."""

    def __init__(self, dim: int = 8) -> None:
        self.dim = dim
        self.calls: dict[str, int] = {"embed_documents": 0, "aembed_documents": 0, "embed_query": 0, "aembed_query": 0}

    def doc(self, text: str) -> list[float]:
        return _vec("doc:" + text, self.dim)

    def query(self, text: str) -> list[float]:
        return _vec("query:" + text, self.dim)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls["embed_documents"] += 1
        return [self.doc(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.calls["embed_query"] += 1
        return self.query(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls["aembed_documents"] += 1
        return [self.doc(t) for t in texts]

    async def aembed_query(self, text: str) -> list[float]:
        self.calls["aembed_query"] += 1
        return self.query(text)


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
