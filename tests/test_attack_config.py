"""One AttackConfig for evaluate_attacks, ``textcrafter attack`` and ``textcrafter audit``; short signatures."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import json
import pkgutil

import pytest

from textcrafter_rag import attacks
from textcrafter_rag.attacks import AttackConfig, InverterTrainingConfig, evaluate
from textcrafter_rag.attacks import cli as attack_cli
from textcrafter_rag.attacks.cli import add_attack_command, attack_config
from textcrafter_rag.attacks.config import DEFAULT_ADAPT_CONFIG, QUICK_ADAPT, QUICK_TRAIN
from textcrafter_rag.audit.cli import add_audit_command, audit_attack_config
from textcrafter_rag.cli import main

#: Every module of the attack suite and of the audit's runner and report.
MODULES = sorted(
    [f"textcrafter_rag.attacks.{m.name}" for m in pkgutil.iter_modules(attacks.__path__)]
    + [f"textcrafter_rag.audit.{m}" for m in ("run", "report", "cli", "measures")]
)
MAX_PARAMETERS = 12


def _public_callables(module):
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj):
            for meth_name, meth in vars(obj).items():
                if isinstance(meth, (classmethod, staticmethod)):
                    meth = meth.__func__
                if meth_name == "__init__" and dataclasses.is_dataclass(obj):
                    continue  # a config dataclass is the remedy for long parameter lists, not a case of one
                if inspect.isfunction(meth) and (not meth_name.startswith("_") or meth_name == "__init__"):
                    yield f"{name}.{meth_name}", meth


@pytest.mark.parametrize("module_name", MODULES)
def test_no_public_function_takes_more_than_12_parameters(module_name):
    module = importlib.import_module(module_name)
    found = list(_public_callables(module))
    too_long = {}
    for name, fn in found:
        params = [p for p in inspect.signature(fn).parameters if p not in ("self", "cls")]
        if len(params) > MAX_PARAMETERS:
            too_long[name] = len(params)
    assert not too_long, too_long


def test_the_signature_check_sees_the_entry_points():
    names = {n for n, _ in _public_callables(evaluate)}
    assert {"evaluate_attacks", "clean_inverter"} <= names


def test_defaults_and_validation():
    cfg = AttackConfig()
    assert cfg.mode == "non-adaptive" and not cfg.adaptive and cfg.beam == 4 and cfg.rerank and cfg.n_examples == 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.beam = 2  # type: ignore[misc]
    for bad in ({"mode": "bogus"}, {"n_pairs": 0}, {"beam": 0}, {"n_pii": 0}, {"n_examples": -1}):
        with pytest.raises(ValueError):
            AttackConfig(**bad)


def test_quick_caps_and_training_settings():
    full = AttackConfig(n_pairs=30_000, n_pii=4000, seed=7)
    assert full.pairs_budget == 30_000 and full.pii_size == 4000 and full.keyword_size == 20_000
    assert (
        full.clean_training().seed == 7
        and full.clean_training().time_budget_min == InverterTrainingConfig().time_budget_min
    )
    assert full.adapt_training() == DEFAULT_ADAPT_CONFIG
    quick = dataclasses.replace(full, quick=True)
    assert quick.pairs_budget == 2000 and quick.pii_size == 600 and quick.keyword_size == 2000
    assert quick.clean_training() == dataclasses.replace(QUICK_TRAIN, seed=7) and quick.adapt_training() == QUICK_ADAPT
    given = InverterTrainingConfig(max_steps=2, seed=3)
    assert AttackConfig(train_config=given, seed=9).clean_training() is given  # a given config keeps its own seed


def _parse(register, argv):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_attack_command_flags_map_to_the_config():
    args = _parse(
        add_attack_command,
        [
            "attack",
            "--mechanism",
            "none",
            "--mode",
            "adaptive",
            "--quick",
            "--beam",
            "2",
            "--n-pairs",
            "10",
            "--seed",
            "3",
            "--cache-dir",
            "C",
            "--data-dir",
            "D",
            "--output",
            "o.json",
        ],
    )
    assert attack_config(args) == AttackConfig(
        mode="adaptive", quick=True, beam=2, n_pairs=10, seed=3, cache_dir="C", data_dir="D"
    )


def test_audit_command_flags_map_to_the_config():
    base = ["audit", "--vectors", "v.npy", "--out", "o"]
    assert audit_attack_config(_parse(add_audit_command, base)) == AttackConfig()
    args = _parse(
        add_audit_command,
        [
            *base,
            "--adaptive",
            "--n-pairs",
            "10",
            "--quick",
            "--beam",
            "1",
            "--n-pii",
            "60",
            "--examples",
            "0",
            "--seed",
            "2",
            "--cache-dir",
            "C",
            "--data-dir",
            "D",
        ],
    )
    assert audit_attack_config(args) == AttackConfig(
        mode="adaptive", n_pairs=10, quick=True, beam=1, n_pii=60, n_examples=0, seed=2, cache_dir="C", data_dir="D"
    )


def test_attack_command_wires_spec_texts_and_config(tmp_path, monkeypatch, capsys):
    """``textcrafter attack`` end to end, with the (slow) attack pipeline replaced by a recorder."""
    seen = {}

    def fake_evaluate(defense, **kwargs):
        seen.update(defense=defense, **kwargs)
        return {"bleu": 1.5, "content_f1": float("nan")}

    monkeypatch.setattr(attack_cli, "evaluate_attacks", fake_evaluate)
    data = tmp_path / "datasets" / "wikitext2"
    data.mkdir(parents=True)
    for split in ("train", "test"):
        (data / f"wiki.{split}.tokens").write_text("a b c d e .\n the river flows into the sea .\n", encoding="utf-8")
    out = tmp_path / "metrics.json"
    rc = main(
        [
            "attack",
            "--mechanism",
            "gaussian:s=0.01",
            "--mechanism-seed",
            "1",
            "--mode",
            "adaptive",
            "--quick",
            "--data-dir",
            str(tmp_path / "datasets"),
            "--n-test",
            "1",
            "--seed",
            "5",
            "--output",
            str(out),
        ]
    )
    assert rc == 0 and "bleu=1.5" in capsys.readouterr().out
    assert seen["defense"].spec().startswith("gaussian") and len(seen["test_texts"]) == 1
    assert seen["attack"] == AttackConfig(mode="adaptive", quick=True, seed=5, data_dir=str(tmp_path / "datasets"))
    written = json.loads(out.read_text())
    assert (
        written["content_f1"] is None
        and written["data"] == "wikitext2"
        and written["mechanism_spec"] == "gaussian:s=0.01"
    )
