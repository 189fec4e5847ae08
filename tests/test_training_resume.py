"""Resumable inverter training: a run stopped after a checkpoint (even one killed while saving) and started
again ends with the same weights as a run that never stopped; a checkpoint of another run is refused;
nothing is left behind."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


from textcrafter_rag.attacks import Inverter, InverterConfig, InverterTrainingConfig
from textcrafter_rag.attacks import inverter as inverter_module
from textcrafter_rag.encoders import bundled_minilm

TEXTS = [f"text number {i} about {w} and {v}." for i, (w, v) in enumerate(zip("abcdefghij" * 2, "klmnopqrst" * 2))]
TINY = InverterConfig(d_model=32, n_layers=1, n_heads=2, d_ff=64, n_prefix=1, max_len=12, init_from_encoder=False)
# 20 texts in batches of 4 over 3 epochs: 15 steps, across epoch boundaries
TRAIN = InverterTrainingConfig(batch_size=4, epochs=3, time_budget_min=None, bf16=False, threads=1, warmup_steps=2)


class Stop(Exception):
    """Stands in for a run killed right after a checkpoint."""


@pytest.fixture(scope="module")
def data():
    enc = bundled_minilm()
    return enc, enc.encode(TEXTS)


def fresh(enc) -> Inverter:
    return Inverter.create(TEXTS, config=InverterConfig(**{**TINY.__dict__, "emb_dim": 384}), encoder=enc, device="cpu")


def weights(inv: Inverter) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in inv.model.state_dict().items()}


def test_stopped_and_resumed_run_equals_an_uninterrupted_one(data, tmp_path, monkeypatch):
    enc, emb = data
    whole = fresh(enc)
    whole.fit(emb, TEXTS, train_config=TRAIN, progress=False)

    real_save = inverter_module.save_training_state
    saves = []

    def save_then_stop(*args, **kwargs):
        path = real_save(*args, **kwargs)
        saves.append(args[3].step)
        if len(saves) == 7:  # mid-way through the second epoch
            raise Stop
        return path

    ckpt = tmp_path / "ckpt"
    monkeypatch.setattr(inverter_module, "save_training_state", save_then_stop)
    with pytest.raises(Stop):
        fresh(enc).fit(emb, TEXTS, train_config=TRAIN, progress=False, checkpoint_dir=ckpt, checkpoint_every_min=0)
    assert saves == list(range(1, 8)) and (ckpt / "state.json").is_file()

    monkeypatch.setattr(inverter_module, "save_training_state", real_save)
    ckpt.rename(tmp_path / "ckpt.old")  # killed between a save's two renames: only the previous one is on disk
    resumed = fresh(enc)  # a new process: fresh weights, restored from the checkpoint
    summary = resumed.fit(emb, TEXTS, train_config=TRAIN, progress=False, checkpoint_dir=ckpt, checkpoint_every_min=0)
    assert summary["resumed_at_step"] == 7 and summary["steps"] == 15
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith("ckpt")]
    assert left == [], f"a finished run removes its checkpoint, found {left}"
    expect = weights(whole)
    for name, value in weights(resumed).items():
        np.testing.assert_allclose(value, expect[name], rtol=0, atol=1e-6, err_msg=name)


def test_checkpoint_of_another_run_is_refused(data, tmp_path, monkeypatch):
    enc, emb = data
    real_save = inverter_module.save_training_state

    def save_then_stop(*args, **kwargs):
        real_save(*args, **kwargs)
        raise Stop

    ckpt = tmp_path / "ckpt"
    monkeypatch.setattr(inverter_module, "save_training_state", save_then_stop)
    with pytest.raises(Stop):
        fresh(enc).fit(emb, TEXTS, train_config=TRAIN, progress=False, checkpoint_dir=ckpt, checkpoint_every_min=0)
    monkeypatch.setattr(inverter_module, "save_training_state", real_save)
    other = InverterTrainingConfig(**{**TRAIN.__dict__, "lr": 1e-3})
    with pytest.raises(ValueError, match="another training run"):
        fresh(enc).fit(emb, TEXTS, train_config=other, progress=False, checkpoint_dir=ckpt)
    with pytest.raises(ValueError, match="another training run"):
        fresh(enc).fit(emb[:-1], TEXTS[:-1], train_config=TRAIN, progress=False, checkpoint_dir=ckpt)
    assert (ckpt / "state.json").is_file(), "a refused checkpoint is kept, not overwritten"
