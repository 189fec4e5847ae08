"""``run_audit`` and ``textcrafter audit`` take the protection options every entry point takes.

``mechanism=`` is a spec string, a policy directory or a Mechanism (``policy=``/``defense=`` were two names
for it); ``seed=`` seeds its noise (``defense_seed=`` was its name). The old names warn and still work. The
attacker is the session's tiny inverter in quick mode (see test_audit.py): the plumbing is tested, not the
numbers.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import pytest
from _textcrafter_helpers import TINY_INVERTER_SENTENCES

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from textcrafter_rag.attacks import AttackConfig
from textcrafter_rag.audit import AuditInputError, run_audit
from textcrafter_rag.audit import cli as audit_cli
from textcrafter_rag.data import bbc_sentences
from textcrafter_rag.encoders import BUNDLED_MODEL_ID
from textcrafter_rag.errors import InvalidTypeError
from textcrafter_rag.mechanisms import LDPGaussian
from textcrafter_rag.options import ProtectionOptions
from textcrafter_rag.policies import shipped_policy_path

ATTACKER_TEXTS = TINY_INVERTER_SENTENCES * 5 + bbc_sentences()[500:540]
TEXTS = bbc_sentences()[:8]


@pytest.fixture(scope="module")
def clean(minilm) -> np.ndarray:
    return minilm.encode(TEXTS)


@pytest.fixture
def audit(clean, minilm, tiny_inverter, tmp_path):
    """``run_audit`` on 8 in-memory rows with their texts; keywords go to run_audit."""

    def go(**kwargs):
        return run_audit(
            clean,
            texts=TEXTS,
            encoder=minilm,
            inverter=tiny_inverter,
            attack_texts=ATTACKER_TEXTS,
            attack=AttackConfig(quick=True, n_pii=60, n_examples=0, cache_dir=tmp_path / "cache"),
            progress=False,
            **kwargs,
        )

    return go


def _defense(result) -> dict:
    return {k: result.meta["defense"][k] for k in ("spec", "name", "params", "seed")}


def test_mechanism_spec_and_seed(audit) -> None:
    d = _defense(audit(mechanism="gaussian:s=0.05", seed=3))
    assert d["name"] == "gaussian" and d["params"]["s"] == pytest.approx(0.05) and d["seed"] == 3


def test_defense_and_defense_seed_warn_and_give_the_same_audit(audit) -> None:
    new = audit(mechanism="gaussian:s=0.05", seed=3)
    with pytest.warns(DeprecationWarning, match="defense(_seed)?= is deprecated") as record:
        old = audit(defense="gaussian:s=0.05", defense_seed=3)
    renamed = [w for w in record if issubclass(w.category, DeprecationWarning)]
    assert {str(w.message).split(" ")[0] for w in renamed} == {"defense=", "defense_seed="}
    assert all(w.filename == __file__ for w in renamed)  # each points at the caller's line
    assert _defense(old) == _defense(new)
    assert old.row("after")["vector_cosine"] == pytest.approx(new.row("after")["vector_cosine"])  # same noise


def test_policy_directory_warns_and_is_a_mechanism(audit) -> None:
    policy_dir = shipped_policy_path(BUNDLED_MODEL_ID, eps=1.0)
    assert policy_dir is not None
    with pytest.warns(DeprecationWarning, match="policy= is deprecated.*use mechanism="):
        old = audit(policy=str(policy_dir), seed=0)
    assert _defense(old) == _defense(audit(mechanism=str(policy_dir), seed=0))
    assert old.meta["defense"]["name"] == "textcrafter"


def test_an_options_object_is_honoured(audit) -> None:
    result = audit(options=ProtectionOptions(mechanism=LDPGaussian(epsilon=4.0, seed=1), seed=1))
    assert result.meta["defense"]["name"] == "ldp" and result.meta["defense"]["seed"] == 1
    over = audit(options=ProtectionOptions(mechanism="ldp:eps=4"), mechanism="none")  # keywords apply over it
    assert over.meta["defense"]["name"] == "none"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"policy": "none", "mechanism": "none"},
        {"defense": "none", "mechanism": "none"},
        {"policy": "none", "defense": "none"},  # two old names for one option
        {"defense_seed": 1, "seed": 1},
    ],
)
def test_one_option_under_two_names_is_refused_before_any_work(kwargs) -> None:
    with pytest.raises(InvalidTypeError, match="only"), pytest.warns(DeprecationWarning, match="deprecated"):
        run_audit(np.zeros((2, 384), dtype=np.float32), encoder="nope", progress=False, **kwargs)


def test_a_key_and_an_unknown_option_are_refused() -> None:
    with pytest.raises(AuditInputError, match="mechanism only"):
        run_audit(np.zeros((2, 384), dtype=np.float32), key=bytes(32), progress=False)
    with pytest.raises(InvalidTypeError, match="unknown protection option"):
        run_audit(np.zeros((2, 384), dtype=np.float32), defence="none", progress=False)


def test_a_path_that_is_neither_spec_nor_directory_is_refused(audit, tmp_path) -> None:
    with pytest.raises(AuditInputError, match="does not exist"):
        audit(mechanism=str(tmp_path / "no-such-policy"))


def test_the_cli_passes_mechanism_and_its_seed_as_options(monkeypatch, tmp_path) -> None:
    seen: dict = {}

    class Stop(Exception):
        pass

    def fake_run_audit(vectors, **kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(audit_cli, "run_audit", fake_run_audit)
    parser = argparse.ArgumentParser()
    audit_cli.add_audit_command(parser.add_subparsers())
    for flag in ("--mechanism", "--defense", "--policy"):
        seen.clear()
        argv = ["audit", "--vectors", "v.npy", "--out", str(tmp_path), flag, "gaussian:s=0.1", "--mechanism-seed", "4"]
        if flag == "--mechanism":
            args = parser.parse_args(argv)
        else:
            with pytest.warns(FutureWarning, match=f"{flag} is deprecated.*use --mechanism"):
                args = parser.parse_args(argv)
        with pytest.raises(Stop):
            audit_cli.run_audit_command(args)
        assert seen["options"] == ProtectionOptions(mechanism="gaussian:s=0.1", seed=4)
        assert not {"policy", "defense", "defense_seed", "mechanism", "seed"} & set(seen)
