"""One options object, one name per concept: ``mechanism=`` everywhere, ``policy=`` only as a warning alias."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from textcrafter_rag import GaussianNoise, Protector, TextcrafterError
from textcrafter_rag.adapters import build_protector
from textcrafter_rag.cli import main
from textcrafter_rag.errors import InvalidInputError, InvalidTypeError
from textcrafter_rag.mechanisms import LDPGaussian, NoDefense
from textcrafter_rag.options import ProtectionOptions
from textcrafter_rag.specs import resolve_mechanism

X = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)


@pytest.mark.parametrize("spec", ["gaussian:s=0.01", "ldp:eps=4", "none", "shuffle"])
def test_any_spec_string_works_as_the_mechanism(spec: str) -> None:
    p = Protector(mechanism=spec, seed=1)
    assert p.mechanism.name == resolve_mechanism(spec, encoder=None).name
    assert p.protect(X).shape == X.shape


def test_a_spec_string_keeps_its_parameters_and_options() -> None:
    p = Protector(mechanism="ldp:eps=4", secure_mode=True)
    assert isinstance(p.mechanism, LDPGaussian) and p.mechanism.secure_mode


def test_policy_is_a_deprecated_alias_of_mechanism() -> None:
    with pytest.warns(DeprecationWarning, match="policy= is deprecated.*use mechanism=") as record:
        p = Protector(policy="gaussian:s=0.01")
    assert record[0].filename == __file__  # the warning points at the caller's line
    assert isinstance(p.mechanism, GaussianNoise)
    with pytest.raises(InvalidTypeError, match="mechanism= only"), pytest.warns(DeprecationWarning, match="policy="):
        Protector(policy=NoDefense(), mechanism=NoDefense())


def test_options_object_and_keywords_build_the_same_protector() -> None:
    options = ProtectionOptions(mechanism=NoDefense(), chunk_size=2, protect_queries=True)
    by_object = Protector(options=options)
    by_keywords = Protector(mechanism=options.mechanism, chunk_size=2, protect_queries=True)
    assert by_object.options == by_keywords.options == options
    assert Protector(options=options, chunk_size=5).chunk_size == 5  # keywords override the object
    assert build_protector(lambda t: np.ones((len(t), 8)), options=options).protector.options == options


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"chunk_size": 0}, InvalidInputError),
        ({"chunk_size": 2.5}, InvalidTypeError),
        ({"seed": "1"}, InvalidTypeError),
        ({"protect_queries": "yes"}, InvalidTypeError),
        ({"mechanism": 42}, InvalidTypeError),
        ({"tenant": "acme"}, InvalidInputError),  # a tenant without a key would isolate nothing
        ({"chunk_sise": 8}, InvalidTypeError),  # a misspelt option is refused, not ignored
    ],
)
def test_every_entry_point_refuses_bad_options_alike(options: dict, error: type[Exception]) -> None:
    with pytest.raises(error) as raised:
        Protector(**options)
    assert isinstance(raised.value, TextcrafterError)
    if "chunk_sise" not in options:
        with pytest.raises(error):
            ProtectionOptions(**options)


def test_options_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        ProtectionOptions().chunk_size = 3  # type: ignore[misc]


def test_old_names_warn() -> None:
    import textcrafter_rag.adapters as adapters
    from textcrafter_rag.specs import resolve_policy

    with pytest.warns(DeprecationWarning, match="AdapterOptions"):
        assert adapters.AdapterOptions is ProtectionOptions
    with pytest.warns(DeprecationWarning, match="resolve_policy"):
        assert resolve_policy("none", encoder=None).name == NoDefense().name


def test_the_cli_takes_a_mechanism_spec_and_the_old_flag_with_a_warning(tmp_path) -> None:
    np.save(tmp_path / "in.npy", X)
    args = ["protect", "--input", str(tmp_path / "in.npy"), "--output", str(tmp_path / "out.npy"), "--no-progress"]
    assert main([*args, "--mechanism", "none"]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), X)
    with pytest.warns(FutureWarning, match="--policy is deprecated.*use --mechanism"):
        assert main([*args, "--policy", "gaussian:s=0.5"]) == 0
    assert not np.allclose(np.load(tmp_path / "out.npy"), X)


def test_a_tenant_needs_a_key_is_raised_in_one_place() -> None:
    """Every entry point (Protector, adapters, protect_file, Ray, CLI) goes through options.check_tenant."""
    import ast
    from pathlib import Path

    import textcrafter_rag

    raising = []
    for path in sorted(Path(textcrafter_rag.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Raise):
                words = " ".join(
                    c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)
                )
                if "tenant" in words and "needs" in words:
                    raising.append(path.name)
    assert raising == ["options.py"]
