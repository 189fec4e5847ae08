"""Checkpoints of an inverter's training, so a long run can stop and go on where it stopped.

A checkpoint is a folder with ``weights.safetensors`` (the network), ``optimizer.safetensors``
(AdamW's moment estimates) and ``state.json`` (steps done, training seconds spent, the optimiser's
hyper-parameters and what the run trains on). It is written to a temporary sibling folder and
renamed into place, so a run killed while saving leaves the previous checkpoint intact. No pickle:
tensors go to safetensors, everything else to JSON.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ..errors import InvalidInputError

__all__ = ["TrainingState", "clear_training_state", "load_training_state", "save_training_state"]

_STATE, _WEIGHTS, _OPTIMIZER = "state.json", "weights.safetensors", "optimizer.safetensors"


def _siblings(d: Path) -> tuple[Path, Path]:
    """The folder a save is written to before the rename (``.tmp``) and the previous checkpoint (``.old``)."""
    return d.with_name(d.name + ".tmp"), d.with_name(d.name + ".old")


@dataclass(frozen=True)
class TrainingState:
    """Where a training run stands.

    Attributes:
        step: Optimiser steps done.
        seconds: Training time spent so far (the time budget counts it across resumptions).
        run: What the run trains on and how (texts hash, sizes, training config); a checkpoint of
            another run is refused rather than continued.
    """

    step: int
    seconds: float
    run: dict[str, Any]


def save_training_state(
    directory: str | os.PathLike[str], model: nn.Module, optimizer: torch.optim.Optimizer, state: TrainingState
) -> Path:
    """Write a checkpoint to ``directory`` atomically (temporary folder, then rename)."""
    d = Path(directory)
    tmp, old = _siblings(d)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, str(tmp / _WEIGHTS))
    opt = optimizer.state_dict()
    tensors = {
        f"{index}.{name}": value.detach().cpu().contiguous()
        for index, slots in opt["state"].items()
        for name, value in slots.items()
        if torch.is_tensor(value)
    }
    save_file(tensors, str(tmp / _OPTIMIZER))
    meta = {"step": state.step, "seconds": state.seconds, "run": state.run, "param_groups": opt["param_groups"]}
    (tmp / _STATE).write_text(json.dumps(meta, indent=2, default=list), encoding="utf-8")
    if d.exists():  # keep the newest complete checkpoint on disk at every moment
        shutil.rmtree(old, ignore_errors=True)
        d.rename(old)
    tmp.rename(d)
    shutil.rmtree(old, ignore_errors=True)
    return d


def load_training_state(
    directory: str | os.PathLike[str], model: nn.Module, optimizer: torch.optim.Optimizer, *, run: dict[str, Any]
) -> TrainingState | None:
    """Restore ``model`` and ``optimizer`` from a checkpoint of the same ``run``; ``None`` when there is none.

    Raises:
        ValueError: The checkpoint belongs to another run (other texts or settings): delete it or
            point the run elsewhere, since continuing it would mix two trainings.
    """
    d = Path(directory)
    if not (d / _STATE).is_file():
        old = _siblings(d)[1]  # a save interrupted between its two renames
        if not (old / _STATE).is_file():
            return None
        d = old
    meta = json.loads((d / _STATE).read_text(encoding="utf-8"))
    saved_run = meta["run"]
    if saved_run != json.loads(json.dumps(run, default=list)):
        raise InvalidInputError(f"{d} is a checkpoint of another training run; delete it to start over")
    model.load_state_dict(load_file(str(d / _WEIGHTS)), strict=True)
    flat = load_file(str(d / _OPTIMIZER))
    slots: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in flat.items():
        index, name = key.split(".", 1)
        slots.setdefault(int(index), {})[name] = value
    optimizer.load_state_dict({"state": slots, "param_groups": meta["param_groups"]})
    return TrainingState(step=int(meta["step"]), seconds=float(meta["seconds"]), run=saved_run)


def clear_training_state(directory: str | os.PathLike[str]) -> None:
    """Remove a checkpoint and its temporary and previous siblings (once training has completed)."""
    d = Path(directory)
    for path in (d, *_siblings(d)):
        shutil.rmtree(path, ignore_errors=True)
