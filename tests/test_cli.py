from __future__ import annotations

import json

import numpy as np
import pytest

from textcrafter_rag import KeyedRotation
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
                "--mechanism",
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
                "--mechanism",
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
            "--mechanism",
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
            "--mechanism",
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
            "--mechanism",
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


def test_protect_with_a_key_file_then_rekey(tmp_path, capsys, monkeypatch) -> None:
    keys = []
    for name in ("old.key", "new.key"):
        assert main(["keygen"]) == 0
        keys.append(capsys.readouterr().out.strip())
        (tmp_path / name).write_text(keys[-1] + "\n")
    x = np.random.default_rng(0).standard_normal((9, 384)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    np.save(tmp_path / "in.npy", x)
    out, moved, retenanted = (str(tmp_path / n) for n in ("out.npy", "moved.npy", "t.npy"))
    common = ["--no-progress", "--chunk-size", "4"]
    old_key = ["--key-file", str(tmp_path / "old.key"), "--tenant", "acme"]
    assert main(["protect", "--input", str(tmp_path / "in.npy"), "--output", out, *old_key, *common]) == 0
    old, new = (KeyedRotation(k, tenant="acme", dim=384) for k in keys)
    np.testing.assert_allclose(np.linalg.norm(old.invert(np.load(out)) - x, axis=1), 1.0, rtol=1e-4)
    assert f"Key fingerprint {old.fingerprint}" in capsys.readouterr().out
    new_key = ["--new-key-file", str(tmp_path / "new.key")]
    wrong = ["--key-file", str(tmp_path / "new.key"), "--tenant", "acme", "--expect-fingerprint", old.fingerprint]
    assert main(["rekey", out, moved, *wrong, "--new-key-file", str(tmp_path / "old.key"), *common]) == 2
    assert "wrong key or tenant" in capsys.readouterr().err and not (tmp_path / "moved.npy").exists()
    check = ["--expect-fingerprint", old.fingerprint]
    assert main(["rekey", out, moved, *old_key, *new_key, *check, *common]) == 0
    np.testing.assert_allclose(np.load(moved), new.apply(old.invert(np.load(out))), atol=1e-5)
    monkeypatch.setenv("TC_TEST_KEY", keys[0])  # the same secret from a variable, another tenant
    assert main(["rekey", out, retenanted, "--key-env", "TC_TEST_KEY", "--tenant", "acme", "--new-tenant", "b"]) == 0
    b = KeyedRotation(keys[0], tenant="b", dim=384)
    np.testing.assert_allclose(np.load(retenanted), b.apply(old.invert(np.load(out))), atol=1e-5)
    printed = capsys.readouterr()
    assert "Re-keyed 9 vectors" in printed.out
    assert not any(k in printed.out + printed.err for k in keys)


def test_protect_and_rekey_report_key_problems_without_the_key(tmp_path, capsys) -> None:
    np.save(tmp_path / "in.npy", np.ones((2, 384), dtype=np.float32))
    secretish = "c2VjcmV0LWJ1dC1ub3QtMzItYnl0ZXMtbG9uZw"
    (tmp_path / "bad.key").write_text(secretish)
    args = ["--input", str(tmp_path / "in.npy"), "--output", str(tmp_path / "o.npy"), "--no-progress"]
    assert main(["protect", *args, "--key-file", str(tmp_path / "bad.key")]) == 2
    err = capsys.readouterr().err
    assert "32 bytes" in err and secretish not in err
    assert main(["protect", *args, "--key-file", str(tmp_path / "none.key")]) == 2
    assert "key file" in capsys.readouterr().err
    assert main(["protect", *args, "--tenant", "acme"]) == 2
    assert "--tenant needs a key" in capsys.readouterr().err
    assert main(["rekey", str(tmp_path / "in.npy"), str(tmp_path / "o.npy"), "--key-env", "TC_UNSET_KEY_VAR"]) == 2
    assert "not set" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the old key is required
        main(["rekey", str(tmp_path / "in.npy"), str(tmp_path / "o.npy")])
    assert not (tmp_path / "o.npy").exists()


def test_protect_refuses_the_mechanism_under_both_names(tmp_path) -> None:
    np.save(tmp_path / "in.npy", np.ones((2, 8), dtype=np.float32))
    args = ["protect", "--input", str(tmp_path / "in.npy"), "--output", str(tmp_path / "o.npy"), "--no-progress"]
    with pytest.raises(SystemExit) as exc:
        main([*args, "--mechanism", "none", "--policy", "gaussian:s=0.5"])
    assert exc.value.code == 2 and not (tmp_path / "o.npy").exists()


def test_protect_checks_the_tenant_with_the_shared_check(tmp_path, capsys) -> None:
    np.save(tmp_path / "in.npy", np.ones((2, 8), dtype=np.float32))
    args = ["protect", "--input", str(tmp_path / "in.npy"), "--output", str(tmp_path / "o.npy"), "--no-progress"]
    assert main([*args, "--mechanism", "none", "--tenant", "acme"]) == 2
    err = capsys.readouterr().err  # the words of options.check_tenant, with the CLI's flag names
    assert "--tenant needs a key, --key-file or --key-env: without a key every tenant would share one" in err
