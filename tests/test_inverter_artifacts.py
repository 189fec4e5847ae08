"""Saved inverters are verified artifacts: round trip, and every corrupted, edited or foreign file is refused."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict

import numpy as np
import pytest
from _textcrafter_helpers import TINY_INVERTER_SENTENCES, make_textcrafter

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from textcrafter_rag.artifacts import CONFIG_DIGEST, CONFIG_NAME, WEIGHTS_NAME, config_digest
from textcrafter_rag.attacks import Corrector, Inverter
from textcrafter_rag.attacks.inverter_io import CORRECTOR_KIND, INVERTER_KIND, TOKENIZER_DIR
from textcrafter_rag.errors import ArtifactError
from textcrafter_rag.textcrafter import TextCrafter


@pytest.fixture(scope="module")
def saved(tiny_inverter, tmp_path_factory):
    return tiny_inverter.save(tmp_path_factory.mktemp("inverter") / "inv")


@pytest.fixture
def copy(saved, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(saved, dst)
    return dst


def _edit_config(path, edit) -> None:
    """Edit the config and recompute its digest, so the checks behind the digest are what is tested."""
    cfg = json.loads((path / CONFIG_NAME).read_text())
    edit(cfg)
    cfg[CONFIG_DIGEST] = config_digest(cfg)
    (path / CONFIG_NAME).write_text(json.dumps(cfg))


def test_edited_config_without_its_digest_is_refused_and_a_legacy_one_read(copy):
    """An inverter is the attacker's own cached model: one saved before configs were hashed still loads."""
    cfg = json.loads((copy / CONFIG_NAME).read_text())
    cfg["architecture"]["n_layers"] += 1
    (copy / CONFIG_NAME).write_text(json.dumps(cfg))
    with pytest.raises(ArtifactError, match=CONFIG_DIGEST):
        Inverter.load(copy)
    cfg["architecture"]["n_layers"] -= 1
    del cfg[CONFIG_DIGEST]
    (copy / CONFIG_NAME).write_text(json.dumps(cfg))
    assert isinstance(Inverter.load(copy, device="cpu"), Inverter)


def test_round_trip_is_exact(tiny_inverter, saved, minilm):
    cfg = json.loads((saved / CONFIG_NAME).read_text())
    assert cfg["kind"] == INVERTER_KIND and cfg["format_version"] == 1 and len(cfg["weights_sha256"]) == 64
    assert cfg["architecture"] == asdict(tiny_inverter.config)
    assert set(cfg["tokenizer_sha256"]) == {p.name for p in (saved / TOKENIZER_DIR).iterdir()}
    assert not [p for p in saved.rglob("*") if p.suffix in (".pkl", ".pickle", ".bin", ".pt")]
    loaded = Inverter.load(saved, device="cpu")
    assert type(loaded) is Inverter and loaded.config == tiny_inverter.config
    assert loaded.meta == tiny_inverter.meta
    np.testing.assert_array_equal(loaded.vocab_ids, tiny_inverter.vocab_ids)
    for (name, a), b in zip(tiny_inverter.model.state_dict().items(), loaded.model.state_dict().values()):
        assert np.array_equal(a.cpu().numpy(), b.cpu().numpy()), name
    emb = minilm.encode(TINY_INVERTER_SENTENCES)
    assert loaded.invert(emb) == tiny_inverter.invert(emb) == TINY_INVERTER_SENTENCES
    assert loaded.invert(emb, beam=2) == tiny_inverter.invert(emb, beam=2)


@pytest.mark.parametrize("how", ["flip", "truncate"])
def test_tampered_weights_are_refused(copy, how):
    weights = copy / WEIGHTS_NAME
    data = bytearray(weights.read_bytes())
    if how == "flip":
        data[len(data) // 2] ^= 0xFF
    else:
        del data[len(data) // 2 :]
    weights.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="truncated or modified"):
        Inverter.load(copy)


def test_tampered_tokenizer_is_refused(copy):
    tok = copy / TOKENIZER_DIR
    vocab = next(p for p in sorted(tok.iterdir()) if p.suffix in (".txt", ".json"))
    vocab.write_text(vocab.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    with pytest.raises(ArtifactError, match=f"changed: {vocab.name}"):
        Inverter.load(copy)


def test_added_or_missing_tokenizer_file_is_refused(copy):
    (copy / TOKENIZER_DIR / "added_tokens.json").write_text("{}")
    with pytest.raises(ArtifactError, match=r"added_tokens\.json"):
        Inverter.load(copy)
    shutil.rmtree(copy / TOKENIZER_DIR)
    with pytest.raises(ArtifactError, match="missing its tokenizer"):
        Inverter.load(copy)


def test_wrong_kind_is_refused(saved, tiny_inverter, tmp_path):
    policy = make_textcrafter().save(tmp_path / "policy")
    with pytest.raises(ArtifactError, match="not a 'textcrafter-inverter'"):
        Inverter.load(policy)
    with pytest.raises(ArtifactError, match="not a 'textcrafter-policy'"):
        TextCrafter.load(saved)
    corrector_dir = Corrector.from_inverter(tiny_inverter).save(tmp_path / "corrector")
    assert json.loads((corrector_dir / CONFIG_NAME).read_text())["kind"] == CORRECTOR_KIND
    with pytest.raises(ArtifactError, match="not a 'textcrafter-inverter'"):
        Inverter.load(corrector_dir)
    corrector = Corrector.load(corrector_dir, device="cpu")
    assert type(corrector) is Corrector and corrector.config.cond_inputs == 3
    with pytest.raises(ArtifactError, match="not a 'textcrafter-corrector'"):
        Corrector.load(saved)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c.update(format_version=99), "format version"),
        (lambda c: c.update(weights_sha256="0" * 64), "truncated or modified"),
        (lambda c: c["architecture"].update(n_layers=2), "invalid textcrafter-inverter"),
        (lambda c: c["architecture"].update(d_model=32), "invalid textcrafter-inverter"),
        (lambda c: c["architecture"].update(surprise=1), "invalid textcrafter-inverter"),
        (lambda c: c.pop("architecture"), "invalid textcrafter-inverter"),
        (lambda c: c.update(meta=[1, 2]), "invalid textcrafter-inverter"),
        (lambda c: c.pop("tokenizer_sha256"), "no tokenizer hashes"),
        (lambda c: c["tokenizer_sha256"].update({"vocab.txt": "0" * 64}), "truncated or modified"),
    ],
)
def test_edited_config_is_refused(copy, edit, message):
    _edit_config(copy, edit)
    with pytest.raises(ArtifactError, match=message):
        Inverter.load(copy)


def test_not_a_directory_is_refused(tmp_path):
    with pytest.raises(ArtifactError, match="not a directory"):
        Inverter.load(tmp_path / "nothing-here")
