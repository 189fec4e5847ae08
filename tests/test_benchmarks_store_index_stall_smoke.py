"""Smoke test of ``benchmarks.sealed_search.store_index_stall``: one small index grown through compactions.

The checks fail when a size is not measured, when the compactions as it grows leave the log whole in the port, when
no write is timed during a compaction, or when a new process opened from the store misses an entry.
"""

from __future__ import annotations

import json

from benchmarks.sealed_search import store_index_stall


def test_the_index_grows_through_compactions_and_a_write_is_timed_during_one_at_each_size(tmp_path) -> None:
    assert store_index_stall.main(["--smoke", "--out-dir", str(tmp_path), "--no-progress"]) == 0
    rows = json.loads((tmp_path / "store_index_stall_smoke.json").read_text())["rows"]
    assert [r["n_records"] for r in rows] == [3_000, 30_000] and all(r["trained"] for r in rows)
    for r in rows:
        assert r["writes_during_compaction"] >= 1 and r["write_ms_longest_during_compaction"] > 0
        assert r["write_ms_median_alone"] > 0 and r["index_bytes_taken_ms"] > 0 and r["snapshot_mb"] > 0
        assert r["fresh_open_from_snapshot"] and r["fresh_open_finds_all"]
        assert r["write_within_target"] is (r["write_ms_longest_during_compaction"] <= store_index_stall.TARGET_MS)
    # compacted every 8,000 entries as it grew, and once at the size: the port never held the whole log (one
    # segment a 2,000-entry add), only the empty segment naming the last snapshot
    assert rows[-1]["log_segments_held"] == 1
    md = (tmp_path / "store_index_stall_smoke.md").read_text()
    assert md.startswith("# ") and "longest write during a compaction, ms" in md and "it finds every entry" in md
