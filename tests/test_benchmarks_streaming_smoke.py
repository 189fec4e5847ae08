"""Smoke test for ``python -m benchmarks.speed.streaming_memory`` at its ``--smoke`` size, into a tmp dir."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks.speed import streaming_memory


def test_streaming_memory_smoke(tmp_path: Path) -> None:
    pytest.importorskip("psutil")
    pytest.importorskip("pyarrow")
    rc = streaming_memory.main(["--smoke", "--no-progress", "--out-dir", str(tmp_path), "--tmp-dir", str(tmp_path)])
    assert rc == 0
    doc = json.loads((tmp_path / "streaming_memory_smoke.json").read_text())
    assert set(doc) == {"meta", "rows"}
    meta, rows = doc["meta"], doc["rows"]
    assert meta["benchmark"] == "streaming_memory" and meta["size"] == "smoke" and meta["limit_mb"] == 1024
    assert meta["command"].startswith("python -m benchmarks.speed.streaming_memory --smoke")
    assert {"platform", "cpu_count", "torch"} <= set(meta["machine"])
    assert {r["format"] for r in rows} == {"npy", "parquet", "jsonl"}
    for r in rows:
        for k, v in r.items():
            assert not isinstance(v, (dict, list)), f"row not flat: {k}"
            if isinstance(v, float):
                assert math.isfinite(v), (k, r)
        assert r["result"] == ("pass" if r["peak_rss_mb"] < r["limit_mb"] else "fail")
        assert 100 < r["peak_rss_mb"] < r["limit_mb"]  # a real process with torch loaded, under the limit
        # The 20 ms poller is a cross-check that may see nothing on a busy machine: no timing assertion on it.
        assert r["peak_rss_mb_polled"] >= 0 and r["vectors_per_s"] > 0 and r["n_vectors"] > 0
        assert abs(r["perturbation_norm"] - 1.0) < 1e-3  # the output was complete and protected
    assert (tmp_path / "streaming_memory_smoke.md").read_text().startswith("# ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["streaming_memory_smoke.json", "streaming_memory_smoke.md"]
