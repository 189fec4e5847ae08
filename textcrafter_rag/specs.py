"""Turn what a user names into a ready mechanism: spec strings and ``mechanism=`` arguments.

:func:`from_spec` parses strings such as ``gaussian:s=0.01``, ``ldp:eps=4`` or ``textcrafter:DIR``
(the CLI and the benchmarks name mechanisms this way); :func:`resolve_mechanism` turns the ``mechanism=``
option of :class:`~textcrafter_rag.protector.Protector` and both adapters into a mechanism.
"""

from __future__ import annotations

import os
import re
from typing import Any

from .autofit import AUTO, auto_policy
from .deprecation import warn_renamed
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

__all__ = ["from_spec", "names_a_spec", "resolve_mechanism", "resolve_policy", "MechanismArg", "DEFAULT_MECHANISM"]

#: What ``mechanism=`` accepts in :class:`~textcrafter_rag.protector.Protector` and both adapters.
MechanismArg = Mechanism | str | os.PathLike | None

#: The default ``mechanism=`` of :class:`~textcrafter_rag.protector.Protector` and both adapters: the
#: TextCrafter policy shipped, cached or fitted on first use (:mod:`textcrafter_rag.autofit`).
DEFAULT_MECHANISM: MechanismArg = AUTO

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
            raise InvalidInputError(f"bad parameter {part!r} in mechanism spec {spec!r}; expected key=value")
        key, value = (s.strip() for s in part.split("=", 1))
        try:
            params[_ALIASES.get(key, key)] = float(value)
        except ValueError:
            raise InvalidInputError(f"parameter {key!r} in mechanism spec {spec!r} must be a number") from None
    return params


def _load_fitted(name: str, rest: str, spec: str, *, encoder: Any, rng: dict[str, Any]) -> Mechanism:
    cls, strength = _FITTED[name]
    match = _PATH_AND_OPTIONS.match(rest)
    path = match.group("path").strip() if match else ""
    if not path or "=" in path:
        raise InvalidInputError(
            f"mechanism spec {spec!r} needs the directory of a fitted mechanism: '{name}:DIR[,{strength}=X]'"
        )
    params = _parse_params(match.group("opts"), spec)
    unknown = sorted(set(params) - {strength})
    if unknown:
        raise InvalidInputError(
            f"unknown parameter(s) {', '.join(unknown)} in mechanism spec {spec!r}; {name} takes {strength}"
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
        raise InvalidInputError("mechanism spec must be a non-empty string such as 'gaussian:s=0.01'")
    name, _, rest = spec.strip().partition(":")
    name = name.lower()
    rng = {"seed": seed, "secure_mode": secure_mode}
    if name == "none":
        return NoDefense()
    if name == "textcrafter":
        if not rest or "=" in rest:  # the shipped policy, optionally at a named eps
            eps = _parse_params(rest, spec).pop("epsilon", None) if rest else None
            return TextCrafter.load_shipped(eps=eps, **rng)
        return TextCrafter.load(rest, encoder=encoder, **rng)
    if name in _FITTED:
        return _load_fitted(name, rest, spec, encoder=encoder, rng=rng)
    if name not in _CLASSES:
        known = ", ".join(["none", *_CLASSES, "textcrafter", *_FITTED])
        raise InvalidInputError(f"unknown mechanism {name!r}; choose from {known}")
    try:
        return _CLASSES[name](**_parse_params(rest, spec), **rng)
    except TypeError as exc:
        raise InvalidInputError(f"bad parameters in mechanism spec {spec!r}: {exc}") from None


def names_a_spec(text: str) -> bool:
    """Whether ``text`` is a spec string rather than a policy directory (an existing path wins)."""
    name = text.strip().partition(":")[0].lower()
    return name in {"none", "textcrafter", *_CLASSES, *_FITTED} and not os.path.exists(text)


def resolve_mechanism(
    mechanism: Any, *, encoder: Encoder | None, secure_mode: bool = False, seed: int | None = None
) -> Mechanism:
    """Turn the ``mechanism=`` option into a ready mechanism.

    Args:
        mechanism: ``"auto"`` (the default; ``None`` means the same): the TextCrafter policy shipped for
            the encoder, else one fitted for it earlier on this machine, else one fitted now and cached
            (:mod:`textcrafter_rag.autofit`); without an encoder, the policy shipped for the bundled
            all-MiniLM-L6-v2. Or a spec string (:func:`from_spec`, e.g. ``"gaussian:s=0.01"``), the path
            of a saved policy directory, or a :class:`~textcrafter_rag.mechanisms.base.Mechanism`.
        encoder: The base encoder; a loaded policy is checked against its fingerprint.
        secure_mode: Draw noise from the OS CSPRNG (for mechanisms built here; a given mechanism
            must already be in secure mode).
        seed: Seed for reproducible experiments (for mechanisms built here).

    Raises:
        MissingPolicyError: ``"auto"`` for an encoder with no shipped or cached policy while
            ``TEXTCRAFTER_AUTO_FIT=0``.
        FingerprintMismatch: The mechanism was fitted for another encoder or dimension.
    """
    if isinstance(mechanism, str) and mechanism != AUTO and names_a_spec(mechanism):
        mechanism = from_spec(mechanism, seed=seed, secure_mode=secure_mode, encoder=encoder)
    if isinstance(mechanism, Mechanism):
        if secure_mode and not mechanism.secure_mode:
            raise InvalidInputError(
                "secure_mode=True was requested but the given mechanism was built without it; "
                "construct it with secure_mode=True (or pass a spec string or a policy path)"
            )
        if encoder is not None and mechanism.dim is not None and mechanism.dim != encoder.dimension:
            raise FingerprintMismatch(
                f"the mechanism protects {mechanism.dim}-d vectors but the encoder produces {encoder.dimension}-d ones"
            )
        return mechanism
    if mechanism is None or mechanism == AUTO:
        if encoder is None:
            return TextCrafter.load_shipped(secure_mode=secure_mode, seed=seed)
        return auto_policy(encoder, secure_mode=secure_mode, seed=seed)
    if isinstance(mechanism, (str, os.PathLike)):
        return TextCrafter.load(mechanism, encoder=encoder, secure_mode=secure_mode, seed=seed)
    kind = type(mechanism).__name__
    raise InvalidTypeError(f"mechanism must be 'auto', a spec string, a path or a Mechanism, got {kind}")


def resolve_policy(
    policy: Any, *, encoder: Encoder | None, secure_mode: bool = False, seed: int | None = None
) -> Mechanism:
    """Deprecated name of :func:`resolve_mechanism`."""
    warn_renamed("resolve_policy", "resolve_mechanism")
    return resolve_mechanism(policy, encoder=encoder, secure_mode=secure_mode, seed=seed)
