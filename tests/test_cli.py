from __future__ import annotations

import json

import numpy as np
import pytest

from textcrafter_rag.cli import main


@pytest.fixture(scope="module")
def quick_policy(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "policy"
    assert main(["fit", "--out", str(out), "--quick", "--no-progress", "--eps", "1.5"]) == 0
    return out


def test_fit_writes_a_loadable_policy(quick_policy) -> None:
    cfg = json.loads((quick_policy / "config.json").read_text())
    assert cfg["eps"] == 1.5 and cfg["provenance"]["quick"] is True
    assert cfg["encoder"]["model_id"] == "sentence-transformers/all-MiniLM-L6-v2"


def test_protect_npy_and_jsonl(quick_policy, tmp_path, minilm, capsys) -> None:
    x = minilm.encode(["The bank raised rates.", "John Smith lives in Leeds."])
    np.save(tmp_path / "in.npy", x)
    assert (
        main(
            [
                "protect",
                "--policy",
                str(quick_policy),
                "--input",
                str(tmp_path / "in.npy"),
                "--output",
                str(tmp_path / "out.npy"),
                "--chunk-size",
                "1",
            ]
        )
        == 0
    )
    y = np.load(tmp_path / "out.npy")
    np.testing.assert_allclose(np.linalg.norm(y - x, axis=1), 1.5, rtol=1e-5)
    (tmp_path / "in.jsonl").write_text('{"text": "The bank raised rates."}\n\n{"text": "John Smith lives in Leeds."}\n')
    assert (
        main(
            [
                "protect",
                "--policy",
                str(quick_policy),
                "--input",
                str(tmp_path / "in.jsonl"),
                "--output",
                str(tmp_path / "out2.npy"),
            ]
        )
        == 0
    )
    y2 = np.load(tmp_path / "out2.npy")
    np.testing.assert_allclose(np.linalg.norm(y2 - x, axis=1), 1.5, rtol=1e-4)
    assert "Protected 2 vectors" in capsys.readouterr().out


def test_protect_defaults_to_the_shipped_policy(tmp_path, minilm) -> None:
    x = minilm.encode(["The bank raised rates."])
    np.save(tmp_path / "in.npy", x)
    assert (
        main(["protect", "--input", str(tmp_path / "in.npy"), "--output", str(tmp_path / "out.npy"), "--secure"]) == 0
    )
    np.testing.assert_allclose(np.linalg.norm(np.load(tmp_path / "out.npy") - x, axis=1), 1.0, rtol=1e-5)


def test_protect_reports_bad_input_clearly(quick_policy, tmp_path, capsys) -> None:
    np.save(tmp_path / "bad.npy", np.ones((3, 10), dtype=np.float32))
    code = main(
        [
            "protect",
            "--policy",
            str(quick_policy),
            "--input",
            str(tmp_path / "bad.npy"),
            "--output",
            str(tmp_path / "o.npy"),
        ]
    )
    assert code == 2 and "dimension 10, expected 384" in capsys.readouterr().err
    assert not (tmp_path / "o.npy").exists()
    (tmp_path / "bad.jsonl").write_text('{"txt": 1}\n')
    code = main(
        [
            "protect",
            "--policy",
            str(quick_policy),
            "--input",
            str(tmp_path / "bad.jsonl"),
            "--output",
            str(tmp_path / "o.npy"),
        ]
    )
    assert code == 2 and "bad.jsonl:1 has no 'embedding' field" in capsys.readouterr().err
    code = main(
        [
            "protect",
            "--policy",
            str(quick_policy),
            "--input",
            str(tmp_path / "none.npy"),
            "--output",
            str(tmp_path / "o.npy"),
        ]
    )
    assert code == 2 and "does not exist" in capsys.readouterr().err
    code = main(["protect", "--input", str(tmp_path / "bad.npy"), "--output", str(tmp_path / "o.csv")])
    assert code == 2 and "unsupported output file type '.csv'" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "bad.npy"]


def test_protect_streams_parquet_with_column_flags(tmp_path, capsys) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from textcrafter_rag.batches import matrix_to_arrow

    rng = np.random.default_rng(1)
    x = rng.standard_normal((11, 384)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    pq.write_table(pa.table({"id": list(range(11)), "vec": matrix_to_arrow(x)}), tmp_path / "in.parquet")
    assert (
        main(
            [
                "protect",
                "--input",
                str(tmp_path / "in.parquet"),
                "--output",
                str(tmp_path / "out.parquet"),
                "--column",
                "vec",
                "--output-column",
                "protected",
                "--chunk-size",
                "4",
                "--no-progress",
            ]
        )
        == 0
    )
    out = capsys.readouterr()
    assert "Protected 11 vectors (384-d)" in out.out and out.err == ""
    t = pq.read_table(tmp_path / "out.parquet")
    assert t.column_names == ["id", "protected"] and t["id"].to_pylist() == list(range(11))
    y = np.asarray(t["protected"].to_pylist(), dtype=np.float32)
    np.testing.assert_allclose(np.linalg.norm(y - x, axis=1), 1.0, rtol=1e-5)


def test_protect_failure_in_a_late_chunk_leaves_no_output(tmp_path, capsys) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((10, 384)).astype(np.float32)
    x[9] = np.nan
    np.save(tmp_path / "in.npy", x)
    code = main(
        [
            "protect",
            "--input",
            str(tmp_path / "in.npy"),
            "--output",
            str(tmp_path / "out.npy"),
            "--chunk-size",
            "3",
            "--no-progress",
        ]
    )
    assert code == 2 and "chunk 3 (rows 9-9)" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["in.npy"]


def test_demo_runs_offline(capsys) -> None:
    assert main(["demo", "--docs", "50", "--query", "football results"]) == 0
    out = capsys.readouterr().out
    assert "Perturbation norm" in out and "Recall@1" in out and "football results" in out
