"""Fit TextCrafter for any encoder: calibrate, train the policy, return a ready mechanism."""

from __future__ import annotations

import os
import platform
import time
from typing import Any

import numpy as np
import torch

from ..encoders import encoder_fingerprint
from ..numerics import row_norms
from ..validation import check_positive
from .aware import AwareObjective, AwareRewardConfig
from .calibration import Calibration, CalibrationConfig, calibrate
from .mechanism import TextCrafter
from .policy import PolicyConfig, TextCrafterPolicy
from .reward import RewardWeights
from .training import PolicyTrainingConfig, train_policy

__all__ = ["fit_textcrafter", "median_norm"]

#: Encoders whose median norm is this close to 1 count as unit-norm (eps is then absolute).
_UNIT_TOLERANCE = 1e-3


def median_norm(embeddings: np.ndarray) -> float:
    """The median row norm, or exactly 1.0 for unit-norm embeddings (so their eps stays absolute)."""
    m = float(np.median(row_norms(embeddings)))
    return 1.0 if abs(m - 1.0) <= _UNIT_TOLERANCE else m


def fit_textcrafter(
    base: Any = None,
    *,
    eps: float = 1.0,
    weights: RewardWeights | None = None,
    training: PolicyTrainingConfig | None = None,
    policy_config: dict[str, Any] | None = None,
    calibration: Calibration | CalibrationConfig | None = None,
    quick: bool = False,
    seed: int = 0,
    progress: bool = True,
    log: Any = print,
    reward: AwareRewardConfig | None = None,
) -> TextCrafter:
    """Fit the PII classifier, the cluster prior and the policy for an encoder.

    Args:
        base: Any encoder :func:`~textcrafter_rag.encoders.as_encoder` accepts; ``None`` uses
            the bundled all-MiniLM-L6-v2. Ignored when ``calibration`` is a :class:`Calibration`.
        eps: Perturbation norm of every release, relative to the encoder's median embedding norm
            (which is 1 for unit-norm encoders). 1.0 keeps SciFact NDCG@10 at 80% of clean; the
            paper's 2.5 leaves retrieval unusable (see the README's results).
        weights: Reward weights ``alpha, beta, gamma`` (default all 1).
        training: REINFORCE settings; ``quick`` shrinks the defaults.
        policy_config: Overrides for :class:`~textcrafter_rag.textcrafter.policy.PolicyConfig` (``heads``, ...).
        calibration: A precomputed :class:`Calibration` (shared across an ``eps`` grid), or the
            :class:`CalibrationConfig` to compute one with.
        quick: A small, fast configuration for demos and tests.
        seed: Seed for everything random in fitting.
        progress: Show progress bars.
        log: Called with progress lines (``print`` by default; ``None`` for silence).
        reward: Retrieval and adversary terms added to the paper's reward (:mod:`.aware`); off by
            default. The adversary term needs ``Calibration.texts`` (:func:`calibrate` records them).
            The result is still a :class:`TextCrafter` (same inference); its config records the terms
            under ``"reward"`` and its :meth:`~TextCrafter.spec` reads ``textcrafter-aware:...`` until saved.

    Returns:
        The fitted :class:`TextCrafter`; ``.save(DIR)`` stores it, ``.training_report`` tells how
        training went.
    """
    eps = check_positive(eps, name="eps")
    weights = weights or RewardWeights()
    say = log or (lambda *_: None)
    t0 = time.perf_counter()
    if quick:
        training = training or PolicyTrainingConfig(steps=150, batch_size=128, eval_every=10, seed=seed)
    training = training or PolicyTrainingConfig(seed=seed)
    torch.manual_seed(seed)
    if not isinstance(calibration, Calibration):
        cfg = calibration or CalibrationConfig()
        calibration = calibrate(base, cfg.quick() if quick else cfg, seed=seed, progress=progress, log=log)
    encoder = calibration.encoder
    norm_scale = median_norm(calibration.embeddings)
    if norm_scale != 1.0:
        say(
            f"[fit] embeddings are not unit-norm (median norm {norm_scale:.4g}): eps {eps:g} means a perturbation "
            f"of norm {eps * norm_scale:.4g}"
        )
    policy = TextCrafterPolicy(PolicyConfig(dim=encoder.dimension, **(policy_config or {}))).float()
    aware = None
    if reward is not None and reward.enabled:
        x = torch.as_tensor(np.asarray(calibration.embeddings, dtype=np.float32))
        aware = AwareObjective(reward, x, calibration.texts, seed=training.seed)
    report = train_policy(
        policy,
        calibration.embeddings,
        eps=eps * norm_scale,
        pii=calibration.pii,
        prior=calibration.prior,
        weights=weights,
        config=training,
        progress=progress,
        aware=aware,
    )
    say(
        f"[fit] policy: validation reward {report.initial_val_reward:.4f} -> {report.best_val_reward:.4f} "
        f"(best at step {report.best_step}/{report.steps_run}, {report.seconds:.1f}s)"
    )

    fp_meta, probes = encoder_fingerprint(encoder)
    seconds = time.perf_counter() - t0
    metadata = {
        "encoder": fp_meta,
        "training": training.to_dict(),
        "training_report": report.to_dict(),
        **({"reward": reward.to_dict()} if aware is not None else {}),
        "provenance": {
            **calibration.provenance,
            "quick": quick,
            "fit_seconds": round(seconds, 1),
            "machine": f"{platform.machine()} {os.cpu_count()} CPUs, torch {torch.__version__}",
            "fitted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    }
    say(f"[fit] done in {seconds:.1f}s")
    tc = TextCrafter(
        policy=policy,
        eps=eps,
        pii=calibration.pii,
        prior=calibration.prior,
        weights=weights,
        norm_scale=norm_scale,
        metadata=metadata,
        probes=probes,
    )
    tc.training_report = report
    return tc
