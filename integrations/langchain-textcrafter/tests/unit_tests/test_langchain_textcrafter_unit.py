"""Unit tests for ProtectedEmbeddings: standard LangChain suite plus protection behaviour."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from langchain_tests.unit_tests import EmbeddingsUnitTests
from langchain_textcrafter import ProtectedEmbeddings, RawVectorCacheWarning

from textcrafter_rag import FingerprintMismatch, GaussianNoise, Mechanism, MissingPolicyError, bundled_minilm
from textcrafter_rag.policies import shipped_policy_path


class TestProtectedEmbeddingsStandardUnit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self) -> type[Embeddings]:
        return ProtectedEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"base": bundled_minilm().model, "policy": GaussianNoise(s=0.05)}


def _f32(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def test_documents_are_protected_through_the_policy(fake_base, recording) -> None:
    emb = ProtectedEmbeddings(base=fake_base, policy=recording)
    texts = ["alpha", "beta", "gamma"]
    out = emb.embed_documents(texts)
    assert isinstance(out, list) and all(isinstance(v, list) for v in out)
    assert all(type(x) is float for v in out for x in v)
    assert len(recording.outputs) == 1  # one policy call for the batch
    np.testing.assert_array_equal(_f32(out), recording.outputs[0])
    raw = _f32([fake_base.doc(t) for t in texts])
    np.testing.assert_array_equal(recording.inputs[0], raw)
    assert not np.allclose(_f32(out), raw, atol=1e-3)


def test_empty_batch(fake_base, recording) -> None:
    emb = ProtectedEmbeddings(base=fake_base, policy=recording)
    assert emb.embed_documents([]) == []
    assert not recording.outputs


async def test_empty_batch_async(fake_base, recording) -> None:
    emb = ProtectedEmbeddings(base=fake_base, policy=recording)
    assert await emb.aembed_documents([]) == []


def test_query_uses_base_query_path_and_is_raw_by_default(fake_base, recording) -> None:
    emb = ProtectedEmbeddings(base=fake_base, policy=recording)
    assert emb.protect_queries is False
    q = emb.embed_query("what is alpha?")
    np.testing.assert_array_equal(_f32(q), _f32(fake_base.query("what is alpha?")))
    assert fake_base.calls["embed_query"] == 1 and fake_base.calls["embed_documents"] == 0
    assert not recording.outputs


def test_protect_queries(fake_base, recording) -> None:
    emb = ProtectedEmbeddings(base=fake_base, policy=recording, protect_queries=True)
    q = emb.embed_query("what is alpha?")
    np.testing.assert_array_equal(_f32(q), recording.outputs[0][0])
    np.testing.assert_array_equal(recording.inputs[0][0], _f32(fake_base.query("what is alpha?")))


async def test_async_is_native_and_protected(fake_base, recording) -> None:
    emb = ProtectedEmbeddings(base=fake_base, policy=recording, protect_queries=True)
    docs = await emb.aembed_documents(["alpha", "beta"])
    q = await emb.aembed_query("alpha?")
    # (the core may make one sync probe call to learn the dimension; the texts go through the async API)
    assert fake_base.calls["aembed_documents"] == 1 and fake_base.calls["aembed_query"] == 1
    assert fake_base.calls["embed_query"] == 0
    np.testing.assert_array_equal(_f32(docs), recording.outputs[0])
    np.testing.assert_array_equal(_f32(q), recording.outputs[1][0])
    assert all(type(x) is float for x in q)


def test_callable_base(recording) -> None:
    def enc(texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), 4), dtype=np.float32)

    out = ProtectedEmbeddings(base=enc, policy=recording).embed_documents(["a", "b"])
    assert _f32(out).shape == (2, 4)
    q = ProtectedEmbeddings(base=enc, policy=recording).embed_query("a")
    assert q == [1.0, 1.0, 1.0, 1.0]


def test_missing_policy_error_surfaces_unchanged() -> None:
    def fake8(texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), 8), dtype=np.float32)

    with pytest.raises(MissingPolicyError) as info:
        ProtectedEmbeddings(base=fake8, policy=None)
    assert type(info.value) is MissingPolicyError
    msg = str(info.value)
    assert "fit_textcrafter" in msg and "textcrafter fit" in msg and "policy=" in msg


def test_mismatched_policy_error_surfaces_unchanged(fake_base) -> None:
    class Bound16(Mechanism):
        name = "bound16"

        @property
        def dim(self) -> int:
            return 16

        def _protect(self, x: np.ndarray) -> np.ndarray:
            return x

    with pytest.raises(FingerprintMismatch, match="16-d"):
        ProtectedEmbeddings(base=fake_base, policy=Bound16())


def test_invalid_input_is_rejected(fake_base, recording) -> None:
    emb = ProtectedEmbeddings(base=fake_base, policy=recording)
    with pytest.raises(ValueError):
        emb.embed_documents(["ok", "   "])
    with pytest.raises(TypeError):
        emb.embed_documents("not a list")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        emb.embed_query(3)  # type: ignore[arg-type]
    assert not recording.outputs


def test_cache_backed_wrapping_order(fake_base, recording) -> None:
    cache_mod = pytest.importorskip("langchain_classic.embeddings")
    from langchain_core.stores import InMemoryByteStore

    store = InMemoryByteStore()
    cached = cache_mod.CacheBackedEmbeddings.from_bytes_store(
        ProtectedEmbeddings(base=fake_base, policy=recording), store, namespace="tc", key_encoder="sha256"
    )
    out = cached.embed_documents(["alpha", "beta"])
    values = [_f32(json.loads(v)) for v in store.mget(list(store.yield_keys()))]
    raw = {tuple(_f32(fake_base.doc(t))) for t in ("alpha", "beta")}
    assert len(values) == 2 and all(tuple(v) not in raw for v in values)
    assert {tuple(v) for v in values} == {tuple(_f32(v)) for v in out}

    raw_cache = cache_mod.CacheBackedEmbeddings.from_bytes_store(fake_base, InMemoryByteStore(), key_encoder="sha256")
    with pytest.warns(RawVectorCacheWarning):
        ProtectedEmbeddings(base=raw_cache, policy=GaussianNoise(s=0.05))


@pytest.mark.skipif(
    shipped_policy_path("sentence-transformers/all-MiniLM-L6-v2") is None,
    reason="the shipped MiniLM policy is not in the checkout yet",
)
def test_default_policy_for_bundled_minilm(minilm) -> None:
    emb = ProtectedEmbeddings()  # bundled MiniLM + shipped policy
    assert emb.mechanism.name == "textcrafter"
    texts = ["Alice Smith's account 12345 is overdrawn.", "The match ended in a draw."]
    out = _f32(emb.embed_documents(texts))
    raw = minilm.encode(texts)
    assert out.shape == raw.shape and not np.allclose(out, raw, atol=1e-3)
    np.testing.assert_allclose(_f32(emb.embed_query(texts[0])), raw[0], atol=1e-5)
