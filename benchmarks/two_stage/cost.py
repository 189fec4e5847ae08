"""Cost of two-stage search: bytes per record and the added latency per query (open + re-rank), in-process.

A record holds its sealed text and its sealed clean vector (float16, or int8 with a per-vector float32
scale), each a base64 token from :class:`~textcrafter_rag.sealed_records.RecordSealer`; the store also holds
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

from textcrafter_rag.sealed_records import RecordSealer

from .core_local import pack_vector, rerank, unpack_vector
from .search import fetch_candidates, int8_quantise
from .utility import Corpus

__all__ = ["VECTOR_FIELD", "cost_rows", "pack_int8", "unpack_int8"]

#: The field a record's clean vector is sealed under in this benchmark.
VECTOR_FIELD = "vector"
_KEY = base64.urlsafe_b64encode(bytes(range(32))).decode("ascii")  # a fixed, public benchmark key


def pack_int8(v: np.ndarray) -> str:
    """int8 values with one float32 scale (max-abs / 127) in front, base64."""
    q, scale = int8_quantise(np.asarray(v, dtype=np.float32))
    return base64.b64encode(scale.astype("<f4").tobytes() + q.tobytes()).decode("ascii")


def unpack_int8(s: str) -> np.ndarray:
    """Inverse of :func:`pack_int8` (float32)."""
    raw = base64.b64decode(s)
    scale = np.frombuffer(raw[:4], dtype="<f4")[0]
    return np.frombuffer(raw[4:], dtype=np.int8).astype(np.float32) * scale


def cost_rows(
    corpus: Corpus, texts: list[str], *, candidate_docs: np.ndarray, fetch_k: int, k: int, n_queries: int
) -> list[dict[str, Any]]:
    """Bytes per record (float16 and int8 sealed vectors) and open + re-rank latency p50/p95 at ``fetch_k``."""
    sealer = RecordSealer(_KEY)
    ids = [str(i) for i in range(corpus.n_docs)]
    text_tokens = [sealer.seal(t, None, record_id=i).text for t, i in zip(texts, ids)]
    packs = {"float16": pack_vector, "int8": pack_int8}
    unpacks = {"float16": unpack_vector, "int8": unpack_int8}
    tokens = {
        enc: [sealer.seal_value(pack(v), record_id=i, field=VECTOR_FIELD) for v, i in zip(corpus.docs, ids)]
        for enc, pack in packs.items()
    }
    stage = fetch_candidates(candidate_docs, corpus.queries, max_k=fetch_k)
    rows = []
    dim = corpus.docs.shape[1]
    for enc, toks in tokens.items():
        lat, lat_vectors = [], []
        for qi in range(min(n_queries, len(corpus.queries))):
            cand = [int(j) for j in stage.idx[qi] if j >= 0]
            t0 = time.perf_counter()
            vecs = np.stack(
                [unpacks[enc](sealer.open_value(toks[j], record_id=ids[j], field=VECTOR_FIELD)) for j in cand]
            )
            order = rerank(corpus.queries[qi], vecs, k)
            t1 = time.perf_counter()
            for j in order:
                sealer.open(text_tokens[cand[j]], {"_tc_id": ids[cand[j]]})
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
