"""Artifact persistence: ``config.json`` + ``model.safetensors``, no pickle.

The config records a format version, library and torch versions and the SHA-256 of the
weights file; :func:`load_artifact` verifies all of them and raises :class:`ArtifactError`
with a clear message on any mismatch, truncation or edit.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save

from ._version import __version__
from .errors import ArtifactError

__all__ = ["ArtifactError", "save_artifact", "load_artifact", "FORMAT_VERSION", "CONFIG_NAME", "WEIGHTS_NAME"]

FORMAT_VERSION = 1
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_artifact(
    path: str | os.PathLike[str], *, kind: str, tensors: dict[str, torch.Tensor], config: dict[str, Any]
) -> Path:
    """Write ``tensors`` and ``config`` to the directory ``path`` (created if needed)."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    payload = save({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, metadata={"kind": kind})
    _atomic_write(out / WEIGHTS_NAME, payload)
    full = {
        "kind": kind,
        "format_version": FORMAT_VERSION,
        "library_version": __version__,
        "torch_version": torch.__version__.split("+")[0],
        "weights_sha256": hashlib.sha256(payload).hexdigest(),
        **config,
    }
    _atomic_write(out / CONFIG_NAME, (json.dumps(full, indent=2, sort_keys=True) + "\n").encode())
    return out


def load_artifact(path: str | os.PathLike[str], *, kind: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Read and verify an artifact directory written by :func:`save_artifact`.

    Raises:
        ArtifactError: Missing files, invalid JSON, another kind or format version, a weights
            hash mismatch (truncated or edited file), or an unreadable safetensors file.
    """
    root = Path(path)
    cfg_path, w_path = root / CONFIG_NAME, root / WEIGHTS_NAME
    if not root.is_dir():
        raise ArtifactError(f"{root} is not a directory with a saved {kind}")
    for p in (cfg_path, w_path):
        if not p.is_file():
            raise ArtifactError(f"{root} is missing {p.name}; it is not a saved {kind}")
    try:
        config = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{cfg_path} is not valid JSON ({exc.__class__.__name__})") from None
    if not isinstance(config, dict):
        raise ArtifactError(f"{cfg_path} must hold a JSON object")
    if config.get("kind") != kind:
        raise ArtifactError(f"{root} holds a {config.get('kind')!r}, not a {kind!r}")
    version = config.get("format_version")
    if version != FORMAT_VERSION:
        raise ArtifactError(f"{root} has format version {version!r}; this library reads version {FORMAT_VERSION}")
    expected = config.get("weights_sha256")
    if not isinstance(expected, str) or _sha256(w_path) != expected:
        raise ArtifactError(f"{w_path} does not match the hash recorded in {CONFIG_NAME}: truncated or modified")
    try:
        tensors = load_file(str(w_path))
    except Exception as exc:  # safetensors raises its own error types
        raise ArtifactError(f"{w_path} is not a readable safetensors file ({exc.__class__.__name__})") from None
    return config, tensors
