"""Smoke test of ``benchmarks/ray_throughput.py`` at its ``--smoke`` size, into a tmp dir (needs Ray)."""

from __future__ import annotations

import importlib
import json
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
META_KEYS = {"benchmark", "size", "seeds", "encoder", "dimension", "normalisation", "machine", "date", "command",
             "attack_config", "ray", "n_vectors", "workers", "batch_sizes"}


def test_ray_throughput_smoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray.data")
    monkeypatch.setenv("TEXTCRAFTER_BENCH_THREADS", "1")
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    mod = importlib.import_module("ray_throughput")
    assert mod.main(["--smoke", "--no-progress", "--out-dir", str(tmp_path)]) == 0

    doc = json.loads((tmp_path / "ray_throughput_smoke.json").read_text())
    assert set(doc) == {"meta", "rows"}
    meta, rows = doc["meta"], doc["rows"]
    assert META_KEYS <= set(meta), META_KEYS - set(meta)
    assert meta["benchmark"] == "ray_throughput" and meta["size"] == "smoke" and meta["ray"]["cluster"] == "local"
    assert meta["workers"] == [2] and meta["n_vectors"] == 4096
    for r in rows:
        for k, v in r.items():
            assert not isinstance(v, (dict, list)), f"row not flat: {k}"
            if isinstance(v, float):
                assert math.isfinite(v), (k, r)
        assert r["defense"] == "textcrafter" and r["n_vectors"] == 4096 and r["vectors_per_s"] > 0
    assert [(r["mode"], r["workers"], r["batch_size"]) for r in rows] == [("single_process", 1, 1024),
                                                                          ("ray_data", 2, 1024)]
    single, ray_row = rows
    assert single["perturbation_norm"] == pytest.approx(1.0, abs=1e-5)
    assert ray_row["perturbation_norm"] == pytest.approx(1.0, abs=1e-5) and ray_row["max_norm_error"] < 1e-4
    assert ray_row["speedup_vs_single_process"] == pytest.approx(ray_row["vectors_per_s"] / single["vectors_per_s"])
    md = (tmp_path / "ray_throughput_smoke.md").read_text()
    assert md.startswith("# Ray Data throughput (smoke)") and "| ray_data | 2 | 1024 | 4096 |" in md
    assert (tmp_path / "ray_throughput_smoke.png").stat().st_size > 0
