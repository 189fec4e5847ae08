"""LangChain's own standard ``VectorStore`` suite (``langchain-tests``) on ``SealedVectorStore``, in every mode."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore
from langchain_tests.integration_tests import VectorStoreIntegrationTests

from langchain_textcrafter import SealedVectorStore
from textcrafter_rag.sealed import StoreIndexSearch
from textcrafter_rag.sealed.app_index import AppIndexSearch
from textcrafter_rag.sealed.candidates import TwoStageSearch
from textcrafter_rag.sealing import generate_key


class TestStoreHeldIndex(VectorStoreIntegrationTests):
    """The default mode: the sealed index lives in the store."""

    @pytest.fixture
    def vectorstore(self) -> VectorStore:
        return SealedVectorStore(
            InMemoryVectorStore, embedding=self.get_embeddings(), key=generate_key(), search=StoreIndexSearch()
        )


class TestCandidates(VectorStoreIntegrationTests):
    """Candidate search: the store ranks noised candidates, the app re-ranks."""

    @pytest.fixture
    def vectorstore(self) -> VectorStore:
        return SealedVectorStore(
            InMemoryVectorStore, embedding=self.get_embeddings(), key=generate_key(), search=TwoStageSearch()
        )


@pytest.mark.filterwarnings("ignore::textcrafter_rag.sealed.app_index.SingleProcessIndexWarning")
class TestAppIndex(VectorStoreIntegrationTests):
    """The app-side index file: as the store-held index, but the index is a file of this process."""

    @pytest.fixture
    def vectorstore(self, tmp_path: Path) -> VectorStore:
        search = AppIndexSearch(index_path=tmp_path / "index.sealed")
        return SealedVectorStore(
            InMemoryVectorStore, embedding=self.get_embeddings(), key=generate_key(), search=search
        )


@pytest.mark.filterwarnings("ignore::textcrafter_rag.sealed.core.UnprotectedVectorsWarning")
class TestSingleStage(VectorStoreIntegrationTests):
    """Single-stage: the store ranks the vectors of ``embedding`` (the suite's fake encoder, unprotected)."""

    @pytest.fixture
    def vectorstore(self) -> VectorStore:
        return SealedVectorStore(InMemoryVectorStore, embedding=self.get_embeddings(), key=generate_key(), search=None)
