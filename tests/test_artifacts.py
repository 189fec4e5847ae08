from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from _textcrafter_helpers import make_textcrafter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from textcrafter_rag.artifacts import CONFIG_DIGEST, ArtifactError, config_digest
from textcrafter_rag.textcrafter import TextCrafter


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("art") / "policy"
    make_textcrafter().save(path)
    return path


def _copy(saved, tmp_path):
    dst = tmp_path / "copy"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(saved, dst)
    return dst


def test_config_records_versions_and_hash(saved) -> None:
    cfg = json.loads((saved / "config.json").read_text())
    assert cfg["format_version"] == 1 and cfg["kind"] == "textcrafter-policy"
    assert len(cfg["weights_sha256"]) == 64 and cfg["torch_version"] and cfg["library_version"]
    assert cfg["dim"] == 32 and cfg["eps"] == 2.5 and cfg["policy"]["heads"] == 4
    assert not list(saved.glob("*.pkl")) and not list(saved.glob("*.bin"))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c.update(format_version=99), "format version"),
        (lambda c: c.update(kind="something-else"), "not a 'textcrafter-policy'"),
        (lambda c: c.update(weights_sha256="0" * 64), "truncated or modified"),
        (lambda c: c.update(dim=31), "invalid TextCrafter policy"),
        (lambda c: c.update(eps=-1), "invalid TextCrafter policy"),
        (lambda c: c["policy"].update(dim=64), "invalid TextCrafter policy"),
        (lambda c: c["policy"].update(heads=5), "invalid TextCrafter policy"),
        (lambda c: c.pop("policy"), "invalid TextCrafter policy"),
        (lambda c: c.pop("weights_sha256"), "truncated or modified"),
    ],
)
def test_edited_config_is_refused(saved, tmp_path, edit, message) -> None:
    """Even with its digest recomputed, an inconsistent config is refused by the checks behind the digest."""
    dst = _copy(saved, tmp_path)
    cfg = json.loads((dst / "config.json").read_text())
    edit(cfg)
    cfg[CONFIG_DIGEST] = config_digest(cfg)
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ArtifactError, match=message):
        TextCrafter.load(dst)


@pytest.mark.parametrize(
    "edit",
    [
        lambda c: c.update(eps=0.01),  # issue 24.1: a quieter policy, released silently before
        lambda c: c.update(norm_scale=1e-6),
        lambda c: c["policy"].update(max_snr=100.0),
        lambda c: c.update(provenance={"corpus": "edited"}),
        lambda c: c.pop(CONFIG_DIGEST),
        lambda c: c.update({CONFIG_DIGEST: "0" * 64}),
    ],
)
def test_config_edited_without_its_digest_is_refused(saved, tmp_path, edit) -> None:
    dst = _copy(saved, tmp_path)
    cfg = json.loads((dst / "config.json").read_text())
    edit(cfg)
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ArtifactError, match=CONFIG_DIGEST):
        TextCrafter.load(dst)


def test_digest_survives_reformatting(saved, tmp_path) -> None:
    """The digest is over canonical JSON: re-indenting or reordering the same values keeps the policy loadable."""
    dst = _copy(saved, tmp_path)
    cfg = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps(dict(reversed(list(cfg.items())))))
    assert TextCrafter.load(dst).eps == 2.5


def test_shipped_policies_are_digested_and_their_edits_refused(tmp_path) -> None:
    from textcrafter_rag import Protector
    from textcrafter_rag.policies import SHIPPED, shipped_policy_path

    for model_id, by_eps in SHIPPED.items():
        for eps in by_eps:
            path = shipped_policy_path(model_id, eps=eps)
            cfg = json.loads((path / "config.json").read_text())
            assert cfg[CONFIG_DIGEST] == config_digest(cfg)
            assert TextCrafter.load(path).eps == eps
    dst = tmp_path / "shipped-copy"
    shutil.copytree(shipped_policy_path(next(iter(SHIPPED)), eps=1.0), dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["eps"] = 0.01
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    with pytest.raises(ArtifactError, match=CONFIG_DIGEST):
        Protector(mechanism=str(dst))


def test_restamp_vouches_for_a_legacy_config_and_keeps_the_weights(saved, tmp_path) -> None:
    from textcrafter_rag.artifacts import restamp_artifact

    dst = _copy(saved, tmp_path)
    weights = (dst / "model.safetensors").read_bytes()
    cfg = json.loads((dst / "config.json").read_text())
    cfg.pop(CONFIG_DIGEST)
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ArtifactError, match="restamp"):
        TextCrafter.load(dst)
    restamp_artifact(dst, kind="textcrafter-policy")
    assert TextCrafter.load(dst).eps == 2.5
    assert (dst / "model.safetensors").read_bytes() == weights


def test_missing_or_garbage_files_are_refused(saved, tmp_path) -> None:
    with pytest.raises(ArtifactError, match="not a directory"):
        TextCrafter.load(tmp_path / "nope")
    dst = _copy(saved, tmp_path)
    (dst / "model.safetensors").unlink()
    with pytest.raises(ArtifactError, match=r"missing model\.safetensors"):
        TextCrafter.load(dst)
    dst = _copy(saved, tmp_path)
    (dst / "config.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="not valid JSON"):
        TextCrafter.load(dst)
    (dst / "config.json").write_text("[1, 2]")
    with pytest.raises(ArtifactError, match="JSON object"):
        TextCrafter.load(dst)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(0.0, 0.999), flip=st.integers(0, 10**9))
def test_truncated_or_corrupted_weights_are_refused(saved, tmp_path, cut: float, flip: int) -> None:
    dst = _copy(saved, tmp_path)
    data = (dst / "model.safetensors").read_bytes()
    (dst / "model.safetensors").write_bytes(data[: int(cut * len(data))])
    with pytest.raises(ArtifactError):
        TextCrafter.load(dst)
    corrupted = bytearray(data)
    corrupted[flip % len(data)] ^= 0xFF
    (dst / "model.safetensors").write_bytes(bytes(corrupted))
    with pytest.raises(ArtifactError, match="truncated or modified"):
        TextCrafter.load(dst)


def test_weights_that_match_a_forged_hash_but_not_the_shape_are_refused(saved, tmp_path) -> None:
    import torch
    from safetensors.torch import load_file

    from textcrafter_rag.artifacts import save_artifact

    dst = _copy(saved, tmp_path)
    cfg = json.loads((dst / "config.json").read_text())
    tensors = load_file(str(dst / "model.safetensors"))
    tensors["pii.weight"] = torch.zeros(31)
    extra = {
        k: v
        for k, v in cfg.items()
        if k not in {"kind", "format_version", "library_version", "torch_version", "weights_sha256"}
    }
    save_artifact(dst, kind="textcrafter-policy", tensors=tensors, config=extra)
    with pytest.raises(ArtifactError, match="invalid TextCrafter policy"):
        TextCrafter.load(dst)


def test_loaded_policy_protects_identically(saved) -> None:
    x = np.random.default_rng(0).standard_normal((5, 32)).astype(np.float32)
    a = TextCrafter.load(saved, seed=1).protect(x)
    b = TextCrafter.load(saved, seed=1).protect(x)
    np.testing.assert_array_equal(a, b)
