"""Smoke test of ``benchmarks.sealed_search.store_index`` on synthetic data: no datasets, no model.

Random clustered vectors stand in for SciFact, Qdrant local for the engines (no server), and the memory part
runs at a few thousand records; the checks are ones that fail when a mode is broken: every mode finds the
relevant records (the store-held index ranks exactly what it opens), a fresh store object opens the log and
searches, and the memory child builds the index from the log it wrote.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("qdrant_client")
pytest.importorskip("langchain_qdrant")
pytest.importorskip("psutil")

from _retrieval_helpers import synthetic_retrieval

from benchmarks.sealed_search import store_index, store_index_scale
from benchmarks.sealed_search.store_index_memory import memory_rows
from benchmarks.sealed_search.store_index_parts import (
    DEFAULT,
    EVERY,
    MODES,
    PLAIN,
    PLAIN_BESIDE,
    PLAIN_EF,
    Retrieval,
    grow,
    latency_rows,
)
from benchmarks.sealed_search.store_index_report import render_markdown
from textcrafter_rag.sealed.sizing import sized
from textcrafter_rag.sealed.store_index import StoreIndexSearch

DIM = 32


def synthetic(n_docs: int = 120, n_queries: int = 12) -> Retrieval:
    return synthetic_retrieval(n_docs=n_docs, n_queries=n_queries, dim=DIM)


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    data = grow(synthetic(), 300, n_clusters=4, seed=0)
    got = latency_rows(data, engines=("qdrant",), key=bytes(32), opens=1, batch=100)
    return got + memory_rows((3_000,), dim=DIM, seed=0, warm_records=1_000)


def test_latency_rows_cover_every_mode_and_find_the_relevant_records(rows: list[dict]) -> None:
    lat = [r for r in rows if r["part"] == "latency"]
    assert [r["mode"] for r in lat] == [m for m in MODES if m != PLAIN_EF]  # Qdrant local's plain is exact
    for r in lat:
        assert r["n_records"] == 300 and r["latency_ms_p95"] >= r["latency_ms_p50"] > 0
        # at this size the index is exact and opens every candidate the engine would rank: clean NDCG
        assert r["ndcg_ratio"] == pytest.approx(1.0, abs=1e-9), r["mode"]
    by = {r["mode"]: r for r in lat}
    assert by[PLAIN]["p95_ratio_to_plain"] == 1.0
    # the plain store timed beside the store-held rows: interleaved with them, the default's ratio taken against it
    assert by[PLAIN_BESIDE]["interleaved"] is True and by[PLAIN_BESIDE]["p95_ratio_to_plain_beside"] == 1.0
    beside = by[DEFAULT]["latency_ms_p95"] / by[PLAIN_BESIDE]["latency_ms_p95"]
    assert by[DEFAULT]["p95_ratio_to_plain_beside"] == pytest.approx(beside)
    assert by[DEFAULT]["index_entries"] == 300 and by[EVERY]["index_entries"] == 300
    assert "refresh_every=1.0" in by[EVERY]["search_options"]


@pytest.mark.filterwarnings("ignore:legacy embedding function config:DeprecationWarning")  # Chroma reading its own
def test_chroma_s_plain_row_at_a_wider_search_is_made_with_that_breadth_and_judged_in_the_report(
    tmp_path: Path,
) -> None:
    pytest.importorskip("langchain_chroma")
    from benchmarks.two_stage.engines import PrecomputedEmbeddings, _engine

    emb = PrecomputedEmbeddings(["a"], np.eye(1, DIM, dtype=np.float32))
    with _engine("chroma", tmp_path / "wide", "wide", DIM, ef_search=123) as factory:
        assert factory(emb)._collection.configuration["hnsw"]["ef_search"] == 123
    with pytest.raises(ValueError, match="ef_search"), _engine("qdrant", tmp_path / "q", "q", DIM, ef_search=123):
        pass
    data = grow(synthetic(), 200, n_clusters=4, seed=0)
    got = latency_rows(data, engines=("chroma",), key=bytes(32), opens=0, modes=(PLAIN, PLAIN_EF, DEFAULT), batch=100)
    assert [r["mode"] for r in got] == [PLAIN, PLAIN_EF, DEFAULT]
    md = render_markdown(got, {"not_covered": []})
    assert f"| {PLAIN_EF} |" in md and "p95 <= 2x the plain store's at ef_search=400" in md
    assert "with ef_search=400 (p95" in md


@pytest.mark.filterwarnings("ignore:legacy embedding function config:DeprecationWarning")  # Chroma reading its own
def test_chroma_across_a_delayed_link_is_measured_and_said_so(tmp_path: Path) -> None:
    pytest.importorskip("langchain_chroma")
    from benchmarks.two_stage.engines import _engine

    with pytest.raises(ValueError, match="net_delay_ms"), _engine("qdrant", tmp_path / "q", "q", DIM, net_delay_ms=1):
        pass
    with pytest.raises(SystemExit):
        store_index.main(["--smoke", "--parts", "latency", "--engines", "qdrant", "--net-delay-ms", "1"])
    data = grow(synthetic(n_docs=60, n_queries=4), 60, n_clusters=2, seed=0)
    got = latency_rows(
        data, engines=("chroma",), key=bytes(32), opens=0, modes=(PLAIN, DEFAULT), batch=100, net_delay_ms=20.0
    )
    assert [r["mode"] for r in got] == [PLAIN, DEFAULT] and all(r["net_delay_ms"] == 20.0 for r in got)
    assert min(r["latency_ms_p50"] for r in got) >= 40.0  # every search crossed the proxy: a 40 ms round trip
    assert got[1]["ndcg_ratio"] == pytest.approx(1.0, abs=1e-9)  # exact below train_at, as without the delay
    md = render_markdown(got, {"not_covered": []})
    assert "through a proxy that holds all traffic 20 ms each way" in md


def test_a_fresh_store_object_opens_the_log(rows: list[dict]) -> None:
    opens = [r for r in rows if r["part"] == "open"]
    assert len(opens) == 1 and opens[0]["index_entries"] == 300
    assert opens[0]["open_ms"] >= opens[0]["first_search_ms"] > 0
    assert "StoreIndexSearch" in opens[0]["search_options"]


def test_memory_child_builds_the_index_from_its_log(rows: list[dict]) -> None:
    (mem,) = [r for r in rows if r["part"] == "memory"]
    assert mem["n_records"] == 3_000 and mem["index_entries"] == 3_000 and mem["open_k_found"] == sized(3_000)[0]
    assert mem["log_records"] >= 4  # two segments and their chunks, one head
    assert np.isfinite(mem["rss_bytes_per_record"]) and mem["accounted_faiss_bytes_per_record"] == 4 * DIM + 8
    # both baselines read: the cold one before the warm-up index, which was built and dropped first
    assert mem["warm_up_records"] == 1_000 and mem["warm_up_seconds"] >= 0  # rounded to 0.1 s: 0.0 when quick
    assert np.isfinite(mem["rss_cold_bytes_per_record"]) and np.isfinite(mem["warm_up_kept_mb"])
    # then writes timed while the index compacts in a thread: at least one, each logged and indexed
    assert mem["writes_during_compaction"] >= 1 and mem["index_bytes_taken_ms"] >= 0
    assert mem["write_ms_longest_during_compaction"] > 0 and mem["write_ms_median_alone"] > 0


def test_report_files(rows: list[dict], tmp_path: Path) -> None:
    meta = {
        "command": "python -m benchmarks.sealed_search.store_index --smoke",
        "date": "today",
        "size": "smoke",
        "machine": {"cpu_count": 2},
        "latency": {"records": "synthetic"},
        "cited_candidates": store_index._cited_candidates(store_index.RESULTS_DIR),
        "not_covered": ["everything real"],
    }
    md = render_markdown(rows, meta)
    assert md.startswith("# ") and "## Against the targets" in md and "p95 <= 2x" in md
    assert "### A write during a compaction" in md and "from a snapshot, then live" in md
    assert "p95 <= 2x the plain store's, timed beside it (qdrant)" in md and "| p95 / plain, beside |" in md
    for mode in MODES:
        assert (f"| {mode} |" in md) is (mode != PLAIN_EF)  # Qdrant local has no plain row at a wider search
    from benchmarks.common.reporting import write_results

    jp, mp = write_results("store_index", size="smoke", meta=meta, rows=rows, markdown=md, out_dir=tmp_path)
    assert set(json.loads(jp.read_text())) == {"meta", "rows"} and mp.read_text() == md.rstrip() + "\n"


def test_scale_row_builds_the_trained_index_and_ranks_what_it_opens(tmp_path: Path) -> None:
    base = synthetic(n_docs=120, n_queries=12)
    options = StoreIndexSearch(train_at=1_000, scan_codes=512)  # a few of the lists: larger scans probe more
    # open_k unset: the size rule's, as a search of 3,000 records takes it
    row = store_index_scale.scale_row(
        base, 3_000, options=options, work_dir=tmp_path, seed=0, n_timed=4, log=lambda msg: None
    )
    assert row["n_records"] == 3_000 and row["trained"] and row["opened_mean"] == row["open_k"] == sized(3_000)[0]
    assert row["clean_ndcg@10"] > 0.5 and row["ndcg_ratio"] >= 0.95  # the exact re-rank of what it opened
    assert row["accounted_faiss_bytes_per_record"] == DIM + 8 and row["queries_timed"] == 4
    sweep = {(s["scan_codes"], s["open_k"]): s for s in row["open_sweep"]}
    scans = [options.scan_codes * t for t in store_index_scale.SCAN_SWEEP]
    assert sorted(sweep) == [(c, m) for c in scans for m in store_index_scale.OPEN_SWEEP]
    # the sweep's pick at the shipped settings is the timed search's pick: the same re-ranked rows
    shipped = sweep[options.scan_codes, row["open_k"]]
    assert shipped["recall10"] == row["recall10"] and shipped["ndcg_ratio"] == row["ndcg_ratio"]
    assert shipped["lists_probed"] == row["lists_probed"]
    for c in scans:  # opening more never finds fewer of the exact top 10 (a deeper prefix of one order)
        recalls = [sweep[c, m]["recall10"] for m in store_index_scale.OPEN_SWEEP]
        assert recalls == sorted(recalls) and 0 < recalls[0] <= recalls[-1] <= 1
    probes = [sweep[c, row["open_k"]]["lists_probed"] for c in scans]
    assert probes == sorted(probes) and probes[0] < probes[-1]  # a larger scan probes more lists
    md = store_index_scale.render_markdown(row, {"command": "x", "machine": {}, "records": "synthetic"})
    assert "| NDCG@10 / clean | >= 0.99 |" in md and "## Records opened and codes scanned against quality" in md
