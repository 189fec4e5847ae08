"""Smoke test of ``python -m benchmarks.privacy.frontier --smoke``: structure, not numbers.

Checks the rows (the issue's fields, none and floor rows per corpus, the adaptive attacker where the
plan puts it), that every bisection lands within its tolerance on the smoke data, that a second run
is served from the cache, and the re-rendering. Skips without the benchmark datasets.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks.privacy.frontier import __main__ as frontier

FIELDS = {"mechanism", "ndcg_target", "ndcg10", "attacker", "pairs", "corpus", "content_f1", "pii_entity_recovery"}
METRICS = {"strength", "perturbation_norm", "bleu", "token_f1", "keyword_f1"}


@pytest.fixture(scope="module")
def data_dir() -> Path:
    from textcrafter_rag.data import find_data_dir

    d = find_data_dir()
    if d is None or not (d / "scifact").is_dir() or not (d / "wikitext2").is_dir():
        pytest.skip("benchmark datasets not found (set TEXTCRAFTER_DATA or provide ../shared/datasets)")
    return d


def test_frontier_smoke(data_dir: Path, tmp_path: Path) -> None:
    argv = [
        "--smoke",
        "--no-progress",
        "--targets",
        "0.9",
        "0.8",
        "--corpora",
        "scifact",
        "pii",
        "--data-dir",
        str(data_dir),
        "--out-dir",
        str(tmp_path / "out"),
        "--cache-dir",
        str(tmp_path / "cache"),
    ]
    assert frontier.main(argv) == 0
    doc = json.loads((tmp_path / "out" / "frontier_smoke.json").read_text())
    meta, rows = doc["meta"], doc["rows"]
    assert meta["benchmark"] == "frontier" and meta["size"] == "smoke" and meta["best"] == "textcrafter"
    for r in rows:
        assert set(r) >= FIELDS, FIELDS - set(r)
        assert all(
            not isinstance(v, (dict, list)) and (not isinstance(v, float) or math.isfinite(v)) for v in r.values()
        )
    corpora = ("scifact", "pii")  # wikitext takes the same path as scifact (and privacy.py's)
    for c in corpora:
        assert [r["mechanism"] for r in rows if r["corpus"] == c].count("none") == 1
        assert [r["mechanism"] for r in rows if r["corpus"] == c].count("floor") == 1
    measured = [r for r in rows if r["ndcg_target"] is not None]
    assert all(set(r) >= METRICS for r in measured)
    # non-adaptive at every point; adaptive at 0.9 for both, at 0.8 for gaussian and the best candidate
    got = {(r["mechanism"], r["ndcg_target"], r["attacker"], r["corpus"]) for r in measured}
    want = {(m, t, "non-adaptive", c) for m in ("gaussian", "textcrafter") for t in (0.9, 0.8) for c in corpora}
    want |= {(m, t, "adaptive", c) for m in ("gaussian", "textcrafter") for t in (0.9, 0.8) for c in corpora}
    assert got == want
    assert all(r["pairs"] > 0 for r in measured if r["attacker"] == "adaptive")
    assert all(r["pairs"] == 0 for r in rows if r["attacker"] != "adaptive")
    pii = [r for r in rows if r["corpus"] == "pii" and r["mechanism"] != "floor"]
    assert all(0 <= r["pii_entity_recovery"] <= 100 for r in pii)
    assert all(r["pii_entity_recovery"] is None for r in rows if r["corpus"] != "pii")
    # the bisection lands within its tolerance, and the rows carry the NDCG it found
    points = meta["points"]
    assert len(points) == 4 and all(abs(p["ratio"] - p["target"]) <= p["tolerance"] for p in points)
    assert all(abs(r["ndcg10"] / meta["clean_ndcg10"] - r["ndcg_target"]) <= meta["tolerance"] for r in measured)
    md = (tmp_path / "out" / "frontier_smoke.md").read_text()
    assert md.startswith("# ") and "vs Gaussian" in md and (tmp_path / "out" / "frontier_smoke.png").is_file()

    # everything is cached: a second run measures nothing and gives the same rows
    assert frontier.main([*argv, "--max-minutes", "0"]) == 0
    again = json.loads((tmp_path / "out" / "frontier_smoke.json").read_text())
    assert again["meta"]["not_measured"] == []
    assert [r["content_f1"] for r in again["rows"]] == [r["content_f1"] for r in rows]

    rr = tmp_path / "rerender"
    assert frontier.main(["--from-json", str(tmp_path / "out" / "frontier_smoke.json"), "--out-dir", str(rr)]) == 0
    assert (rr / "frontier_smoke.md").read_text() == (tmp_path / "out" / "frontier_smoke.md").read_text()


def test_help_names_the_module_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        frontier.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m benchmarks.privacy.frontier") and "--max-minutes" in out


def test_missing_data_dir_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert frontier.main(["--smoke", "--data-dir", str(tmp_path / "nope"), "--out-dir", str(tmp_path)]) == 2
    assert "benchmark datasets not found" in capsys.readouterr().err
