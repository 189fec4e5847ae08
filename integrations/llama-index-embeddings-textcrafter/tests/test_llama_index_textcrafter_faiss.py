"""End to end: VectorStoreIndex on a FaissVectorStore stores only protected vectors."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import TextNode

from llama_index.embeddings.textcrafter import ProtectedEmbedding

faiss = pytest.importorskip("faiss")
FaissVectorStore = pytest.importorskip("llama_index.vector_stores.faiss").FaissVectorStore

TEXTS = [
    "The striker scored twice as the home side won the football match.",
    "The central bank raised interest rates to curb inflation.",
    "The new smartphone ships with a faster chip and a better camera.",
    "The film won best picture at the awards ceremony.",
]


def _index(embed_model: ProtectedEmbedding, dim: int) -> tuple[VectorStoreIndex, FaissVectorStore]:
    store = FaissVectorStore(faiss_index=faiss.IndexFlatL2(dim))
    nodes = [TextNode(text=t, id_=f"n{i}") for i, t in enumerate(TEXTS)]
    ctx = StorageContext.from_defaults(vector_store=store)
    return VectorStoreIndex(nodes, storage_context=ctx, embed_model=embed_model), store


def test_faiss_index_stores_protected_vectors(minilm, recording) -> None:
    embed_model = ProtectedEmbedding(base=minilm, mechanism=recording)
    index, store = _index(embed_model, minilm.dimension)
    stored = store.client.reconstruct_n(0, store.client.ntotal)
    raw = minilm.encode(TEXTS)
    assert len(recording.outputs) == 1  # one policy call for the batch
    np.testing.assert_array_equal(stored, recording.outputs[0])
    np.testing.assert_allclose(recording.inputs[0], raw, atol=1e-5)
    assert np.linalg.norm(stored - raw, axis=1).min() > 0.5

    hits = index.as_retriever(similarity_top_k=1).retrieve("Who won the football game?")
    assert hits[0].node.get_content() == TEXTS[0]


async def test_faiss_index_async_ingest(minilm, recording) -> None:
    embed_model = ProtectedEmbedding(base=minilm, mechanism=recording)
    store = FaissVectorStore(faiss_index=faiss.IndexFlatL2(minilm.dimension))
    nodes = [TextNode(text=t, id_=f"n{i}") for i, t in enumerate(TEXTS)]
    index = VectorStoreIndex(
        nodes, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=embed_model, use_async=True
    )
    np.testing.assert_array_equal(store.client.reconstruct_n(0, len(TEXTS)), recording.outputs[0])
    hits = await index.as_retriever(similarity_top_k=1).aretrieve("interest rates and inflation")
    assert hits[0].node.get_content() == TEXTS[1]
