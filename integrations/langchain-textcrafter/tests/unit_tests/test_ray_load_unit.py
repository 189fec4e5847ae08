"""``SealedLoad``, the Ray Data bulk loader, called directly (no cluster): each instance is one writer of the
store-held index, every batch is one sealed add, and a fresh store object with only the key finds every record.

The instances share one in-memory store, as Ray's actors share a server; the real-process run on a Chroma
server is ``integration_tests/test_ray_load_chroma.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from _langchain_textcrafter_fakes import FakeAsymmetricEmbeddings
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_textcrafter import SealedVectorStore
from langchain_textcrafter.ray_load import SealedLoad, unindexed
from textcrafter_rag.errors import InvalidInputError, InvalidTypeError, MissingColumnError
from textcrafter_rag.sealed import StoreIndexSearch
from textcrafter_rag.sealed.app_index import AppIndexSearch, SingleProcessIndexWarning
from textcrafter_rag.sealed.core import SealedSearch
from textcrafter_rag.sealed.log import LOG_FIELD
from textcrafter_rag.sealing import generate_key
from textcrafter_rag.testing import KnownVectors

DIM = 32
N = 120


class SharedMemory:
    """A store factory whose stores all hold one dict of records: several writers, one store."""

    def __init__(self) -> None:
        self.records: dict[str, Any] = {}

    def __call__(self, embedding: Embeddings) -> InMemoryVectorStore:
        store = InMemoryVectorStore(embedding)
        store.store = self.records
        return store


@pytest.fixture
def base() -> FakeAsymmetricEmbeddings:
    return FakeAsymmetricEmbeddings(KnownVectors(dim=DIM))


@pytest.fixture
def key_file(tmp_path: Path) -> str:
    path = tmp_path / "textcrafter.key"
    path.write_text(generate_key())
    return str(path)


def _batch(base: FakeAsymmetricEmbeddings, start: int, stop: int) -> dict[str, np.ndarray]:
    ids = [f"r{i}" for i in range(start, stop)]
    texts = [f"record {i}: a sealed note about topic {i % 9}" for i in range(start, stop)]
    vectors = np.asarray([base.doc(t) for t in texts], dtype=np.float32)
    return {"id": np.array(ids, dtype=object), "text": np.array(texts, dtype=object), "embedding": vectors}


def _reader(shared: SharedMemory, base: FakeAsymmetricEmbeddings, key_file: str) -> SealedVectorStore:
    return SealedVectorStore(shared, embedding=base, key=Path(key_file).read_text(), search=StoreIndexSearch())


def test_two_writers_load_every_record_and_a_fresh_store_finds_each_by_its_vector(base, key_file) -> None:
    shared = SharedMemory()
    loads = [SealedLoad(store=shared, key_file=key_file) for _ in range(2)]
    written: list[str] = []
    writers = set()
    for n, start in enumerate(range(0, N, 30)):  # batches alternate between the two writers
        out = loads[n % 2](_batch(base, start, start + 30))
        written += list(out["id"])
        writers |= set(out["writer"])
    assert written == [f"r{i}" for i in range(N)]
    assert len(writers) == 2 and all(writers)
    heads = [r for r in shared.records.values() if r["metadata"].get(LOG_FIELD) == "head"]
    assert len(heads) == 2  # one head a writer, in the store
    reader = _reader(shared, base, key_file)
    assert unindexed(reader, written) == []
    for i in range(0, N, 7):
        text = f"record {i}: a sealed note about topic {i % 9}"
        (hit,) = reader.similarity_search_by_vector(base.doc(text), k=1)
        assert (hit.id, hit.page_content) == (f"r{i}", text)


def test_a_load_that_skips_the_index_is_caught(base, key_file, monkeypatch) -> None:
    shared = SharedMemory()
    monkeypatch.setattr(SealedSearch, "index_add", lambda self, ids, clean: None)  # a load that never logs
    monkeypatch.setattr(SealedSearch, "index_stored", lambda self, ids, clean: None)
    out = SealedLoad(store=shared, key_file=key_file)(_batch(base, 0, 20))
    monkeypatch.undo()
    assert unindexed(_reader(shared, base, key_file), list(out["id"])) == list(out["id"])


@pytest.mark.parametrize("kind", ["pandas", "arrow"])
def test_pandas_and_arrow_batches_write_the_same_records(base, key_file, kind) -> None:
    batch = _batch(base, 0, 12)
    frame = pd.DataFrame({"id": batch["id"], "text": batch["text"], "embedding": list(batch["embedding"])})
    given = frame if kind == "pandas" else pa.Table.from_pandas(frame)
    shared = SharedMemory()
    out = SealedLoad(store=shared, key_file=key_file)(given)
    assert list(out["id"]) == list(batch["id"])
    assert unindexed(_reader(shared, base, key_file), list(out["id"])) == []


def test_texts_without_vectors_are_embedded_by_the_given_embeddings(base, key_file) -> None:
    batch = _batch(base, 0, 10)
    del batch["embedding"]
    shared = SharedMemory()
    with pytest.raises(InvalidInputError, match="must carry the clean vectors"):
        SealedLoad(store=shared, key_file=key_file)(batch)
    out = SealedLoad(store=shared, key_file=key_file, embedding=base, metadata_columns=("id",))(batch)
    reader = _reader(shared, base, key_file)
    (hit,) = reader.similarity_search_by_vector(base.doc(str(batch["text"][3])), k=1)
    assert hit.id == "r3" and hit.metadata["id"] == "r3"
    assert unindexed(reader, list(out["id"])) == []


def test_the_key_is_read_on_the_worker_never_passed(key_file, monkeypatch) -> None:
    shared = SharedMemory()
    with pytest.raises(InvalidInputError, match="never the key itself"):
        SealedLoad(store=shared, key=generate_key())  # type: ignore[call-arg]
    with pytest.raises(InvalidInputError, match="exactly one"):
        SealedLoad(store=shared)
    monkeypatch.setenv("TC_BULK_KEY", Path(key_file).read_text())
    assert "key=<redacted>" in repr(SealedLoad(store=shared, key_env="TC_BULK_KEY"))


def test_refusals_say_why(base, key_file, tmp_path) -> None:
    with pytest.raises(InvalidTypeError, match="not a store"):
        SealedLoad(store=InMemoryVectorStore(base), key_file=key_file)
    with pytest.warns(SingleProcessIndexWarning):
        one_process = AppIndexSearch(index_path=tmp_path / "i")
    with pytest.raises(InvalidInputError, match="one writer"):
        SealedLoad(store=SharedMemory(), key_file=key_file, search=one_process)
    with pytest.raises(MissingColumnError, match="'text'"):
        SealedLoad(store=SharedMemory(), key_file=key_file)({"id": np.array(["a"]), "body": np.array(["x"])})
    empty = SealedLoad(store=SharedMemory(), key_file=key_file)({"text": np.array([], dtype=object)})
    assert len(empty["id"]) == 0
