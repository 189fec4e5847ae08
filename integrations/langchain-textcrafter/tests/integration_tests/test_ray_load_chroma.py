"""A Ray Data bulk load (``SealedLoad``) into a ``chroma run`` server: two actors, two writers of the index log.

2,000 records go through ``ds.map_batches(SealedLoad, ...)`` on a local 2-CPU Ray instance with two actor
processes. Both actors are made to write, by design rather than by scheduling luck: at most one batch is in
flight per actor, the pool starts both actors before the first batch, and each actor's first write waits at a
barrier (a Ray actor) until the other has started one, so the second batch can only go to the second actor.
Then a fresh store object with only the key finds every record (the index holds every id; a sample is found
top-1 by its own text) and the store holds one log head per writer.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")
pytest.importorskip("langchain_chroma", reason="the Chroma tests need langchain-chroma (the test extra)")

import chromadb
from chromadb.config import Settings
from langchain_chroma import Chroma
from langchain_core.embeddings import Embeddings
from ray.data import ActorPoolStrategy

from langchain_textcrafter import SealedVectorStore
from langchain_textcrafter.ray_load import ChromaHttpFactory, SealedLoad, unindexed
from textcrafter_rag.sealed import StoreIndexSearch
from textcrafter_rag.sealed.log import LOG_FIELD
from textcrafter_rag.sealing import generate_key

from ._sealed_engine_servers import ChromaServer
from ._store_index_worker import HashEmbeddings

N = 2_000
BATCH = 250
#: Bounds a broken run (a barrier never met fails the test instead of hanging CI); no result depends on it.
DEADLINE_S = 300


@ray.remote(num_cpus=0)
class Barrier:
    """Releases every caller once ``parties`` callers have arrived."""

    def __init__(self, parties: int) -> None:
        self.parties, self.arrived = parties, 0
        self.event = asyncio.Event()

    async def arrive(self) -> int:
        self.arrived += 1
        if self.arrived >= self.parties:
            self.event.set()
        await self.event.wait()
        return self.arrived


class BarrierChroma(Chroma):
    """Chroma whose first write in this process waits until every actor has started a batch."""

    barrier_name = ""
    _waited = False

    def add_documents(self, documents: list[Any], **kwargs: Any) -> list[str]:
        if not BarrierChroma._waited:
            ray.get(ray.get_actor(self.barrier_name).arrive.remote(), timeout=DEADLINE_S)
            BarrierChroma._waited = True
        return super().add_documents(documents, **kwargs)


class BarrierFactory(ChromaHttpFactory):
    """:class:`ChromaHttpFactory` building :class:`BarrierChroma` (pickled by value to the actors)."""

    def __call__(self, embedding: Embeddings) -> Chroma:
        client = chromadb.HttpClient(host=self.host, port=self.port, settings=Settings(anonymized_telemetry=False))
        store = BarrierChroma(client=client, collection_name=self.collection, embedding_function=embedding)
        store.barrier_name = "bulk-load-barrier"
        return store


def _text(i: int) -> str:
    return f"record {i}: a sealed note of the bulk-load test, topic {i % 13}"


@pytest.fixture(scope="module")
def chroma(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    server = ChromaServer(tmp_path_factory.mktemp("chroma-ray-load") / "data").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=200 * 2**20,
        configure_logging=False,
    )
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.wait_for_min_actors_s = DEADLINE_S  # both actors exist before the first batch is handed out
    try:
        yield ray
    finally:
        ray.shutdown()


def test_two_actors_load_every_record_and_a_fresh_store_finds_them(
    chroma: ChromaServer, local_ray: Any, tmp_path: Path
) -> None:
    key = generate_key()
    key_file = tmp_path / "textcrafter.key"
    key_file.write_text(key)
    emb = HashEmbeddings()
    texts = [_text(i) for i in range(N)]
    vectors = np.asarray(emb.embed_documents(texts), dtype=np.float32)
    ids = [f"doc-{i}" for i in range(N)]
    ds = ray.data.from_items([{"id": i, "text": t, "embedding": v} for i, t, v in zip(ids, texts, vectors)])
    barrier = Barrier.options(name="bulk-load-barrier").remote(2)
    factory = BarrierFactory(host=chroma.host, port=chroma.port, collection="bulk")
    out = ds.map_batches(
        SealedLoad,
        fn_constructor_kwargs={"store": factory, "key_file": str(key_file)},
        batch_size=BATCH,
        compute=ActorPoolStrategy(size=2, max_tasks_in_flight_per_actor=1),
        num_cpus=0.5,
    ).to_pandas()
    assert ray.get(barrier.arrive.remote()) == 3  # both actors arrived (and this call)
    assert sorted(out["id"]) == sorted(ids)  # every record written once
    writers = set(out["writer"])
    assert len(writers) == 2 and all(writers)

    client = chromadb.HttpClient(host=chroma.host, port=chroma.port, settings=Settings(anonymized_telemetry=False))
    heads = client.get_collection("bulk").get(where={LOG_FIELD: "head"}, include=[])["ids"]
    assert len(heads) == 2  # one head a writer, in the store

    fresh = SealedVectorStore(
        ChromaHttpFactory(host=chroma.host, port=chroma.port, collection="bulk"),
        embedding=emb,
        key=key,
        search=StoreIndexSearch(),
    )
    assert unindexed(fresh, ids) == []
    for i in range(0, N, 50):
        (hit,) = fresh.similarity_search(texts[i], k=1)
        assert (hit.id, hit.page_content) == (ids[i], texts[i])
    assert fresh.skipped == 0 and fresh._search.dead == 0
