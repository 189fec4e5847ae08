"""Smoke test of ``benchmarks.sealed_search.store_index_reads`` on synthetic data and a real ``chroma run`` server.

The checks fail when a part is not measured, when the scan picks other than what an exact index reads, or when the
packed copy misses a sealed record.
"""

from __future__ import annotations

import pytest

pytest.importorskip("chromadb")
pytest.importorskip("langchain_chroma")

from _retrieval_helpers import synthetic_retrieval

from benchmarks.common.reporting import make_meta
from benchmarks.sealed_search.store_index_parts import grow
from benchmarks.sealed_search.store_index_reads import (
    DEFAULT,
    EVICTED,
    PARTS,
    PLAIN_QUERY,
    RESIDENT,
    SCRIPT,
    measure,
    render_markdown,
)


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    data = grow(synthetic_retrieval(n_docs=120, n_queries=6, dim=32), 300, n_clusters=4, seed=0)
    return measure(data, key=bytes(32), work_dir=tmp_path_factory.mktemp("reads"))


def test_every_part_is_timed_for_every_query(rows: list[dict]) -> None:
    parts = [r for r in rows if "page_cache" not in r]
    assert [r["part"] for r in parts] == list(PARTS)
    for r in parts:
        assert r["n_records"] == 300 and r["n_queries"] == 6
        assert r["ms_p95"] >= r["ms_p50"] > 0 and r["ms_mean"] > 0


def test_the_plain_query_and_the_default_are_timed_in_both_page_cache_regimes(rows: list[dict]) -> None:
    cache = [(r["page_cache"], r["part"]) for r in rows if "page_cache" in r]
    assert cache == [(EVICTED, PLAIN_QUERY), (EVICTED, DEFAULT), (RESIDENT, PLAIN_QUERY), (RESIDENT, DEFAULT)]
    for r in rows[len(PARTS) :]:
        assert r["n_queries"] == 6 and r["ms_p95"] >= r["ms_p50"] > 0


def test_an_exact_index_reads_its_k_and_eight_more(rows: list[dict]) -> None:
    # 300 records are below train_at: the index is exact, and a search reads its best 10 and 8 more
    assert not rows[0]["index_trained"] and rows[0]["records_read"] == 18
    # every record read came back, from the sealed collection and from its packed copy (which holds each record)
    assert rows[0]["sealed_read_missed"] == 0 and rows[0]["packed_read_missed"] == 0
    assert rows[0]["sealed_records_packed"] >= 300


def test_the_report_names_each_part(rows: list[dict]) -> None:
    meta = make_meta(SCRIPT, ["--smoke"], size="smoke", seed=0, records="synthetic", git={"head": "abc"})
    md = render_markdown(rows, meta)
    for part in PARTS:
        assert f"| {part} |" in md
    assert "packed into fewer fields" in md
    assert "| evicted |" in md and "| resident |" in md and "page-out policy: ?" in md
