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
import torch

from .. import embedding
from ..artifacts import CONFIG_NAME, FORMAT_VERSION
from ..embedding import texts_hash
from .inverter import Inverter, InverterConfig, InverterTrainingConfig

__all__ = [
    "adapted_key",
    "cache_root",
    "attacker_embeddings",
    "defense_key",
    "inverter_key",
    "load_or_train_inverter",
    "texts_hash",
]

#: Part of every inverter cache key: entries saved in another file layout are never looked up.
_LAYOUT = f"artifact-v{FORMAT_VERSION}"


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache folder (created)."""
    root = Path(
        cache_dir
        or os.environ.get("TEXTCRAFTER_ATTACK_CACHE")
        or Path.home() / ".cache" / "textcrafter_rag" / "attacks"
    )
    root.mkdir(parents=True, exist_ok=True)
    return root


def attacker_embeddings(
    encoder: Any,
    texts: Sequence[str],
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    batch: int = 1024,
    progress: bool = True,
) -> np.ndarray:
    """``encoder.encode(texts)``, cached in :func:`cache_root` by :func:`textcrafter_rag.embedding.cached_embeddings`.

    Only for the attacker's own (public) texts: a store owner's texts are never cached.
    """
    return embedding.cached_embeddings(
        encoder, texts, cache_dir=cache_root(cache_dir), batch_size=batch, progress=progress, desc="encode"
    )


def inverter_key(
    encoder: Any, texts: Sequence[str], config: InverterConfig, train_config: InverterTrainingConfig
) -> str:
    """Cache key of a clean inverter: encoder id, training texts, both configs and the file layout."""
    blob = json.dumps(
        {
            "encoder": getattr(encoder, "model_id", "?"),
            "texts": texts_hash(texts),
            "config": asdict(config),
            "train": asdict(train_config),
            "layout": _LAYOUT,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_or_train_inverter(
    encoder: Any,
    texts: Sequence[str],
    *,
    config: InverterConfig | None = None,
    train_config: InverterTrainingConfig | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
    device: torch.device | str | None = None,
) -> tuple[Inverter, Path, bool]:
    """A clean inverter for ``encoder`` trained on ``texts`` (loaded from cache when present).

    A cache entry counts once its ``config.json`` exists (written last); a corrupted or edited entry is
    refused rather than silently retrained, since it may have been tampered with: delete it to retrain.
    Training checkpoints itself beside the entry (``<entry>.partial``), so an interrupted run of the
    same call goes on where it stopped.

    ``device`` trains (and loads) it there (default CUDA when present, see
    :func:`~.inverter_model.resolve_device`); it is not part of the cache key.

    Returns:
        ``(inverter, directory, loaded_from_cache)``.

    Raises:
        ArtifactError: The cached entry exists but fails verification.
    """
    config = config or InverterConfig()
    train_config = train_config or InverterTrainingConfig()
    d = cache_root(cache_dir) / f"inverter-{inverter_key(encoder, texts, config, train_config)}"
    if (d / CONFIG_NAME).is_file():
        return Inverter.load(d, device=device), d, True
    emb = attacker_embeddings(encoder, texts, cache_dir=cache_dir, progress=progress)
    inv = Inverter.train(
        emb,
        texts,
        config=config,
        train_config=train_config,
        encoder=encoder,
        device=device,
        progress=progress,
        checkpoint_dir=d.with_name(d.name + ".partial"),
    )
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


def adapted_key(
    inverter: Inverter,
    defense: Any,
    texts: Sequence[str],
    *,
    n_pairs: int,
    seed: int,
    train_config: InverterTrainingConfig,
) -> str:
    """Cache key of an adaptive attacker: clean inverter, defense, attacker texts, budget, seed, fine-tuning config."""
    blob = json.dumps(
        {
            "inverter_meta": inverter.meta,
            "inverter_config": asdict(inverter.config),
            "defense": defense_key(defense),
            "texts": texts_hash(texts),
            "n_pairs": n_pairs,
            "seed": seed,
            "train": asdict(train_config),
            "layout": _LAYOUT,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
