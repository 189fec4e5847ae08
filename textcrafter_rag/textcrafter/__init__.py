"""TextCrafter: a trained policy picks a random perturbation of norm exactly ``eps``.

The method's parts, from the inside out:

* :mod:`.configs` — the settings of the policy, reward, calibration and training (no torch);
* :mod:`.numpy_policy` — the policy network and the sphere projection in NumPy: what protection runs;
* :mod:`.mechanism` — :class:`TextCrafter`, the mechanism (protect, save, load); inference
  imports nothing from training and needs no torch;
* :mod:`.policy`, :mod:`.projection` — the same network and projection in torch, for training;
* :mod:`.reward`, :mod:`.pii`, :mod:`.priors` — the reward and its PII classifier and cluster prior;
* :mod:`.rollout` — one sample-release-score step, and Algorithm 1's per-batch refinement;
* :mod:`.calibration`, :mod:`.training`, :mod:`.fitting` — fitting a policy for any encoder;
* :mod:`.aware` — opt-in retrieval and adversary reward terms for training (off by default).

Fitting needs the ``fit`` extra (torch and the calibration corpora). Without it, :func:`fit_textcrafter`
and :func:`calibrate` raise :class:`~textcrafter_rag.errors.MissingDependencyError` naming the extra, and
the torch classes (:class:`TextCrafterPolicy`, :class:`Calibration`) raise it when imported.
"""

from __future__ import annotations

from typing import Any, NoReturn

from ..extras import FIT_PURPOSE, is_missing, missing_extra
from .configs import AwareRewardConfig, CalibrationConfig, PolicyConfig, PolicyTrainingConfig, RewardWeights
from .mechanism import TextCrafter

try:  # the torch side: the `fit` extra
    from .calibration import Calibration, calibrate
    from .fitting import fit_textcrafter
    from .policy import TextCrafterPolicy
except ModuleNotFoundError as exc:
    if not is_missing(exc, extra="fit"):
        raise
    _MISSING = exc.name

    def fit_textcrafter(*_args: Any, **_kwargs: Any) -> NoReturn:
        """Fit a TextCrafter policy: needs the ``fit`` extra, which is not installed."""
        raise missing_extra(str(_MISSING), extra="fit", purpose=FIT_PURPOSE)

    def calibrate(*_args: Any, **_kwargs: Any) -> NoReturn:
        """Calibrate a TextCrafter fit: needs the ``fit`` extra, which is not installed."""
        raise missing_extra(str(_MISSING), extra="fit", purpose=FIT_PURPOSE)

    def __getattr__(name: str) -> Any:
        """The torch classes, without the ``fit`` extra: an error naming it."""
        if name in {"Calibration", "TextCrafterPolicy"}:
            raise missing_extra(str(_MISSING), extra="fit", purpose=FIT_PURPOSE)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
