"""The measured parts of ``benchmarks.sealed_search.store_index``: its data and the latency part (the memory part
is :mod:`.store_index_memory`).

Split from the command line (:mod:`.store_index`) and the report (:mod:`.store_index_report`) by role; what each
part measures is said there.
"""

from __future__ import annotations

import gc
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.caches import embed_cached
from benchmarks.common.reporting import Script
from benchmarks.common.scifact import subsample
from benchmarks.two_stage.engines import PrecomputedEmbeddings, _engine
from langchain_textcrafter import SealedVectorStore
from textcrafter_rag.data import load_scifact
from textcrafter_rag.encoders import bundled_minilm
from textcrafter_rag.metrics import retrieval_metrics
from textcrafter_rag.sealed.store_index import StoreIndexSearch

from .distractors import cluster_distractors

NAME = "store_index"
SCRIPT = Script(NAME, "benchmarks.sealed_search.store_index")
#: The breadth of Chroma's HNSW search in the plain row made to rank closer to clean (Chroma's default is 100,
#: whose plain store ranked at 0.80 of clean NDCG@10 at 1,000,000 records): set once before any run with it, not
#: tuned on the queries. The comparison the guide asks for is at equal retrieval quality.
CHROMA_EF_SEARCH = 400
PLAIN, SINGLE, DEFAULT, EVERY = "plain", "single-stage", "store-index (default)", "store-index, refresh_every=1.0"
WIDE_SEARCH = f"ef_search={CHROMA_EF_SEARCH}"
PLAIN_EF = f"plain, {WIDE_SEARCH}"
#: The plain store once more, in a collection beside the store-held one on the same engine instance, timed with the
#: store-held rows, query by query: the engine's state then weighs on it as on them (the ``plain`` row is timed
#: right after its own write, minutes before them; a server that idled meanwhile answers everyone slower at first).
PLAIN_BESIDE = "plain, beside"
MODES = (PLAIN, PLAIN_EF, SINGLE, PLAIN_BESIDE, DEFAULT, EVERY)
#: The command line's names of the modes (``--modes``); ``plain-ef`` is measured on Chroma only (the others'
#: plain search is exact).
MODE_NAMES = {
    "plain": PLAIN,
    "plain-ef": PLAIN_EF,
    "plain-beside": PLAIN_BESIDE,
    "single-stage": SINGLE,
    "store-index": DEFAULT,
    "refresh-every": EVERY,
}
#: The issue's targets.
P95_TARGET, NDCG_TARGET, BYTES_TARGET = 2.0, 0.99, 64.0


@dataclass(frozen=True)
class Config:
    """One size: records in the engines, queries timed, engines, opens timed, memory sizes, their dimension."""

    n_records: int
    n_queries: int
    engines: tuple[str, ...]
    opens: int
    memory_ns: tuple[int, ...]
    memory_dim: int = 384
    n_clusters: int = 64


SIZES: dict[str, Config] = {
    "smoke": Config(n_records=400, n_queries=8, engines=("qdrant",), opens=1, memory_ns=(3_000,), n_clusters=4),
    "quick": Config(n_records=20_000, n_queries=50, engines=("qdrant", "chroma"), opens=2, memory_ns=(200_000,)),
    "full": Config(
        n_records=20_000, n_queries=300, engines=("qdrant", "chroma"), opens=3, memory_ns=(200_000, 1_000_000)
    ),
}


@dataclass
class Retrieval:
    """The records (ids, texts, clean vectors) and the judged queries of the latency part."""

    doc_ids: list[str]
    texts: list[str]
    vectors: np.ndarray
    query_ids: list[str]
    query_texts: list[str]
    query_vectors: np.ndarray
    qrels: dict[str, set[str]]
    about: str = ""


def grow(base: Retrieval, n_records: int, *, n_clusters: int, seed: int) -> Retrieval:
    """``base`` grown to ``n_records`` with fitted distractors (never relevant; texts of ``base``'s lengths)."""
    extra = n_records - len(base.doc_ids)
    if extra <= 0:
        return base
    fake = cluster_distractors(base.vectors, extra, n_clusters=n_clusters, seed=seed)
    rng = np.random.default_rng(seed + 31)
    donors = rng.integers(len(base.texts), size=extra)
    texts = [f"[distractor {i}] {base.texts[d]}" for i, d in enumerate(donors.tolist())]
    return Retrieval(
        [*base.doc_ids, *(f"distractor-{i}" for i in range(extra))],
        [*base.texts, *texts],
        np.vstack([base.vectors, fake]).astype(np.float32),
        base.query_ids,
        base.query_texts,
        base.query_vectors,
        base.qrels,
        f"{base.about} + {extra:,} cluster-preserving fitted distractors ({n_clusters} clusters)",
    )


def first_queries(data: Retrieval, n: int) -> Retrieval:
    """``data`` with its first ``n`` judged queries only (qrels cut to match)."""
    if n >= len(data.query_ids):
        return data
    ids = data.query_ids[:n]
    return Retrieval(
        data.doc_ids,
        data.texts,
        data.vectors,
        ids,
        data.query_texts[:n],
        data.query_vectors[:n],
        {q: data.qrels[q] for q in ids if q in data.qrels},
        data.about,
    )


class _RowEmbeddings(PrecomputedEmbeddings):
    """:class:`PrecomputedEmbeddings` over float32 matrices, a (matrix, row) per text, not a float list per text
    (about 12 KB a 384-d record, 12 GB at 1,000,000 records); the list is made per call."""

    def __init__(self, *parts: tuple[Sequence[str], np.ndarray]) -> None:
        self._mats = [np.asarray(v, dtype=np.float32) for _, v in parts]
        self._row = {t: (m, i) for m, (texts, _) in enumerate(parts) for i, t in enumerate(texts)}
        self._probe = np.eye(1, self._mats[0].shape[1], dtype=np.float32)[0].tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        at = self._row.get(text)
        return self._probe if at is None else self._mats[at[0]][at[1]].tolist()


def _ndcg(ranked: dict[str, list[str]], qrels: dict[str, set[str]]) -> float:
    return float(retrieval_metrics(ranked, qrels, ks=(10,))["ndcg@10"])


def _exact_ndcg(data: Retrieval, k: int) -> float:
    docs = data.vectors / np.linalg.norm(data.vectors, axis=1, keepdims=True)
    q = data.query_vectors / np.linalg.norm(data.query_vectors, axis=1, keepdims=True)
    top = np.vstack([np.argsort(-(q[i : i + 16] @ docs.T), axis=1, kind="stable")[:, :k] for i in range(0, len(q), 16)])
    return _ndcg({qid: [data.doc_ids[j] for j in row] for qid, row in zip(data.query_ids, top)}, data.qrels)


def _searched(store: Any, data: Retrieval, by_uuid: dict[str, str], k: int) -> tuple[np.ndarray, float]:
    """Latency (ms) of each query after three warm-up searches, and the NDCG@10 of the timed searches."""
    return _searched_together({"one": store}, data, by_uuid, k)["one"]


def _searched_together(
    stores: dict[str, Any], data: Retrieval, by_uuid: dict[str, str], k: int
) -> dict[str, tuple[np.ndarray, float]]:
    """:func:`_searched` for several store objects over one collection, their searches interleaved query by query
    (the order turned around every other query), so a change in the engine's state during the run (a server still
    settling its last writes) weighs on each row alike."""
    for store in stores.values():
        for q in data.query_texts[:3]:
            store.similarity_search(q, k=k)
        _wait_trained(store)  # a PQ codebook training in the background (past train_at) would share the CPU
    ranked: dict[str, dict[str, list[str]]] = {name: {} for name in stores}
    out: dict[str, list[float]] = {name: [] for name in stores}
    names = list(stores)
    for i, (qid, q) in enumerate(zip(data.query_ids, data.query_texts)):
        for name in names if i % 2 == 0 else names[::-1]:
            t0 = time.perf_counter()
            docs = stores[name].similarity_search(q, k=k)
            out[name].append((time.perf_counter() - t0) * 1000)
            ranked[name][qid] = [
                by_uuid.get(str(d.id if d.id is not None else d.metadata.get("_id")), "?") for d in docs
            ]
    return {name: (np.asarray(out[name]), _ndcg(ranked[name], data.qrels)) for name in stores}


def _held_index(store: Any) -> Any:
    """The store object's store-held index (its :class:`~textcrafter_rag.sealed.store_index.StoreIndex`), if any."""
    return store._search.store_index() if getattr(store, "_search", None) is not None else None


def _wait_trained(store: Any) -> float:
    """Wait for the store object's PQ training in progress, if any; seconds waited."""
    si = _held_index(store)
    t0 = time.perf_counter()
    if si is not None:
        si.index.wait_trained()
    return time.perf_counter() - t0


def _wait_compacted(store: Any) -> float:
    """Wait for the store object's background compaction in flight, if any; seconds waited. At a million records on
    a Chroma server a compaction stores about 100 MB and deletes the segments it covers, for minutes: timed
    searches made meanwhile would measure it too."""
    si = _held_index(store)
    t0 = time.perf_counter()
    if si is not None:
        si.wait_compacted()
    return time.perf_counter() - t0


def _index_state(store: Any) -> dict[str, Any]:
    """How many entries the store object's in-memory index holds, whether it holds PQ codes, and whether its log
    keeps a beacon (a search reads it instead of searching the heads), and the records a search of the trained index
    opens (its options' ``open_k``, or the size rule's at this size; diagnostics)."""
    si = _held_index(store)
    if si is None:
        return {"index_entries": None, "index_trained": None, "log_beacon": None, "open_k": None}
    return {
        "index_entries": len(si),
        "index_trained": bool(si.index.trained),
        "log_beacon": si.log.beacon is not None,
        "open_k": si.options.opened(len(si)),
    }


def latency_rows(
    data: Retrieval,
    *,
    engines: Sequence[str],
    key: bytes | str,
    opens: int = 3,
    modes: Sequence[str] = MODES,
    k: int = 10,
    batch: int = 1000,
    net_delay_ms: float = 0.0,
    progress: Callable[[str], Any] = lambda s: None,
) -> list[dict[str, Any]]:
    """Rows of the ``latency`` part (one per engine and mode in ``modes``) and the ``open`` part (one per engine
    and open, when a store-index mode is among ``modes``). Each mode's collection is released (and its folder
    removed) before the next one is written. ``net_delay_ms``: Chroma's client reaches its server that many
    milliseconds away each way (:mod:`benchmarks.common.net_delay`)."""

    embeddings = _RowEmbeddings((data.texts, data.vectors), (data.query_texts, data.query_vectors))
    dim = int(data.vectors.shape[1])
    uuids = [str(uuid.UUID(int=i + 1, version=4)) for i in range(len(data.doc_ids))]
    by_uuid = dict(zip(uuids, data.doc_ids))
    clean = _exact_ndcg(data, k)
    common = {
        "n_records": len(data.doc_ids),
        "n_queries": len(data.query_ids),
        "k": k,
        "clean_ndcg10": clean,
        "net_delay_ms": net_delay_ms,
    }
    rows: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="store-index-bench-"))

    def fill(store: Any) -> float:
        t0 = time.perf_counter()
        for start in range(0, len(data.texts), batch):
            store.add_texts(list(data.texts[start : start + batch]), ids=uuids[start : start + batch])
        return time.perf_counter() - t0

    def row(engine: str, mode: str, lat: np.ndarray, ndcg: float, **extra: Any) -> dict[str, Any]:
        return {
            "part": "latency",
            "engine": engine,
            "mode": mode,
            **common,
            "latency_ms_p50": round(float(np.percentile(lat, 50)), 2),
            "latency_ms_p95": round(float(np.percentile(lat, 95)), 2),
            "latency_ms_mean": round(float(lat.mean()), 2),
            "ndcg10": ndcg,
            "ndcg_ratio": ndcg / clean if clean else None,
            **extra,
        }

    try:
        for engine in engines:
            # plain (at the engine's own HNSW breadth and at CHROMA_EF_SEARCH) and single-stage: one collection
            # each (the engine ranks clean vectors)
            for n, mode in enumerate((PLAIN, PLAIN_EF, SINGLE)):
                if mode not in modes or (mode == PLAIN_EF and engine != "chroma"):
                    continue
                name = f"docs_{n}"
                ef = CHROMA_EF_SEARCH if mode == PLAIN_EF else None
                made = _engine(engine, tmp / engine / name, name, dim, ef_search=ef, net_delay_ms=net_delay_ms)
                with made as factory:
                    if mode in (PLAIN, PLAIN_EF):
                        store = factory(embeddings)
                    else:
                        store = SealedVectorStore(factory, embedding=embeddings, key=key, search=None)
                    seconds = fill(store)
                    progress(f"{engine} {mode}: {len(uuids):,} records written in {seconds:.0f} s")
                    lat, ndcg = _searched(store, data, by_uuid, k)
                    del store  # the engine's client holds every point (Qdrant local: in this process)
                _released(tmp / engine / name)
                rows.append(row(engine, mode, lat, ndcg, write_seconds=round(seconds, 1)))
                progress(f"{engine} {mode}: p95 {rows[-1]['latency_ms_p95']} ms, NDCG@10 {ndcg:.2f}")
            indexed = [m for m in (DEFAULT, EVERY) if m in modes]
            if not indexed:
                continue
            # the store-held index: written once, searched by the default, by refresh_every=1.0, opened afresh
            name = "docs_index"
            with _engine(engine, tmp / engine / name, name, dim, net_delay_ms=net_delay_ms) as factory:
                beside = factory(embeddings, collection=f"{name}_plain") if PLAIN_BESIDE in modes else None
                beside_seconds = fill(beside) if beside is not None else None
                writer = SealedVectorStore(factory, embedding=embeddings, key=key, search=StoreIndexSearch())
                assert isinstance(writer.search_options, StoreIndexSearch), writer.search_options
                seconds = fill(writer)
                compaction_wait = round(_wait_compacted(writer), 1)  # the writer's last compaction, if still running
                progress(
                    f"{engine} store-index: {len(uuids):,} records written in {seconds:.0f} s "
                    f"(then {compaction_wait} s for a compaction in flight)"
                )
                for n_open in range(opens):
                    gc.collect()
                    t0 = time.perf_counter()
                    fresh = SealedVectorStore(factory, embedding=embeddings, key=key)  # the default, only the key
                    t1 = time.perf_counter()
                    fresh.similarity_search(data.query_texts[n_open % len(data.query_texts)], k=k)
                    t2 = time.perf_counter()
                    waited = _wait_trained(fresh)
                    rows.append(
                        {
                            "part": "open",
                            "engine": engine,
                            "open": n_open + 1,
                            "n_records": len(uuids),
                            "construct_ms": round((t1 - t0) * 1000, 1),
                            "first_search_ms": round((t2 - t1) * 1000, 1),
                            "open_ms": round((t2 - t0) * 1000, 1),
                            "training_after_open_ms": round(waited * 1000, 1),
                            "search_options": repr(fresh.search_options),
                            **_index_state(fresh),
                        }
                    )
                    progress(f"{engine} open {n_open + 1}: {rows[-1]['open_ms']:.0f} ms to the first search")
                    del fresh
                options = {DEFAULT: StoreIndexSearch(), EVERY: StoreIndexSearch(refresh_every=1.0)}
                stores = {
                    mode: SealedVectorStore(factory, embedding=embeddings, key=key, search=options[mode])
                    for mode in indexed
                }
                if beside is not None:
                    stores = {PLAIN_BESIDE: beside, **stores}
                for mode, (lat, ndcg) in _searched_together(stores, data, by_uuid, k).items():
                    if mode == PLAIN_BESIDE:
                        rows.append(
                            row(engine, mode, lat, ndcg, write_seconds=round(beside_seconds, 1), interleaved=True)
                        )
                    else:
                        rows.append(
                            row(
                                engine,
                                mode,
                                lat,
                                ndcg,
                                write_seconds=round(seconds, 1),
                                compaction_wait_seconds=compaction_wait,
                                interleaved=len(stores) > 1,
                                search_options=repr(options[mode]),
                                **_index_state(stores[mode]),
                            )
                        )
                    progress(f"{engine} {mode}: p95 {rows[-1]['latency_ms_p95']} ms, NDCG@10 {ndcg:.2f}")
                del stores, beside
                del writer
            _released(tmp / engine / name)
        for engine in engines:
            lat = [r for r in rows if r["part"] == "latency" and r["engine"] == engine]
            for reference, suffix in ((PLAIN, ""), (PLAIN_BESIDE, "_beside")):
                plain = next((r for r in lat if r["mode"] == reference), None)
                for r in lat if plain is not None else ():
                    r[f"p95_ratio_to_plain{suffix}"] = r["latency_ms_p95"] / plain["latency_ms_p95"]
                    r[f"p50_ratio_to_plain{suffix}"] = r["latency_ms_p50"] / plain["latency_ms_p50"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def _released(path: Path) -> None:
    """Drop what the last collection left: its objects (a cycle collection) and its folder."""
    gc.collect()
    shutil.rmtree(path, ignore_errors=True)


def _scifact(data_dir: Path, *, cache: Path, size: str, seed: int, progress: bool, split: str = "test") -> Retrieval:
    """SciFact's abstracts and the queries judged in ``split`` (``"train"``: queries apart from the reported test
    queries, for choosing a setting), embedded by the bundled MiniLM (cached)."""
    encoder = bundled_minilm()
    full = load_scifact(data_dir=data_dir, split=split)
    n = 64 if size == "smoke" else 0
    rs = subsample(full, n_queries=16 if size == "smoke" else 0, n_docs=n, seed=seed)
    docs = embed_cached(encoder, rs.docs, cache=cache, desc="Embedding docs", progress=progress, superset=full.docs)
    queries = embed_cached(
        encoder, rs.queries, cache=cache, desc="Embedding queries", progress=progress, superset=full.queries
    )
    return Retrieval(
        list(rs.doc_ids),
        list(rs.docs),
        np.asarray(docs, dtype=np.float32),
        list(rs.query_ids),
        list(rs.queries),
        np.asarray(queries, dtype=np.float32),
        rs.qrels,
        f"SciFact: {len(rs.doc_ids):,} abstracts" + ("" if split == "test" else f", {split} queries"),
    )
