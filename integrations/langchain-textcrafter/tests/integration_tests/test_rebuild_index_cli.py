"""``textcrafter rebuild-index``: a store whose index log was lost is indexed again from its sealed records,
by the command line, in another process (Qdrant local: one process at a time, so the test's client is closed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from langchain_textcrafter import SealedVectorStore
from textcrafter_rag.sealed import StoreIndexSearch
from textcrafter_rag.sealing import generate_key

from ._store_index_worker import DIM, HashEmbeddings

qdrant_client = pytest.importorskip("qdrant_client", reason="the Qdrant tests need qdrant-client (the test extra)")
langchain_qdrant = pytest.importorskip("langchain_qdrant")

TEXTS = [f"sealed note {i} about ward {i % 4}" for i in range(30)]
IDS = [f"n{i}" for i in range(30)]


def _store(path: Path, key: str) -> tuple[SealedVectorStore, object]:
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=str(path))
    if not client.collection_exists("docs"):
        client.create_collection("docs", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    store = SealedVectorStore(
        lambda e: langchain_qdrant.QdrantVectorStore(client=client, collection_name="docs", embedding=e),
        embedding=HashEmbeddings(),
        key=key,
        search=StoreIndexSearch(),
    )
    return store, client


def test_the_command_rebuilds_a_lost_log_from_the_sealed_records(tmp_path: Path) -> None:
    from qdrant_client import models

    key, path = generate_key(), tmp_path / "qdrant"
    store, client = _store(path, key)
    store.add_texts(TEXTS, ids=IDS)
    log = models.Filter(must=[models.IsEmptyCondition(is_empty=models.PayloadField(key="metadata._tc_log"))])
    client.delete("docs", points_selector=models.FilterSelector(filter=models.Filter(must_not=log.must)))
    client.close()
    env = {**os.environ, "TC_REBUILD_KEY": key}
    args = ["rebuild-index", "--engine", "qdrant", "--path", str(path), "--collection", "docs", "--compact"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "textcrafter_rag.cli",
            *args,
            "--key-env",
            "TC_REBUILD_KEY",
            "--no-progress",
            "--compact",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"indexed {len(TEXTS)} sealed records" in done.stdout
    assert "compacted the index into a snapshot" in done.stdout
    assert key not in done.stdout + done.stderr
    store, client = _store(path, key)
    try:
        assert [d.id for d in store.similarity_search(TEXTS[7], k=1)] == ["n7"]
        assert store._search.store_index().snapshots.loaded == 1  # opened from the snapshot the command wrote
    finally:
        client.close()


def test_the_command_refuses_without_a_place_and_prints_no_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "textcrafter_rag.cli", "rebuild-index", "--engine", "qdrant", "--collection", "x"],
        env={**os.environ, "TC_REBUILD_KEY": generate_key()},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "needs --path" in done.stderr and "Traceback" not in done.stderr
