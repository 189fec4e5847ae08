"""Smoke test of ``python -m benchmarks.threat_models --smoke``: structure of the matrix, never its numbers.

Skips when the benchmark datasets are absent. Checks that every (protection, attacker) cell is present
with a status, that finished keyed cells carry key-recovery metrics, that retrieval is measured per
protection, that the floor row and the generated summary are there, that a second run is served from
the cache, and that ``--from-json`` re-renders the same Markdown.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.threat_models import __main__ as threat_models
from textcrafter_rag.data import find_data_dir


@pytest.fixture(scope="module")
def data_dir() -> Path:
    d = find_data_dir()
    if d is None or not (d / "scifact").is_dir() or not (d / "ag_news").is_dir():
        pytest.skip("benchmark datasets not found (set TEXTCRAFTER_DATA or provide ../shared/datasets)")
    return d


def test_threat_models_smoke(tmp_path: Path, data_dir: Path) -> None:
    argv = ["--smoke", "--no-progress", "--data-dir", str(data_dir), "--cache-dir", str(tmp_path / "cache")]
    assert threat_models.main([*argv, "--out-dir", str(tmp_path / "a")]) == 0
    doc = json.loads((tmp_path / "a" / "threat_models_smoke.json").read_text())
    meta, rows = doc["meta"], doc["rows"]
    assert meta["benchmark"] == "threat_models" and meta["size"] == "smoke" and meta["pending"] == 0
    cols = meta["columns"]
    assert cols[0].startswith("store only") and cols[-2:] == [
        "query access (adaptive)",
        "query access (un-key, then adapt)",
    ]
    assert any(c.startswith("store + 10 pairs") for c in cols)
    cells = [r for r in rows if r["family"] != "floor"]
    protections = list(dict.fromkeys(r["protection"] for r in cells))
    assert (
        protections[0] == "none" and protections[1].startswith("Gaussian") and protections[2].startswith("TextCrafter")
    )
    assert "key (rotation)" in protections and any(p.startswith("key + TextCrafter") for p in protections)
    assert {"key + whitening", "shuffle + noise af 1", "IronCore DCPE af 2.5"} <= set(protections)
    assert len(cells) == len(protections) * len(cols)  # every cell has a row, done or not
    assert {(r["protection"], r["attacker"]) for r in cells} == {(p, c) for p in protections for c in cols}
    for r in cells:
        status = r["status"]
        assert status == "done" or status.startswith(("unavailable", "n/a")), r
        if status == "done":
            assert 0.0 <= r["content_f1"] <= 100.0 and "bleu" in r and "token_f1" in r
            assert r["ndcg10"] is not None and r["ndcg10_key_only_queries"] is not None
        if status == "done" and r["family"] in ("rotation", "permutation") and r["column"] != "query":
            assert {"key_mean_cosine", "key_centered_cosine", "key_relative_frobenius", "unkeyed_cosine"} <= set(r)
        if r["column"] == "unkey":  # the composite attacker runs exactly where there is a key to recover
            if r["family"] not in ("rotation", "permutation"):
                assert status.startswith("n/a"), r
            elif status == "done":
                assert r["key_pairs"] == 64, r
            else:  # only the optional AGPL extra may be missing (CI installs without it)
                assert status.startswith("unavailable") and r["protection"].startswith("IronCore"), r
    floor = [r for r in rows if r["family"] == "floor"]
    assert len(floor) == 1 and "content_f1" in floor[0]
    md = (tmp_path / "a" / "threat_models_smoke.md").read_text()
    assert md.startswith("# Threat models") and "## Which protection for which threat" in md

    # all cells cached: a second run measures nothing new and renders the same tables
    assert threat_models.main([*argv, "--out-dir", str(tmp_path / "b")]) == 0
    again = json.loads((tmp_path / "b" / "threat_models_smoke.json").read_text())["rows"]
    assert [(r["protection"], r["attacker"], r.get("content_f1")) for r in again] == [
        (r["protection"], r["attacker"], r.get("content_f1")) for r in rows
    ]
    out = tmp_path / "c"
    assert (
        threat_models.main(["--from-json", str(tmp_path / "a" / "threat_models_smoke.json"), "--out-dir", str(out)])
        == 0
    )
    assert (out / "threat_models_smoke.md").read_text() == md
