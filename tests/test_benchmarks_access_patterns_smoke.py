"""Smoke test of ``benchmarks.sealed_search.access_patterns``: hash vectors, a few hundred notes, no model.

The checks fail when the replica is broken or the attacks are: without the replica each query reads its best
ten records and a few more (the index is exact at this size) and the inserter, who knows its own records,
finds the topic; with it no query reads a data record, every query's requests to the store are the same, and
every read-based row is at chance exactly. The write rows are there for both modes, and the store links each
write to its writer in both (what the replica does not hide). The Chroma-server part (a ``chroma run`` server,
and a writer in another OS process): the other process's writes are found at the next search of both sealed
stores, and the replica's queries read no data record.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("psutil")
pytest.importorskip("sklearn")
pytest.importorskip("langchain_chroma", reason="the server part runs a chroma run server")

from benchmarks.sealed_search import access_patterns
from benchmarks.sealed_search.access_costs import cost_rows
from benchmarks.sealed_search.access_report import WRITE_ATTACKS
from benchmarks.sealed_search.access_server import server_rows
from textcrafter_rag.sealed.store_index import EXACT_EXTRA


def test_reads_leak_without_the_replica_and_nothing_with_it() -> None:
    rows = access_patterns.attack_rows(access_patterns.toy_encoder(), size="smoke", seed=0)
    reads = {(r["mode"], r["attacker"], r["attack"]): r for r in rows}
    plain = reads[("store-index", "inserter-20", "guess-query-topic")]
    assert plain["mean_data_reads"] == 10 + EXACT_EXTRA and plain["value"] >= 0.9  # the leak the option closes
    for r in rows:
        if r["mode"] == "store-index-replica" and r["attack"] not in WRITE_ATTACKS:
            assert r["mean_data_reads"] == 0 and r["distinct_request_logs"] == 1
            assert r["x_chance"] == pytest.approx(1.0)
    writes = [r for r in rows if r["attack"] == "guess-note-from-write-sizes"]
    assert len(writes) == 2 and writes[0]["value"] == writes[1]["value"]  # the replica changes no write size
    got = {(r["mode"], r["attack"]) for r in rows}
    assert {(m, a) for m, _ in access_patterns.MODES for a in WRITE_ATTACKS} <= got
    for r in rows:
        if r["attack"] == "link-writes-to-writer":  # each writer's heads chain: both processes' writes told apart
            assert r["value"] == 1.0 and r["n_chains"] == 2
        elif r["attack"] in WRITE_ATTACKS:
            assert 0.0 <= r["value"] <= 1.0 and r["chance"] in (0.05, 0.5)


def test_costs_measure_both_modes(tmp_path: Path) -> None:
    rows = cost_rows([600], seed=0, n_queries=5)
    assert [r["mode"] for r in rows] == ["store-index", "store-index-replica"]
    assert rows[1]["replica_records"] == 600 + 1_000 and rows[1]["replica_pending"] == 0  # the other writer's too
    assert rows[0]["replica_records"] == 0 and all(r["p50_ms"] > 0 for r in rows)
    doc = {"size": "smoke", "command": "-", "about": "-", "attacks": [], "costs": rows, "verdict": ["-"]}
    md = access_patterns.render_markdown(doc)
    assert "store-index-replica" in md and json.dumps(rows)


def test_server_part_syncs_another_process_writes() -> None:
    rows = server_rows([300], seed=0, n_queries=5, sync_rounds=1, writes=100)
    by = {r["mode"]: r for r in rows}
    assert list(by) == ["plain-chroma", "store-index", "store-index-replica"]
    assert by["store-index"]["data_records_read_a_query"] == 10 + EXACT_EXTRA  # the best k and a few more, by id
    assert by["store-index-replica"]["data_records_read_a_query"] == 0  # none: the replica holds them
    for mode in ("store-index", "store-index-replica"):
        (sync,) = by[mode]["sync_rounds"]
        assert by[mode]["found_after_sync"] and sync["found_first"]  # the other process's write, found
    replica = by["store-index-replica"]["sync_rounds"][0]
    assert replica["replica_records"] == 300 + 100 and replica["replica_pending"] == 0
    assert replica["data_records_read"] == 100  # the sync read each new record once, by id
    md = access_patterns.render_markdown(
        {"size": "smoke", "command": "-", "about": "-", "attacks": [], "costs": [], "server": rows, "verdict": ["-"]}
    )
    assert "On a Chroma server" in md and "plain-chroma" in md
