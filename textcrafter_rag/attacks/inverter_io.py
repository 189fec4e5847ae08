"""Save and load inverters as verified artifacts: no pickle, and nothing edited goes unnoticed.

A saved inverter is a :mod:`textcrafter_rag.artifacts` directory (``config.json`` with a ``kind`` --
``textcrafter-inverter`` or ``textcrafter-corrector`` --, the format version and the weights'
SHA-256, plus ``model.safetensors`` with the network and its vocabulary) and a ``tokenizer/``
folder whose files' SHA-256 hashes are recorded in ``config.json`` as well. Loading checks all of
them and rebuilds the network strictly, so a truncated, edited or foreign file raises
:class:`~textcrafter_rag.errors.ArtifactError` instead of yielding a silently different attacker.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from ..artifacts import CONFIG_NAME, load_artifact, save_artifact
from ..errors import ArtifactError, InvalidTypeError
from .inverter_model import InverterConfig, InverterModel

if TYPE_CHECKING:  # typing only: inverter.py imports this module
    from .inverter import Inverter

__all__ = [
    "CORRECTOR_KIND",
    "INVERTER_KIND",
    "STRENGTH_NAME",
    "TOKENIZER_DIR",
    "load_inverter",
    "read_strength",
    "save_inverter",
]

#: The ``kind`` in a saved inverter's and a saved corrector's ``config.json``.
INVERTER_KIND = "textcrafter-inverter"
CORRECTOR_KIND = "textcrafter-corrector"
#: Folder of the tokenizer files inside a saved inverter.
TOKENIZER_DIR = "tokenizer"
#: Optional file beside a saved inverter: its measured strength on undefended text (a JSON list of rows with
#: ``attack``, ``defense``, ``bleu``, ``token_f1``, ``content_f1``, ...), written by the benchmarks that train it.
STRENGTH_NAME = "strength.json"

InverterT = TypeVar("InverterT", bound="Inverter")


def save_inverter(inverter: Inverter, directory: str | os.PathLike[str]) -> Path:
    """Write the artifact (``config.json`` + ``model.safetensors``) and the tokenizer to ``directory``.

    The tokenizer is written first and ``config.json`` last, so an interrupted save leaves no
    ``config.json`` and is never mistaken for a complete inverter (the caches rely on this).
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / CONFIG_NAME).unlink(missing_ok=True)  # an overwrite interrupted halfway must not look complete
    tok_dir = d / TOKENIZER_DIR
    shutil.rmtree(tok_dir, ignore_errors=True)  # no stale file may survive beside the recorded ones
    inverter.tokenizer.save_pretrained(str(tok_dir))
    tensors = {k: v.detach().cpu().contiguous() for k, v in inverter.model.state_dict().items()}
    tensors["vocab_ids"] = torch.as_tensor(inverter.vocab_ids)
    config = {
        "architecture": asdict(inverter.config),
        "meta": json.loads(json.dumps(inverter.meta, default=str)),
        "tokenizer_sha256": _file_hashes(tok_dir),
    }
    return save_artifact(d, kind=inverter.artifact_kind, tensors=tensors, config=config)


def load_inverter(
    directory: str | os.PathLike[str], *, cls: type[InverterT], device: torch.device | str | None = None
) -> InverterT:
    """Load and verify an inverter (or corrector: ``cls``) written by :func:`save_inverter`.

    Raises:
        ArtifactError: Missing, truncated or edited files (weights, config or tokenizer), another
            kind of artifact (a policy, or a corrector loaded as an inverter) or an unknown format.
    """
    d = Path(directory)
    config, tensors = load_artifact(d, kind=cls.artifact_kind, require_config_digest=False)  # attacker-side cache
    tok_dir = d / TOKENIZER_DIR
    _check_file_hashes(tok_dir, config.get("tokenizer_sha256"))
    from transformers import AutoTokenizer  # heavy: imported only when an inverter is loaded

    try:
        vocab = tensors.pop("vocab_ids").numpy()
        model = InverterModel(InverterConfig(**config["architecture"]), len(vocab))
        model.load_state_dict(tensors, strict=True)
        meta = config.get("meta") or {}
        if not isinstance(meta, dict):
            raise InvalidTypeError("meta must be a JSON object")
        tok = AutoTokenizer.from_pretrained(str(tok_dir), local_files_only=True)
        obj = cls(model, tok, vocab, meta=meta, device=device)
    except (KeyError, TypeError, ValueError, RuntimeError, OSError) as exc:
        raise ArtifactError(f"{d} holds an invalid {cls.artifact_kind}: {_short(exc)}") from None
    obj.model.eval()
    return obj


def _short(exc: BaseException) -> str:
    """The first line of an exception's message (torch's state-dict errors list every key)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def _file_hashes(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder``, keyed by its relative POSIX path."""
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _check_file_hashes(folder: Path, expected: Any) -> None:
    """Refuse a tokenizer folder whose files differ from the ones recorded at save time (edited, added, missing)."""
    if not isinstance(expected, dict) or not expected:
        raise ArtifactError(f"{folder.parent} records no tokenizer hashes; it is not a saved inverter")
    if not folder.is_dir():
        raise ArtifactError(f"{folder.parent} is missing its {TOKENIZER_DIR}/ folder")
    found = _file_hashes(folder)
    if found != expected:
        changed = sorted(set(found) ^ set(expected) | {k for k in found if expected.get(k) != found[k]})
        raise ArtifactError(
            f"{folder} does not match the hashes recorded in config.json (changed: "
            f"{', '.join(changed)}): truncated or modified"
        )


def read_strength(directory: str | os.PathLike[str]) -> list[dict[str, Any]] | None:
    """The strength rows recorded beside a saved inverter (:data:`STRENGTH_NAME`), or ``None`` when there are none.

    They are informational (not covered by the artifact's hashes): a report quotes them with their source.

    Raises:
        ArtifactError: The file exists but is not a JSON list of objects.
    """
    path = Path(directory) / STRENGTH_NAME
    if not path.is_file():
        return None
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{path} is not valid JSON ({exc.__class__.__name__})") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ArtifactError(f"{path} must hold a JSON list of rows")
    return rows
