"""Two-stage sealed search hands no vector to LlamaIndex's instrumentation (issue 32).

In two-stage mode the index embeds with the plain encoder, whose vectors the sealed store keeps sealed.
A plain LlamaIndex model reports each one beside its text to every event, callback and span handler;
``SealedEmbedding`` returns the same vectors and reports texts only. The handlers here sit where a
tracing integration sits (the root dispatcher, the index's callback manager) and look for any list of
floats of the embedding dimension anywhere in what they are given, at the moment they are given it.
"""

from __future__ import annotations

import dataclasses
import inspect
import pickle
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.bridge.pydantic import BaseModel, Field, PrivateAttr
from llama_index.core.callbacks import CallbackManager
from llama_index.core.callbacks.base_handler import BaseCallbackHandler
from llama_index.core.callbacks.schema import CBEventType, EventPayload
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.embedding import EmbeddingEndEvent, EmbeddingStartEvent
from llama_index.core.instrumentation.span_handlers import NullSpanHandler
from llama_index.core.schema import TextNode
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import AsyncQdrantClient, QdrantClient

from llama_index.embeddings.textcrafter import (
    BypassedCacheWarning,
    ReportedVectorsWarning,
    SealedEmbedding,
    sealed_storage_context,
)
from llama_index.embeddings.textcrafter.instrumentation import warn_unless_silent
from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.sealing import generate_key
from textcrafter_rag.testing import KnownVectors

from ._llama_textcrafter_fakes import FakeBase

DIM = 32  # no other vector in these tests has this length
TEXTS = [f"Patient {i} was treated for condition {i % 3} at ward {i % 2}." for i in range(6)]
EXTRA = "Patient 9 was discharged from ward 1."
QUERY = "who was treated at ward 1?"


@dataclasses.dataclass(frozen=True)
class Seen:
    """One vector a handler was given: through which channel, by whom, where in what it was given."""

    channel: str  # "event", "callback", "span arguments", "span arguments at exit", "span result"
    source: str  # the event class, the callback event type, or the span's Class.method
    path: str
    vector: np.ndarray = dataclasses.field(compare=False)

    @property
    def embedding_channel(self) -> bool:
        """Reported by an embedding model (its events, callback events and spans)."""
        return self.source in ("EmbeddingStartEvent", "EmbeddingEndEvent", CBEventType.EMBEDDING.value) or (
            self.channel.startswith("span") and "embedding" in self.source.rpartition(".")[2]
        )


def _vectors(obj: Any, path: str = "") -> list[tuple[str, np.ndarray]]:
    """Every float vector of length DIM in ``obj`` (lists, tuples, dicts, arrays, pydantic models, dataclasses)."""
    out: list[tuple[str, np.ndarray]] = []
    seen: set[int] = set()

    def walk(obj: Any, path: str) -> None:
        if isinstance(obj, (str, bytes, int, float, type(None))) or id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            if obj.ndim and obj.shape[-1] == DIM:
                out.extend((path, row) for row in obj.reshape(-1, DIM).astype(np.float32))
        elif isinstance(obj, (list, tuple)):
            if len(obj) == DIM and all(isinstance(v, (float, np.floating)) for v in obj):
                out.append((path, np.asarray(obj, dtype=np.float32)))
            else:
                for i, item in enumerate(obj):
                    walk(item, f"{path}[{i}]")
        elif isinstance(obj, dict):
            for k, item in obj.items():
                walk(item, f"{path}.{k}")
        elif isinstance(obj, inspect.BoundArguments):  # a span's arguments; `self` is the handler's `instance`
            walk({k: v for k, v in obj.arguments.items() if k != "self"}, path)
        elif isinstance(obj, BaseModel) or dataclasses.is_dataclass(obj):
            walk(dict(vars(obj)), f"{path}<{type(obj).__name__}>")

    walk(obj, path)
    return out


class _Events(BaseEventHandler):
    found: list = Field(default_factory=list)
    embedding_events: int = 0

    @classmethod
    def class_name(cls) -> str:
        return "TwoStageEvents"

    def handle(self, event: Any, **kwargs: Any) -> None:
        name = type(event).__name__
        self.embedding_events += isinstance(event, (EmbeddingStartEvent, EmbeddingEndEvent))
        self.found.extend(Seen("event", name, p, v) for p, v in _vectors(event))


class _Spans(NullSpanHandler):
    _found: list = PrivateAttr(default_factory=list)

    @property
    def found(self) -> list[Seen]:
        return self._found

    def _add(self, channel: str, id_: str, obj: Any) -> None:
        self._found.extend(Seen(channel, id_.partition("-")[0], p, v) for p, v in _vectors(obj))

    def span_enter(self, id_: str, bound_args: Any, instance: Any = None, **kwargs: Any) -> None:
        self._add("span arguments", id_, bound_args)

    def span_exit(self, id_: str, bound_args: Any, instance: Any = None, result: Any = None, **kwargs: Any) -> None:
        self._add("span arguments at exit", id_, bound_args)
        self._add("span result", id_, result)


class _Callbacks(BaseCallbackHandler):
    def __init__(self) -> None:
        super().__init__(event_starts_to_ignore=[], event_ends_to_ignore=[])
        self.found: list[Seen] = []
        self.embedding_chunks: list[str] = []

    def on_event_start(
        self, event_type: CBEventType, payload: Any = None, event_id: str = "", parent_id: str = "", **kwargs: Any
    ) -> str:
        self.found.extend(Seen("callback", event_type.value, p, v) for p, v in _vectors(payload))
        return event_id

    def on_event_end(self, event_type: CBEventType, payload: Any = None, event_id: str = "", **kwargs: Any) -> None:
        if event_type == CBEventType.EMBEDDING:
            self.embedding_chunks.extend((payload or {}).get(EventPayload.CHUNKS, []))
        self.found.extend(Seen("callback", event_type.value, p, v) for p, v in _vectors(payload))

    def start_trace(self, trace_id: str | None = None) -> None:
        pass

    def end_trace(self, trace_id: str | None = None, trace_map: Any = None) -> None:
        pass


@dataclasses.dataclass
class _Observed:
    events: _Events
    spans: _Spans
    callbacks: _Callbacks

    @property
    def found(self) -> list[Seen]:
        return [*self.events.found, *self.spans.found, *self.callbacks.found]

    def clear(self) -> None:
        """Forget what was seen so far (between indexing and querying)."""
        for found in (self.events.found, self.spans.found, self.callbacks.found, self.callbacks.embedding_chunks):
            found.clear()
        self.events.embedding_events = 0


@contextmanager
def _observed() -> Iterator[_Observed]:
    """Handlers on the root dispatcher (where tracing integrations register), removed afterwards."""
    root = get_dispatcher()
    seen = _Observed(_Events(), _Spans(), _Callbacks())
    root.add_event_handler(seen.events)
    root.add_span_handler(seen.spans)
    try:
        yield seen
    finally:
        root.event_handlers = [h for h in root.event_handlers if h is not seen.events]
        root.span_handlers = [h for h in root.span_handlers if h is not seen.spans]


def _is(vec: np.ndarray, clean: list[float]) -> bool:
    return bool(np.allclose(vec, np.asarray(clean, dtype=np.float32), atol=1e-6))


@pytest.fixture
def base() -> FakeBase:
    return FakeBase(known=KnownVectors(dim=DIM), embed_batch_size=4)


def _nodes(texts: list[str]) -> list[TextNode]:
    return [TextNode(id_=f"00000000-0000-4000-8000-{i:012d}", text=t) for i, t in enumerate(texts)]


def _index(embed_model: Any, seen: _Observed) -> tuple[VectorStoreIndex, QdrantClient]:
    """What the issue did: index through the two-stage sealed storage context (and insert one more node)."""
    client = QdrantClient(location=":memory:")
    ctx = sealed_storage_context(
        vector_store=QdrantVectorStore(client=client, collection_name="notes"), key=generate_key(), fetch_k=8
    )
    index = VectorStoreIndex(
        _nodes(TEXTS), storage_context=ctx, embed_model=embed_model, callback_manager=CallbackManager([seen.callbacks])
    )
    index.insert_nodes([TextNode(id_="00000000-0000-4000-8000-000000000099", text=EXTRA)])
    return index, client


def test_two_stage_indexing_and_query_embedding_report_texts_but_no_vectors(base) -> None:
    embed = SealedEmbedding(base=base)
    assert embed.report_vectors is False and embed.embed_batch_size == 4  # taken from the base
    with _observed() as seen:
        index, client = _index(embed, seen)
        assert seen.events.embedding_events and seen.found == []  # the whole build: embedding, shells, docstore
        assert set(seen.callbacks.embedding_chunks) == {*TEXTS, EXTRA}  # what was embedded stays observable
        seen.clear()
        hits = index.as_retriever(similarity_top_k=3).retrieve(QUERY)
    client.close()
    assert len(hits) == 3 and {h.node.get_content() for h in hits} <= {*TEXTS, EXTRA}
    assert seen.events.embedding_events and [s for s in seen.found if s.embedding_channel] == []
    assert seen.callbacks.embedding_chunks == [QUERY]


async def test_two_stage_async_indexing_and_query_embedding_report_no_vectors(base) -> None:
    aclient = AsyncQdrantClient(location=":memory:")
    ctx = sealed_storage_context(
        vector_store=QdrantVectorStore(aclient=aclient, collection_name="notes"), key=generate_key(), fetch_k=8
    )
    with _observed() as seen:
        index = VectorStoreIndex(
            [],
            storage_context=ctx,
            embed_model=SealedEmbedding(base=base),
            use_async=True,
            callback_manager=CallbackManager([seen.callbacks]),
        )
        await index.ainsert_nodes(_nodes(TEXTS))
        assert seen.events.embedding_events and seen.found == []
        assert set(seen.callbacks.embedding_chunks) == set(TEXTS)
        seen.clear()
        hits = await index.as_retriever(similarity_top_k=3).aretrieve(QUERY)
    await aclient.close()
    assert len(hits) == 3 and "_aget_text_embeddings" in base.calls  # the base's native async path
    assert seen.events.embedding_events and [s for s in seen.found if s.embedding_channel] == []
    assert seen.callbacks.embedding_chunks == [QUERY]


@pytest.mark.parametrize("plain", [False, True], ids=["report_vectors", "plain-encoder"])
def test_the_clean_vectors_do_reach_the_handlers_when_reported(base, plain) -> None:
    """The handlers do see vectors: with the plain encoder (the issue) and with the explicit opt-in."""
    embed = base if plain else SealedEmbedding(base=base, report_vectors=True)
    with _observed() as seen:
        index, client = _index(embed, seen)
        index.as_retriever(similarity_top_k=3).retrieve(QUERY)
    client.close()
    reported = [s for s in seen.found if s.embedding_channel]
    for text in [*TEXTS, EXTRA]:  # every clean document vector, in an event and in a callback payload
        channels = {s.channel for s in reported if _is(s.vector, base.doc(text))}
        assert {"event", "callback"} <= channels
    assert any(_is(s.vector, base.query(QUERY)) for s in reported if s.channel == "event")
    spans = {s.source for s in reported if s.channel == "span result"}  # and LlamaIndex's spans return them
    owner = type(embed).__name__
    assert {f"{owner}.get_text_embedding_batch", f"{owner}.get_query_embedding"} <= spans


def test_sealed_embedding_returns_the_clean_vectors(base) -> None:
    embed = SealedEmbedding(base=base)
    np.testing.assert_allclose(embed.get_text_embedding_batch(TEXTS), [base.doc(t) for t in TEXTS], atol=1e-6)
    np.testing.assert_allclose(embed.get_query_embedding(QUERY), base.query(QUERY), atol=1e-6)  # the query path
    assert "_get_text_embeddings" in base.calls and "_get_query_embedding" in base.calls
    eight = FakeBase()  # (KnownVectors' default dimension: the fake itself pickles without its vectors)
    copy = pickle.loads(pickle.dumps(SealedEmbedding(base=eight, report_vectors=True)))  # rebuilt from its arguments
    assert isinstance(copy, SealedEmbedding) and copy.report_vectors is True
    np.testing.assert_allclose(copy.get_query_embedding(QUERY), eight.query(QUERY), atol=1e-6)


def test_sealed_embedding_refuses_protection_options_and_caches(base) -> None:
    from llama_index.core.storage.kvstore import SimpleKVStore

    with pytest.raises(InvalidInputError, match="drop key"):
        SealedEmbedding(base=base, key=generate_key())
    with pytest.raises(InvalidInputError, match="embeddings_cache"):
        SealedEmbedding(base=base, embeddings_cache=SimpleKVStore())
    cached = FakeBase(known=KnownVectors(dim=DIM), embeddings_cache=SimpleKVStore())
    with pytest.warns(BypassedCacheWarning):
        embed = SealedEmbedding(base=cached)
    embed.get_text_embedding_batch(TEXTS)
    assert cached.embeddings_cache.get_all(collection="embeddings") == {}  # no clean vector cached


def test_a_store_can_tell_reported_vectors_from_sealed_embedding_ones(base) -> None:
    """The guard a two-stage store runs on what it is given: a plain model's vectors were already reported."""
    embed = SealedEmbedding(base=base)
    silent = [*embed.get_text_embedding_batch(TEXTS), embed.get_agg_embedding_from_queries([QUERY, TEXTS[0]])]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReportedVectorsWarning)
        assert warn_unless_silent(silent, what="node embeddings") == 0
    plain = base.get_text_embedding_batch([EXTRA])  # the same encoder, unwrapped
    with pytest.warns(ReportedVectorsWarning, match=r"1 of 2 node embeddings came from no SealedEmbedding"):
        assert warn_unless_silent([silent[0], *plain], what="node embeddings") == 1


def test_sealed_embedding_over_the_bundled_minilm(minilm, instrumentation) -> None:
    """A non-LlamaIndex base (the bundled offline MiniLM, an Encoder) goes through the same silent path."""
    events, spans = instrumentation
    embed = SealedEmbedding(base=minilm)
    np.testing.assert_allclose(embed.get_text_embedding_batch(TEXTS[:2]), minilm.encode(TEXTS[:2]), atol=1e-6)
    np.testing.assert_allclose(embed.get_query_embedding(QUERY), minilm.encode([QUERY])[0], atol=1e-6)
    assert events.vectors == [] and set(events.chunks) == {*TEXTS[:2], QUERY}
    assert spans.results == []  # no span opened around it, so none returned a vector


def test_retrieval_hands_no_vector_to_any_handler_when_the_store_embeds_the_query(base: FakeBase) -> None:
    """Results carry no embedding, and the retriever never holds the clean query vector (the store embeds it)."""
    embed = SealedEmbedding(base=base)
    with _observed() as seen:
        client = QdrantClient(location=":memory:")
        ctx = sealed_storage_context(
            vector_store=QdrantVectorStore(client=client, collection_name="notes"),
            key=generate_key(),
            fetch_k=8,
            embed_model=embed,
        )
        index = VectorStoreIndex(
            _nodes(TEXTS), storage_context=ctx, embed_model=embed, callback_manager=CallbackManager([seen.callbacks])
        )
        seen.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("error", ReportedVectorsWarning)
            hits = index.as_retriever(similarity_top_k=3).retrieve(QUERY)
    client.close()
    assert len(hits) == 3 and all(h.node.embedding is None for h in hits)
    assert [(s.channel, s.source, s.path) for s in seen.found] == []
    assert seen.callbacks.embedding_chunks == [QUERY]  # the query text was embedded, and reported, once


def test_a_plain_encoder_in_sealed_search_is_loud(base: FakeBase) -> None:
    with _observed() as seen, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ReportedVectorsWarning)
        index, client = _index(base, seen)
        index.as_retriever(similarity_top_k=3).retrieve(QUERY)
    client.close()
    said = [str(w.message) for w in caught if issubclass(w.category, ReportedVectorsWarning)]
    assert any("node embeddings" in m for m in said) and any("query embeddings" in m for m in said)
