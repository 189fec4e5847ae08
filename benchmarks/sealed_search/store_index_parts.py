"""The measured parts of ``benchmarks.sealed_search.store_index``: its data, the latency part, the memory part.

Split from the command line (:mod:`.store_index`) and the report (:mod:`.store_index_report`) by role; what each
part measures is said there.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from benchmarks.common.caches import embed_cached
from benchmarks.common.reporting import Script
from benchmarks.common.scifact import subsample
from benchmarks.two_stage.engines import PrecomputedEmbeddings, _engine
from langchain_textcrafter import SealedVectorStore
from textcrafter_rag.data import load_scifact
from textcrafter_rag.encoders import bundled_minilm
from textcrafter_rag.metrics import retrieval_metrics
from textcrafter_rag.numerics import unit_rows
from textcrafter_rag.sealed.log import LOG_FIELD, IndexLog
from textcrafter_rag.sealed.store_index import StoreIndex, StoreIndexSearch
from textcrafter_rag.testing.memory_port import MemoryPort

from .distractors import cluster_distractors

NAME = "store_index"
SCRIPT = Script(NAME, "benchmarks.sealed_search.store_index")
PLAIN, SINGLE, DEFAULT, EVERY = "plain", "single-stage", "store-index (default)", "store-index, refresh_every=1.0"
MODES = (PLAIN, SINGLE, DEFAULT, EVERY)
#: The command line's names of the modes (``--modes``).
MODE_NAMES = {"plain": PLAIN, "single-stage": SINGLE, "store-index": DEFAULT, "refresh-every": EVERY}
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
    for q in data.query_texts[:3]:
        store.similarity_search(q, k=k)
    _wait_trained(store)  # a PQ codebook training in the background (past train_at) would share the CPU
    ranked: dict[str, list[str]] = {}
    out = []
    for qid, q in zip(data.query_ids, data.query_texts):
        t0 = time.perf_counter()
        docs = store.similarity_search(q, k=k)
        out.append((time.perf_counter() - t0) * 1000)
        ranked[qid] = [by_uuid.get(str(d.id if d.id is not None else d.metadata.get("_id")), "?") for d in docs]
    return np.asarray(out), _ndcg(ranked, data.qrels)


def _wait_trained(store: Any) -> float:
    """Wait for the store object's PQ training in progress, if any; seconds waited."""
    si = store._search.store_index() if getattr(store, "_search", None) is not None else None
    t0 = time.perf_counter()
    if si is not None:
        si.index.wait_trained()
    return time.perf_counter() - t0


def _index_state(store: Any) -> dict[str, Any]:
    """How many entries the store object's in-memory index holds, and whether it holds PQ codes (diagnostics)."""
    si = store._search.store_index() if store._search is not None else None
    if si is None:
        return {"index_entries": None, "index_trained": None}
    return {"index_entries": len(si), "index_trained": bool(si.index.trained)}


def latency_rows(
    data: Retrieval,
    *,
    engines: Sequence[str],
    key: bytes | str,
    opens: int = 3,
    modes: Sequence[str] = MODES,
    k: int = 10,
    batch: int = 1000,
    progress: Callable[[str], Any] = lambda s: None,
) -> list[dict[str, Any]]:
    """Rows of the ``latency`` part (one per engine and mode in ``modes``) and the ``open`` part (one per engine
    and open, when a store-index mode is among ``modes``). Each mode's collection is released (and its folder
    removed) before the next one is written."""

    embeddings = _RowEmbeddings((data.texts, data.vectors), (data.query_texts, data.query_vectors))
    dim = int(data.vectors.shape[1])
    uuids = [str(uuid.UUID(int=i + 1, version=4)) for i in range(len(data.doc_ids))]
    by_uuid = dict(zip(uuids, data.doc_ids))
    clean = _exact_ndcg(data, k)
    common = {"n_records": len(data.doc_ids), "n_queries": len(data.query_ids), "k": k, "clean_ndcg10": clean}
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
            # plain and single-stage: one collection each (the engine ranks clean vectors)
            for n, mode in enumerate((PLAIN, SINGLE)):
                if mode not in modes:
                    continue
                name = f"docs_{n}"
                with _engine(engine, tmp / engine / name, name, dim) as factory:
                    if mode == PLAIN:
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
            with _engine(engine, tmp / engine / name, name, dim) as factory:
                writer = SealedVectorStore(factory, embedding=embeddings, key=key, search=StoreIndexSearch())
                assert isinstance(writer.search_options, StoreIndexSearch), writer.search_options
                seconds = fill(writer)
                progress(f"{engine} store-index: {len(uuids):,} records written in {seconds:.0f} s")
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
                for mode, options in ((DEFAULT, StoreIndexSearch()), (EVERY, StoreIndexSearch(refresh_every=1.0))):
                    if mode not in indexed:
                        continue
                    store = SealedVectorStore(factory, embedding=embeddings, key=key, search=options)
                    lat, ndcg = _searched(store, data, by_uuid, k)
                    rows.append(
                        row(
                            engine,
                            mode,
                            lat,
                            ndcg,
                            write_seconds=round(seconds, 1),
                            search_options=repr(options),
                            **_index_state(store),
                        )
                    )
                    progress(f"{engine} {mode}: p95 {rows[-1]['latency_ms_p95']} ms, NDCG@10 {ndcg:.2f}")
                    del store
                del writer
            _released(tmp / engine / name)
        for engine in engines:
            plain = next(
                (r for r in rows if r["part"] == "latency" and r["engine"] == engine and r["mode"] == PLAIN), None
            )
            for r in rows:
                if plain is not None and r["part"] == "latency" and r["engine"] == engine:
                    r["p95_ratio_to_plain"] = r["latency_ms_p95"] / plain["latency_ms_p95"]
                    r["p50_ratio_to_plain"] = r["latency_ms_p50"] / plain["latency_ms_p50"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def _released(path: Path) -> None:
    """Drop what the last collection left: its objects (a cycle collection) and its folder."""
    gc.collect()
    shutil.rmtree(path, ignore_errors=True)


# -- memory -------------------------------------------------------------------------------------------


def _rss() -> int:

    gc.collect()
    return int(psutil.Process().memory_info().rss)


def _trimmed_rss() -> int | None:
    """RSS after glibc's ``malloc_trim(0)`` returned the heap's free pages (``None`` without glibc)."""

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        return None
    return _rss()


def memory_child(n: int, dim: int, seed: int) -> dict[str, Any]:
    """In this process: write a log of ``n`` random records to a MemoryPort, then build a StoreIndex from it."""

    rng = np.random.default_rng(seed)
    key = rng.bytes(32)
    port = MemoryPort()
    writer = IndexLog(key, port=port, dim=dim)
    t0 = time.perf_counter()
    for start in range(0, n, 2000):
        m = min(2000, n - start)
        ids = [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(m)]
        vecs = unit_rows(rng.standard_normal((m, dim))).astype(np.float32)
        writer.append(adds=ids, vectors=vecs)
    write_s = time.perf_counter() - t0
    del writer, ids, vecs
    log_chars = sum(len(r.text) for r in port.records.values())
    before = _trimmed_rss() or _rss()  # the writer's free heap handed back first: a clean baseline
    options = StoreIndexSearch()
    t0 = time.perf_counter()
    index = StoreIndex(key, options=options, port=port, dim=dim)
    index.refresh()
    read_s = time.perf_counter() - t0
    index.index.wait_trained()
    trained_s = time.perf_counter() - t0
    q = unit_rows(rng.standard_normal((1, dim)))[0]
    t1 = time.perf_counter()
    got = index.candidates(q, options.open_k)
    scan_ms = (time.perf_counter() - t1) * 1000
    after = _rss()
    trimmed = _trimmed_rss()
    vi = index.index
    # what the process holds per record, as far as FAISS and the id table say (an accounting, not a measurement)
    faiss_bytes = vi.bytes_per_record  # codes (or float32 rows) + the int64 label
    id_bytes = vi.id_bytes_per_record
    trained = bool(vi.trained)
    # compaction: the index stored as a sealed snapshot, then opened from it by another fresh StoreIndex
    segments_before = sum(1 for r in port.records.values() if r.fields.get(LOG_FIELD) == "seg")
    t1 = time.perf_counter()
    compacted = index.compact()
    compact_s = time.perf_counter() - t1
    snap = [r for r in port.records.values() if r.fields.get(LOG_FIELD) == "snap"]
    n_first = len(index)
    del index, vi
    base_snapshot = _trimmed_rss() or _rss()  # the first index gone: the port (log and snapshot) remains
    t1 = time.perf_counter()
    reopened = StoreIndex(key, options=options, port=port, dim=dim)
    reopened.refresh()
    snapshot_open_s = time.perf_counter() - t1
    same = reopened.candidates(q, options.open_k) == got and len(reopened) == n_first
    after_snapshot, trimmed_snapshot = _rss(), _trimmed_rss()
    return {
        "part": "memory",
        "n_records": n,
        "dim": dim,
        "vectors": f"{dim}-d random unit vectors (Gaussian, normalised), random UUID4 ids",
        "log_records": len(port.records),
        "log_chars": log_chars,
        "write_seconds": round(write_s, 1),
        "build_seconds": round(read_s, 2),
        "build_and_train_seconds": round(trained_s, 2),
        "first_scan_ms": round(scan_ms, 2),
        "index_entries": n_first,
        "trained": trained,
        "rss_before_mb": round(before / 2**20, 1),
        "rss_after_mb": round(after / 2**20, 1),
        "rss_bytes_per_record": (after - before) / n,
        "rss_trimmed_bytes_per_record": None if trimmed is None else (trimmed - before) / n,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "accounted_faiss_bytes_per_record": faiss_bytes,
        "accounted_id_table_bytes_per_record": id_bytes,
        "open_k_found": len(got),
        "compacted": compacted,
        "compact_seconds": round(compact_s, 2),
        "log_chunks_before_compaction": segments_before,
        "log_chunks_after_compaction": sum(1 for r in port.records.values() if r.fields.get(LOG_FIELD) == "seg"),
        "snapshot_records": len(snap),
        "snapshot_mb": round(sum(len(r.text) for r in snap) / 2**20, 1),
        "open_from_snapshot_seconds": round(snapshot_open_s, 2),
        "opened_from_snapshot": reopened.snapshots.loaded == 1,
        "snapshot_same_candidates": bool(same),
        "rss_snapshot_bytes_per_record": (after_snapshot - base_snapshot) / n,
        "rss_snapshot_trimmed_bytes_per_record": None
        if trimmed_snapshot is None
        else (trimmed_snapshot - base_snapshot) / n,
    }


def memory_rows(
    ns: Sequence[int], *, dim: int, seed: int, progress: Callable[[str], Any] = lambda s: None, timeout: float = 1200
) -> list[dict[str, Any]]:
    """One :func:`memory_child` per size, each in a fresh Python process (its RSS is the index's alone)."""
    rows = []
    code = (
        "import json, sys; from benchmarks.sealed_search.store_index_parts import memory_child; "
        "print(json.dumps(memory_child(*map(int, sys.argv[1:]))))"
    )
    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    for n in ns:
        t0 = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", code, str(n), str(dim), str(seed)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=root,
            env={**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")},
        )
        if out.returncode != 0:
            raise RuntimeError(f"memory child for n={n} failed ({out.returncode}):\n{out.stderr[-4000:]}")
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        progress(
            f"memory n={n:,}: {r['rss_bytes_per_record']:.0f} B a record, build {r['build_seconds']} s "
            f"({time.perf_counter() - t0:.0f} s in all)"
        )
    return rows


# -- report -------------------------------------------------------------------------------------------


def _scifact(data_dir: Path, *, cache: Path, size: str, seed: int, progress: bool) -> Retrieval:

    encoder = bundled_minilm()
    full = load_scifact(data_dir=data_dir)
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
        f"SciFact: {len(rs.doc_ids):,} abstracts",
    )
