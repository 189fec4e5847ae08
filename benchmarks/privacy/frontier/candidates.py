"""The mechanisms the frontier benchmark compares: one :class:`Candidate` per mechanism, in a registry.

A candidate says how to build its mechanism at a strength ``t`` (a fresh, seeded instance, so that
every call with the same seed draws the same noise: the bisection then sees NDCG@10 as a
deterministic, in practice monotone, function of ``t``), the bracket ``t`` is searched in, and
whether NDCG falls or rises as ``t`` grows. Adding a mechanism is a few lines::

    register(Candidate(
        name="spectral",
        strength="budget",
        bracket=(1e-3, 10.0),
        build=lambda t, seed, ctx: _spectral_base(ctx).with_strength(t, seed=seed),  # fitted once, cached
        about="water-filling noise covariance from the calibration spectrum",
    ))

``ctx`` (:class:`FrontierContext`) gives a builder the encoder, its dimension and the benchmark's
cached calibration (unlabelled embeddings and the PII corpus, :class:`~.fitted_policies.PolicySource`),
for mechanisms that are fitted like TextCrafter. A builder may cache what it fits (it is called
once per bisection step).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.caches import cache_key
from benchmarks.common.fitted_policies import PolicySource
from benchmarks.common.options import quiet_seed_warnings
from textcrafter_rag.autofit import AutoFitConfig
from textcrafter_rag.mechanisms import GaussianNoise, LDPGaussian, Mechanism, NullspaceNoise, SpectralNoise
from textcrafter_rag.noise_fitting import fit_nullspace_for_encoder, fit_spectral_for_encoder
from textcrafter_rag.textcrafter import AwareRewardConfig, TextCrafter, calibrate, fit_textcrafter

__all__ = ["CANDIDATES", "DEFAULT_CANDIDATES", "Candidate", "FrontierContext", "register"]


@dataclass(frozen=True)
class FrontierContext:
    """What a candidate's builder may use besides ``t`` and the seed.

    Attributes:
        encoder: The base encoder (bundled all-MiniLM-L6-v2).
        dim: Its dimension.
        policies: The benchmark's cached calibration and fitted TextCrafter policies.
    """

    encoder: Any
    dim: int
    policies: PolicySource

    def calibration_embeddings(self) -> np.ndarray:
        """The unlabelled calibration embeddings (computed once per size and seed, cached)."""
        return self.policies.calibration().embeddings


MechanismBuilder = Callable[[float, int, FrontierContext], Mechanism]


@dataclass(frozen=True)
class Candidate:
    """One mechanism on the frontier.

    Attributes:
        name: Row label (``mechanism`` column).
        strength: What ``t`` is, for the tables (``s``, ``radius``, ``eps``, ...).
        bracket: ``(low, high)``, both > 0: the bisection runs on ``log t`` between them.
        build: ``(t, seed, ctx) -> Mechanism``, a fresh instance whose noise is seeded with ``seed``.
        ndcg_falls: NDCG@10 falls as ``t`` grows (noise scales); ``False`` for privacy budgets (eps).
        about: One line for the report: what the mechanism is and what ``t`` means.
        version: Bump it when ``build`` changes, so cached bisections and rows are not reused.
    """

    name: str
    strength: str
    bracket: tuple[float, float]
    build: MechanismBuilder
    ndcg_falls: bool = True
    about: str = ""
    version: str = "1"

    def __post_init__(self) -> None:
        lo, hi = self.bracket
        if not 0 < lo < hi:
            raise ValueError(f"{self.name}: the bracket must satisfy 0 < low < high, got {self.bracket}")

    def mechanism(self, t: float, *, seed: int, ctx: FrontierContext) -> Mechanism:
        """The mechanism at strength ``t`` with its noise seeded (the benchmark's seed warnings silenced)."""
        with quiet_seed_warnings():
            return self.build(float(t), seed, ctx)


#: Every known candidate by name (:func:`register` adds one).
CANDIDATES: dict[str, Candidate] = {}
#: Those run when ``--candidates`` is not given.
DEFAULT_CANDIDATES: tuple[str, ...] = ("gaussian", "textcrafter")


def register(candidate: Candidate) -> Candidate:
    """Add ``candidate`` to :data:`CANDIDATES` (a second one of the same name replaces the first)."""
    CANDIDATES[candidate.name] = candidate
    return candidate


@functools.lru_cache(maxsize=1)
def _shipped_policy() -> TextCrafter:
    with quiet_seed_warnings():
        return TextCrafter.load_shipped(eps=1.0, seed=0)


def _at_radius(base: TextCrafter, radius: float, seed: int) -> TextCrafter:
    """``base`` releasing at norm ``radius``, its noise seeded with ``seed``."""
    mech = TextCrafter(
        policy=base.policy,
        eps=radius / base.norm_scale,
        pii=base.pii,
        prior=base.prior,
        weights=base.weights,
        norm_scale=base.norm_scale,
        metadata=base.metadata,
        probes=base.probes,
        seed=seed,
    )
    mech.path = base.path
    return mech


def _textcrafter_at(radius: float, seed: int, ctx: FrontierContext) -> TextCrafter:
    """The shipped default policy (fitted at eps 1.0) releasing at norm ``radius`` instead of 1.0.

    The policy network does not see ``eps``: its ``mu``, ``sigma`` and ``v`` depend on the input only,
    and ``eps`` scales the normalised release direction. So this is the product's own policy, used at
    another radius, with the same direction for the same noise draw whatever the radius.
    """
    return _at_radius(_shipped_policy(), radius, seed)


#: The new mechanisms are fitted as auto-fit fits TextCrafter for any encoder: its offline corpora and sizes.
_AUTO = AutoFitConfig()
_FIT_CALIBRATION = _AUTO.calibration


def _fitted(ctx: FrontierContext, name: str, fit: Callable[[], Any], load: Callable[[Path], Any]) -> Any:
    """``fit()`` once per benchmark cache and encoder, saved under the cache and loaded afterwards.

    The key holds the name, not the fit settings: bump the name's ``-vN`` whenever a fit setting or
    the fitting code changes (a new key also re-measures every row of that mechanism, whose cache
    keys hold the fitted artifact's path).
    """
    folder = ctx.policies.cache / "frontier-fits" / cache_key(name, ctx.encoder.model_id, ctx.policies.seed)
    if (folder / "config.json").is_file():
        return load(folder)
    fitted = fit()
    fitted.save(folder)
    return load(folder)


@functools.lru_cache(maxsize=4)
def _spectral_base(ctx: FrontierContext) -> SpectralNoise:
    return _fitted(
        ctx,
        "spectral-v1",
        lambda: fit_spectral_for_encoder(ctx.encoder, calibration=_FIT_CALIBRATION, seed=ctx.policies.seed),
        SpectralNoise.load,
    )


@functools.lru_cache(maxsize=4)
def _nullspace_base(ctx: FrontierContext) -> NullspaceNoise:
    return _fitted(
        ctx,
        "nullspace-v1",
        lambda: fit_nullspace_for_encoder(ctx.encoder, calibration=_FIT_CALIBRATION, seed=ctx.policies.seed),
        NullspaceNoise.load,
    )


def _fit_aware(ctx: FrontierContext) -> TextCrafter:
    cal = calibrate(ctx.encoder, _FIT_CALIBRATION, seed=ctx.policies.seed, progress=False, log=None)
    return fit_textcrafter(
        eps=1.0,
        calibration=cal,
        seed=ctx.policies.seed,
        progress=False,
        log=None,
        training=replace(_AUTO.training, seed=ctx.policies.seed),
        reward=AwareRewardConfig(retrieval_weight=1.0, adversary_weight=1.0, adversary_every=50),
    )


@functools.lru_cache(maxsize=4)
def _aware_base(ctx: FrontierContext) -> TextCrafter:
    with quiet_seed_warnings():
        return _fitted(ctx, "textcrafter-aware-v1", lambda: _fit_aware(ctx), lambda p: TextCrafter.load(p, seed=0))


register(
    Candidate(
        name="gaussian",
        strength="s",
        bracket=(1e-3, 0.5),
        build=lambda t, seed, ctx: GaussianNoise(s=t, seed=seed),
        about="x + N(0, s² I); s is the per-coordinate standard deviation (norm ≈ s·√D)",
    )
)
register(
    Candidate(
        name="textcrafter",
        strength="radius",
        bracket=(0.02, 2.5),
        build=_textcrafter_at,
        about="the shipped default policy (fitted at eps 1.0) released at norm t = ‖x'−x‖; not refitted per t",
    )
)
register(
    Candidate(
        name="spectral",
        strength="budget",
        bracket=(1e-5, 0.1),
        build=lambda t, seed, ctx: _spectral_base(ctx).with_strength(t, seed=seed),
        about="water-filling noise covariance from the calibration spectrum; t = mean added variance of a query "
        "score (isotropic noise of std s has t = s²)",
    )
)
register(
    Candidate(
        name="nullspace",
        strength="s",
        bracket=(1e-3, 0.3),
        build=lambda t, seed, ctx: _nullspace_base(ctx).with_strength(t, seed=seed),
        about="INLP: directions that predict PII kinds removed (until a probe is at chance), then N(0, s² I), "
        "renormalised",
    )
)
register(
    Candidate(
        name="textcrafter-aware",
        strength="radius",
        bracket=(0.02, 2.5),
        build=lambda t, seed, ctx: _at_radius(_aware_base(ctx), t, seed),
        about="TextCrafter refitted at eps 1.0 with retrieval (weight 1) and bag-of-words adversary (weight 1) "
        "terms in its reward (auto-fit sizes), released at norm t",
    )
)
register(
    Candidate(
        name="ldp",
        strength="eps",
        bracket=(1.0, 5000.0),
        build=lambda t, seed, ctx: LDPGaussian(epsilon=t, seed=seed),
        ndcg_falls=False,
        about="(eps, 1e-5)-LDP analytic Gaussian on the unit sphere; isotropic noise, so the same curve as "
        "gaussian: it says which eps each target costs",
    )
)
