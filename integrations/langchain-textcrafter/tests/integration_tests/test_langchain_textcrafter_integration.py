"""Integration tests: the standard LangChain suite on the offline MiniLM, and a FAISS store end to end."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from langchain_tests.integration_tests import EmbeddingsIntegrationTests

from langchain_textcrafter import ProtectedEmbeddings
from textcrafter_rag import GaussianNoise, bundled_minilm

FAISS = pytest.importorskip("langchain_community.vectorstores").FAISS

TEXTS = [
    "The striker scored twice as the home side won the football match.",
    "The central bank raised interest rates to curb inflation.",
    "The new smartphone ships with a faster chip and a better camera.",
    "The film won best picture at the awards ceremony.",
]


class TestProtectedEmbeddingsStandardIntegration(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self) -> type[Embeddings]:
        return ProtectedEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"base": bundled_minilm().model, "mechanism": GaussianNoise(s=0.05)}


def _stored(store: Any) -> np.ndarray:
    return store.index.reconstruct_n(0, store.index.ntotal)


def test_faiss_stores_protected_vectors(minilm, recording, tmp_path) -> None:
    emb = ProtectedEmbeddings(base=minilm.model, mechanism=recording)
    store = FAISS.from_texts(TEXTS, emb)
    stored = _stored(store)
    raw = minilm.encode(TEXTS)
    assert len(recording.outputs) == 1
    np.testing.assert_array_equal(stored, recording.outputs[0])
    np.testing.assert_allclose(recording.inputs[0], raw, atol=1e-5)
    assert np.linalg.norm(stored - raw, axis=1).min() > 0.5  # s=0.05 in 384-d: about 0.98

    hits = store.similarity_search("Who won the football game?", k=1)
    assert hits[0].page_content == TEXTS[0]

    store.save_local(str(tmp_path / "faiss"))
    loaded = FAISS.load_local(str(tmp_path / "faiss"), emb, allow_dangerous_deserialization=True)
    np.testing.assert_array_equal(_stored(loaded), recording.outputs[0])


async def test_faiss_async_ingest(minilm, recording) -> None:
    emb = ProtectedEmbeddings(base=minilm.model, mechanism=recording)
    store = await FAISS.afrom_texts(TEXTS, emb)
    np.testing.assert_array_equal(_stored(store), recording.outputs[0])
    hits = await store.asimilarity_search("interest rates and inflation", k=1)
    assert hits[0].page_content == TEXTS[1]
