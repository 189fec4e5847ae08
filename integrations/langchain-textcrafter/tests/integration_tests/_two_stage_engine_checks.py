"""Two-stage search (``fetch_k=``) on a real engine: the checks every engine test runs.

A two-stage sealed store hands the engine only noised candidate vectors and keeps each clean vector
sealed in the payload (``_tc_vec``); every search opens the candidates and ranks them by exact cosine
in this process. :func:`check_two_stage_hits` checks what the application gets back,
:func:`check_two_stage_rows` what the engine holds (read back from the engine itself), so the
engine tests differ only in how they build the store and read its rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from langchain_textcrafter import SealedVectorStore
from textcrafter_rag.sealed.app_index import AppIndexSearch
from textcrafter_rag.sealed.candidates import VECTOR_KEY
from textcrafter_rag.sealed.core import MARKER_KEY, MODE_KEY
from textcrafter_rag.sealing import Sealer
from textcrafter_rag.testing import scan_for_plaintext
from textcrafter_rag.testing.pii_records import SEALED_FIELDS

from ._sealed_engine_servers import RECORDS, assert_opened, documents

TWO_STAGE_RECORDS = RECORDS[:20]
#: Every record is a candidate (and the store's marker record), so the re-rank is exact and the order known.
FETCH_K = len(TWO_STAGE_RECORDS) + 1
#: Five paraphrased questions and one stored text (which must come back first, at cosine ~1).
QUERIES = [r.question for r in TWO_STAGE_RECORDS[:5]] + [TWO_STAGE_RECORDS[7].text]
#: The clean vectors travel as float16: a score may differ from the float32 cosine by this much.
SCORE_TOL = 2e-3


@dataclass
class StoredRow:
    """One record as the engine holds it: text, metadata and vector, read back from the engine."""

    text: str
    metadata: dict[str, Any]
    vector: Sequence[float]


def two_stage_store(
    store: Callable[[Embeddings], VectorStore], embeddings: Embeddings, key: str, **kwargs: Any
) -> SealedVectorStore:
    """A two-stage sealed store over the engine ``store`` builds, sealing the records' sealed fields."""
    return SealedVectorStore(
        store, embedding=embeddings, key=key, sealed_metadata=SEALED_FIELDS, fetch_k=FETCH_K, **kwargs
    )


def app_index_store(
    store: Callable[[Embeddings], VectorStore], embeddings: Embeddings, key: str, **kwargs: Any
) -> SealedVectorStore:
    """A sealed store with the app-side index over the engine ``store`` builds (every record opened)."""
    search = AppIndexSearch(open_k=FETCH_K, **kwargs)
    return SealedVectorStore(store, embedding=embeddings, key=key, sealed_metadata=SEALED_FIELDS, search=search)


def add_two_stage_records(store: SealedVectorStore, ids: Sequence[Any] | None = None) -> list[Any]:
    """Add the 20 records; ``ids[n]`` is the record id of ``TWO_STAGE_RECORDS[n]``."""
    return store.add_documents(documents(TWO_STAGE_RECORDS), ids=ids)


def _cosines(query: np.ndarray, rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float64)
    query = np.asarray(query, dtype=np.float64)
    return rows @ query / np.linalg.norm(rows, axis=1) / np.linalg.norm(query)


def check_two_stage_hits(store: SealedVectorStore, ids: Sequence[Any], minilm: Any, *, k: int = 5) -> None:
    """Hits come back opened, scored by the exact cosine of the clean vectors, best first, none missed."""
    clean = minilm.encode([r.text for r in TWO_STAGE_RECORDS])
    for query in QUERIES:
        exact = _cosines(minilm.encode([query])[0], clean)
        hits = store.similarity_search_with_score(query, k=k)
        assert len(hits) == k
        scores = [float(s) for _, s in hits]
        assert scores == sorted(scores, reverse=True)
        found = []
        for doc, score in hits:
            n = assert_opened(doc, ids)
            assert VECTOR_KEY not in doc.metadata
            assert score == pytest.approx(exact[n], abs=SCORE_TOL)
            found.append(n)
        missed = [exact[i] for i in range(len(exact)) if i not in found]
        assert max(missed) <= scores[-1] + SCORE_TOL  # nothing left out ranks above the last hit
    top = store.similarity_search_with_score(QUERIES[-1], k=1)[0]
    assert assert_opened(top[0], ids) == 7 and top[1] == pytest.approx(1.0, abs=SCORE_TOL)


def check_two_stage_rows(rows: Sequence[StoredRow], minilm: Any, scratch: Path, *, mode: str = "candidates") -> None:
    """The engine holds sealed texts, sealed fields and sealed clean vectors, and only noised vectors.

    The rows are also written to a file under ``scratch`` and byte-scanned for every text, 3-word
    fragment and sealed value of the records. The store's marker record (its mode, sealed) is set aside.
    """
    markers = [r for r in rows if MARKER_KEY in r.metadata]  # none where the store has no get_by_ids (Milvus)
    assert [r.metadata[MARKER_KEY] for r in markers] in ([], [mode])
    assert all(Sealer.is_sealed(r.text) for r in markers)
    rows = [r for r in rows if MARKER_KEY not in r.metadata]
    assert all(r.metadata[MODE_KEY] == mode for r in rows)
    assert sorted(int(r.metadata["n"]) for r in rows) == list(range(len(TWO_STAGE_RECORDS)))
    clean = minilm.encode([r.text for r in TWO_STAGE_RECORDS])
    for row in rows:
        n = int(row.metadata["n"])
        assert Sealer.is_sealed(row.text) and Sealer.is_sealed(row.metadata[VECTOR_KEY])
        assert all(Sealer.is_sealed(row.metadata[f]) for f in SEALED_FIELDS if f in TWO_STAGE_RECORDS[n].metadata)
        limit = 0.95 if mode == "candidates" else 0.5  # index mode: a keyed random vector, |cos| ~ 0.05 at 384-d
        assert abs(_cosines(clean[n], np.asarray([row.vector]))[0]) < limit  # the engine never got the clean vector
    dump = scratch / "two-stage-rows.json"
    dump.write_text(
        json.dumps([{"text": r.text, "metadata": r.metadata} for r in rows], ensure_ascii=False, default=str)
    )
    hits = scan_for_plaintext([dump], [s for r in TWO_STAGE_RECORDS for s in r.secrets])
    assert hits == [], "\n".join(map(str, hits[:10]))
