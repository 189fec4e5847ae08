"""Smoke tests for the benchmark scripts: each ``main([...])`` at its ``--smoke`` size into a tmp dir.

Checks the results schema (``meta`` + non-empty flat ``rows``), that metric values are finite, and
the exit code 2 on a missing data directory. Skips when the benchmark datasets are absent.
"""

from __future__ import annotations

import importlib
import json
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
META_KEYS = {"benchmark", "size", "seeds", "encoder", "dimension", "normalisation", "machine", "date", "command",
             "attack_config"}
METRIC_KEYS = {"accuracy", "macro_f1", "recall@1", "recall@10", "mrr@10", "ndcg@10", "vectors_per_s",
               "perturbation_norm", "fit_seconds", "bleu"}


def _bench(name: str):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(name)


@pytest.fixture(scope="module")
def data_dir() -> Path:
    from textcrafter_rag.data import find_data_dir

    d = find_data_dir()
    if d is None or not (d / "scifact").is_dir():
        pytest.skip("benchmark datasets not found (set TEXTCRAFTER_DATA or provide ../shared/datasets)")
    return d


@pytest.fixture(scope="module")
def bench_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bench-cache")


def _check(path: Path, *, benchmark: str) -> list[dict]:
    doc = json.loads(path.read_text())
    assert set(doc) == {"meta", "rows"}
    meta, rows = doc["meta"], doc["rows"]
    assert META_KEYS <= set(meta), META_KEYS - set(meta)
    assert meta["benchmark"] == benchmark and meta["size"] == "smoke"
    assert {"platform", "cpu_count", "torch"} <= set(meta["machine"])
    assert rows, "no rows"
    for r in rows:
        assert "defense" in r
        for k, v in r.items():
            assert not isinstance(v, (dict, list)), f"row not flat: {k}"
            if isinstance(v, float):
                assert math.isfinite(v), (k, r)
        assert any(k in METRIC_KEYS and isinstance(r[k], (int, float)) for k in r), r
    assert path.with_suffix(".md").read_text().startswith("# ")
    return rows


def test_retrieval_smoke(tmp_path: Path, data_dir: Path, bench_cache: Path) -> None:
    mod = _bench("retrieval")
    rc = mod.main(["--smoke", "--no-privacy", "--no-progress", "--data-dir", str(data_dir), "--out-dir", str(tmp_path),
                   "--cache-dir", str(bench_cache)])
    assert rc == 0
    rows = _check(tmp_path / "retrieval_smoke.json", benchmark="retrieval")
    assert {r["scenario"] for r in rows} == {"clean", "protected_docs", "protected_docs_queries"}
    assert {r["index"] for r in rows} == {"flat", "hnsw"}
    clean = next(r for r in rows if r["scenario"] == "clean" and r["index"] == "flat")
    assert clean["perturbation_norm"] == 0.0 and clean["ndcg@10"] > 0
    assert (tmp_path / "retrieval_smoke.png").is_file()


def test_utility_smoke(tmp_path: Path, data_dir: Path, bench_cache: Path) -> None:
    mod = _bench("utility")
    rc = mod.main(["--smoke", "--no-progress", "--datasets", "financial_phrasebank", "sst2", "--data-dir", str(data_dir),
                   "--out-dir", str(tmp_path), "--cache-dir", str(bench_cache)])
    assert rc == 0
    rows = _check(tmp_path / "utility_smoke.json", benchmark="utility")
    assert {r["scenario"] for r in rows} == {"development", "deployment"}
    assert {r["dataset"] for r in rows} == {"financial_phrasebank", "sst2"}
    assert all(0 <= r["accuracy"] <= 100 for r in rows)
    assert list(tmp_path.glob("utility_smoke_*.png"))


def test_speed_smoke(tmp_path: Path, data_dir: Path, bench_cache: Path) -> None:
    mod = _bench("speed")
    rc = mod.main(["--smoke", "--no-progress", "--data-dir", str(data_dir), "--out-dir", str(tmp_path),
                   "--cache-dir", str(bench_cache)])
    assert rc == 0
    rows = _check(tmp_path / "speed_smoke.json", benchmark="speed")
    kinds = {r["kind"] for r in rows}
    assert kinds == {"encode", "protect", "fit"}
    tc = [r for r in rows if r["kind"] == "protect" and r["defense"] == "textcrafter"]
    assert tc and all(abs(r["perturbation_norm"] - 2.5) < 1e-3 for r in tc)


@pytest.mark.parametrize("name", ["retrieval", "utility", "speed"])
def test_missing_data_dir_exits_2(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mod = _bench(name)
    rc = mod.main(["--smoke", "--data-dir", str(tmp_path / "nope"), "--out-dir", str(tmp_path)])
    assert rc == 2
    assert "benchmark datasets not found" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.json"))


def test_privacy_smoke(data_dir: Path, bench_cache: Path, tmp_path: Path) -> None:
    mod = _bench("privacy")
    code = mod.main(["--smoke", "--no-progress", "--data-dir", str(data_dir), "--out-dir", str(tmp_path),
                     "--cache-dir", str(bench_cache)])
    assert code == 0
    rows = _check(tmp_path / "privacy_smoke.json", benchmark="privacy")
    labels = {(r["defense_label"], r["attacker"].startswith("adaptive")) for r in rows}
    assert ("none", False) in labels and ("textcrafter:eps=1", True) in labels
    adaptive = [r for r in rows if r["attacker"].startswith("adaptive")]
    assert all(r["n_pairs"] == r["pairs_seen"] > 0 for r in adaptive)
    assert all("floor_content_f1" in r for r in rows)
