"""Smoke test of ``benchmarks.sealed_search.llama_index_ndcg`` on synthetic data: no datasets, no model.

Random clustered vectors stand in for SciFact and Qdrant local (a folder under ``tmp_path``) for the engine. The
checks fail when LlamaIndex's default sealed store ranks wrongly: at this size the store-held index is exact and
re-ranks what it opens by the sealed (int8-packed) clean vectors, so every sealed store must return the exact
top 10 of the clean vectors but for swaps of near ties (no hit's clean cosine more than 0.02 below the exact
one of its rank), as the plain store does, and a new store object given only the key must too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("qdrant_client")
pytest.importorskip("llama_index.vector_stores.qdrant")

from _retrieval_helpers import synthetic_retrieval

from benchmarks.common.reporting import write_results
from benchmarks.sealed_search.llama_index_ndcg import FRESH, MODES, PLAIN, WRITER, measure, render_markdown
from benchmarks.sealed_search.store_index_parts import Retrieval

DIM = 32


def synthetic(n_docs: int = 150, n_queries: int = 12) -> Retrieval:
    return synthetic_retrieval(n_docs=n_docs, n_queries=n_queries, dim=DIM)


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return measure(synthetic(), key=bytes(32), work_dir=tmp_path_factory.mktemp("llama-ndcg"), batch=64)


def test_every_store_returns_the_exact_ranking_of_the_clean_vectors(rows: list[dict]) -> None:
    assert [r["store"] for r in rows] == list(MODES)
    for r in rows:
        assert r["n_records"] == 150 and r["n_queries"] == 12
        assert r["clean_ndcg10"] > 0.5  # the queries find their documents: a ranking that is off shows
        assert r["top10_cosine_shortfall_max"] <= 0.02 and r["top10_overlap_with_exact"] >= 0.95, r["store"]
        assert r["ndcg_ratio"] == pytest.approx(1.0, abs=1e-9) and r["ndcg_ratio_to_plain"] == pytest.approx(1.0)
        assert r["latency_ms_p95"] >= r["latency_ms_p50"] > 0


def test_the_default_is_the_store_held_index_and_a_new_store_object_reads_it(rows: list[dict]) -> None:
    by = {r["store"]: r for r in rows}
    assert by[PLAIN]["p95_ratio_to_plain"] == 1.0
    assert by[PLAIN]["top10_same_order_as_exact"] == 1.0  # Qdrant ranks the float32 clean vectors
    assert by[WRITER]["top10_same_order_as_exact"] == by[FRESH]["top10_same_order_as_exact"]  # one index, one ranking
    assert by[WRITER]["search_options"].startswith("StoreIndexSearch(")
    assert by[FRESH]["search_options"].startswith("StoreIndexSearch(")
    assert by[FRESH]["dead_entries"] == 0 and by[FRESH]["open_ms"] > 0


def test_report_files(rows: list[dict], tmp_path: Path) -> None:
    meta = {
        "command": "python -m benchmarks.sealed_search.llama_index_ndcg --smoke",
        "date": "today",
        "size": "smoke",
        "machine": {"cpu_count": 2},
        "records": "synthetic",
        "git": {"head": "abc1234"},
    }
    md = render_markdown(rows, meta)
    assert md.startswith("# ") and "Target (issue 37)" in md and ": met (lowest sealed ratio 1.0000)" in md
    for mode in MODES:
        assert f"| {mode} |" in md
    jp, mp = write_results("llama_index_ndcg", size="smoke", meta=meta, rows=rows, markdown=md, out_dir=tmp_path)
    assert set(json.loads(jp.read_text())) == {"meta", "rows"} and mp.read_text() == md.rstrip() + "\n"
