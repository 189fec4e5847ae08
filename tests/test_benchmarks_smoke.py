"""Smoke tests for the benchmark scripts: each ``main([...])`` at its ``--smoke`` size into a tmp dir.

Checks the results schema (``meta`` + non-empty flat ``rows``), that metric values are finite, the
exit code 2 on a missing data directory, and every script's ``--help``. Skips the measuring tests
when the benchmark datasets are absent. The benchmarks are the ``benchmarks`` package at the
repository root (the working directory of ``python -m pytest``).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from benchmarks.common import fitted_policies
from benchmarks.common.caches import embed_cached, embedding_file
from benchmarks.common.fitted_policies import PolicySource
from benchmarks.common.grid import add_grid_options
from benchmarks.common.reporting import load_results
from benchmarks.privacy import __main__ as privacy
from benchmarks.retrieval import __main__ as retrieval
from benchmarks.speed import __main__ as speed
from benchmarks.utility import __main__ as utility
from benchmarks.utility import table1
from textcrafter_rag.numerics import row_norms, unit_rows

#: Every script: the module ``python -m`` runs, and the module that holds its ``main`` (a study's main
#: script is its package's ``__main__``).
SCRIPTS = [
    "benchmarks.retrieval",
    "benchmarks.retrieval.queries",
    "benchmarks.utility",
    "benchmarks.utility.table1",
    "benchmarks.privacy",
    "benchmarks.privacy.attack_strength",
    "benchmarks.privacy.audit_example",
    "benchmarks.privacy.frontier",
    "benchmarks.threat_models",
    "benchmarks.speed",
    "benchmarks.speed.streaming_memory",
    "benchmarks.speed.ray_throughput",
    "benchmarks.speed.autofit",
    "benchmarks.speed.install_size",
    "benchmarks.two_stage",
    "benchmarks.sealing_padding",
    "benchmarks.sealed_search",
    "benchmarks.sealed_search.store_index",
    "benchmarks.sealed_search.bulk_load",
    "benchmarks.sealed_search.llama_index_ndcg",
    "benchmarks.sealed_search.store_index_scale",
    "benchmarks.sealed_search.store_index_reads",
    "benchmarks.sealed_search.store_index_stall",
    "benchmarks.sealed_search.access_patterns",
]
#: Command-line tools among the benchmarks that write no results of their own (the GPU inverter's steps:
#: the device step imports only what the GPU machine has, so not the shared options).
TOOLS = ["benchmarks.gpu_inverter", "benchmarks.gpu_inverter.prepare", "benchmarks.gpu_inverter.record"]


def script_module(command: str) -> object:
    """The module holding ``main`` for ``python -m command`` (a package runs its ``__main__``)."""
    mod = importlib.import_module(command)
    return importlib.import_module(f"{command}.__main__") if hasattr(mod, "__path__") else mod


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
}
METRIC_KEYS = {
    "accuracy",
    "macro_f1",
    "recall@1",
    "recall@10",
    "mrr@10",
    "ndcg@10",
    "vectors_per_s",
    "perturbation_norm",
    "fit_seconds",
    "bleu",
}


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
    assert set(meta) >= META_KEYS, META_KEYS - set(meta)
    assert meta["benchmark"] == benchmark and meta["size"] == "smoke"
    assert {"platform", "cpu_count", "torch"} <= set(meta["machine"])
    assert rows, "no rows"
    for r in rows:
        assert "mechanism" in r and "defense" not in r
        for k, v in r.items():
            assert not isinstance(v, (dict, list)), f"row not flat: {k}"
            if isinstance(v, float):
                assert math.isfinite(v), (k, r)
        assert any(k in METRIC_KEYS and isinstance(r[k], (int, float)) for k in r), r
    assert path.with_suffix(".md").read_text().startswith("# ")
    return rows


def test_retrieval_smoke(tmp_path: Path, data_dir: Path, bench_cache: Path) -> None:
    rc = retrieval.main(
        [
            "--smoke",
            "--no-privacy",
            "--no-progress",
            "--data-dir",
            str(data_dir),
            "--out-dir",
            str(tmp_path),
            "--cache-dir",
            str(bench_cache),
        ]
    )
    assert rc == 0
    rows = _check(tmp_path / "retrieval_smoke.json", benchmark="retrieval")
    assert {r["scenario"] for r in rows} == {"clean", "protected_docs", "protected_docs_queries"}
    assert {r["index"] for r in rows} == {"flat", "hnsw"}
    clean = next(r for r in rows if r["scenario"] == "clean" and r["index"] == "flat")
    assert clean["perturbation_norm"] == 0.0 and clean["ndcg@10"] > 0
    assert (tmp_path / "retrieval_smoke.png").is_file()


def test_utility_smoke(tmp_path: Path, data_dir: Path, bench_cache: Path) -> None:
    rc = utility.main(
        [
            "--smoke",
            "--no-progress",
            "--datasets",
            "financial_phrasebank",
            "sst2",
            "--data-dir",
            str(data_dir),
            "--out-dir",
            str(tmp_path),
            "--cache-dir",
            str(bench_cache),
        ]
    )
    assert rc == 0
    rows = _check(tmp_path / "utility_smoke.json", benchmark="utility")
    assert {r["scenario"] for r in rows} == {"development", "deployment"}
    assert {r["dataset"] for r in rows} == {"financial_phrasebank", "sst2"}
    assert all(0 <= r["accuracy"] <= 100 for r in rows)
    assert list(tmp_path.glob("utility_smoke_*.png"))


def test_speed_smoke(tmp_path: Path, data_dir: Path, bench_cache: Path) -> None:
    rc = speed.main(
        [
            "--smoke",
            "--no-progress",
            "--data-dir",
            str(data_dir),
            "--out-dir",
            str(tmp_path),
            "--cache-dir",
            str(bench_cache),
        ]
    )
    assert rc == 0
    rows = _check(tmp_path / "speed_smoke.json", benchmark="speed")
    kinds = {r["kind"] for r in rows}
    assert kinds == {"encode", "protect", "fit"}
    tc = [r for r in rows if r["kind"] == "protect" and r["mechanism"] == "textcrafter"]
    assert tc and all(abs(r["perturbation_norm"] - 2.5) < 1e-3 for r in tc)


@pytest.mark.parametrize("name", ["retrieval", "utility", "speed"])
def test_missing_data_dir_exits_2(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mod = script_module(f"benchmarks.{name}")
    rc = mod.main(["--smoke", "--data-dir", str(tmp_path / "nope"), "--out-dir", str(tmp_path)])
    assert rc == 2
    assert "benchmark datasets not found" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.json"))


def test_privacy_smoke(data_dir: Path, bench_cache: Path, tmp_path: Path) -> None:
    code = privacy.main(
        [
            "--smoke",
            "--no-progress",
            "--data-dir",
            str(data_dir),
            "--out-dir",
            str(tmp_path),
            "--cache-dir",
            str(bench_cache),
        ]
    )
    assert code == 0
    rows = _check(tmp_path / "privacy_smoke.json", benchmark="privacy")
    labels = {(r["mechanism_label"], r["attacker"].startswith("adaptive")) for r in rows}
    assert ("none", False) in labels and ("textcrafter:eps=1", True) in labels
    adaptive = [r for r in rows if r["attacker"].startswith("adaptive")]
    assert all(r["n_pairs"] == r["pairs_seen"] > 0 for r in adaptive)
    assert all("floor_content_f1" in r for r in rows)


def _fake_privacy_row(label: str, defense: str, content_f1: float, **extra) -> dict:
    """A privacy row as the committed results files have it (keys from before ``defense`` became ``mechanism``)."""
    return {
        "dataset": "sst2",
        "defense": defense,
        "defense_label": label,
        "comparison": "grid",
        "kind": "privacy",
        "perturbation_norm": 1.0,
        "mode": "non-adaptive",
        "attacker": "inverter-beam4-rerank",
        "bleu": 1.0,
        "token_f1": 20.0,
        "content_f1": content_f1,
        "rouge_l": 15.0,
        "exact_match": 0.0,
        "cosine": 0.3,
        "floor_bleu": 0.2,
        "floor_token_f1": 16.7,
        "floor_content_f1": 0.47,
        "floor_rouge_l": 15.8,
        "floor_exact_match": 0.0,
        "floor_cosine": 0.01,
        **extra,
    }


def test_utility_rerender_adds_floor_row_and_frontier(tmp_path: Path) -> None:
    """``--from-json`` rebuilds the report from measured rows; the privacy table ends with the floor row."""
    util = [
        {
            "dataset": "sst2",
            "defense": d,
            "defense_label": d,
            "comparison": "grid",
            "perturbation_norm": n,
            "scenario": sc,
            "accuracy": acc,
            "macro_f1": acc - 1,
            **({"param_eps": 1.0} if d == "textcrafter" else {}),
        }
        for d, n, acc in (("none", 0.0, 80.0), ("textcrafter", 1.0, 70.0))
        for sc in ("development", "deployment")
    ]
    priv = [_fake_privacy_row("none", "none", 13.5), _fake_privacy_row("textcrafter", "textcrafter", 5.5)]
    meta = {
        "size": "full",
        "encoder": "e",
        "dimension": 384,
        "normalisation": "unit",
        "classifier": "lr",
        "seeds": {"seed": 0},
        "runtime_seconds": 1.0,
        "machine": {"cpu_count": 2, "torch": "x"},
        "command": "c",
        "paper_reference": "p",
        "dataset_sizes": {"sst2": {"train": 1, "test": 1, "classes": 2}},
        "attack_config": {"n_test_texts": 200},
    }
    src = tmp_path / "utility_fake.json"
    src.write_text(json.dumps({"meta": meta, "rows": util + priv}))
    assert utility.main(["--from-json", str(src), "--out-dir", str(tmp_path)]) == 0
    md = (tmp_path / "utility_fake.md").read_text()
    table = md[md.index("### sst2") :].splitlines()
    floor_line = next(line for line in table if line.startswith("| floor (ignores the vector)"))
    assert "0.47" in floor_line and "16.70" in floor_line
    tc_line = next(line for line in table if line.startswith("| textcrafter"))
    assert "70.00" in tc_line and "5.50" in tc_line  # accuracy joined to its privacy row
    assert (tmp_path / "utility_fake_sst2.png").is_file()


def test_table1_collects_privacy_runs(tmp_path: Path) -> None:
    assert table1.main(["--results-dir", str(tmp_path), "--out-dir", str(tmp_path)]) == 2  # nothing to collect
    util = [
        {
            "dataset": "sst2",
            "defense": "textcrafter",
            "defense_label": "textcrafter",
            "scenario": "development",
            "accuracy": 70.0,
            "perturbation_norm": 1.0,
        }
    ]
    first = [_fake_privacy_row("none", "none", 13.5), _fake_privacy_row("textcrafter", "textcrafter", 5.5)]
    again = [
        _fake_privacy_row("none", "none", 99.0),  # same measurement in a later file: the first one is kept
        _fake_privacy_row("textcrafter", "textcrafter", 8.0, mode="adaptive", pairs_seen=30000),
    ]
    for name, priv in (("utility_privacy_a.json", first), ("utility_privacy_b.json", again)):
        (tmp_path / name).write_text(json.dumps({"meta": {}, "rows": util + priv}))
    assert table1.main(["--results-dir", str(tmp_path), "--out-dir", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "table1.json").read_text())["rows"]
    got = {(r["mechanism_label"], r["mode"]): r for r in rows}
    assert got[("none", "non-adaptive")]["content_f1"] == 13.5
    assert got[("textcrafter", "adaptive")]["pairs_seen"] == 30000
    assert got[("textcrafter", "non-adaptive")]["dev_acc"] == 70.0
    assert [r["mechanism"] for r in rows].count("floor") == 1
    assert rows[-1]["mechanism"] == "floor" and rows[-1]["content_f1"] == 0.47
    assert not any("defense" in r or "defense_label" in r for r in rows)


@pytest.mark.parametrize("command", SCRIPTS)
def test_help_names_the_module_command(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Every script is a module of its study's package, and its help says how to run it."""
    mod = script_module(command)
    with pytest.raises(SystemExit) as exc:
        mod.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m {command}")
    assert f"python -m {command}" in mod.__doc__ and ".py" not in out.splitlines()[0]
    assert mod.SCRIPT.module == command


def test_the_package_docstring_and_readme_list_every_script() -> None:
    """``benchmarks/__init__.py`` and ``benchmarks/README.md`` name every script's command."""
    import benchmarks

    readme = (Path(benchmarks.__file__).parent / "README.md").read_text(encoding="utf-8")
    missing = [
        c
        for c in SCRIPTS + TOOLS
        for text in (readme, benchmarks.__doc__)
        if not re.search(rf"python -m {c}(?![\w.])", text)
    ]
    assert not missing, missing


def test_every_script_is_listed() -> None:
    """Every script (a package's ``__main__.py``, or a module run as ``__main__``) is in ``SCRIPTS``."""
    root = Path(importlib.import_module("benchmarks").__file__).parent
    found = set()
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__main__":
            found.add(".".join(parts[:-1]))
        elif 'if __name__ == "__main__":' in path.read_text(encoding="utf-8"):
            found.add(".".join(parts))
    assert found == set(SCRIPTS) | set(TOOLS)
    assert not any(c.startswith("benchmarks.common") for c in found)


def test_the_shared_helpers_import_no_study() -> None:
    """``benchmarks.common`` is the lowest layer of the benchmarks: it imports no study folder."""
    root = Path(importlib.import_module("benchmarks").__file__).parent
    bad = []
    for path in (root / "common").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                name = ("." * node.level) + (node.module or "")
                study = name.startswith("benchmarks.") and not name.startswith("benchmarks.common")
                if name.startswith("..") or study:
                    bad.append(f"{path.name}: {name}")
    assert not bad, bad


def test_old_results_rows_are_read_with_todays_keys(tmp_path: Path) -> None:
    """Files written before the rename name the mechanism ``defense``; the frontier's named its spec so."""
    old = {"defense": "gaussian", "defense_label": "gaussian:s=0.1", "accuracy": 1.0}
    frontier_row = {"mechanism": "gaussian", "defense": "gaussian:s=0.1", "content_f1": 1.0}
    (tmp_path / "old.json").write_text(json.dumps({"meta": {}, "rows": [old, frontier_row]}))
    _, rows = load_results(tmp_path / "old.json")
    assert rows == [
        {"mechanism": "gaussian", "mechanism_label": "gaussian:s=0.1", "accuracy": 1.0},
        {"mechanism": "gaussian", "mechanism_spec": "gaussian:s=0.1", "content_f1": 1.0},
    ]


def test_old_option_spelling_still_works_with_a_warning() -> None:
    """``--defenses`` (the commands of the committed results) still selects, and says it is now ``--mechanisms``."""
    ap = argparse.ArgumentParser()
    add_grid_options(ap)
    with pytest.warns(FutureWarning, match="deprecated; use --(privacy-)?mechanisms$"):
        args = ap.parse_args(["--defenses", "none", "gaussian", "--privacy-defenses", "all"])
    assert args.mechanisms == ["none", "gaussian"] and args.privacy_mechanisms == "all"


class _FakeEncoder:
    model_id = "fake-encoder"

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.array([[len(t), t.count("a"), 1.0] for t in texts], dtype=np.float32)


def test_embed_cached_reuses_a_cached_superset(tmp_path: Path) -> None:
    """Subsets are sliced from a cached superset, whose file is where the core's embedding cache puts it."""
    enc, superset = _FakeEncoder(), ["a", "bb", "cab", "dddd"]
    full = embed_cached(enc, superset, cache=tmp_path, progress=False)
    assert embedding_file(enc, superset, cache=tmp_path).is_file()  # the core helper's file, found by name
    enc.encode = None  # a cache hit must not encode
    sub = embed_cached(enc, ["cab", "a"], cache=tmp_path, progress=False, superset=superset)
    np.testing.assert_array_equal(sub, full[[2, 0]])


def test_policy_source_fits_once_and_caches_without_pickle(
    data_dir: Path, bench_cache: Path, minilm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A smoke-size policy is calibrated and fitted once, stored as JSON + safetensors, then loaded."""
    policies = PolicySource(size="smoke", encoder=minilm, data_dir=data_dir, cache=bench_cache, progress=False)
    x = unit_rows(np.random.default_rng(0).standard_normal((8, minilm.dimension))).astype(np.float32)
    first = policies.textcrafter(1.0, noise_seed=0).protect(x)
    stored = [p for d in ("calibration", "policies") for p in (bench_cache / d).rglob("*") if p.is_file()]
    assert stored and {p.suffix for p in stored} == {".json", ".safetensors"}

    def refit(*args, **kwargs):
        raise AssertionError("a cached calibration or policy was computed again")

    monkeypatch.setattr(fitted_policies, "fit_textcrafter", refit)
    monkeypatch.setattr(fitted_policies, "calibrate", refit)
    np.testing.assert_allclose(policies.textcrafter(1.0, noise_seed=0).protect(x), first, atol=1e-6)
    np.testing.assert_allclose(row_norms(first - x), 1.0, atol=1e-4)
    cal = policies.calibration()
    assert cal.embeddings.shape == (300, minilm.dimension) and cal.provenance["n_pii"] == 60
