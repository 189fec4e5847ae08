"""Smoke test of ``benchmarks.sealed_search.bulk_load``: 1,000 records through Ray Data into a ``chroma run``
server, with 1 and then 2 actors, checked by a fresh process; the checks fail when the load is broken (a record
not indexed, not stored, returned twice, or not found by its own vector; a log head missing for a writer).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("ray.data")
pytest.importorskip("langchain_chroma")

from benchmarks.common.reporting import write_results
from benchmarks.sealed_search.bulk_load import SIZES, run
from benchmarks.sealed_search.bulk_load_report import render_markdown


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    work_dir = tmp_path_factory.mktemp("bulk-load")
    return run(SIZES["smoke"], seed=0, progress=False, work_dir=work_dir, log=lambda m: None)


def test_every_record_is_loaded_once_indexed_stored_and_found(rows: list[dict]) -> None:
    assert [(r["n_records"], r["workers"]) for r in rows] == [(1_000, 1), (1_000, 2)]
    for r in rows:
        assert r["rows_out"] == r["unique_ids_out"] == r["n_records"]
        assert r["indexed"] == r["stored"] == r["n_records"]
        assert r["sample_found_top1"] == r["sample"] == 20 and r["dead"] == 0
        # one head a writer; whether Ray hands both actors a batch of so few is its scheduler's choice (the
        # langchain integration test forces two writers with a barrier)
        assert 1 <= r["writers"] == r["log_heads"] <= r["workers"]
        assert r["records_per_s"] > 0 and r["seconds"] >= r["s_to_first_output"] > 0
        assert r["actor_busy_s"] >= r["log_writes_s"] + r["record_writes_s"] > 0


def test_report_files(rows: list[dict], tmp_path: Path) -> None:
    meta = {"command": "python -m benchmarks.sealed_search.bulk_load --smoke", "date": "today", "config": {}}
    md = render_markdown(rows, meta)
    assert md.startswith("# ") and "## Records per second" in md and "**yes**" in md
    jp, mp = write_results("bulk_load", size="smoke", meta=meta, rows=rows, markdown=md, out_dir=tmp_path)
    assert set(json.loads(jp.read_text())) == {"meta", "rows"} and mp.read_text() == md.rstrip() + "\n"
