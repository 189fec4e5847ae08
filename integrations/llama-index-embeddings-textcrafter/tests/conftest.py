"""Fixtures for the llama-index-embeddings-textcrafter tests (no network, no HF hub)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from _llama_textcrafter_fakes import EmbeddingEventRecorder, FakeBase, SpanResultRecorder
from textcrafter_rag.testing import RecordingMechanism
from llama_index.core.instrumentation import get_dispatcher

from textcrafter_rag import GaussianNoise

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def fake_base() -> FakeBase:
    return FakeBase(model_name="fake", embed_batch_size=4)


@pytest.fixture
def recording() -> RecordingMechanism:
    return RecordingMechanism(GaussianNoise(s=0.05))


@pytest.fixture
def instrumentation() -> Iterator[tuple[EmbeddingEventRecorder, SpanResultRecorder]]:
    """Event and span handlers on the root dispatcher, removed afterwards."""
    root = get_dispatcher()
    events, spans = EmbeddingEventRecorder(vectors=[]), SpanResultRecorder()
    root.add_event_handler(events)
    root.add_span_handler(spans)
    try:
        yield events, spans
    finally:
        root.event_handlers = [h for h in root.event_handlers if h is not events]
        root.span_handlers = [h for h in root.span_handlers if h is not spans]


@pytest.fixture(scope="session")
def minilm() -> Any:
    from textcrafter_rag import bundled_minilm

    return bundled_minilm()
