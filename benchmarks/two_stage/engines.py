"""End-to-end search latency through the sealed store on real engines: Qdrant local and a Chroma server.

The same records go into a single-stage and a two-stage :class:`langchain_textcrafter.SealedVectorStore`
on each engine; every query is timed from the call to the opened hits (the encoder is not timed: the
embeddings are precomputed and served by text). Two-stage search asks the engine for ``fetch_k``
candidates, opens their sealed clean vectors, re-ranks and opens the ``k`` winners' texts; the
difference to single-stage is what the re-rank costs on that engine, transfer of the larger payloads
included.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from benchmarks.common.net_delay import delayed
from benchmarks.common.processes import free_port, running
from langchain_textcrafter import SealedVectorStore
from textcrafter_rag.sealed.candidates import DEFAULT_SEARCH, TwoStageSearch

__all__ = ["PrecomputedEmbeddings", "engine_latency_rows", "engines_section"]

#: The mode name of LangChain's default candidate search (rounds to an expected recall, at most 2,000).
ROUNDS = "two-stage, rounds to recall 0.95 (default)"


class PrecomputedEmbeddings(Embeddings):
    """Serve precomputed vectors by text, so the timing leaves the encoder out.

    A text it does not know (an engine's dimension probe, ``"dummy_text"``) gets the first basis vector.
    """

    def __init__(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        vectors = np.asarray(vectors, dtype=np.float32)
        self._by_text = {t: v.tolist() for t, v in zip(texts, vectors)}
        self._probe = np.eye(1, vectors.shape[1], dtype=np.float32)[0].tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._by_text.get(t, self._probe) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._by_text.get(text, self._probe)


@contextmanager
def _chroma_server(path: Path) -> Iterator[tuple[str, int]]:
    """A ``chroma run`` server on a loopback port, stopped on exit."""
    port = free_port()
    exe = Path(sys.executable).parent / "chroma"
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False", "HOME": str(path)}

    def ready() -> bool:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1).close()
        except OSError:
            return False
        return True

    command = [str(exe), "run", "--path", str(path / "data"), "--host", "127.0.0.1", "--port", str(port)]
    name = f"chroma run (see {path / 'chroma.log'})"
    log = (path / "chroma.log").open("w")
    with log, running(command, ready=ready, name=name, stdout=log, stderr=subprocess.STDOUT, env=env):
        yield "127.0.0.1", port


def _timed(search: Callable[[str], Any], queries: Sequence[str]) -> np.ndarray:
    for q in queries[:3]:  # warm-up: connections, caches
        search(q)
    out = []
    for q in queries:
        t0 = time.perf_counter()
        search(q)
        out.append((time.perf_counter() - t0) * 1000)
    return np.asarray(out)


def engine_latency_rows(
    texts: Sequence[str],
    doc_vectors: np.ndarray,
    queries: Sequence[str],
    query_vectors: np.ndarray,
    *,
    fetch_k: int = 200,
    k: int = 10,
    engines: Sequence[str] = ("qdrant", "chroma"),
    key: str,
) -> list[dict[str, Any]]:
    """p50 / p95 search latency (ms) per engine: single-stage, two-stage at ``fetch_k``, and the default rounds."""
    embeddings = PrecomputedEmbeddings([*texts, *queries], np.vstack([doc_vectors, query_vectors]))
    dim = int(np.asarray(doc_vectors).shape[1])
    ids = [f"00000000-0000-4000-8000-{i:012d}" for i in range(len(texts))]
    rows: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="two-stage-engines-"))
    try:
        for engine in engines:
            modes = (("single-stage", None), ("two-stage", TwoStageSearch.of(fetch_k)), (ROUNDS, DEFAULT_SEARCH))
            for n_mode, (mode, two_stage) in enumerate(modes):
                name = f"docs_{n_mode}"
                with _engine(engine, tmp / engine / name, name, dim) as factory:
                    store = SealedVectorStore(factory, embedding=embeddings, key=key, search=two_stage)
                    for start in range(0, len(texts), 1000):
                        store.add_texts(list(texts[start : start + 1000]), ids=ids[start : start + 1000])
                    lat = _timed(lambda q, s=store: s.similarity_search(q, k=k), list(queries))
                rows.append(
                    {
                        "part": "engines",
                        "mechanism": "gaussian" if two_stage else "none",
                        "engine": engine,
                        "mode": mode,
                        "fetch_k": two_stage.open_k if two_stage else None,
                        "recall": two_stage.recall if two_stage else None,
                        "k": k,
                        "n_docs": len(texts),
                        "n_queries": len(queries),
                        "latency_ms_p50": round(float(np.percentile(lat, 50)), 2),
                        "latency_ms_p95": round(float(np.percentile(lat, 95)), 2),
                        "doc_strength": store.two_stage.doc_strength if two_stage else None,
                        "query_strength": store.two_stage.query_strength if two_stage else None,
                    }
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


@contextmanager
def _engine(
    engine: str, path: Path, name: str, dim: int, *, ef_search: int | None = None, net_delay_ms: float = 0.0
) -> Iterator[Callable[..., Any]]:
    """A factory building the engine's LangChain store from the embeddings the sealed store gives it (of collection
    ``name``; ``collection=`` names another on the same engine instance, made on first use).

    ``"qdrant-memory"``: Qdrant local without its file (``QdrantClient(":memory:")``): the same search code as
    ``"qdrant"``, without the SQLite write of every point that ``"qdrant"`` makes. ``ef_search``: the breadth of
    Chroma's HNSW search, set when the collection is made (a running server keeps a loaded index's breadth, so
    changing it later does not apply); Qdrant local has no HNSW, and refuses it. ``net_delay_ms``: the Chroma
    client reaches its server through :func:`~benchmarks.common.net_delay.delayed`, that many milliseconds each
    way (Qdrant local runs in this process: no network to delay, refused)."""
    path.mkdir(parents=True, exist_ok=True)
    if ef_search is not None and engine != "chroma":
        raise ValueError(f"ef_search applies to chroma's HNSW; {engine} searches exactly")
    if net_delay_ms and engine != "chroma":
        raise ValueError(f"net_delay_ms applies to the chroma server; {engine} runs in this process")
    if engine in ("qdrant", "qdrant-memory"):
        from langchain_qdrant import QdrantVectorStore
        from qdrant_client import QdrantClient, models

        client = QdrantClient(path=str(path)) if engine == "qdrant" else QdrantClient(location=":memory:")

        def qdrant(e: Embeddings, collection: str = name) -> Any:
            if not client.collection_exists(collection):
                config = models.VectorParams(size=dim, distance=models.Distance.DOT)
                client.create_collection(collection, vectors_config=config)
            return QdrantVectorStore(
                client=client, collection_name=collection, embedding=e, distance=models.Distance.DOT
            )

        try:
            yield qdrant
        finally:
            client.close()
    elif engine == "chroma":
        import chromadb
        from langchain_chroma import Chroma

        with _chroma_server(path) as (host, port), ExitStack() as stack:
            if net_delay_ms:
                port = stack.enter_context(delayed(port, net_delay_ms))
            client = chromadb.HttpClient(host=host, port=port)
            config = {"hnsw": {"ef_search": int(ef_search)}} if ef_search is not None else None
            yield lambda e, collection=name: Chroma(
                collection_name=collection, embedding_function=e, client=client, collection_configuration=config
            )
    else:
        raise ValueError(f"unknown engine {engine!r}; choose qdrant, qdrant-memory or chroma")


def engines_section(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The report's section on the end-to-end latency rows."""
    en = [r for r in rows if r.get("part") == "engines"]
    if not en:
        return ["## Latency through the sealed store", "", "Not measured in this run."]
    lines = [
        "## Latency through the sealed store",
        "",
        f"`SealedVectorStore.similarity_search(query, k={en[0]['k']})` from the call to the opened hits, "
        f"{en[0]['n_docs']:,} records, {en[0]['n_queries']} queries, embeddings precomputed (the encoder is not "
        "timed), one process on the shared 2-core machine. Single-stage: the engine ranks, the winners' texts are "
        "opened; two-stage: the engine returns fetch_k candidates, their sealed int8 vectors are opened and "
        "re-ranked, the winners' texts opened; rounds (LangChain's default): the engine is asked for 100, 200, ... "
        "candidates until the expected recall of the exact top k reaches 0.95 (fetch_k the cap).",
        "",
        "| engine | search | fetch_k | p50 ms | p95 ms |",
        "|---|---|---:|---:|---:|",
    ]
    for r in en:
        fk = r["fetch_k"] if r["fetch_k"] is not None else "–"
        lines.append(f"| {r['engine']} | {r['mode']} | {fk} | {r['latency_ms_p50']:.2f} | {r['latency_ms_p95']:.2f} |")
    return lines
