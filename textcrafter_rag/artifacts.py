"""Artifact persistence: ``config.json`` + ``model.safetensors``, no pickle.

The config records a format version, library and torch versions, the SHA-256 of the weights
file and the SHA-256 of the config itself (:data:`CONFIG_DIGEST`, over its canonical JSON without
that field; it covers the weights through their hash). :func:`load_artifact` verifies all of them
and raises :class:`ArtifactError` with a clear message on any mismatch, truncation or edit, so an
edited ``eps`` is refused like edited weights.

These digests detect corruption and edits that do not recompute them; they are not signatures:
whoever can write an artifact's directory can replace the artifact whole. Protect it like code.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.numpy

from ._version import __version__
from .errors import ArtifactError

__all__ = [
    "ArtifactError",
    "save_artifact",
    "load_artifact",
    "restamp_artifact",
    "config_digest",
    "FORMAT_VERSION",
    "CONFIG_NAME",
    "WEIGHTS_NAME",
    "CONFIG_DIGEST",
]

FORMAT_VERSION = 1
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
#: Config field holding the SHA-256 of the rest of the config (see :func:`config_digest`).
CONFIG_DIGEST = "config_sha256"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def config_digest(config: dict[str, Any]) -> str:
    """SHA-256 of ``config`` without :data:`CONFIG_DIGEST`, as canonical JSON (sorted keys, no spaces).

    Canonical so that re-reading and re-writing the same values (any indentation, key order) keeps it.
    """
    body = {k: v for k, v in config.items() if k != CONFIG_DIGEST}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def _write_config(path: Path, config: dict[str, Any]) -> None:
    full = {**{k: v for k, v in config.items() if k != CONFIG_DIGEST}, CONFIG_DIGEST: config_digest(config)}
    _atomic_write(path, (json.dumps(full, indent=2, sort_keys=True) + "\n").encode())


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


def _torch_version() -> str | None:
    """The installed torch's version, read from its metadata (importing torch takes seconds), or ``None``."""
    try:
        return importlib.metadata.version("torch").split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return None


def _serialize(tensors: dict[str, Any], kind: str) -> bytes:
    """safetensors bytes of NumPy arrays (no torch needed) or, when any value is a torch tensor, of tensors."""
    if all(isinstance(v, np.ndarray) for v in tensors.values()):
        return safetensors.numpy.save({k: np.ascontiguousarray(v) for k, v in tensors.items()}, metadata={"kind": kind})
    import torch
    from safetensors.torch import save

    as_torch = {k: v if isinstance(v, torch.Tensor) else torch.from_numpy(np.asarray(v)) for k, v in tensors.items()}
    return save({k: v.detach().cpu().contiguous() for k, v in as_torch.items()}, metadata={"kind": kind})


def save_artifact(path: str | os.PathLike[str], *, kind: str, tensors: dict[str, Any], config: dict[str, Any]) -> Path:
    """Write ``tensors`` (NumPy arrays or torch tensors) and ``config`` to the directory ``path`` (created if needed).

    The recorded kind, versions and digests are this call's: stale ones in ``config`` (the config
    of a loaded artifact saved again) never override them.
    """
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    payload = _serialize(tensors, kind)
    _atomic_write(out / WEIGHTS_NAME, payload)
    full = {
        **config,
        "kind": kind,
        "format_version": FORMAT_VERSION,
        "library_version": __version__,
        "torch_version": _torch_version(),
        "weights_sha256": hashlib.sha256(payload).hexdigest(),
    }
    _write_config(out / CONFIG_NAME, full)
    return out


def _read_config(root: Path, kind: str) -> dict[str, Any]:
    """The config of the artifact ``root`` of ``kind``, its weights verified against their hash."""
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
    return config


def load_artifact(
    path: str | os.PathLike[str], *, kind: str, require_config_digest: bool = True, arrays: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read and verify an artifact directory written by :func:`save_artifact`.

    Args:
        path: The artifact directory.
        kind: The kind it must hold.
        require_config_digest: Refuse a config without :data:`CONFIG_DIGEST` (saved before configs
            were hashed). Only an attacker's own cached models (inverters) may be read without it;
            a protection artifact never is.
        arrays: Return NumPy arrays (no torch needed: protection loads so) instead of torch tensors.

    Raises:
        ArtifactError: Missing files, invalid JSON, another kind or format version, a weights or
            config hash mismatch (truncated or edited file), or an unreadable safetensors file.
    """
    root = Path(path)
    config = _read_config(root, kind)
    recorded = config.get(CONFIG_DIGEST)
    if recorded is None and require_config_digest:
        raise ArtifactError(
            f"{root / CONFIG_NAME} has no {CONFIG_DIGEST}: it was saved before configs were hashed, or the field "
            "was removed. If you trust its content, restamp it with textcrafter_rag.artifacts.restamp_artifact"
        )
    if recorded is not None and recorded != config_digest(config):
        raise ArtifactError(f"{root / CONFIG_NAME} does not match its recorded {CONFIG_DIGEST}: edited or corrupted")
    w_path = root / WEIGHTS_NAME
    try:
        if arrays:
            tensors = safetensors.numpy.load_file(str(w_path))
        else:
            from safetensors.torch import load_file

            tensors = load_file(str(w_path))
    except Exception as exc:  # safetensors raises its own error types
        raise ArtifactError(f"{w_path} is not a readable safetensors file ({exc.__class__.__name__})") from None
    return config, tensors


def restamp_artifact(path: str | os.PathLike[str], *, kind: str) -> Path:
    """Record the config digest of an artifact saved before configs were hashed; the weights are not touched.

    Why: such an artifact would be refused by :func:`load_artifact`. Restamping vouches for the
    config as it is now, so run it only on an artifact you trust (its weights are still checked
    against their recorded hash first).

    Raises:
        ArtifactError: As :func:`load_artifact` for a missing, foreign or corrupted artifact.
    """
    root = Path(path)
    _write_config(root / CONFIG_NAME, _read_config(root, kind))
    return root
