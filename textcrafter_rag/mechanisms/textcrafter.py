"""TextCrafter: the trained policy as a mechanism, with fitting, saving and loading."""

from __future__ import annotations

import math
import os
import platform
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from ..artifacts import ArtifactError, load_artifact, save_artifact
from ..encoders import BUNDLED_MODEL_ID, FingerprintMismatch, as_encoder, encoder_fingerprint, verify_fingerprint
from ..calibration import Calibration, calibrate
from ..pii import PIIClassifier
from ..policy import PolicyConfig, PolicyOutput, TextCrafterPolicy
from ..priors import ClusterPrior
from ..reward import RewardWeights
from ..training import TrainingConfig, refine_batch, release, train_policy
from .base import Mechanism

__all__ = ["TextCrafter"]

_KIND = "textcrafter-policy"


def _check_eps(eps: float) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be a finite number > 0, got {eps!r}")
    return float(eps)


class TextCrafter(Mechanism):
    """Optimization-calibrated noise: a learned policy picks a random perturbation of norm exactly ``eps``.

    For each embedding ``f0`` the policy gives ``mu``, ``sigma`` and a unit direction ``v``; the
    release is ``f_adv = f0 + eps * P(delta)`` with ``delta ~ N(mu, sigma^2 I)`` drawn fresh per call
    and ``P`` the projection orthogonal to ``v``, normalised. Guarantees for every input:
    ``||f_adv - f0|| = eps`` and ``<f_adv - f0, v> = 0``. TextCrafter has no formal DP guarantee.

    Build one with :meth:`fit` (for any encoder) or :meth:`load`; the policy for the bundled
    all-MiniLM-L6-v2 ship with the package at eps 1.0 and 2.5 (:meth:`load_shipped`).

    Args:
        policy: The trained policy network.
        eps: Perturbation norm.
        pii: The reward's PII classifier.
        prior: The reward's cluster prior.
        weights: The reward weights.
        refine_steps: If > 0, run Algorithm 1's per-batch refinement with this many steps
            (slower; keeps each row's best release by reward).
        metadata: Fingerprint, provenance and reports, as stored in ``config.json``.
        probes: The encoder's probe embeddings (fingerprint), if known.
        seed: Reproducible noise (warns). secure_mode: CSPRNG noise.
    """

    name: ClassVar[str] = "textcrafter"
    deterministic_norm: ClassVar[bool] = True

    def __init__(
        self,
        *,
        policy: TextCrafterPolicy,
        eps: float,
        pii: PIIClassifier,
        prior: ClusterPrior,
        weights: RewardWeights = RewardWeights(),
        refine_steps: int = 0,
        metadata: dict[str, Any] | None = None,
        probes: np.ndarray | None = None,
        seed: int | None = None,
        secure_mode: bool = False,
    ) -> None:
        self.eps = _check_eps(eps)
        if refine_steps < 0:
            raise ValueError("refine_steps must be >= 0")
        super().__init__(seed=seed, secure_mode=secure_mode)
        self.policy = policy.eval()
        self.pii = pii
        self.prior = prior
        self.weights = weights
        self.refine_steps = int(refine_steps)
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.probes = probes
        self.path: Path | None = None
        self._torch_lock = threading.Lock()

    # ------------------------------------------------------------------ protection
    @property
    def dim(self) -> int:
        return self.policy.config.dim

    @torch.no_grad()
    def policy_outputs(self, x: np.ndarray) -> PolicyOutput:
        """``(mu, sigma, v)`` for a validated batch (inference path, dropout off)."""
        return self.policy(torch.as_tensor(x, dtype=torch.float32))

    def release_with_noise(self, x: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Release with given standard-normal noise ``z``: returns ``(f_adv, v)``. For tests and audits."""
        with torch.no_grad():
            f0 = torch.as_tensor(x, dtype=torch.float32)
            out = self.policy(f0)
            delta = out.mu + out.sigma * torch.as_tensor(z, dtype=torch.float32)
            return release(f0, delta, out.v, self.eps).numpy(), out.v.numpy()

    def _protect(self, x: np.ndarray) -> np.ndarray:
        if self.refine_steps:
            with self._torch_lock:  # refinement trains a copy of the policy
                return refine_batch(
                    self.policy, torch.as_tensor(x), self._noise, eps=self.eps, pii=self.pii,
                    prior=self.prior, weights=self.weights, steps=self.refine_steps,
                ).numpy()
        return self.release_with_noise(x, self._noise.normal(x.shape))[0]

    def params(self) -> dict[str, Any]:
        return {"eps": self.eps}

    def spec(self) -> str:
        return f"textcrafter:{self.path}" if self.path else "textcrafter"

    def expected_norm(self, dim: int) -> float:
        return self.eps

    # ------------------------------------------------------------------ fitting
    @classmethod
    def fit(
        cls,
        base: Any = None,
        *,
        eps: float = 1.0,
        weights: RewardWeights = RewardWeights(),
        training: TrainingConfig | None = None,
        policy_config: dict[str, Any] | None = None,
        calibration: Calibration | None = None,
        corpus: Sequence[str] | None = None,
        n_pii: int = 1000,
        n_calibration: int = 6000,
        clusters: int = 16,
        data_dir: str | os.PathLike[str] | None = None,
        quick: bool = False,
        seed: int = 0,
        progress: bool = True,
        log: Any = print,
    ) -> TextCrafter:
        """Fit the PII classifier, the cluster prior and the policy for an encoder.

        Args:
            base: Any encoder :func:`~textcrafter_rag.encoders.as_encoder` accepts; ``None`` uses
                the bundled all-MiniLM-L6-v2. Ignored when ``calibration`` is given.
            eps: Perturbation norm of every release (1.0 keeps SciFact NDCG@10 at 80% of clean; the
                paper's 2.5 leaves retrieval unusable, see the README's results).
            weights: Reward weights ``alpha, beta, gamma``.
            training: REINFORCE settings; ``quick`` shrinks the defaults.
            policy_config: Overrides for :class:`~textcrafter_rag.policy.PolicyConfig` (``heads``, ...).
            calibration: A precomputed :class:`~textcrafter_rag.calibration.Calibration` (shared
                across an ``eps`` grid); otherwise one is computed with the arguments below.
            corpus, n_pii, n_calibration, clusters, data_dir: See
                :func:`~textcrafter_rag.calibration.calibrate`.
            quick: A small, fast configuration for demos and tests.
            seed: Seed for everything random in fitting.
            progress: Show progress bars.
            log: Called with progress lines (``print`` by default; ``None`` for silence).
        """
        eps = _check_eps(eps)
        say = log or (lambda *_: None)
        t0 = time.perf_counter()
        if quick:
            n_pii, n_calibration, clusters = min(n_pii, 300), min(n_calibration, 1500), min(clusters, 8)
            training = training or TrainingConfig(steps=150, batch_size=128, eval_every=10, seed=seed)
        training = training or TrainingConfig(seed=seed)
        torch.manual_seed(seed)
        if calibration is None:
            calibration = calibrate(base, corpus=corpus, n_pii=n_pii, n_calibration=n_calibration,
                                    clusters=clusters, data_dir=data_dir, seed=seed, progress=progress, log=log)
        encoder = calibration.encoder
        cfg = PolicyConfig(dim=encoder.dimension, **(policy_config or {}))
        policy = TextCrafterPolicy(cfg)
        report = train_policy(policy, calibration.embeddings, eps=eps, pii=calibration.pii, prior=calibration.prior,
                              weights=weights, config=training, progress=progress)
        say(f"[fit] policy: validation reward {report.initial_val_reward:.4f} -> {report.best_val_reward:.4f} "
            f"(best at step {report.best_step}/{report.steps_run}, {report.seconds:.1f}s)")

        fp_meta, probes = encoder_fingerprint(encoder)
        seconds = time.perf_counter() - t0
        metadata = {
            "encoder": fp_meta,
            "training": training.to_dict(),
            "training_report": report.to_dict(),
            "provenance": {
                **calibration.provenance, "quick": quick, "fit_seconds": round(seconds, 1),
                "machine": f"{platform.machine()} {os.cpu_count()} CPUs, torch {torch.__version__}",
                "fitted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
        }
        say(f"[fit] done in {seconds:.1f}s")
        tc = cls(policy=policy, eps=eps, pii=calibration.pii, prior=calibration.prior, weights=weights,
                 metadata=metadata, probes=probes)
        tc.training_report = report
        return tc

    # ------------------------------------------------------------------ persistence
    def get_config_dict(self) -> dict[str, Any]:
        """The JSON-serialisable configuration stored in ``config.json``."""
        return {
            **self.metadata,
            "eps": self.eps,
            "dim": self.dim,
            "policy": self.policy.config.to_dict(),
            "reward_weights": self.weights.to_dict(),
            "pii_classifier": dict(self.pii.metrics),
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Save as ``config.json`` + ``model.safetensors`` (policy, PII classifier, centroids, probes)."""
        tensors = {f"policy.{k}": v for k, v in self.policy.state_dict().items()}
        tensors.update(self.pii.tensors())
        tensors.update(self.prior.tensors())
        if self.probes is not None:
            tensors["encoder.probes"] = torch.as_tensor(self.probes, dtype=torch.float32)
        self.path = save_artifact(path, kind=_KIND, tensors=tensors, config=self.get_config_dict())
        return self.path

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        encoder: Any = None,
        seed: int | None = None,
        secure_mode: bool = False,
        refine_steps: int = 0,
    ) -> TextCrafter:
        """Load a saved policy; with ``encoder``, refuse one fitted for a different encoder.

        Raises:
            ArtifactError: Missing, corrupted, edited or unknown-format files.
            FingerprintMismatch: ``encoder`` differs from the one the policy was fitted for.
        """
        config, tensors = load_artifact(path, kind=_KIND)
        try:
            eps = _check_eps(config["eps"])
            dim = int(config["dim"])
            pcfg = PolicyConfig(**config["policy"])
            if pcfg.dim != dim:
                raise ValueError(f"policy dimension {pcfg.dim} != recorded dimension {dim}")
            weights = RewardWeights(**config["reward_weights"])
            policy = TextCrafterPolicy(pcfg)
            state = {k[len("policy."):]: v for k, v in tensors.items() if k.startswith("policy.")}
            policy.load_state_dict(state, strict=True)
            pii = PIIClassifier.from_tensors(tensors, config.get("pii_classifier"))
            prior = ClusterPrior.from_tensors(tensors)
            if pii.weight.shape != (dim,) or prior.centroids.shape[1] != dim:
                raise ValueError("PII classifier or centroids do not match the policy dimension")
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise ArtifactError(f"{path} holds an invalid TextCrafter policy: {exc}") from None
        probes = tensors.get("encoder.probes")
        probes_np = probes.numpy() if probes is not None else None
        if encoder is not None:
            enc = as_encoder(encoder)
            if enc.dimension != dim:
                raise FingerprintMismatch(
                    f"the policy at {path} was fitted for {dim}-d embeddings from "
                    f"{config.get('encoder', {}).get('model_id')!r}, but the encoder produces {enc.dimension}-d "
                    "ones; fit a policy for this encoder with TextCrafter.fit(...) or `textcrafter fit`"
                )
            if probes_np is not None:
                verify_fingerprint(enc, probes_np)
        meta = {k: v for k, v in config.items() if k not in {"eps", "dim", "policy", "reward_weights", "pii_classifier"}}
        tc = cls(policy=policy, eps=eps, pii=pii, prior=prior, weights=weights, metadata=meta,
                 probes=probes_np, seed=seed, secure_mode=secure_mode, refine_steps=refine_steps)
        tc.path = Path(path)
        return tc

    @classmethod
    def load_shipped(
        cls, *, eps: float | None = None, seed: int | None = None, secure_mode: bool = False
    ) -> TextCrafter:
        """A policy shipped for the bundled all-MiniLM-L6-v2: ``eps`` 1.0 (default) or 2.5 (the paper's)."""
        from ..protector import DEFAULT_SHIPPED_EPS, MissingPolicyError, shipped_policy_path

        eps = DEFAULT_SHIPPED_EPS if eps is None else eps
        path = shipped_policy_path(BUNDLED_MODEL_ID, eps=eps)
        if path is None:
            raise MissingPolicyError(
                f"no policy for all-MiniLM-L6-v2 at eps={eps} ships with this installation (shipped: 1.0, 2.5); "
                "fit one with `textcrafter fit --eps EPS --out DIR`"
            )
        return cls.load(path, seed=seed, secure_mode=secure_mode)
