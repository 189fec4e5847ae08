"""LlamaIndex-specific behaviour of ProtectedEmbedding: batching, single-text API, instrumentation, caches.

What every adapter must do (protection, query path, async, errors, options) is in
``test_llama_index_textcrafter_contract.py``, from the shared ``textcrafter_rag.testing.contract``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.callbacks.schema import EventPayload
from llama_index.core.schema import TextNode
from llama_index.core.storage.kvstore import SimpleKVStore

from llama_index.embeddings.textcrafter import BypassedCacheWarning, ProtectedEmbedding
from textcrafter_rag import GaussianNoise

from ._llama_textcrafter_fakes import FakeBase, MinimalBase, vectors_in

DOCS = ["alpha doc", "beta doc", "gamma doc", "delta doc", "epsilon doc", "zeta doc"]
QUERY = "which doc is alpha?"


def _f32(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def _is_one_of(vec: np.ndarray, rows: np.ndarray) -> bool:
    return bool(rows.size) and bool(np.isclose(rows, vec, atol=1e-6).all(axis=1).any())


def test_batch_is_protected_with_one_policy_call_per_batch(fake_base, recording) -> None:
    emb = ProtectedEmbedding(base=fake_base, mechanism=recording)
    assert emb.embed_batch_size == 4  # taken from the base
    out = emb.get_text_embedding_batch(DOCS)
    assert [len(b) for b in recording.outputs] == [4, 2]
    np.testing.assert_array_equal(_f32(out), recording.all_outputs())
    np.testing.assert_array_equal(np.concatenate(recording.inputs), _f32([fake_base.doc(t) for t in DOCS]))
    # two batches (+ at most one probe call the core may make to learn the dimension); never per text
    assert fake_base.calls["_get_text_embeddings"] in (2, 3) and "_get_text_embedding" not in fake_base.calls


async def test_single_text_api_is_protected(fake_base, recording) -> None:
    emb = ProtectedEmbedding(base=fake_base, mechanism=recording)
    v = emb.get_text_embedding(DOCS[0])
    np.testing.assert_array_equal(_f32(v), recording.outputs[0][0])
    np.testing.assert_array_equal(recording.inputs[0][0], _f32(fake_base.doc(DOCS[0])))
    av = await emb.aget_text_embedding(DOCS[1])
    np.testing.assert_array_equal(_f32(av), recording.outputs[1][0])
    assert fake_base.calls["_aget_text_embeddings"] == 1  # the base's native async batch method
    assert all(type(x) is float for x in [*v, *av])


@pytest.mark.parametrize("minimal", [False, True], ids=["batch-base", "minimal-base"])
async def test_instrumentation_and_callbacks_only_see_protected_vectors(
    fake_base, recording, instrumentation, minimal
) -> None:
    events, spans = instrumentation
    if minimal:
        fake_base = MinimalBase(model_name="minimal", embed_batch_size=4)
    debug = LlamaDebugHandler()
    fake_base.callback_manager = CallbackManager([debug])  # the base must never report anything
    wrapper_debug = LlamaDebugHandler()
    emb = ProtectedEmbedding(
        base=fake_base,
        mechanism=recording,
        protect_queries=True,
        callback_manager=CallbackManager([wrapper_debug]),
        report_vectors=True,  # opted in: every vector reported is a protected one
    )
    emb.get_text_embedding_batch(DOCS)
    emb.get_text_embedding(DOCS[0])
    emb.get_query_embedding(QUERY)
    await emb.aget_text_embedding_batch(DOCS)
    await emb.aget_query_embedding(QUERY)
    emb([])  # TransformComponent path, no nodes

    raw = _f32([fake_base.doc(t) for t in DOCS] + [fake_base.query(QUERY)])
    protected = recording.all_outputs()
    seen = [_f32(v) for v in events.vectors]
    assert len(seen) == 2 * len(DOCS) + 3
    for v in seen:
        assert _is_one_of(v, protected) and not _is_one_of(v, raw)
    span_vectors = vectors_in(spans.results)  # what get_*_embedding* returned, span by span
    assert span_vectors and all(_is_one_of(v, protected) and not _is_one_of(v, raw) for v in span_vectors)

    assert not debug.get_event_pairs(CBEventType.EMBEDDING)
    pairs = wrapper_debug.get_event_pairs(CBEventType.EMBEDDING)
    cb_vectors = [_f32(v) for _, end in pairs for v in end.payload[EventPayload.EMBEDDINGS]]
    assert cb_vectors and all(_is_one_of(v, protected) and not _is_one_of(v, raw) for v in cb_vectors)


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
async def test_instrumentation_carries_texts_but_no_vectors_by_default(
    fake_base, recording, instrumentation, keyed
) -> None:
    """Issue 24 (note b): events paired each text with its vector -- known pairs for a keyed rotation."""
    events, spans = instrumentation
    chunks: list[str] = []
    debug = LlamaDebugHandler()
    emb = ProtectedEmbedding(
        base=fake_base,
        mechanism=recording,
        key=bytes(range(32)) if keyed else None,
        callback_manager=CallbackManager([debug]),
    )
    assert emb.report_vectors is False
    released = [
        *emb.get_text_embedding_batch(DOCS),
        emb.get_text_embedding(DOCS[0]),
        emb.get_query_embedding(QUERY),
        *(await emb.aget_text_embedding_batch(DOCS)),
        await emb.aget_text_embedding(DOCS[1]),
        await emb.aget_query_embedding(QUERY),
        emb.get_agg_embedding_from_queries([QUERY]),
    ]
    nodes = emb([TextNode(text=DOCS[2])])
    assert nodes[0].embedding is not None and len(released) == 2 * len(DOCS) + 5
    assert all(len(v) == 8 for v in released)  # the caller still gets every vector
    assert events.vectors == [] and set(events.chunks) == {*DOCS, QUERY}  # EmbeddingEndEvent: texts only
    assert vectors_in(spans.results) == []  # no span result holds a vector
    for _, end in debug.get_event_pairs(CBEventType.EMBEDDING):
        assert EventPayload.EMBEDDINGS not in (end.payload or {})
        chunks.extend(end.payload[EventPayload.CHUNKS])
    assert set(chunks) == {*DOCS, QUERY}  # what was embedded is still observable, without the vectors


def test_base_cache_never_receives_raw_vectors(recording) -> None:
    cache = SimpleKVStore()
    base = FakeBase(model_name="fake", embeddings_cache=cache)
    with pytest.warns(BypassedCacheWarning):
        emb = ProtectedEmbedding(base=base, mechanism=recording)
    assert emb.embeddings_cache is None
    emb.get_text_embedding_batch(DOCS)
    emb.get_query_embedding(QUERY)
    assert cache.get_all(collection="embeddings") == {}

    own_cache = SimpleKVStore()
    with pytest.warns(BypassedCacheWarning):
        emb_cached = ProtectedEmbedding(base=base, mechanism=recording, embeddings_cache=own_cache)
    out = emb_cached.get_text_embedding_batch(DOCS)
    cached = [_f32(next(iter(v.values()))) for v in own_cache.get_all(collection="embeddings").values()]
    raw = _f32([base.doc(t) for t in DOCS])
    assert len(cached) == len(DOCS) and all(_is_one_of(v, _f32(out)) and not _is_one_of(v, raw) for v in cached)


def test_a_keyed_embedding_refuses_a_text_keyed_cache(recording) -> None:
    # LlamaIndex keys embeddings_cache by text alone: tenants (and keys) sharing one would get each other's vectors
    with pytest.raises(ValueError, match="embeddings_cache cannot be used with key="):
        ProtectedEmbedding(
            base=FakeBase(model_name="fake"), mechanism=recording, key=bytes(32), embeddings_cache=SimpleKVStore()
        )


def test_payload_has_no_vectors_or_parameters(fake_base) -> None:
    payload = ProtectedEmbedding(base=fake_base, mechanism=GaussianNoise(s=0.05)).to_payload()
    assert payload["mechanism"] == "gaussian" and payload["protect_queries"] is False
    assert payload["model_name"].startswith("textcrafter:")
