"""TextCrafter: a trained policy picks a random perturbation of norm exactly ``eps``.

The method's parts, from the inside out:

* :mod:`.policy` — the two-branch network ``x -> (mu, sigma, v)``;
* :mod:`.projection` — the sphere projection and :func:`~.projection.release`;
* :mod:`.reward`, :mod:`.pii`, :mod:`.priors` — the reward and its PII classifier and cluster prior;
* :mod:`.rollout` — one sample-release-score step, and Algorithm 1's per-batch refinement;
* :mod:`.mechanism` — :class:`TextCrafter`, the mechanism (protect, save, load); inference
  imports nothing from training;
* :mod:`.calibration`, :mod:`.training`, :mod:`.fitting` — fitting a policy for any encoder;
* :mod:`.aware` — opt-in retrieval and adversary reward terms for training (off by default).
"""

from __future__ import annotations

from .aware import AwareRewardConfig
from .calibration import Calibration, CalibrationConfig, calibrate
from .fitting import fit_textcrafter
from .mechanism import TextCrafter
from .policy import PolicyConfig, TextCrafterPolicy
from .reward import RewardWeights
from .training import PolicyTrainingConfig

__all__ = [
    "TextCrafter",
    "fit_textcrafter",
    "Calibration",
    "CalibrationConfig",
    "calibrate",
    "PolicyConfig",
    "TextCrafterPolicy",
    "RewardWeights",
    "AwareRewardConfig",
    "PolicyTrainingConfig",
]
