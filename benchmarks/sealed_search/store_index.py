"""The store-held index (LangChain's default sealed search): latency on real engines, open time, memory.

**Latency** (``latency``): SciFact (5,183 abstracts, 300 queries) grown to ``n_records`` with the scale grid's
cluster-preserving fitted distractors (each distractor's text a SciFact abstract's, prefixed, so the sealed
payloads have SciFact's sizes), written to Qdrant local and to a Chroma server (``chroma run``, started and
stopped here) as:

* ``plain``: the engine's own LangChain store (clean vectors, plaintext, the engine ranks): the reference;
* ``single-stage``: :class:`SealedVectorStore` with ``fetch_k=None`` (clean vectors, sealed texts);
* ``store-index (default)``: ``SealedVectorStore(..., search=StoreIndexSearch())``: every search first reads
  the log's heads (and any new segments), scans the in-memory index for ``open_k`` = 100 records, fetches them
  by id, opens and ranks them exactly;
* ``store-index, refresh_every=1.0``: a second store object over the same collection that reads the log at most
  once a second.

Each query is timed from the call to the opened hits (embeddings precomputed: the encoder is not timed), after
three warm-up searches; NDCG@10 comes from the same searches, against the exact search of the clean vectors of
the same grown store. The candidate default (``search=DEFAULT_SEARCH``) is not measured again: the committed
``two_stage_engines.json`` (5,183 records) is cited.

**Open time** (``open``): a new store object over the same collection, given only the key (a fresh process's
view: it holds nothing of the log), timed from construction to the end of its first search, which reads the
whole log into memory; ``opens`` times per engine.

**Memory** (``memory``): in a fresh subprocess per size, a log of ``N`` records of 384-d random unit vectors
(not SciFact: the memory and build time do not depend on the vectors) under random UUID ids is written to
:class:`~textcrafter_rag.testing.memory_port.MemoryPort`; the process RSS (psutil) is read before and after
building a :class:`StoreIndex` from it (read the log, apply it, wait for the PQ codebook's background training),
and the difference is divided by ``N``.

Usage::

    python -m benchmarks.sealed_search.store_index                    # full: 20,000 records, 1,000,000 in memory
    python -m benchmarks.sealed_search.store_index --parts memory     # one part (the others from the part cache)
    python -m benchmarks.sealed_search.store_index --quick            # writes store_index_quick.*
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.caches import cache_dir, cache_key, embed_cached
from benchmarks.common.options import base_parser, resolve_data_or_none, resolve_size, set_threads
from benchmarks.common.reporting import RESULTS_DIR, Script, Timer, clean_json, make_meta, md_table, write_results
from benchmarks.common.scifact import subsample
from textcrafter_rag.metrics import retrieval_metrics

from .distractors import cluster_distractors

__all__ = [
    "MODES",
    "NAME",
    "PARTS",
    "SCRIPT",
    "SIZES",
    "Config",
    "Retrieval",
    "first_queries",
    "grow",
    "latency_rows",
    "main",
    "memory_rows",
    "render_markdown",
]

NAME = "store_index"
SCRIPT = Script(NAME, "benchmarks.sealed_search.store_index")
PARTS = ("latency", "memory")
#: Bump when a part's code changes, so its cached rows are measured again.
PART_VERSIONS = {"latency": "1", "memory": "1"}
PLAIN, SINGLE, DEFAULT, EVERY = "plain", "single-stage", "store-index (default)", "store-index, refresh_every=1.0"
MODES = (PLAIN, SINGLE, DEFAULT, EVERY)
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


def _ndcg(ranked: dict[str, list[str]], qrels: dict[str, set[str]]) -> float:
    return float(retrieval_metrics(ranked, qrels, ks=(10,))["ndcg@10"])


def _exact_ndcg(data: Retrieval, k: int) -> float:
    docs = data.vectors / np.linalg.norm(data.vectors, axis=1, keepdims=True)
    q = data.query_vectors / np.linalg.norm(data.query_vectors, axis=1, keepdims=True)
    top = np.argsort(-(q @ docs.T), axis=1, kind="stable")[:, :k]
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
    k: int = 10,
    batch: int = 1000,
    progress: Callable[[str], Any] = lambda s: None,
) -> list[dict[str, Any]]:
    """Rows of the ``latency`` part (one per engine and mode) and the ``open`` part (one per engine and open)."""
    from benchmarks.two_stage.engines import PrecomputedEmbeddings, _engine
    from langchain_textcrafter import SealedVectorStore
    from textcrafter_rag.sealed.store_index import StoreIndexSearch

    embeddings = PrecomputedEmbeddings([*data.texts, *data.query_texts], np.vstack([data.vectors, data.query_vectors]))
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
                name = f"docs_{n}"
                with _engine(engine, tmp / engine / name, name, dim) as factory:
                    if mode == PLAIN:
                        store = factory(embeddings)
                    else:
                        store = SealedVectorStore(factory, embedding=embeddings, key=key, fetch_k=None)
                    seconds = fill(store)
                    progress(f"{engine} {mode}: {len(uuids):,} records written in {seconds:.0f} s")
                    lat, ndcg = _searched(store, data, by_uuid, k)
                rows.append(row(engine, mode, lat, ndcg, write_seconds=round(seconds, 1)))
                progress(f"{engine} {mode}: p95 {rows[-1]['latency_ms_p95']} ms, NDCG@10 {ndcg:.2f}")
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
            plain = next(r for r in rows if r["part"] == "latency" and r["engine"] == engine and r["mode"] == PLAIN)
            for r in rows:
                if r["part"] == "latency" and r["engine"] == engine:
                    r["p95_ratio_to_plain"] = r["latency_ms_p95"] / plain["latency_ms_p95"]
                    r["p50_ratio_to_plain"] = r["latency_ms_p50"] / plain["latency_ms_p50"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


# -- memory -------------------------------------------------------------------------------------------


def _rss() -> int:
    import psutil

    gc.collect()
    return int(psutil.Process().memory_info().rss)


def _trimmed_rss() -> int | None:
    """RSS after glibc's ``malloc_trim(0)`` returned the heap's free pages (``None`` without glibc)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        return None
    return _rss()


def memory_child(n: int, dim: int, seed: int) -> dict[str, Any]:
    """In this process: write a log of ``n`` random records to a MemoryPort, then build a StoreIndex from it."""
    import resource

    from textcrafter_rag.numerics import unit_rows
    from textcrafter_rag.sealed.log import IndexLog
    from textcrafter_rag.sealed.store_index import StoreIndex, StoreIndexSearch
    from textcrafter_rag.testing.memory_port import MemoryPort

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
    # what the process holds per record, as far as Python and FAISS say (an accounting, not a measurement)
    dict_bytes = sys.getsizeof(vi._label) + sys.getsizeof(vi._id)
    sample = list(vi._label)[:1000]
    str_bytes = float(np.mean([sys.getsizeof(s) for s in sample])) if sample else 0.0
    faiss_bytes = vi.bytes_per_record + 8  # codes (or float32 rows) + the int64 id map
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
        "index_entries": len(index),
        "trained": bool(vi.trained),
        "rss_before_mb": round(before / 2**20, 1),
        "rss_after_mb": round(after / 2**20, 1),
        "rss_bytes_per_record": (after - before) / n,
        "rss_trimmed_bytes_per_record": None if trimmed is None else (trimmed - before) / n,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "accounted_faiss_bytes_per_record": faiss_bytes,
        "accounted_dict_bytes_per_record": dict_bytes / n,
        "accounted_id_str_bytes_per_record": str_bytes,
        "accounted_label_int_bytes_per_record": 28.0,
        "open_k_found": len(got),
    }


def memory_rows(
    ns: Sequence[int], *, dim: int, seed: int, progress: Callable[[str], Any] = lambda s: None, timeout: float = 1200
) -> list[dict[str, Any]]:
    """One :func:`memory_child` per size, each in a fresh Python process (its RSS is the index's alone)."""
    rows = []
    code = (
        "import json, sys; from benchmarks.sealed_search.store_index import memory_child; "
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


def _cited_candidates(results_dir: Path) -> list[dict[str, Any]]:
    """The committed candidate-default rows of ``two_stage_engines.json`` (not measured again here)."""
    path = results_dir / "two_stage_engines.json"
    if not path.is_file():
        return []
    doc = json.loads(path.read_text(encoding="utf-8"))
    rows = [r for r in doc.get("rows", []) if r.get("part") == "engines"]
    out = []
    for r in rows:
        if r.get("fetch_k") is None or "rounds" in str(r.get("mode")) or r.get("mode") == "single-stage":
            out.append(
                {
                    "engine": r["engine"],
                    "mode": r["mode"],
                    "n_docs": r["n_docs"],
                    "n_queries": r["n_queries"],
                    "latency_ms_p50": r["latency_ms_p50"],
                    "latency_ms_p95": r["latency_ms_p95"],
                    "source": f"{path.name} ({doc.get('meta', {}).get('date', '?')})",
                }
            )
    return out


def _verdicts(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        if r.get("part") == "latency" and r["mode"] == DEFAULT:
            ratio = r["p95_ratio_to_plain"]
            out.append(
                {
                    "target": f"p95 <= {P95_TARGET:g}x the plain store's ({r['engine']})",
                    "measured": f"{ratio:.2f}x ({r['latency_ms_p95']:.2f} vs {r['latency_ms_p95'] / ratio:.2f} ms)",
                    "met": "met"
                    if ratio <= P95_TARGET
                    else f"not met: {ratio / P95_TARGET:.2f}x the allowed {P95_TARGET:g}x",
                }
            )
            out.append(
                {
                    "target": f"NDCG@10 >= {NDCG_TARGET:g} of clean ({r['engine']})",
                    "measured": f"{r['ndcg_ratio']:.4f} ({r['ndcg10']:.2f} vs {r['clean_ndcg10']:.2f})",
                    "met": "met" if r["ndcg_ratio"] >= NDCG_TARGET else "not met",
                }
            )
    for r in rows:
        if r.get("part") == "memory":
            b = r["rss_bytes_per_record"]
            out.append(
                {
                    "target": f"<= {BYTES_TARGET:g} B a record in memory ({r['n_records']:,} records)",
                    "measured": f"{b:.0f} B",
                    "met": "met"
                    if b <= BYTES_TARGET
                    else f"not met: {b / BYTES_TARGET:.1f}x the target"
                    + (
                        f" ({r['rss_trimmed_bytes_per_record'] / BYTES_TARGET:.1f}x after malloc_trim)"
                        if r.get("rss_trimmed_bytes_per_record") is not None
                        else ""
                    ),
                }
            )
    return out


def _memory_sentence(r: dict[str, Any]) -> str:
    py = r["accounted_dict_bytes_per_record"] + r["accounted_id_str_bytes_per_record"]
    py += r["accounted_label_int_bytes_per_record"]
    trimmed = r.get("rss_trimmed_bytes_per_record")
    return (
        f"at {r['n_records']:,} records (built in {r['build_and_train_seconds']:.0f} s, one scan of the index for "
        f"open_k in {r['first_scan_ms']:.0f} ms) the process grew by {r['rss_bytes_per_record']:.0f} B a record "
        + (f"({trimmed:.0f} B once the heap's free pages were handed back) " if trimmed is not None else "")
        + f"against the {BYTES_TARGET:g} B target; FAISS accounts for {r['accounted_faiss_bytes_per_record']:.0f} B "
        f"(codes and id map), the Python id maps for about {py:.0f} B (two dicts, the id string, the label int)"
    )


def render_markdown(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    lat = [r for r in rows if r.get("part") == "latency"]
    opens = [r for r in rows if r.get("part") == "open"]
    mem = [r for r in rows if r.get("part") == "memory"]
    m = meta.get("machine", {})
    lines = [
        "# The store-held index: latency on real engines, open time, memory",
        "",
        f"`{meta.get('command', '?')}` on {meta.get('date', '?')} ({meta.get('size', '?')}); "
        f"machine: {m.get('cpu_count', '?')} cores, shared (load average {m.get('load_avg_1m', '?')} at the end); "
        f"code at {meta.get('git', {}).get('head', '?')}"
        + (" with uncommitted library changes in the tree" if meta.get("git", {}).get("dirty_library") else "")
        + f". Reproduce: `python -m {SCRIPT.module}` (all parts; this run took "
        f"{(meta.get('runtime_seconds') or 0) / 60:.1f} min, the latency part "
        f"{(meta.get('latency', {}).get('seconds') or 0) / 60:.1f} min of it).",
        "",
        "## Search latency and NDCG@10",
        "",
    ]
    if lat:
        r0 = lat[0]
        lines += [
            f"`similarity_search(query, k={r0['k']})` from the call to the opened hits, {r0['n_records']:,} records "
            f"({meta.get('latency', {}).get('records', '?')}), {r0['n_queries']} SciFact queries one at a time after "
            "three warm-up searches, embeddings precomputed (the encoder is not timed), one process. NDCG@10 from "
            "the same searches; clean = exact search of the clean vectors of the same store "
            f"({r0['clean_ndcg10']:.2f}).",
            "",
            md_table(
                lat,
                [
                    "engine",
                    "mode",
                    "latency_ms_p50",
                    "latency_ms_p95",
                    "p95_ratio_to_plain",
                    "ndcg10",
                    "ndcg_ratio",
                    "write_seconds",
                ],
                headers=["engine", "search", "p50 ms", "p95 ms", "p95 / plain", "NDCG@10", "/ clean", "write s"],
                digits=2,
            ),
            "",
        ]
        by = {(r["engine"], r["mode"]): r for r in lat}
        parts = []
        for engine in dict.fromkeys(r["engine"] for r in lat):
            d, e = by.get((engine, DEFAULT)), by.get((engine, EVERY))
            if d and e:
                parts.append(
                    f"on {engine} the default (a log read before every search) is {d['p95_ratio_to_plain']:.1f}x the "
                    f"plain store's p95 and reading the log at most once a second {e['p95_ratio_to_plain']:.1f}x "
                    f"(the log read costs {d['latency_ms_p50'] - e['latency_ms_p50']:.0f} ms at p50)"
                )
        lines += [
            "Interpretation: " + "; ".join(parts) + ". The store-held index fetches open_k = 100 sealed records by id "
            "and opens them per query where the plain store returns 10 plaintext hits; the default also searches "
            "for the log's heads first (one more engine round trip).",
            "",
        ]
    else:
        lines += ["Not measured in this run.", ""]
    cited = meta.get("cited_candidates") or []
    if cited:
        lines += [
            "The candidate default (`search=DEFAULT_SEARCH`, rounds to recall 0.95) was not measured again; from "
            f"the committed {cited[0]['source']}, at {cited[0]['n_docs']:,} records (not 20,000), "
            f"{cited[0]['n_queries']} queries:",
            "",
            md_table(
                cited,
                ["engine", "mode", "latency_ms_p50", "latency_ms_p95"],
                headers=["engine", "search", "p50 ms", "p95 ms"],
            ),
            "",
        ]
    lines += ["## Open time", ""]
    if opens:
        lines += [
            "A new `SealedVectorStore` object over the written collection, given only the key (the default search): "
            "construction, then its first search, which reads the whole log into memory (past `train_at` = 20,000 "
            "the first search answers from the exact index while the PQ codebook trains in the background: the next "
            "column is how much longer that took; the searches of the latency table start after it).",
            "",
            md_table(
                opens,
                [
                    "engine",
                    "open",
                    "n_records",
                    "construct_ms",
                    "first_search_ms",
                    "open_ms",
                    "training_after_open_ms",
                    "index_trained",
                ],
                headers=[
                    "engine",
                    "open",
                    "records",
                    "construct ms",
                    "first search ms",
                    "open ms",
                    "PQ training after, ms",
                    "PQ trained",
                ],
                digits=1,
            ),
            "",
        ]
        med = {
            e: float(np.median([r["open_ms"] for r in opens if r["engine"] == e]))
            for e in dict.fromkeys(r["engine"] for r in opens)
        }
        lines += [
            "Interpretation: a fresh process is ready to answer after "
            + ", ".join(f"{v / 1000:.2f} s on {e}" for e, v in med.items())
            + " (median from construction to the end of the first search, which reads every log segment).",
            "",
        ]
    else:
        lines += ["Not measured in this run.", ""]
    lines += ["## Memory of the in-memory index", ""]
    if mem:
        lines += [
            f"{mem[0]['vectors']} (not SciFact), logged to a `MemoryPort`; RSS of a fresh process before and after "
            "building a `StoreIndex` from the log (read, applied, PQ codebook trained; the log's records stay in the "
            "port throughout; the baseline is read after glibc's `malloc_trim(0)`). `after malloc_trim`: the same "
            "after handing the heap's free pages back (what the index holds without allocator slack). The accounted "
            "columns are what Python and FAISS say the index holds per record.",
            "",
            md_table(
                mem,
                [
                    "n_records",
                    "rss_bytes_per_record",
                    "rss_trimmed_bytes_per_record",
                    "build_seconds",
                    "build_and_train_seconds",
                    "first_scan_ms",
                    "trained",
                    "accounted_faiss_bytes_per_record",
                    "accounted_dict_bytes_per_record",
                    "accounted_id_str_bytes_per_record",
                    "peak_rss_mb",
                ],
                headers=[
                    "records",
                    "RSS B / record",
                    "after malloc_trim",
                    "build s",
                    "build + train s",
                    "scan ms",
                    "PQ",
                    "FAISS B",
                    "2 dicts B",
                    "id str B",
                    "peak RSS MB",
                ],
                digits=1,
            ),
            "",
            "Interpretation: " + "; ".join(_memory_sentence(r) for r in mem) + ".",
            "",
        ]
    else:
        lines += ["Not measured in this run.", ""]
    verdicts = _verdicts(rows)
    if verdicts:
        lines += ["## Against the targets", "", md_table(verdicts, ["target", "measured", "met"]), ""]
    lines += ["## Not covered", "", *(f"* {s}" for s in meta.get("not_covered", []))]
    return "\n".join(lines)


NOT_COVERED = [
    "The candidate default was not measured again at 20,000 records (its committed rows are at 5,183).",
    "One run on a shared 2-core machine: other jobs ran beside it (load average in the header); p95 over "
    "300 queries moves by tens of percent between runs.",
    "Chroma is one local server on loopback (no network latency); Qdrant is local mode (in-process).",
    "Open time is a new store object in the same process (the engine's client and caches warm); a new OS "
    "process would also import the libraries and connect.",
    "Memory: random vectors and UUID ids on the in-memory port; RSS differences include allocator slack; FAISS "
    "ran with one OpenMP thread in the memory child (build and scan times are single-threaded).",
    "Latency at more than 20,000 records on the engines was not measured (the memory part's scan time at "
    "1,000,000 is the in-memory index's share only).",
]


# -- command line -------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    ap = base_parser(SCRIPT, __doc__)
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="parts to measure")
    ap.add_argument("--redo", action="store_true", help="measure the selected parts again, ignoring the part cache")
    ap.add_argument("--engines", nargs="+", choices=("qdrant", "chroma"), default=None, help="engines (latency)")
    ap.add_argument(
        "--memory-ns",
        nargs="+",
        type=int,
        default=None,
        help="measure only these of the size's memory record counts now (each is cached; the report shows all cached)",
    )
    return ap


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _git() -> dict[str, Any]:
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True).stdout
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "textcrafter_rag", "integrations"],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout
    except OSError:
        return {}
    return {"head": head.strip(), "dirty_library": bool(dirty.strip())}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(None if argv is None else list(argv))
    size = resolve_size(args)
    cfg = SIZES[size]
    if args.engines:
        cfg = Config(**{**asdict(cfg), "engines": tuple(args.engines)})
    set_threads()
    t_start = time.perf_counter()
    cache = cache_dir(args.cache_dir)

    def log(msg: str) -> None:
        print(f"[store_index] {msg} ({time.perf_counter() - t_start:.0f} s)", flush=True)

    part_dir = cache / "sealed_search" / "store_index_parts"
    configs = {
        "latency": repr((cfg.n_records, cfg.n_queries, cfg.engines, cfg.opens, cfg.n_clusters)),
        **{f"memory-{n}": repr((n, cfg.memory_dim)) for n in cfg.memory_ns},
    }

    def part_path(part: str) -> Path:
        version = PART_VERSIONS[part.split("-")[0]]
        return part_dir / f"{part}-{cache_key(part, version, size, args.seed, configs[part])}.json"

    def cached(part: str) -> dict[str, Any] | None:
        p = part_path(part)
        return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None

    done: dict[str, dict[str, Any]] = {}
    if (got := cached("latency")) is not None and not (args.redo and "latency" in args.parts):
        done["latency"] = got
    # the memory part is cached per size: --memory-ns measures some now, the report shows every size cached
    now = set(args.memory_ns or cfg.memory_ns) if "memory" in args.parts else set()
    mem = {n: got for n in cfg.memory_ns if (got := cached(f"memory-{n}")) is not None and not (args.redo and n in now)}
    for n in sorted(now - set(mem)):
        load0 = _load()
        got = {
            "rows": memory_rows((n,), dim=cfg.memory_dim, seed=args.seed, progress=log),
            "meta": {"load_avg_1m_start": load0, "load_avg_1m_end": _load()},
        }
        part_dir.mkdir(parents=True, exist_ok=True)
        part_path(f"memory-{n}").write_text(json.dumps(clean_json(got)), encoding="utf-8")
        mem[n] = got
    if mem:
        done["memory"] = {
            "rows": [r for n in cfg.memory_ns if n in mem for r in mem[n]["rows"]],
            "meta": {
                "ns": [n for n in cfg.memory_ns if n in mem],
                "dim": cfg.memory_dim,
                "load_avg_1m": {n: mem[n].get("meta", {}) for n in cfg.memory_ns if n in mem},
                "faiss_threads": "OMP_NUM_THREADS=1 in the child unless set",
            },
        }
    for part in ("latency",):
        if part not in args.parts or part in done:
            continue
        load0 = _load()
        with Timer() as t:
            if part == "latency":
                data_dir = resolve_data_or_none(args.data_dir)
                if data_dir is None:
                    return 2
                data = _scifact(data_dir, cache=cache, size=size, seed=args.seed, progress=not args.no_progress)
                data = grow(
                    first_queries(data, cfg.n_queries), cfg.n_records, n_clusters=cfg.n_clusters, seed=args.seed
                )
                log(f"latency: {len(data.doc_ids):,} records ({data.about})")
                key = np.random.default_rng(args.seed).bytes(32)
                rows = latency_rows(data, engines=cfg.engines, key=key, opens=cfg.opens, progress=log)
                meta = {"records": data.about, "engines": list(cfg.engines)}
        meta["seconds"] = round(t.seconds, 1)
        meta["load_avg_1m_start"], meta["load_avg_1m_end"] = load0, _load()
        done[part] = {"rows": rows, "meta": meta}
        part_dir.mkdir(parents=True, exist_ok=True)
        part_path(part).write_text(json.dumps(clean_json(done[part])), encoding="utf-8")
        log(f"{part} done in {t.seconds:.0f} s")
    rows = [r for p in PARTS if p in done for r in done[p]["rows"]]
    meta = make_meta(
        SCRIPT,
        argv,
        size=size,
        seed=args.seed,
        config=asdict(cfg),
        parts=[p for p in PARTS if p in done],
        parts_missing=[p for p in PARTS if p not in done],
        latency=done.get("latency", {}).get("meta", {}),
        memory=done.get("memory", {}).get("meta", {}),
        cited_candidates=_cited_candidates(RESULTS_DIR),
        targets={"p95_ratio_to_plain": P95_TARGET, "ndcg_ratio": NDCG_TARGET, "bytes_per_record": BYTES_TARGET},
        git=_git(),
        not_covered=NOT_COVERED,
        runtime_seconds=round(time.perf_counter() - t_start, 1),
    )
    jp, mp = write_results(
        NAME,
        size=size,
        meta=meta,
        rows=rows or [{"part": "none", "n": 0}],
        markdown=render_markdown(rows, meta),
        out_dir=args.out_dir,
        tag=args.tag,
    )
    log(f"wrote {jp}, {mp}")
    return 0


def _scifact(data_dir: Path, *, cache: Path, size: str, seed: int, progress: bool) -> Retrieval:
    from textcrafter_rag.data import load_scifact
    from textcrafter_rag.encoders import bundled_minilm

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


if __name__ == "__main__":
    raise SystemExit(main())
