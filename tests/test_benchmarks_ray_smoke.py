"""Smoke test of ``python -m benchmarks.speed.ray_throughput`` at its ``--smoke`` size, into a tmp dir (needs Ray).

The benchmark runs as a subprocess, exactly as documented, so that the Ray instance it starts and
shuts down is its own and not shared with other tests in this process. Nothing here depends on
timing or on how Ray schedules the batches: only the configuration, the row schema and the
correctness checks (every id once, every norm == eps) are asserted.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
META_KEYS = {
    "benchmark",
    "size",
    "seeds",
    "encoder",
    "dimension",
    "normalisation",
    "machine",
    "date",
    "command",
    "attack_config",
    "ray",
    "n_vectors",
    "workers",
    "batch_sizes",
}


def test_ray_throughput_smoke(tmp_path: Path) -> None:
    pytest.importorskip("ray.data")
    env = dict(os.environ, TEXTCRAFTER_BENCH_THREADS="1")
    args = ["--smoke", "--no-progress", "--out-dir", str(tmp_path)]
    cmd = [sys.executable, "-m", "benchmarks.speed.ray_throughput", *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    doc = json.loads((tmp_path / "ray_throughput_smoke.json").read_text())
    assert set(doc) == {"meta", "rows"}
    meta, rows = doc["meta"], doc["rows"]
    assert set(meta) >= META_KEYS, META_KEYS - set(meta)
    assert meta["benchmark"] == "ray_throughput" and meta["size"] == "smoke" and meta["ray"]["cluster"] == "local"
    assert meta["workers"] == [2] and meta["n_vectors"] == 4096
    assert meta["command"] == " ".join(["python -m benchmarks.speed.ray_throughput", *args])
    for r in rows:
        for k, v in r.items():
            assert not isinstance(v, (dict, list)), f"row not flat: {k}"
            if isinstance(v, float):
                assert math.isfinite(v), (k, r)
        assert r["mechanism"] == "textcrafter" and r["n_vectors"] == 4096 and r["vectors_per_s"] > 0
    assert [(r["mode"], r["workers"], r["batch_size"]) for r in rows] == [
        ("single_process", 1, 1024),
        ("ray_data", 2, 1024),
    ]
    single, ray_row = rows
    assert single["perturbation_norm"] == pytest.approx(1.0, abs=1e-5)
    assert ray_row["perturbation_norm"] == pytest.approx(1.0, abs=1e-5) and ray_row["max_norm_error"] < 1e-4
    assert ray_row["speedup_vs_single_process"] == pytest.approx(ray_row["vectors_per_s"] / single["vectors_per_s"])
    md = (tmp_path / "ray_throughput_smoke.md").read_text()
    assert md.startswith("# Ray Data throughput (smoke)") and "| ray_data | 2 | 1024 | 4096 |" in md
    assert (tmp_path / "ray_throughput_smoke.png").stat().st_size > 0
