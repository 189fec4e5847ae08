"""Cost of two-stage search: bytes per record and the added latency per query (open + re-rank), in-process.

A record holds its sealed text and its sealed clean vector (float16, or int8 with a per-vector float32
scale), each a base64 token from :class:`~textcrafter_rag.sealed.records.RecordSealer`; the store also holds
the float32 candidate vector. The latency is measured in this process on one thread: for each query, open the
``fetch_k`` sealed vectors of its candidates, re-rank them by exact cosine with the clean query, then open the
texts of the ``k`` winners. The end-to-end latency through Qdrant local and the Chroma server needs the
stores' two-stage support and is left ``null`` here.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import numpy as np

from textcrafter_rag.sealed.candidates import VECTOR_FIELD, TwoStage, TwoStageSearch, rerank
from textcrafter_rag.sealed.records import RecordSealer
from textcrafter_rag.sealing import Sealer

from .search import fetch_candidates, int8_quantise
from .utility import Corpus

__all__ = ["cost_rows", "pack_int8", "unpack_int8"]

_KEY = base64.urlsafe_b64encode(bytes(range(32))).decode("ascii")  # a fixed, public benchmark key


def pack_int8(v: np.ndarray) -> str:
    """int8 values with one float32 scale (max-abs / 127) in front, base64 (the float16 pack's int8 alternative)."""
    q, scale = int8_quantise(np.asarray(v, dtype=np.float32))
    return "i8:" + base64.urlsafe_b64encode(scale.astype("<f4").tobytes() + q.tobytes()).decode("ascii")


def unpack_int8(s: str) -> np.ndarray:
    """Inverse of :func:`pack_int8` (float32)."""
    raw = base64.urlsafe_b64decode(s.removeprefix("i8:"))
    scale = np.frombuffer(raw[:4], dtype="<f4")[0]
    return np.frombuffer(raw[4:], dtype=np.int8).astype(np.float32) * scale


def cost_rows(
    corpus: Corpus, texts: list[str], *, candidate_docs: np.ndarray, fetch_k: int, k: int, n_queries: int
) -> list[dict[str, Any]]:
    """Bytes per record (float16 and int8 sealed vectors) and open + re-rank latency p50/p95 at ``fetch_k``."""
    sealer = RecordSealer(_KEY)
    two = TwoStage(_KEY, search=TwoStageSearch(open_k=fetch_k))
    raw = Sealer(_KEY)  # the int8 alternative, sealed the way TwoStage seals its float16 vectors
    ids = [str(i) for i in range(corpus.n_docs)]
    records = [sealer.seal(t, None, record_id=i) for t, i in zip(texts, ids)]  # keyed ids, as shipped
    text_tokens = [r.text for r in records]
    tokens = {
        "float16": [two.seal_vector(v, record_id=i) for v, i in zip(corpus.docs, ids)],
        "int8": [raw.seal(pack_int8(v), record_id=i, field=VECTOR_FIELD) for v, i in zip(corpus.docs, ids)],
    }

    def open_int8(token: str, rid: str) -> np.ndarray:
        return unpack_int8(raw.open(token, record_id=rid, field=VECTOR_FIELD))

    def rank(enc: str, query: np.ndarray, cand: list[int]) -> list[int]:
        if enc == "float16":  # the core's own path: open each sealed vector, exact cosine, top k
            vecs = np.stack([two.open_vector(tokens[enc][j], record_id=ids[j]) for j in cand])
            return [int(i) for i in rerank(query, vecs, k)[0]]
        vecs = np.stack([open_int8(tokens[enc][j], ids[j]) for j in cand])
        return [int(i) for i in rerank(query, vecs, k)[0]]

    stage = fetch_candidates(candidate_docs, corpus.queries, max_k=fetch_k)
    rows = []
    dim = corpus.docs.shape[1]
    for enc, toks in tokens.items():
        lat, lat_vectors = [], []
        for qi in range(min(n_queries, len(corpus.queries))):
            cand = [int(j) for j in stage.idx[qi] if j >= 0]
            t0 = time.perf_counter()
            order = rank(enc, corpus.queries[qi], cand)
            t1 = time.perf_counter()
            for j in order:
                sealer.open(records[cand[j]].text, records[cand[j]].metadata)
            t2 = time.perf_counter()
            lat_vectors.append(1000 * (t1 - t0))
            lat.append(1000 * (t2 - t0))
        text_chars = float(np.mean([len(t) for t in text_tokens]))
        vec_chars = float(np.mean([len(t) for t in toks]))
        rows.append(
            {
                "part": "cost",
                "mechanism": "gaussian",
                "encoding": enc,
                "fetch_k": fetch_k,
                "n_docs": corpus.n_docs,
                "bytes_per_record": text_chars + vec_chars,
                "sealed_text_chars": text_chars,
                "sealed_vector_chars": vec_chars,
                "candidate_vector_bytes": 4 * dim,
                "plain_text_chars": float(np.mean([len(t) for t in texts])),
                "latency_ms_p50": float(np.percentile(lat, 50)),
                "latency_ms_p95": float(np.percentile(lat, 95)),
                "latency_vectors_ms_p50": float(np.percentile(lat_vectors, 50)),
                "latency_vectors_ms_p95": float(np.percentile(lat_vectors, 95)),
                "latency_where": "in-process, one thread: open fetch_k sealed vectors + re-rank + open k texts",
                "latency_qdrant_ms_p50": None,
                "latency_chroma_ms_p50": None,
                "n_timed_queries": len(lat),
            }
        )
    return rows
