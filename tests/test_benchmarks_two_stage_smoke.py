"""Smoke test of ``python -m benchmarks.two_stage`` at its ``--smoke`` size, and checks of its building blocks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks.two_stage import run
from benchmarks.two_stage.report import ISSUE_KEYS
from benchmarks.two_stage.search import SealedVectors, evaluate_two_stage, fetch_candidates
from benchmarks.two_stage.tables import REFERENCE
from benchmarks.two_stage.utility import Corpus, one_stage_strength


@pytest.fixture(scope="module")
def data_dir() -> Path:
    from textcrafter_rag.data import find_data_dir

    d = find_data_dir()
    if d is None or not (d / "scifact").is_dir():
        pytest.skip("benchmark datasets not found (set TEXTCRAFTER_DATA or provide ../shared/datasets)")
    return d


def test_two_stage_smoke(tmp_path: Path, data_dir: Path) -> None:
    args = ["--smoke", "--no-progress", "--data-dir", str(data_dir), "--out-dir", str(tmp_path)]
    args += ["--cache-dir", str(tmp_path / "cache")]
    assert run.main(args) == 0
    doc = json.loads((tmp_path / "two_stage_smoke.json").read_text())
    meta, rows = doc["meta"], doc["rows"]
    assert meta["benchmark"] == "two_stage" and meta["parts_missing"] == []
    assert {r["part"] for r in rows} >= {"utility", "encoding", "scale", "averaging", "privacy", "cost", "engines"}
    engines = [r for r in rows if r["part"] == "engines"]
    assert {(r["engine"], r["mode"]) for r in engines} == {
        ("qdrant", "single-stage"),
        ("qdrant", "two-stage"),
        ("qdrant", "two-stage, rounds to recall 0.95 (default)"),
    }
    assert all(r["latency_ms_p95"] >= r["latency_ms_p50"] > 0 for r in engines)
    for r in rows:
        assert set(ISSUE_KEYS) <= set(r)
        assert all(not isinstance(v, float) or math.isfinite(v) for v in r.values())
    util = [r for r in rows if r["part"] == "utility" and r["search"] == "two-stage"]
    clean = util[0]["clean_ndcg10"]
    # fetching every document and re-ranking by the sealed clean vectors is the clean search
    everything = [r for r in util if r["fetch_k"] == 64]
    assert everything and all(abs(r["ndcg10"] - clean) < 1e-6 for r in everything)
    assert {r["mechanism"] for r in rows if r["part"] == "privacy"} >= {"none", "gaussian", "floor"}
    # the rule's comparison: the single-stage Gaussian release at 0.95, attacked in the same run
    ref = [r for r in rows if r["part"] == "privacy" and r.get("reference") == REFERENCE]
    assert len(ref) == 1 and ref[0]["doc_strength"] == round(meta["parts"]["privacy"]["reference"]["doc_strength"], 4)
    assert meta["parts"]["privacy"]["parity"] is False
    assert (tmp_path / "two_stage_smoke.md").read_text().startswith("# ")
    assert (tmp_path / "two_stage_smoke.png").is_file()
    # a second run reports the cached parts without measuring them again
    before = (tmp_path / "two_stage_smoke.json").read_text()
    assert run.main([*args, "--parts", "utility"]) == 0
    after = json.loads((tmp_path / "two_stage_smoke.json").read_text())
    assert after["rows"] == json.loads(before)["rows"]
    # a saved clean inverter makes the privacy part the parity attacker, measured again (its own part cache)
    inverter = next(p for p in (tmp_path / "cache" / "attacks").glob("inverter-*") if (p / "config.json").is_file())
    assert run.main([*args, "--parts", "privacy", "--inverter", str(inverter), "--adapt-pairs", "8"]) == 0
    parity = json.loads((tmp_path / "two_stage_smoke.json").read_text())["meta"]["parts"]["privacy"]
    assert parity["parity"] is True and parity["adaptive_pairs"] == 8
    assert parity["attacker"].startswith("parity attacker: clean inverter") and inverter.name in parity["attacker"]
    assert "Attacker at parity" in (tmp_path / "two_stage_smoke.md").read_text()


def test_one_stage_strength_finds_the_strength_that_keeps_the_ratio() -> None:
    rng = np.random.default_rng(0)
    docs = rng.standard_normal((300, 16)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = docs[:60] + 0.3 * rng.standard_normal((60, 16)).astype(np.float32)
    ids = [f"d{i}" for i in range(300)]
    corpus = Corpus(
        doc_ids=ids,
        query_ids=[f"q{i}" for i in range(60)],
        qrels={f"q{i}": {f"d{i}"} for i in range(60)},
        docs=docs,
        queries=queries,
    )
    loose, kept_loose = one_stage_strength(corpus, ratio=0.6, seed=0)
    tight, kept_tight = one_stage_strength(corpus, ratio=0.95, seed=0)
    assert kept_loose >= 0.6 and kept_tight >= 0.95
    assert 0 < tight < loose
    assert one_stage_strength(corpus, ratio=0.95, seed=0) == (tight, kept_tight)


def test_rerank_of_every_candidate_restores_the_clean_ranking() -> None:
    rng = np.random.default_rng(0)
    docs = rng.standard_normal((50, 8)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = docs[:5] + 0.1 * rng.standard_normal((5, 8)).astype(np.float32)
    noisy = docs + 3.0 * rng.standard_normal((50, 8)).astype(np.float32)
    ids, qids = [f"d{i}" for i in range(50)], [f"q{i}" for i in range(5)]
    qrels = {f"q{i}": {f"d{i}"} for i in range(5)}
    stage = fetch_candidates(noisy, queries, max_k=50)
    got = evaluate_two_stage(
        stage,
        SealedVectors.of(docs, encoding="float32"),
        queries,
        doc_ids=ids,
        query_ids=qids,
        qrels=qrels,
        fetch_ks=(50,),
    )
    clean = evaluate_two_stage(
        fetch_candidates(docs, queries, max_k=50),
        SealedVectors.of(docs, encoding="float32"),
        queries,
        doc_ids=ids,
        query_ids=qids,
        qrels=qrels,
        fetch_ks=(50,),
    )
    assert got[50]["ndcg10"] == pytest.approx(clean[50]["single_stage_ndcg10"])
    assert got[50]["recall_at_fetch_k"] == 100.0
