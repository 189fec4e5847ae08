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

Fitting needs the ``fit`` extra (torch and the calibration corpora). The torch side is imported on first use,
so importing this package (or ``textcrafter_rag``) never imports torch, even where it is installed. Without the
extra, :func:`fit_textcrafter` and :func:`calibrate` raise :class:`~textcrafter_rag.errors.MissingDependencyError`
naming it, and so do the torch classes (:class:`TextCrafterPolicy`, :class:`Calibration`) when imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..extras import FIT_PURPOSE, is_missing, missing_extra
from .configs import AwareRewardConfig, CalibrationConfig, PolicyConfig, PolicyTrainingConfig, RewardWeights
from .mechanism import TextCrafter

if TYPE_CHECKING:  # the torch side, loaded on first use (below): `import textcrafter_rag` never imports torch
    from .calibration import Calibration
    from .policy import TextCrafterPolicy


def _fit_missing(exc: ModuleNotFoundError) -> Exception:
    """The error for a torch-side import that failed: the extra's name if a package of ``fit`` is missing."""
    if not is_missing(exc, extra="fit"):
        return exc
    return missing_extra(str(exc.name), extra="fit", purpose=FIT_PURPOSE)


def fit_textcrafter(*args: Any, **kwargs: Any) -> TextCrafter:
    """Fit a TextCrafter policy for an encoder (``fit`` extra): :func:`.fitting.fit_textcrafter`, loaded on first use.

    Why a wrapper: the fitting modules import torch, which the runtime install does not have and which a
    process that only protects should not pay for on import.
    """
    try:
        from .fitting import fit_textcrafter as fit
    except ModuleNotFoundError as exc:
        raise _fit_missing(exc) from exc
    return fit(*args, **kwargs)


def calibrate(*args: Any, **kwargs: Any) -> Calibration:
    """Embed the calibration corpora and fit the reward's parts (``fit`` extra): :func:`.calibration.calibrate`."""
    try:
        from .calibration import calibrate as run
    except ModuleNotFoundError as exc:
        raise _fit_missing(exc) from exc
    return run(*args, **kwargs)


def __getattr__(name: str) -> Any:
    """The torch classes (``fit`` extra), imported on first use; without the extra, an error naming it."""
    try:
        if name == "Calibration":
            from .calibration import Calibration

            return Calibration
        if name == "TextCrafterPolicy":
            from .policy import TextCrafterPolicy

            return TextCrafterPolicy
    except ModuleNotFoundError as exc:
        raise _fit_missing(exc) from exc
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
