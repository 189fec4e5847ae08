"""Smoke test of ``benchmarks.sealed_search`` on synthetic data: no datasets, no model, deterministic.

A toy encoder (a fixed random vector per word, summed and normalised) stands in for MiniLM: two texts that
differ in one field get different vectors, the same text the same vector. The battery and the scale grid run
end to end through the core, and the checks are ones that fail when an attack or a mode is broken: on clean
vectors guessing is (near) perfect, the key holder and the inserter find the disease under the candidate mode's
deterministic noise, the rotation stops the thief, and the index mode's vectors tell nothing.
"""

from __future__ import annotations

import json
import re
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from _retrieval_helpers import clustered_vectors

from benchmarks.sealed_search.battery_store import SEARCH_K, HeldWorld
from benchmarks.sealed_search.distractors import cluster_distractors
from benchmarks.sealed_search.modes import make_mode
from benchmarks.sealed_search.report import verdict_rows
from benchmarks.sealed_search.run import BatteryConfig, Corpus, measure, write_report
from benchmarks.sealed_search.scale import ScaleConfig
from textcrafter_rag.sealed.layout import LOG_FIELD
from textcrafter_rag.sealed.store_index import EXACT_EXTRA

DIM = 48


def toy_encode(texts: list[str]) -> np.ndarray:
    """A bag of fixed random word vectors (crc32-seeded), unit norm: deterministic, any text."""
    out = np.zeros((len(texts), DIM), dtype=np.float64)
    for i, text in enumerate(texts):
        for word in re.findall(r"\w+", text.lower()):
            out[i] += np.random.default_rng(zlib.crc32(word.encode())).standard_normal(DIM)
    return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def synthetic_corpus(n_docs: int = 240, n_queries: int = 24, seed: int = 0) -> Corpus:
    docs, queries, rel = clustered_vectors(
        np.random.default_rng(seed), n_docs=n_docs, n_queries=n_queries, dim=DIM, centers=6, query_noise=0.3
    )
    doc_ids = [f"d{i}" for i in range(n_docs)]
    query_ids = [f"q{i}" for i in range(n_queries)]
    qrels = {q: {doc_ids[r]} for q, r in zip(query_ids, rel)}
    return Corpus(doc_ids, docs.astype(np.float32), query_ids, queries.astype(np.float32), qrels, "synthetic docs")


BATTERY = BatteryConfig(
    n_members=24, n_others=60, n_queries=16, n_variants=2, pair_counts=(40, 200), insert_budgets=(20, 60)
)
SCALE = ScaleConfig(
    sizes=(240, 1200),
    fetch_ks=(20, 1200),
    index=((8, 30),),
    n_timed=3,
    n_clusters=4,
    train_at=256,
    kinds=("clustered", "real"),
    real=300,
)
#: Stand-ins for the real out-of-domain sentences of the ``real`` kind.
OTHER_TEXTS = [f"market report {i} on shares of company {i % 17} and rates" for i in range(300)]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], dict, Path]:
    corpus = synthetic_corpus()
    corpus.distractor_texts = OTHER_TEXTS
    rows, meta = [], {}
    for part in ("battery", "scale"):
        got, m = measure(
            part, corpus, battery=BATTERY, scale=SCALE, app_encode=toy_encode, attacker_encode=toy_encode, seed=0
        )
        rows += got
        meta[part] = m
    out = tmp_path_factory.mktemp("sealed-search")
    full_meta = {
        "command": "python -m benchmarks.sealed_search --smoke",
        "date": "today",
        "size": "smoke",
        "machine": {"cpu_count": 1},
        "parts": ["battery", "scale"],
        "battery": meta["battery"],
        "scale": meta["scale"],
        "not_covered": ["everything real"],
    }
    write_report(rows, full_meta, out=out, size="smoke")
    return rows, full_meta, out


def _acc(rows: list[dict], mode: str, attacker: str, attack: str) -> float:
    got = [r["value"] for r in rows if (r.get("mode"), r.get("attacker"), r.get("attack")) == (mode, attacker, attack)]
    assert len(got) == 1, (mode, attacker, attack)
    return got[0]


def test_battery_covers_every_mode_attacker_and_attack(results: tuple[list[dict], dict, Path]) -> None:
    rows = [r for r in results[0] if r["part"] == "battery"]
    modes = {r["mode"] for r in rows}
    assert modes == {
        "none",
        "candidates-norot",
        "candidates",
        "index",
        "index-open1000",
        "store-index",
        "store-index-replica",
        "store-index-compacted",
    }
    for mode in modes:
        got = {(r["attacker"], r["attack"]) for r in rows if r["mode"] == mode}
        for attacker in ("thief", "pairs-40", "pairs-200", "inserter-20", "inserter-60", "key-holder"):
            for attack in ("guess-disease", "guess-city", "guess-name", "query-guess-disease", "membership"):
                assert (attacker, attack) in got, (mode, attacker, attack)
        assert ("inserter-20", "access-pattern") in got and ("pairs-200", "access-pattern") in got


def test_guessing_can_succeed_and_can_be_stopped(results: tuple[list[dict], dict, Path]) -> None:
    rows = results[0]
    # clean vectors: the attacker's own embedding of the right guess is the stored vector
    assert _acc(rows, "none", "thief", "guess-disease") >= 0.95
    assert _acc(rows, "none", "thief", "membership") >= 0.95
    # the candidates' noise is a function of the text: recomputing it (key) or inserting the text finds a twin
    assert _acc(rows, "candidates", "key-holder", "guess-disease") >= 0.95
    assert _acc(rows, "candidates", "inserter-20", "guess-disease") >= 0.95
    assert _acc(rows, "candidates", "inserter-20", "membership") >= 0.95
    # without the rotation the thief compares directly and beats chance by far; with it, it does not
    assert _acc(rows, "candidates-norot", "thief", "guess-disease") >= 0.2
    assert _acc(rows, "candidates", "thief", "guess-disease") <= 0.25
    # the index mode's vectors are keyed random: the key holder's recomputation says nothing about the text
    for attacker in ("thief", "pairs-200", "inserter-60", "key-holder"):
        for mode in ("index", "store-index", "store-index-replica"):
            assert _acc(rows, mode, attacker, "guess-disease") <= 0.25, (mode, attacker)
            assert _acc(rows, mode, attacker, "membership") <= 0.75, (mode, attacker)


def test_the_store_held_modes_are_attacked_in_a_real_store(results: tuple[list[dict], dict, Path]) -> None:
    rows = [r for r in results[0] if r.get("part") == "battery"]
    access = {(r["mode"], r["attacker"]): r for r in rows if r["attack"] == "access-pattern"}
    # without the replica each query has the store read its best k and EXACT_EXTRA more (the index is exact at
    # this size), and an inserter whose own records are read learns the disease; with the replica no query has
    # the store read a record it ranked
    assert access[("store-index", "pairs-200")]["store_reads_per_query"] == SEARCH_K + EXACT_EXTRA
    assert access[("store-index", "inserter-20")]["own_opened_share"] == 1.0
    assert access[("store-index", "inserter-20")]["value"] >= 0.5
    assert access[("store-index-replica", "pairs-200")]["store_reads_per_query"] == 0
    # the replica's sync reads an inserter's new records at the next query, all of them, whatever it asks
    for b in (20, 60):
        assert access[("store-index-replica", f"inserter-{b}")]["value"] <= 0.25


def test_scale_rows_and_ratios(results: tuple[list[dict], dict, Path]) -> None:
    rows = [r for r in results[0] if r["part"] == "scale" and r["distractors"] != "real"]
    assert {r["n_records"] for r in rows} == {240, 1200}
    for r in rows:
        assert 0.0 <= r["ndcg_ratio"] <= 1.5 and r["app_ms_p95"] >= r["app_ms_p50"] >= 0.0
    # fetching every record and ranking exactly is the clean search
    everything = [r for r in rows if r["mode"] == "candidates" and r["fetch_k"] == 1200 and r["n_records"] == 1200]
    assert everything and abs(everything[0]["ndcg_ratio"] - 1.0) < 1e-9
    index = [r for r in rows if r["mode"] == "index"]
    assert {r["trained"] for r in index} == {False, True}  # exact below train_at, PQ codes after
    assert all(r["app_vector_bytes_per_record"] == 8 for r in index if r["trained"])
    assert all(r["app_bytes_per_record_measured"] > r["app_vector_bytes_per_record"] for r in index)


def test_verdict_marks_what_fails(results: tuple[list[dict], dict, Path]) -> None:
    verdicts = verdict_rows(results[0])
    by = {(v["target"], v["mode"]): v for v in verdicts}
    store_side = "every store-side attacker: guessing (notes pooled, queries) <= 1.2x chance"
    assert by[(store_side, "none")]["met"] == "not met"
    assert by[(store_side, "candidates")]["met"] == "not met"  # the inserter's twin
    assert "inserter" in by[(store_side, "candidates")]["measured"]
    assert any(v["met"] == "not measured" for v in verdicts)  # the inverter row: not rerun, said so


def test_report_files(results: tuple[list[dict], dict, Path]) -> None:
    out = results[2]
    doc = json.loads((out / "sealed_search_smoke.json").read_text())
    assert set(doc) == {"meta", "rows"} and doc["rows"]
    md = (out / "sealed_search_smoke.md").read_text()
    assert md.startswith("# ") and "## Verdict" in md and "not met" in md
    assert (out / "sealed_search_smoke.png").stat().st_size > 1000


def test_cluster_distractors_keep_the_clusters() -> None:
    corpus = synthetic_corpus()
    fake = cluster_distractors(corpus.doc_vecs, 500, n_clusters=6, seed=0)
    assert fake.shape == (500, DIM) and np.allclose(np.linalg.norm(fake, axis=1), 1.0, atol=1e-5)
    best = (fake @ corpus.doc_vecs.T).max(axis=1)
    assert best.max() < 0.999  # no copies of real records
    # closer to the real records than random directions are
    rand = np.random.default_rng(1).standard_normal((500, DIM))
    rand /= np.linalg.norm(rand, axis=1, keepdims=True)
    assert best.mean() > (rand @ corpus.doc_vecs.T).max(axis=1).mean() + 0.1


def test_the_real_kind_adds_the_embedded_sentences_as_one_store_size(results) -> None:
    rows, _, out = results
    real = [r for r in rows if r.get("part") == "scale" and r["distractors"] == "real"]
    assert real and {r["n_records"] for r in real} == {240 + len(OTHER_TEXTS)}
    assert {r["mode"] for r in real} >= {"none", "candidates", "index"}
    assert "real out-of-domain sentences" in (out / "sealed_search_smoke.md").read_text()


def test_the_compacted_mode_leaves_snapshots_in_the_store_the_attackers_read() -> None:
    mode = make_mode("store-index-compacted", "compacted")
    assert mode.held is not None
    world = HeldWorld(mode.key, context=mode.context, options=mode.held)
    rng = np.random.default_rng(0)
    for start in range(0, 200, 20):
        world.write(rng.standard_normal((20, 16)).astype(np.float32), [f"r{i}" for i in range(start, start + 20)])
    kinds = Counter(r.fields.get(LOG_FIELD, "data") for r in world.port.records.values())
    assert kinds["snap"] >= 1 and kinds["seg"] < 10  # compacted: snapshots, and most segments deleted
    assert kinds["beacon"] == 1  # the recording store replaces, as Chroma's and Qdrant's do: one beacon
    assert len(world.library()) == kinds["snap"] + kinds["seg"] + kinds["head"] + 2  # all of it, beacon and marker
