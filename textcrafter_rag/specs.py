"""Turn what a user names into a ready mechanism: defense specs and policy arguments.

:func:`from_spec` parses strings such as ``gaussian:s=0.01``, ``ldp:eps=4`` or ``textcrafter:DIR``
(the CLI and the benchmarks name defenses this way); :func:`resolve_policy` turns the ``policy=``
argument of :class:`~textcrafter_rag.protector.Protector` and both adapters into a mechanism.
"""

from __future__ import annotations

import os
import re
from typing import Any

from .autofit import AUTO, auto_policy
from .encoders import Encoder
from .errors import FingerprintMismatch, InvalidInputError, InvalidTypeError
from .mechanisms import (
    GaussianNoise,
    LDPGaussian,
    Mechanism,
    NoDefense,
    NullspaceNoise,
    Purkayastha,
    Shuffle,
    SpectralNoise,
)
from .textcrafter import TextCrafter

__all__ = ["from_spec", "resolve_policy", "PolicyArg", "DEFAULT_POLICY"]

#: What ``policy=`` accepts in :class:`~textcrafter_rag.protector.Protector` and both adapters.
PolicyArg = Mechanism | str | os.PathLike | None

#: The default ``policy=`` of :class:`~textcrafter_rag.protector.Protector` and both adapters:
#: shipped, cached or fitted on first use (:mod:`textcrafter_rag.autofit`).
DEFAULT_POLICY: PolicyArg = AUTO

_ALIASES = {"eps": "epsilon"}
_CLASSES: dict[str, type[Mechanism]] = {
    "shuffle": Shuffle,
    "gaussian": GaussianNoise,
    "ldp": LDPGaussian,
    "purkayastha": Purkayastha,
}
#: Mechanisms fitted for an encoder and saved to a directory: ``NAME:DIR[,STRENGTH=X]``.
_FITTED: dict[str, tuple[type[SpectralNoise] | type[NullspaceNoise], str]] = {
    "spectral": (SpectralNoise, "budget"),
    "nullspace": (NullspaceNoise, "s"),
}
#: ``DIR`` followed by ``,key=value`` options (a directory may itself contain commas).
_PATH_AND_OPTIONS = re.compile(r"^(?P<path>.*?)(?P<opts>(?:,\s*[A-Za-z_]\w*\s*=[^,]*)*)$", re.DOTALL)


def _parse_params(text: str, spec: str) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise InvalidInputError(f"bad parameter {part!r} in defense spec {spec!r}; expected key=value")
        key, value = (s.strip() for s in part.split("=", 1))
        try:
            params[_ALIASES.get(key, key)] = float(value)
        except ValueError:
            raise InvalidInputError(f"parameter {key!r} in defense spec {spec!r} must be a number") from None
    return params


def _load_fitted(name: str, rest: str, spec: str, *, encoder: Any, rng: dict[str, Any]) -> Mechanism:
    cls, strength = _FITTED[name]
    match = _PATH_AND_OPTIONS.match(rest)
    path = match.group("path").strip() if match else ""
    if not path or "=" in path:
        raise InvalidInputError(
            f"defense spec {spec!r} needs the directory of a fitted mechanism: '{name}:DIR[,{strength}=X]'"
        )
    params = _parse_params(match.group("opts"), spec)
    unknown = sorted(set(params) - {strength})
    if unknown:
        raise InvalidInputError(
            f"unknown parameter(s) {', '.join(unknown)} in defense spec {spec!r}; {name} takes {strength}"
        )
    return cls.load(path, encoder=encoder, **{strength: params.get(strength)}, **rng)


def from_spec(spec: str, *, seed: int | None = None, secure_mode: bool = False, encoder: Any = None) -> Mechanism:
    """Build a mechanism from its spec string.

    Specs: ``none``, ``shuffle``, ``gaussian:s=S``, ``ldp:eps=E[,delta=D]``, ``purkayastha:eps=E``,
    ``textcrafter:POLICY_DIR``, or ``textcrafter`` / ``textcrafter:eps=2.5`` for a policy shipped for the
    bundled MiniLM; ``spectral:DIR[,budget=B]`` and ``nullspace:DIR[,s=S]`` for a saved fitted
    mechanism, at its saved strength unless one is given (``encoder`` checks its fingerprint).

    Raises:
        ValueError: Unknown mechanism or malformed parameters.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidInputError("defense spec must be a non-empty string such as 'gaussian:s=0.01'")
    name, _, rest = spec.strip().partition(":")
    name = name.lower()
    rng = {"seed": seed, "secure_mode": secure_mode}
    if name == "none":
        return NoDefense()
    if name == "textcrafter":
        if not rest or "=" in rest:  # the shipped policy, optionally at a named eps
            eps = _parse_params(rest, spec).pop("epsilon", None) if rest else None
            return TextCrafter.load_shipped(eps=eps, **rng)
        return resolve_policy(rest, encoder=encoder, **rng)
    if name in _FITTED:
        return _load_fitted(name, rest, spec, encoder=encoder, rng=rng)
    if name not in _CLASSES:
        known = ", ".join(["none", *_CLASSES, "textcrafter", *_FITTED])
        raise InvalidInputError(f"unknown defense {name!r}; choose from {known}")
    try:
        return _CLASSES[name](**_parse_params(rest, spec), **rng)
    except TypeError as exc:
        raise InvalidInputError(f"bad parameters in defense spec {spec!r}: {exc}") from None


def resolve_policy(
    policy: Any, *, encoder: Encoder | None, secure_mode: bool = False, seed: int | None = None
) -> Mechanism:
    """Turn ``policy`` into a ready mechanism.

    Args:
        policy: ``"auto"`` (the default; ``None`` means the same): the policy shipped for the
            encoder, else one fitted for it earlier on this machine, else one fitted now and cached
            (:mod:`textcrafter_rag.autofit`); without an encoder, the policy shipped for the bundled
            all-MiniLM-L6-v2. Or a :class:`~textcrafter_rag.mechanisms.base.Mechanism` (a loaded
            ``TextCrafter`` or a baseline), or the path of a saved policy directory.
        encoder: The base encoder; a loaded policy is checked against its fingerprint.
        secure_mode: Draw noise from the OS CSPRNG (for policies loaded here; a given mechanism
            must already be in secure mode).
        seed: Seed for reproducible experiments (for policies loaded here).

    Raises:
        MissingPolicyError: ``"auto"`` for an encoder with no shipped or cached policy while
            ``TEXTCRAFTER_AUTO_FIT=0``.
        FingerprintMismatch: The policy was fitted for another encoder or dimension.
    """
    if isinstance(policy, Mechanism):
        if secure_mode and not policy.secure_mode:
            raise InvalidInputError(
                "secure_mode=True was requested but the given mechanism was built without it; "
                "construct it with secure_mode=True (or pass a policy path)"
            )
        if encoder is not None and policy.dim is not None and policy.dim != encoder.dimension:
            raise FingerprintMismatch(
                f"the policy protects {policy.dim}-d vectors but the encoder produces {encoder.dimension}-d ones"
            )
        return policy
    if policy is None or policy == AUTO:
        if encoder is None:
            return TextCrafter.load_shipped(secure_mode=secure_mode, seed=seed)
        return auto_policy(encoder, secure_mode=secure_mode, seed=seed)
    if isinstance(policy, (str, os.PathLike)):
        return TextCrafter.load(policy, encoder=encoder, secure_mode=secure_mode, seed=seed)
    raise InvalidTypeError(f"policy must be 'auto', a path or a Mechanism, got {type(policy).__name__}")
