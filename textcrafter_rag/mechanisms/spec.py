"""Parse defense specs such as ``gaussian:s=0.01``, ``ldp:eps=4`` or ``textcrafter:DIR``."""

from __future__ import annotations

from typing import Any

from .base import Mechanism

__all__ = ["from_spec"]

_ALIASES = {"eps": "epsilon"}


def _parse_params(text: str, spec: str) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise ValueError(f"bad parameter {part!r} in defense spec {spec!r}; expected key=value")
        key, value = (s.strip() for s in part.split("=", 1))
        try:
            params[_ALIASES.get(key, key)] = float(value)
        except ValueError:
            raise ValueError(f"parameter {key!r} in defense spec {spec!r} must be a number") from None
    return params


def from_spec(spec: str, *, seed: int | None = None, secure_mode: bool = False, encoder: Any = None) -> Mechanism:
    """Build a mechanism from its spec string.

    Specs: ``none``, ``shuffle``, ``gaussian:s=S``, ``ldp:eps=E[,delta=D]``, ``purkayastha:eps=E``,
    ``textcrafter:POLICY_DIR``, or ``textcrafter`` / ``textcrafter:eps=2.5`` for a policy shipped for the
    bundled MiniLM.

    Raises:
        ValueError: Unknown mechanism or malformed parameters.
    """
    from .ldp import LDPGaussian, Purkayastha
    from .simple import GaussianNoise, NoDefense, Shuffle
    from .textcrafter import TextCrafter

    if not isinstance(spec, str) or not spec.strip():
        raise ValueError("defense spec must be a non-empty string such as 'gaussian:s=0.01'")
    name, _, rest = spec.strip().partition(":")
    name = name.lower()
    rng = {"seed": seed, "secure_mode": secure_mode}
    if name == "none":
        return NoDefense()
    if name == "textcrafter":
        from ..protector import resolve_policy

        if not rest or "=" in rest:  # the shipped policy, optionally at a named eps
            eps = _parse_params(rest, spec).pop("epsilon", None) if rest else None
            return TextCrafter.load_shipped(eps=eps, **rng)
        return resolve_policy(rest, encoder=encoder, **rng)
    classes: dict[str, type[Mechanism]] = {
        "shuffle": Shuffle, "gaussian": GaussianNoise, "ldp": LDPGaussian, "purkayastha": Purkayastha,
    }
    if name not in classes:
        raise ValueError(f"unknown defense {name!r}; choose from none, shuffle, gaussian, ldp, purkayastha, textcrafter")
    try:
        return classes[name](**_parse_params(rest, spec), **rng)
    except TypeError as exc:
        raise ValueError(f"bad parameters in defense spec {spec!r}: {exc}") from None
