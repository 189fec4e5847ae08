"""Smoke test of ``benchmarks.sealed_search.access_patterns``: hash vectors, a few hundred notes, no model.

The checks fail when the replica is broken or the attacks are: without the replica each query reads its
``open_k`` records and the inserter, who knows its own records, finds the topic; with it no query reads a data
record, every query's requests to the store are the same, and every read-based row is at chance exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("psutil")
pytest.importorskip("sklearn")

from benchmarks.sealed_search import access_patterns
from benchmarks.sealed_search.access_costs import cost_rows


def test_reads_leak_without_the_replica_and_nothing_with_it() -> None:
    rows = access_patterns.attack_rows(access_patterns.toy_encoder(), size="smoke", seed=0)
    reads = {(r["mode"], r["attacker"], r["attack"]): r for r in rows}
    plain = reads[("store-index", "inserter-20", "guess-query-topic")]
    assert plain["mean_data_reads"] == 100 and plain["value"] >= 0.9  # the leak the option closes
    for r in rows:
        if r["mode"] == "store-index-replica" and r["attack"] != "guess-note-from-write-sizes":
            assert r["mean_data_reads"] == 0 and r["distinct_request_logs"] == 1
            assert r["x_chance"] == pytest.approx(1.0)
    writes = [r for r in rows if r["attack"] == "guess-note-from-write-sizes"]
    assert len(writes) == 2 and writes[0]["value"] == writes[1]["value"]  # the replica changes no write


def test_costs_measure_both_modes(tmp_path: Path) -> None:
    rows = cost_rows([600], seed=0, n_queries=5)
    assert [r["mode"] for r in rows] == ["store-index", "store-index-replica"]
    assert rows[1]["replica_records"] == 600 + 1_000 and rows[1]["replica_pending"] == 0  # the other writer's too
    assert rows[0]["replica_records"] == 0 and all(r["p50_ms"] > 0 for r in rows)
    doc = {"size": "smoke", "command": "-", "about": "-", "attacks": [], "costs": rows, "verdict": ["-"]}
    md = access_patterns.render_markdown(doc)
    assert "store-index-replica" in md and json.dumps(rows)
