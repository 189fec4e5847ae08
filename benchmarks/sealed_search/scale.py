"""The scale grid: SciFact grown by fitted distractors, per mode: NDCG@10 ratio, records opened, latency, bytes.

**Distractors that keep the cluster structure** (``clustered``): k-means (FAISS, ``n_clusters``) on the real
SciFact document vectors; a distractor picks a cluster with probability proportional to its size, sums six
of that cluster's residuals (``x - centroid``) drawn at random, with random signs, over ``sqrt(6)`` (the mix has
the cluster's own residual covariance and is no copy of any real document: its cosine with each parent's
residual is about 0.4), adds a small isotropic jitter (a quarter of the cluster's residual spread per dimension)
and is normalised: ``unit(centroid + mix + jitter)``. Fitted this way a distractor's best cosine to a real
document is about a real document's best cosine to another (``distractor_check`` in the results' meta; three
Gaussian-weighted residuals made many near-copies, p99 0.98, and halved clean NDCG@10 at 1,000,000).
``gaussian`` (optional, the earlier benchmark's kind): one Gaussian with the mean and covariance of all documents.
Distractors are never relevant; the clean reference of each size is the exact search of the grown store.

**Modes.** ``none``: exact cosine over the clean vectors (a FAISS flat index). ``candidates``: what the core
stores (``Q unit(unit(x) + r u)``, doc 2.0, query 0.5), searched by a FAISS flat inner-product index, then the
``fetch_k`` hits' clean vectors (int8 as sealed) ranked exactly. The SciFact records and the queries go
through the core (:meth:`SealedSearch.store_vectors`, :meth:`store_query`) and are un-rotated with the key
(inner products, hence the ranking, are the same with or without the rotation); the distractors' noise
directions are drawn with NumPy (uniform on the sphere, the law of the core's keyed directions: the core's
per-record PRF costs about 1 ms a record here, 15 minutes at 1,000,000). ``index``: the core's
:class:`AppIndex` (exact float16 below ``train_at`` = 20,000 records, PQ codes trained on the first 20,000
after), its ``open_k`` hits ranked exactly.

**Latency** (in-process, one query at a time, ``n_timed`` queries): the app's work per query — protect the query
(candidates) or scan the index (index), open the sealed vectors of the hits (the core's :meth:`SealedSearch.open_hits`
on real sealed tokens: as many as the mode opens, from a pool sealed once) and rank them (:meth:`SealedSearch.rank`)
— and, beside it, the store's own search (FAISS flat over what it holds; none in index mode: it fetches by id).
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import faiss
import numpy as np

from textcrafter_rag.metrics import retrieval_metrics
from textcrafter_rag.numerics import unit_rows
from textcrafter_rag.sealed.app_index import AppIndex, AppIndexSearch
from textcrafter_rag.sealed.candidates import TwoStage, TwoStageSearch
from textcrafter_rag.sealed.core import SealedSearch
from textcrafter_rag.sealing import SecretKey

from .distractors import CHUNK as _CHUNK
from .distractors import cluster_distractors, distractor_check, gaussian_distractors
from .modes import BENCH_KEY, CONTEXT
from .rounds import recall_rows, timed_ms
from .timing import SealedPool

__all__ = ["ScaleConfig", "scale_rows", "store_bytes"]

_DIM_BYTES = 4  # float32 per component in the store


@dataclass(frozen=True)
class ScaleConfig:
    """What the scale grid measures.

    Attributes:
        sizes: Store sizes (records), SciFact first, then distractors (prefixes of one pool).
        fetch_ks: Candidate mode's ``fetch_k`` values (200 is the shipped default).
        index: ``(code_bytes, open_k)`` app-side index settings (48, 100 is the shipped default).
        n_timed: Queries timed one at a time at each size.
        n_clusters: k-means clusters of the distractor fit.
        kinds: Distractor kinds (``clustered``; ``real``: SciFact + ``real`` real sentences, one size; optionally
            ``gaussian``, only at the largest size).
        real: How many real sentences the ``real`` kind adds.
        train_at: The index's ``train_at`` (``None``: the shipped default, 20,000).
        recalls: Candidate mode's recall targets, searched in rounds up to the largest ``fetch_ks``.
    """

    sizes: tuple[int, ...]
    fetch_ks: tuple[int, ...] = (200, 1000, 2000)
    index: tuple[tuple[int, int], ...] = ((48, 100), (32, 100), (16, 100), (16, 1000), (48, 1000))
    n_timed: int = 100
    n_clusters: int = 64
    kinds: tuple[str, ...] = ("clustered",)
    train_at: int | None = None
    recalls: tuple[float, ...] = (0.95, 0.99)
    real: int = 0


def _unit32(x: np.ndarray) -> np.ndarray:
    return unit_rows(np.asarray(x, dtype=np.float64)).astype(np.float32)


def _ndcg(top: np.ndarray, doc_ids: Sequence[str], query_ids: Sequence[str], qrels: dict[str, set[str]]) -> float:
    ranked = {q: [doc_ids[j] for j in row if 0 <= j < len(doc_ids)] for q, row in zip(query_ids, top)}
    return float(retrieval_metrics(ranked, qrels, ks=(10,))["ndcg@10"])


def _int8(x: np.ndarray) -> np.ndarray:
    """Unit rows as the core seals them (int8 with one scale) and opens them again."""
    scale = np.maximum(np.abs(x).max(axis=-1, keepdims=True), 1e-12) / 127.0
    return _unit32(np.round(x / scale) * scale)


def _int8_rows(x: np.ndarray) -> np.ndarray:
    """:func:`_int8` of many rows, in chunks (bounded memory at a million records)."""
    return np.concatenate([_int8(x[s : s + _CHUNK]) for s in range(0, len(x), _CHUNK)])


def _rerank(idx: np.ndarray, clean: np.ndarray, queries: np.ndarray, k: int = 10) -> np.ndarray:
    """The top ``k`` of each row of fetched indices by exact cosine of the (int8-sealed) clean vectors."""
    out = np.full((len(idx), k), -1, dtype=np.int64)
    for i, row in enumerate(idx):
        row = row[row >= 0]
        if not len(row):
            continue
        s = _int8(clean[row]) @ queries[i]
        order = np.argsort(-s, kind="stable")[:k]
        out[i, : len(order)] = row[order]
    return out


def _sealed_cosines(clean: np.ndarray, q_unit: np.ndarray, i: int, idx: np.ndarray) -> np.ndarray:
    return _int8(clean[idx]) @ q_unit[i]


def _rerank_ndcg(
    clean: np.ndarray,
    q_unit: np.ndarray,
    ids: Sequence[str],
    query_ids: Sequence[str],
    qrels: dict[str, set[str]],
    top: np.ndarray,
) -> float:
    return _ndcg(_rerank(top, clean, q_unit), ids, query_ids, qrels)


def _round_ms(index: Any, q_stored: np.ndarray, i: int, k: int) -> float:
    """Milliseconds of one store search of query ``i`` for ``k`` records."""
    return timed_ms(lambda: index.search(q_stored[i : i + 1], k))


def _rounds_app_ms(pool: SealedPool, queries: np.ndarray, search: SealedSearch, two: TwoStage, i: int, n: int) -> float:
    return pool.time_rounds_app(queries[i], n, search, two)


def _flat(vectors: np.ndarray) -> Any:
    index = faiss.IndexFlatIP(vectors.shape[1])
    for start in range(0, len(vectors), _CHUNK * 4):
        index.add(np.ascontiguousarray(vectors[start : start + _CHUNK * 4]))
    return index


def _pct(values: Sequence[float]) -> tuple[float, float]:
    return float(np.percentile(values, 50)), float(np.percentile(values, 95))


def store_bytes(search: SealedSearch | None, clean: np.ndarray, dim: int) -> dict[str, float]:
    """Bytes per record in the store: the vector (float32) plus the sealed clean vector and the mode marker."""
    vector = _DIM_BYTES * dim
    if search is None:
        return {"store_vector_bytes": vector, "store_sealed_vector_chars": 0, "store_bytes_per_record": vector}
    n = min(50, len(clean))
    texts = [np.random.default_rng(i).bytes(192).hex() for i in range(n)]
    fields = search.record_fields(clean[:n], [f"r{i}" for i in range(n)], texts)
    sealed = float(np.mean([sum(len(k) + len(v) for k, v in f.items()) for f in fields]))
    return {
        "store_vector_bytes": vector,
        "store_sealed_vector_chars": sealed,
        "store_bytes_per_record": vector + sealed,
    }


def _app_bytes(index: AppIndex) -> dict[str, float]:
    """App memory per record: the index's vector payload, and a measured total (codes or float16 directions, the
    ids list, the id -> position dict, the strings)."""
    n = max(1, len(index))
    ids = index._ids  # measuring the index's own containers, read only
    pos = index._pos
    arrays = index._codes.nbytes + index._exact.nbytes
    total = arrays + sys.getsizeof(ids) + sys.getsizeof(pos) + sum(sys.getsizeof(s) for s in ids)
    return {"app_vector_bytes_per_record": float(index.bytes_per_record), "app_bytes_per_record_measured": total / n}


def _measured(ndcg: float, clean_ndcg: float, opened: list[int], a50: float, a95: float) -> dict[str, float]:
    """The quality, records-opened and app-latency fields every mode's row carries."""
    p50, p95 = (float(np.percentile(opened, p)) for p in (50, 95))
    ratio = ndcg / clean_ndcg
    quality = {"ndcg10": ndcg, "clean_ndcg10": clean_ndcg, "ndcg_ratio": ratio}
    return {**quality, "opened_p50": p50, "opened_p95": p95, "app_ms_p50": a50, "app_ms_p95": a95}


def scale_rows(
    cfg: ScaleConfig,
    *,
    docs: np.ndarray,
    doc_ids: list[str],
    queries: np.ndarray,
    query_ids: list[str],
    qrels: dict[str, set[str]],
    seed: int,
    real: np.ndarray | None = None,
    progress: Callable[[str], Any] = lambda s: None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every (distractor kind, size, mode setting) row, and notes for ``meta`` (the distractor checks, throughput).

    ``real``: the vectors of real out-of-domain sentences, the distractors of the ``real`` kind.
    """
    rows: list[dict[str, Any]] = []
    meta: dict[str, Any] = {"distractor_check": {}, "throughput": {}}
    secret = SecretKey(BENCH_KEY)
    cand_search = SealedSearch(secret, tenant=CONTEXT, options=TwoStageSearch())
    two = TwoStage(secret, context=CONTEXT, search=TwoStageSearch())
    dim = docs.shape[1]
    rot = two.rotation(dim)
    n_real = len(docs)
    q_unit = _unit32(queries)

    t0 = time.perf_counter()
    real_stored = rot.invert(cand_search.store_vectors(cand_search.check_vectors(docs), doc_ids))
    meta["throughput"]["core_store_vectors_candidates_us_per_record"] = 1e6 * (time.perf_counter() - t0) / n_real
    q_stored = _unit32(rot.invert(np.concatenate([cand_search.store_query(q) for q in queries])))
    cand_by_k = {fk: SealedSearch(secret, tenant=CONTEXT, options=TwoStageSearch(open_k=fk)) for fk in cfg.fetch_ks}
    idx_by = {
        (cb, ok): SealedSearch(secret, tenant=CONTEXT, options=AppIndexSearch(code_bytes=cb, open_k=ok))
        for cb, ok in cfg.index
    }
    index_search = next(iter(idx_by.values()))
    t0 = time.perf_counter()
    index_search.store_vectors(docs[:500], doc_ids[:500])
    meta["throughput"]["core_store_vectors_index_us_per_record"] = 1e6 * (time.perf_counter() - t0) / min(500, n_real)
    openers = {
        "candidates": SealedPool(cand_search, docs, max(cfg.fetch_ks), seed),
        "index": SealedPool(index_search, docs, max(o for _, o in cfg.index), seed),
    }
    bytes_cand = store_bytes(cand_search, docs, dim)
    bytes_index = store_bytes(index_search, docs, dim)
    bytes_none = store_bytes(None, docs, dim)
    timed = range(min(cfg.n_timed, len(queries)))
    max_fetch = max(cfg.fetch_ks)

    for kind in cfg.kinds:
        if kind == "clustered":
            sizes = [s for s in cfg.sizes if s >= n_real]
        else:
            sizes = [n_real + len(real)] if kind == "real" and real is not None else [max(cfg.sizes)]
        n_extra = max(sizes) - n_real
        progress(f"scale: {kind} distractors ({n_extra:,})")
        if kind == "clustered":
            extra = cluster_distractors(docs, n_extra, n_clusters=cfg.n_clusters, seed=seed)
        elif kind == "real":
            if real is None:
                raise ValueError("the real kind needs the real sentences' vectors")
            extra = _unit32(real)
        else:
            extra = gaussian_distractors(docs, n_extra, seed=seed)
        if n_extra:
            meta["distractor_check"][kind] = distractor_check(docs, extra, seed=seed)
        clean = np.concatenate([_unit32(docs), extra])
        del extra
        ids = doc_ids + [f"distractor-{i}" for i in range(len(clean) - n_real)]
        rng = np.random.default_rng(seed + 17)
        stored = np.empty_like(clean)
        stored[:n_real] = _unit32(real_stored)
        r = two.search.doc_strength
        for start in range(n_real, len(clean), _CHUNK):
            x = clean[start : start + _CHUNK]
            u = _unit32(rng.standard_normal(x.shape, dtype=np.float32))
            stored[start : start + _CHUNK] = _unit32(x + r * u)
        train = {} if cfg.train_at is None else {"train_at": cfg.train_at}
        indexes = {
            cb: AppIndex(dim, search=AppIndexSearch(code_bytes=cb, **train)) for cb in {cb for cb, _ in cfg.index}
        }
        rid = np.random.default_rng(seed + 19)
        uuids = [str(uuid.UUID(bytes=rid.bytes(16), version=4)) for _ in range(len(clean))]
        added = 0
        for size in sizes:
            base = {"part": "scale", "distractors": kind if size > n_real else "none", "n_records": size}
            progress(f"scale: {kind} {size:,} records")
            # the clean reference: exact search of the grown store
            flat = _flat(clean[:size])
            _, top = flat.search(q_unit, 10)
            clean_ndcg = _ndcg(top, ids, query_ids, qrels)
            lat = []
            for i in timed:
                t = time.perf_counter()
                flat.search(q_unit[i : i + 1], 10)
                lat.append(1000 * (time.perf_counter() - t))
            del flat
            store_p50, store_p95 = _pct(lat)
            rows.append(
                {
                    **base,
                    "mode": "none",
                    "mechanism": "none",
                    "setting": "exact cosine",
                    "opened": 10,
                    "ndcg10": clean_ndcg,
                    "clean_ndcg10": clean_ndcg,
                    "ndcg_ratio": 1.0,
                    "opened_p50": 10,
                    "opened_p95": 10,
                    "app_ms_p50": 0.0,
                    "app_ms_p95": 0.0,
                    "store_ms_p50": store_p50,
                    "store_ms_p95": store_p95,
                    "app_bytes_per_record_measured": 0.0,
                    "app_vector_bytes_per_record": 0.0,
                    **bytes_none,
                }
            )
            # candidates: the store's flat search over what it holds, then the exact re-rank
            flat = _flat(stored[:size])
            store_scores, fetched = flat.search(q_stored, min(max_fetch, size))
            search_lat = [_round_ms(flat, q_stored, i, min(max_fetch, size)) for i in timed]
            scan_top = _flat(_int8_rows(clean[:size])).search(q_unit, 10)[1]
            for r in recall_rows(
                cfg.recalls,
                cap=max_fetch,
                size=size,
                scores=store_scores,
                fetched=fetched,
                sealed_cosines=partial(_sealed_cosines, clean, q_unit),
                scan_top=scan_top,
                rerank_ndcg=partial(_rerank_ndcg, clean, q_unit, ids, query_ids, qrels),
                timed=timed,
                time_store=partial(_round_ms, flat, q_stored),
                time_app=partial(_rounds_app_ms, openers["candidates"], queries, cand_by_k[max_fetch], two),
                dim=dim,
            ):
                read, app, store = r.pop("read"), r.pop("app_ms"), r.pop("store_ms")
                rows.append(
                    {
                        **base,
                        "mode": "candidates",
                        "mechanism": "candidates",
                        **r,
                        **_measured(r.pop("ndcg10"), clean_ndcg, read, *_pct(app)),
                        "store_ms_p50": _pct(store)[0],
                        "store_ms_p95": _pct(store)[1],
                        "app_bytes_per_record_measured": 0.0,
                        "app_vector_bytes_per_record": 0.0,
                        **bytes_cand,
                    }
                )
            del flat
            for fk in cfg.fetch_ks:
                ndcg = _ndcg(_rerank(fetched[:, :fk], clean, q_unit), ids, query_ids, qrels)
                app = []
                for i in timed:
                    t = time.perf_counter()
                    cand_by_k[fk].store_query(queries[i])
                    vecs = openers["candidates"].open(min(fk, size), cand_by_k[fk])
                    SealedSearch.rank(queries[i], vecs, 10)
                    app.append(1000 * (time.perf_counter() - t))
                a50, a95 = _pct(app)
                s50, s95 = _pct(search_lat)
                opened = [int((row >= 0).sum()) for row in fetched[:, :fk]]
                rows.append(
                    {
                        **base,
                        "mode": "candidates",
                        "mechanism": "candidates",
                        "setting": f"fetch_k {fk}",
                        "fetch_k": fk,
                        "opened": fk,
                        **_measured(ndcg, clean_ndcg, opened, a50, a95),
                        "store_ms_p50": s50,
                        "store_ms_p95": s95,
                        "app_bytes_per_record_measured": 0.0,
                        "app_vector_bytes_per_record": 0.0,
                        **bytes_cand,
                    }
                )
            # the app-side index, grown to this size (trained once it reaches train_at)
            add_seconds = dict.fromkeys(indexes, 0.0)
            for start in range(added, size, _CHUNK):
                stop = min(size, start + _CHUNK)
                for cb, index in indexes.items():
                    t = time.perf_counter()
                    index.add(uuids[start:stop], clean[start:stop])
                    add_seconds[cb] += time.perf_counter() - t
            grown_by = max(1, size - added)
            added = size
            files: dict[int, tuple[float, float]] = {}
            for cb, index in indexes.items():
                t = time.perf_counter()
                raw = index.to_bytes()
                files[cb] = (len(raw) / size, 1000 * (time.perf_counter() - t))
                del raw
            pos = {u: i for i, u in enumerate(uuids[:size])}
            for cb, open_k in cfg.index:
                index = indexes[cb]
                index.search(queries[0], open_k)  # warm: FAISS's view of the codes is rebuilt after a write
                found = np.full((len(queries), open_k), -1, dtype=np.int64)
                scan = []
                for i in range(len(queries)):
                    t = time.perf_counter()
                    got = index.search(queries[i], open_k)
                    scan.append(1000 * (time.perf_counter() - t))
                    found[i, : len(got)] = [pos[g] for g in got]
                ndcg = _ndcg(_rerank(found, clean, q_unit), ids, query_ids, qrels)
                app = []
                for n_i, i in enumerate(timed):
                    t = time.perf_counter()
                    vecs = openers["index"].open(min(open_k, size), idx_by[(cb, open_k)])
                    SealedSearch.rank(queries[i], vecs, 10)
                    app.append(scan[n_i] + 1000 * (time.perf_counter() - t))
                a50, a95 = _pct(app)
                opened = [int((row >= 0).sum()) for row in found]
                shipped = (cb, open_k) == (AppIndexSearch().code_bytes, AppIndexSearch().open_k)
                rows.append(
                    {
                        **base,
                        "mode": "index",
                        "mechanism": "index",
                        "setting": f"PQ {cb} B, open_k {open_k}" + (" (shipped)" if shipped else ""),
                        "code_bytes": cb,
                        "open_k": open_k,
                        "trained": index.trained,
                        "opened": open_k,
                        **_measured(ndcg, clean_ndcg, opened, a50, a95),
                        "scan_ms_p50": _pct(scan)[0],
                        "scan_ms_p95": _pct(scan)[1],
                        "store_ms_p50": 0.0,
                        "store_ms_p95": 0.0,
                        **_app_bytes(index),
                        "index_add_us_per_record": 1e6 * add_seconds[cb] / grown_by,
                        "index_bytes_per_record_serialized": files[cb][0],
                        "index_to_bytes_ms": files[cb][1],
                        **bytes_index,
                    }
                )
            del pos
        del clean, stored, indexes
    return rows, meta
