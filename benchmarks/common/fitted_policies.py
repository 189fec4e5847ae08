"""TextCrafter policies for the benchmark grid: one calibration per size, one fitted policy per eps, cached.

Calibration (Presidio relabelling + embedding) is the slow, ``eps``-independent part of fitting, so
it is computed once per (size, seed) and shared by every ``eps`` of the grid; each policy is then
fitted with :func:`textcrafter_rag.textcrafter.fit_textcrafter` and saved. Both are stored as
``config.json`` + ``model.safetensors`` (no pickle). The full size reuses the policies shipped for
the bundled MiniLM (eps 1.0 and 2.5) when they are installed.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, astuple, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from textcrafter_rag.artifacts import load_artifact, save_artifact
from textcrafter_rag.errors import ArtifactError
from textcrafter_rag.policies import BUNDLED_MODEL_ID, shipped_policy_path
from textcrafter_rag.textcrafter import (
    Calibration,
    CalibrationConfig,
    PolicyTrainingConfig,
    TextCrafter,
    calibrate,
    fit_textcrafter,
)
from textcrafter_rag.textcrafter.pii import PIIClassifier
from textcrafter_rag.textcrafter.priors import ClusterPrior

from .caches import cache_dir, cache_key
from .options import quiet_seed_warnings

__all__ = ["FIT_SIZES", "FitSize", "PolicySource"]

CALIBRATION_KIND = "benchmark-calibration"


@dataclass(frozen=True)
class FitSize:
    """Calibration and training sizes of one benchmark size (recorded in each result's ``meta``)."""

    n_pii: int
    n_calibration: int
    clusters: int
    steps: int
    batch_size: int

    def as_dict(self) -> dict[str, int]:
        """The sizes as a flat dict, for the results ``meta``."""
        return asdict(self)


#: The full size uses the package defaults (those of the shipped policies).
FIT_SIZES: dict[str, FitSize] = {
    "full": FitSize(n_pii=1000, n_calibration=6000, clusters=16, steps=800, batch_size=256),
    "quick": FitSize(n_pii=300, n_calibration=1500, clusters=8, steps=150, batch_size=128),
    "smoke": FitSize(n_pii=60, n_calibration=300, clusters=4, steps=20, batch_size=64),
}


@dataclass(frozen=True)
class PolicySource:
    """Where a benchmark's TextCrafter policies come from: its size, encoder, data, seed and cache.

    Attributes:
        size: ``smoke``, ``quick`` or ``full`` (see :data:`FIT_SIZES`).
        encoder: The base encoder the policies protect.
        data_dir: The benchmark datasets (the calibration corpus is WikiText-2 train from there).
        cache: The benchmark cache folder.
        seed: Seed of calibration and fitting (part of the cache keys).
        progress: Show progress bars and fitting logs.
    """

    size: str
    encoder: Any
    data_dir: Path | None
    cache: Path
    seed: int = 0
    progress: bool = True

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, size: str, encoder: Any, data_dir: Path) -> PolicySource:
        """The source of a script's run: its ``--cache-dir``, ``--seed`` and ``--no-progress``."""
        cache = cache_dir(args.cache_dir)
        return cls(
            size=size, encoder=encoder, data_dir=data_dir, cache=cache, seed=args.seed, progress=not args.no_progress
        )

    @property
    def fit_size(self) -> FitSize:
        """The calibration and training sizes of :attr:`size`."""
        return FIT_SIZES[self.size]

    def at_size(self, size: str) -> PolicySource:
        """The same source at another benchmark size (``benchmarks.speed`` times a quick fit in any run)."""
        return replace(self, size=size)

    def calibration(self) -> Calibration:
        """:func:`~textcrafter_rag.textcrafter.calibrate` at this size, computed once and cached."""
        fs = self.fit_size
        sizes = astuple(fs)[:3]  # n_pii, n_calibration, clusters: what the calibration depends on
        key = cache_key("calibration-v2", self.encoder.model_id, self.size, *sizes, self.seed, str(self.data_dir))
        folder = self.cache / "calibration" / key
        if (folder / "config.json").is_file():
            try:
                return self._load_calibration(folder)
            except ArtifactError:
                pass  # truncated or edited: compute it again
        config = CalibrationConfig(
            n_pii=fs.n_pii, n_calibration=fs.n_calibration, clusters=fs.clusters, data_dir=self.data_dir
        )
        cal = calibrate(self.encoder, config, seed=self.seed, progress=self.progress, log=self._log)
        tensors = {**cal.pii.tensors(), **cal.prior.tensors(), "embeddings": torch.as_tensor(cal.embeddings)}
        save_artifact(
            folder,
            kind=CALIBRATION_KIND,
            tensors=tensors,
            config={"pii_metrics": cal.pii.metrics, "provenance": cal.provenance},
        )
        return cal

    def textcrafter(self, eps: float, *, noise_seed: int | None = None) -> TextCrafter:
        """A TextCrafter policy at ``eps``, fitted once per (size, seed) and cached.

        Args:
            eps: The perturbation norm.
            noise_seed: Seed of the returned mechanism's release noise (``None``: fresh randomness).
        """
        shipped = self._shipped(eps)
        if shipped is not None:
            with quiet_seed_warnings():
                return TextCrafter.load(shipped, seed=noise_seed)
        fs = self.fit_size
        key = cache_key(
            "textcrafter-v1", self.encoder.model_id, self.size, *astuple(fs), self.seed, eps, str(self.data_dir)
        )
        folder = self.cache / "policies" / f"minilm-{self.size}-eps{eps:g}-seed{self.seed}-{key[:8]}"
        if not (folder / "config.json").is_file():
            training = PolicyTrainingConfig(
                steps=fs.steps, batch_size=fs.batch_size, eval_every=min(20, fs.steps), seed=self.seed
            )
            fitted = fit_textcrafter(
                eps=eps,
                calibration=self.calibration(),
                training=training,
                seed=self.seed,
                progress=self.progress,
                log=self._log,
            )
            fitted.save(folder)
        with quiet_seed_warnings():
            return TextCrafter.load(folder, seed=noise_seed)

    def _shipped(self, eps: float) -> Path | None:
        """The shipped policy for ``eps`` if the full size may use it (same encoder, installed)."""
        if self.size != "full" or self.encoder.model_id != BUNDLED_MODEL_ID:
            return None
        return shipped_policy_path(BUNDLED_MODEL_ID, eps=eps)

    def _load_calibration(self, folder: Path) -> Calibration:
        config, tensors = load_artifact(folder, kind=CALIBRATION_KIND)
        return Calibration(
            encoder=self.encoder,
            pii=PIIClassifier.from_tensors(tensors, config["pii_metrics"]),
            prior=ClusterPrior.from_tensors(tensors),
            embeddings=tensors["embeddings"].numpy(),
            provenance=config["provenance"],
        )

    @property
    def _log(self) -> Any:
        return print if self.progress else None
