"""Unit tests for ProtectedEmbedding with a fake base whose raw vectors are known."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _llama_textcrafter_fakes import FakeBase, known_vector  # this folder is on sys.path (pytest prepend mode)
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.callbacks.schema import EventPayload
from llama_index.core.storage.kvstore import SimpleKVStore
from llama_index.embeddings.textcrafter import BypassedCacheWarning, ProtectedEmbedding

from textcrafter_rag import FingerprintMismatch, GaussianNoise, Mechanism, MissingPolicyError
from textcrafter_rag.policies import shipped_policy_path

DOCS = ["alpha doc", "beta doc", "gamma doc", "delta doc", "epsilon doc", "zeta doc"]
QUERY = "which doc is alpha?"


class MinimalBase(BaseEmbedding):
    """Implements only the abstract methods: LlamaIndex span-decorates all three, and its default
    batch methods loop over them."""

    def doc(self, text: str) -> list[float]:
        return known_vector("doc:" + text)

    def query(self, text: str) -> list[float]:
        return known_vector("query:" + text)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self.doc(text)

    def _get_query_embedding(self, query: str) -> list[float]:
        return self.query(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self.query(query)


def _f32(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def _vectors_in(obj: Any, dim: int = 8) -> list[np.ndarray]:
    """Every float vector of length ``dim`` nested anywhere in lists/tuples/dicts."""
    if isinstance(obj, (list, tuple)):
        if len(obj) == dim and all(isinstance(v, float) for v in obj):
            return [_f32(obj)]
        return [v for item in obj for v in _vectors_in(item, dim)]
    if isinstance(obj, dict):
        return [v for item in obj.values() for v in _vectors_in(item, dim)]
    return []


def _is_one_of(vec: np.ndarray, rows: np.ndarray) -> bool:
    return bool(rows.size) and bool(np.isclose(rows, vec, atol=1e-6).all(axis=1).any())


def test_batch_is_protected_with_one_policy_call_per_batch(fake_base, recording) -> None:
    emb = ProtectedEmbedding(base=fake_base, policy=recording)
    assert emb.embed_batch_size == 4  # taken from the base
    out = emb.get_text_embedding_batch(DOCS)
    assert [len(b) for b in recording.outputs] == [4, 2]
    np.testing.assert_array_equal(_f32(out), recording.all_outputs())
    np.testing.assert_array_equal(np.concatenate(recording.inputs), _f32([fake_base.doc(t) for t in DOCS]))
    # two batches (+ at most one probe call the core may make to learn the dimension); never per text
    assert fake_base.calls["_get_text_embeddings"] in (2, 3) and "_get_text_embedding" not in fake_base.calls
    assert all(type(x) is float for v in out for x in v)


def test_single_text_and_query(fake_base, recording) -> None:
    emb = ProtectedEmbedding(base=fake_base, policy=recording)
    v = emb.get_text_embedding("alpha doc")
    np.testing.assert_array_equal(_f32(v), recording.outputs[0][0])
    q = emb.get_query_embedding(QUERY)  # raw by default, through the base's query path
    np.testing.assert_array_equal(_f32(q), _f32(fake_base.query(QUERY)))
    assert len(recording.outputs) == 1 and fake_base.calls["_get_query_embedding"] == 1

    emb_q = ProtectedEmbedding(base=fake_base, policy=recording, protect_queries=True)
    q2 = emb_q.get_query_embedding(QUERY)
    np.testing.assert_array_equal(_f32(q2), recording.outputs[1][0])
    np.testing.assert_array_equal(recording.inputs[1][0], _f32(fake_base.query(QUERY)))


async def test_async_is_native_and_protected(fake_base, recording) -> None:
    emb = ProtectedEmbedding(base=fake_base, policy=recording, protect_queries=True)
    out = await emb.aget_text_embedding_batch(DOCS)
    single = await emb.aget_text_embedding("alpha doc")
    q = await emb.aget_query_embedding(QUERY)
    assert fake_base.calls.get("_aget_text_embeddings") == 3 and fake_base.calls.get("_aget_query_embedding") == 1
    assert fake_base.calls.get("_get_text_embeddings", 0) <= 1  # at most the core's dimension probe
    assert "_get_query_embedding" not in fake_base.calls
    protected = recording.all_outputs()
    assert all(_is_one_of(v, protected) for v in _f32(out))
    assert _is_one_of(_f32(single), protected) and _is_one_of(_f32(q), protected)


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
        base=fake_base, policy=recording, protect_queries=True, callback_manager=CallbackManager([wrapper_debug])
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
    span_vectors = _vectors_in(spans.results)  # what get_*_embedding* returned, span by span
    assert span_vectors and all(_is_one_of(v, protected) and not _is_one_of(v, raw) for v in span_vectors)

    assert not debug.get_event_pairs(CBEventType.EMBEDDING)
    pairs = wrapper_debug.get_event_pairs(CBEventType.EMBEDDING)
    cb_vectors = [_f32(v) for _, end in pairs for v in end.payload[EventPayload.EMBEDDINGS]]
    assert cb_vectors and all(_is_one_of(v, protected) and not _is_one_of(v, raw) for v in cb_vectors)


def test_base_cache_never_receives_raw_vectors(recording) -> None:
    cache = SimpleKVStore()
    base = FakeBase(model_name="fake", embeddings_cache=cache)
    with pytest.warns(BypassedCacheWarning):
        emb = ProtectedEmbedding(base=base, policy=recording)
    assert emb.embeddings_cache is None
    emb.get_text_embedding_batch(DOCS)
    emb.get_query_embedding(QUERY)
    assert cache.get_all(collection="embeddings") == {}

    own_cache = SimpleKVStore()
    with pytest.warns(BypassedCacheWarning):
        emb_cached = ProtectedEmbedding(base=base, policy=recording, embeddings_cache=own_cache)
    out = emb_cached.get_text_embedding_batch(DOCS)
    cached = [_f32(next(iter(v.values()))) for v in own_cache.get_all(collection="embeddings").values()]
    raw = _f32([base.doc(t) for t in DOCS])
    assert len(cached) == len(DOCS) and all(_is_one_of(v, _f32(out)) and not _is_one_of(v, raw) for v in cached)


def test_payload_has_no_vectors_or_parameters(fake_base) -> None:
    payload = ProtectedEmbedding(base=fake_base, policy=GaussianNoise(s=0.05)).to_payload()
    assert payload["mechanism"] == "gaussian" and payload["protect_queries"] is False
    assert payload["model_name"].startswith("textcrafter:")


def test_missing_policy_error_surfaces_unchanged() -> None:
    def fake8(texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), 8), dtype=np.float32)

    with pytest.raises(MissingPolicyError) as info:
        ProtectedEmbedding(base=fake8, policy=None)
    assert type(info.value) is MissingPolicyError
    assert "fit_textcrafter" in str(info.value) and "textcrafter fit" in str(info.value)


def test_missing_policy_for_llama_index_base(fake_base) -> None:
    with pytest.raises(MissingPolicyError, match="fit"):
        ProtectedEmbedding(base=fake_base)


def test_mismatched_policy_error_surfaces_unchanged(fake_base) -> None:
    class Bound16(Mechanism):
        name = "bound16"

        @property
        def dim(self) -> int:
            return 16

        def _protect(self, x: np.ndarray) -> np.ndarray:
            return x

    with pytest.raises(FingerprintMismatch, match="16-d"):
        ProtectedEmbedding(base=fake_base, policy=Bound16())


def test_invalid_input_is_rejected(fake_base, recording) -> None:
    emb = ProtectedEmbedding(base=fake_base, policy=recording)
    with pytest.raises(ValueError):
        emb.get_text_embedding_batch(["ok", " "])
    with pytest.raises(ValueError):
        emb.get_query_embedding("")
    assert not recording.outputs


@pytest.mark.skipif(
    shipped_policy_path("sentence-transformers/all-MiniLM-L6-v2") is None,
    reason="the shipped MiniLM policy is not in the checkout yet",
)
def test_default_policy_for_bundled_minilm(minilm) -> None:
    emb = ProtectedEmbedding()  # bundled MiniLM + shipped policy
    assert emb.protector.mechanism.name == "textcrafter"
    texts = ["Alice Smith's account 12345 is overdrawn.", "The match ended in a draw."]
    out = _f32(emb.get_text_embedding_batch(texts))
    assert not np.allclose(out, minilm.encode(texts), atol=1e-3)


def test_core_protector_on_a_llama_index_base_keeps_raw_vectors_out_of_spans(instrumentation) -> None:
    """The core's ``as_encoder`` uses this package's span-free path for a LlamaIndex base."""
    from textcrafter_rag import GaussianNoise, Protector

    events, spans = instrumentation
    fake_base = MinimalBase(model_name="minimal")  # every method span-decorated by LlamaIndex
    protector = Protector(base=fake_base, policy=GaussianNoise(s=0.05, seed=0))
    out = protector.embed_documents(DOCS)
    raw = np.asarray([fake_base.doc(t) for t in DOCS], dtype=np.float32)
    assert not np.any(np.all(np.isclose(out, raw), axis=1))
    seen = [np.asarray(r, dtype=np.float32).ravel() for r in spans.results if isinstance(r, list) and r]
    seen += [np.asarray(v, dtype=np.float32) for v in events.vectors]
    for v in seen:
        for row in raw:
            assert v.shape != row.shape or not np.allclose(v, row, atol=1e-6)
