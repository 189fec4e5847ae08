"""On-disk caches for attack artifacts: clean embeddings (``.npy``) and trained inverters (safetensors).

The default folder is ``~/.cache/textcrafter_rag/attacks/``; override it with the ``cache_dir``
argument or ``$TEXTCRAFTER_ATTACK_CACHE``. Keys are SHA-256 hashes of the inputs (texts, encoder
id, configs), so a changed dataset or configuration never reuses a stale artifact.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["cache_root", "texts_hash", "cached_embeddings", "inverter_key", "load_or_train_inverter", "defense_key",
           "adapted_key"]


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache folder (created)."""
    root = Path(cache_dir or os.environ.get("TEXTCRAFTER_ATTACK_CACHE") or
                Path.home() / ".cache" / "textcrafter_rag" / "attacks")
    root.mkdir(parents=True, exist_ok=True)
    return root


def texts_hash(texts: Sequence[str]) -> str:
    """SHA-256 of a text list (order-sensitive)."""
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


def cached_embeddings(
    encoder: Any, texts: Sequence[str], *, cache_dir: str | os.PathLike[str] | None = None, batch: int = 1024,
    progress: bool = True,
) -> np.ndarray:
    """``encoder.encode(texts)``, cached as ``.npy`` under the cache folder (resumable chunk by chunk)."""
    import shutil

    from tqdm.auto import tqdm

    key = hashlib.sha256(f"{getattr(encoder, 'model_id', '?')}|{texts_hash(texts)}".encode()).hexdigest()[:20]
    root = cache_root(cache_dir)
    path = root / f"emb-{key}.npy"
    if path.is_file():
        return np.load(path, allow_pickle=False)
    chunks = root / f"emb-{key}.chunks"
    chunks.mkdir(exist_ok=True)
    parts = []
    starts = range(0, len(texts), batch)
    for i, s in enumerate(tqdm(starts, desc="encode", disable=not progress or len(texts) <= batch)):
        f = chunks / f"{i:06d}.npy"
        if f.is_file():
            parts.append(np.load(f, allow_pickle=False))
            continue
        part = np.asarray(encoder.encode(list(texts[s : s + batch])), dtype=np.float32)
        np.save(chunks / f"{i:06d}.tmp.npy", part, allow_pickle=False)
        (chunks / f"{i:06d}.tmp.npy").replace(f)
        parts.append(part)
    emb = np.concatenate(parts, 0).astype(np.float32)
    tmp = root / f"emb-{key}.tmp.npy"
    np.save(tmp, emb, allow_pickle=False)
    tmp.replace(path)
    shutil.rmtree(chunks, ignore_errors=True)
    return emb


def inverter_key(encoder: Any, texts: Sequence[str], config: Any, train_config: Any) -> str:
    """Cache key of a clean inverter: encoder id, training texts and both configs."""
    blob = json.dumps({"encoder": getattr(encoder, "model_id", "?"), "texts": texts_hash(texts),
                       "config": asdict(config), "train": asdict(train_config)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_or_train_inverter(
    encoder: Any, texts: Sequence[str], *, config: Any = None, train_config: Any = None,
    cache_dir: str | os.PathLike[str] | None = None, progress: bool = True,
) -> tuple[Any, Path, bool]:
    """A clean inverter for ``encoder`` trained on ``texts`` (loaded from cache when present).

    Returns:
        ``(inverter, directory, loaded_from_cache)``.
    """
    from .inverter import Inverter, InverterConfig, TrainConfig

    config = config or InverterConfig()
    train_config = train_config or TrainConfig()
    d = cache_root(cache_dir) / f"inverter-{inverter_key(encoder, texts, config, train_config)}"
    if (d / "model.safetensors").is_file() and (d / "config.json").is_file():
        return Inverter.load(d), d, True
    emb = cached_embeddings(encoder, texts, cache_dir=cache_dir, progress=progress)
    inv = Inverter.train(emb, texts, config=config, train_config=train_config, encoder=encoder, progress=progress)
    inv.save(d)
    return inv, d, False


def defense_key(defense: Any) -> str:
    """Identity of a defense for cache keys: its spec, plus the weights of a learned policy.

    Only the mechanism's *distribution* is identified (its spec and parameters), never its noise
    state: an adaptive attacker trained against a deployed defense can be reused on any victim
    vectors released by that defense.
    """
    h = hashlib.sha256(str(getattr(defense, "spec", lambda: repr(defense))()).encode())
    h.update(repr(sorted(getattr(defense, "params", dict)().items())).encode())
    policy = getattr(defense, "policy", None)
    if policy is not None and hasattr(policy, "state_dict"):
        for name, tensor in sorted(policy.state_dict().items()):
            h.update(name.encode())
            h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def adapted_key(inverter: Any, defense: Any, texts: Sequence[str], *, n_pairs: int, seed: int,
                train_config: Any) -> str:
    """Cache key of an adaptive attacker: clean inverter, defense, attacker texts, budget, seed, fine-tuning config."""
    blob = json.dumps({"inverter_meta": inverter.meta, "inverter_config": asdict(inverter.config),
                       "defense": defense_key(defense), "texts": texts_hash(texts), "n_pairs": n_pairs,
                       "seed": seed, "train": asdict(train_config)}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
