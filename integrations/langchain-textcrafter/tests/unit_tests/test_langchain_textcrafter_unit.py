"""LangChain-specific unit tests: the standard LangChain suite and the cache wrapping order.

What every adapter must do (protection, query path, async, errors, options) is in
``test_langchain_textcrafter_contract.py``, from the shared ``textcrafter_rag.testing.contract``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.stores import InMemoryByteStore
from langchain_tests.unit_tests import EmbeddingsUnitTests

from langchain_textcrafter import ProtectedEmbeddings, RawVectorCacheWarning
from textcrafter_rag import GaussianNoise, bundled_minilm


class TestProtectedEmbeddingsStandardUnit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self) -> type[Embeddings]:
        return ProtectedEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"base": bundled_minilm().model, "mechanism": GaussianNoise(s=0.05)}


def _f32(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def test_only_protected_vectors_are_cached_and_a_raw_cache_base_warns(fake_base, recording) -> None:
    cache_mod = pytest.importorskip("langchain_classic.embeddings")
    store = InMemoryByteStore()
    cached = cache_mod.CacheBackedEmbeddings.from_bytes_store(
        ProtectedEmbeddings(base=fake_base, mechanism=recording), store, namespace="tc", key_encoder="sha256"
    )
    out = cached.embed_documents(["alpha", "beta"])
    values = [_f32(json.loads(v)) for v in store.mget(list(store.yield_keys()))]
    raw = {tuple(_f32(fake_base.doc(t))) for t in ("alpha", "beta")}
    assert len(values) == 2 and all(tuple(v) not in raw for v in values)
    assert {tuple(v) for v in values} == {tuple(_f32(v)) for v in out}

    raw_cache = cache_mod.CacheBackedEmbeddings.from_bytes_store(fake_base, InMemoryByteStore(), key_encoder="sha256")
    with pytest.warns(RawVectorCacheWarning):
        ProtectedEmbeddings(base=raw_cache, mechanism=GaussianNoise(s=0.05))
