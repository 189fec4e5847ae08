"""The mechanism grid of the retrieval and utility studies, and what a mechanism does to the vectors.

The paper's grid, adapted to a unit-norm 384-d encoder (see benchmarks/README.md): Gaussian noise
over ``s``, the LDP Gaussian and Purkayastha over ``eps``, TextCrafter over ``eps``, and a Gaussian
at the expected norm of each TextCrafter ``eps`` (the comparison at equal perturbation size).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from textcrafter_rag.mechanisms import GaussianNoise, LDPGaussian, Mechanism, NoDefense, Purkayastha, Shuffle
from textcrafter_rag.numerics import row_norms

from .fitted_policies import PolicySource
from .options import add_renamed_option

__all__ = [
    "GRID_VALUES",
    "MechanismSpec",
    "GridValues",
    "add_grid_options",
    "build_grid",
    "mechanism_grid",
    "perturbation_norm",
]


@dataclass(frozen=True)
class GridValues:
    """The parameter values of each family in a grid."""

    gaussian_s: tuple[float, ...]
    ldp_eps: tuple[float, ...]
    purkayastha_eps: tuple[float, ...]
    textcrafter_eps: tuple[float, ...]


#: Per size: ``smoke`` keeps one or two settings, ``quick`` trims each family, ``full`` is the whole grid.
GRID_VALUES: dict[str, GridValues] = {
    "smoke": GridValues(gaussian_s=(0.05,), ldp_eps=(8.0,), purkayastha_eps=(), textcrafter_eps=()),
    "quick": GridValues(
        gaussian_s=(0.01, 0.05, 0.1), ldp_eps=(4.0, 12.0), purkayastha_eps=(128.0, 2048.0), textcrafter_eps=(1.0, 2.5)
    ),
    "full": GridValues(
        gaussian_s=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0),
        ldp_eps=(1.0, 4.0, 8.0, 12.0),
        purkayastha_eps=(8.0, 32.0, 128.0, 512.0, 2048.0),
        textcrafter_eps=(0.5, 1.0, 2.5, 4.0),
    ),
}


@dataclass
class MechanismSpec:
    """One entry of a mechanism grid.

    Attributes:
        family: Family name (``none``, ``shuffle``, ``gaussian``, ``ldp``, ``purkayastha``, ``textcrafter``).
        params: Public parameters for the result rows (``s``, ``eps``, ``delta``, ...).
        build: ``seed -> Mechanism`` (a fresh, seeded instance, so every scenario sees the same noise).
        comparison: ``grid`` or ``equal_norm`` (a Gaussian matched to a TextCrafter eps).
        extra: More columns for the result rows.
    """

    family: str
    params: dict[str, Any]
    build: Callable[[int], Mechanism]
    comparison: str = "grid"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """A unique, readable name such as ``gaussian:s=0.05`` or ``gaussian:s=0.05@norm``."""
        p = ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.params.items())
        tag = f"{self.family}:{p}" if p else self.family
        return tag + ("@norm" if self.comparison == "equal_norm" else "")

    def row_fields(self) -> dict[str, Any]:
        """The mechanism columns of a result row."""
        params = {f"param_{k}": v for k, v in self.params.items()}
        return {
            "mechanism": self.family,
            **params,
            "comparison": self.comparison,
            "mechanism_label": self.label,
            **self.extra,
        }


def mechanism_grid(
    *,
    size: str,
    dim: int,
    textcrafter: Callable[[float, int], Mechanism] | None,
    values: GridValues | None = None,
    equal_norm: bool = True,
    only: Sequence[str] | None = None,
) -> list[MechanismSpec]:
    """The benchmark mechanism grid.

    Args:
        size: ``smoke``, ``quick`` or ``full``: picks :data:`GRID_VALUES` and whether ``shuffle`` is in.
        dim: Embedding dimension (for the equal-norm Gaussian).
        textcrafter: ``(eps, seed) -> TextCrafter`` (loads or fits a cached policy, noise seeded with
            ``seed``); ``None`` leaves TextCrafter out.
        values: Override the parameter values of :data:`GRID_VALUES`.
        equal_norm: Add a Gaussian at the expected norm of each TextCrafter eps.
        only: Keep only these families.
    """
    v = values or GRID_VALUES[size]
    te = v.textcrafter_eps if textcrafter is not None else ()
    specs: list[MechanismSpec] = [MechanismSpec("none", {}, lambda seed: NoDefense())]
    if size != "smoke":
        specs.append(MechanismSpec("shuffle", {}, lambda seed: Shuffle(seed=seed)))
    specs += [
        MechanismSpec("gaussian", {"s": s}, lambda seed, s=s: GaussianNoise(s=s, seed=seed)) for s in v.gaussian_s
    ]
    specs += [
        MechanismSpec("ldp", {"eps": e, "delta": 1e-5}, lambda seed, e=e: LDPGaussian(epsilon=e, seed=seed))
        for e in v.ldp_eps
    ]
    specs += [
        MechanismSpec("purkayastha", {"eps": e}, lambda seed, e=e: Purkayastha(epsilon=e, seed=seed))
        for e in v.purkayastha_eps
    ]
    if textcrafter is not None:
        specs += [MechanismSpec("textcrafter", {"eps": e}, lambda seed, e=e: textcrafter(e, seed)) for e in te]
    if equal_norm:
        for e in te:
            g = GaussianNoise.at_norm(e, dim=dim)
            specs.append(
                MechanismSpec(
                    "gaussian",
                    {"s": g.s},
                    lambda seed, s=g.s: GaussianNoise(s=s, seed=seed),
                    comparison="equal_norm",
                    extra={"matched_textcrafter_eps": e},
                )
            )
    if only:
        specs = [s for s in specs if s.family in set(only)]
    return specs


def add_grid_options(ap: argparse.ArgumentParser) -> None:
    """The mechanism-grid and privacy-attack options the retrieval and utility studies share."""
    add_renamed_option(
        ap,
        "--privacy-mechanisms",
        "--privacy-defenses",
        choices=("core", "all"),
        default="core",
        help="attack 'core' (none, TextCrafter, Gaussian at TextCrafter's norm) or 'all' mechanisms",
    )
    ap.add_argument(
        "--attack-modes",
        nargs="+",
        choices=("non-adaptive", "adaptive"),
        default=["non-adaptive", "adaptive"],
        help="attacker modes to run with privacy",
    )
    add_renamed_option(ap, "--mechanisms", "--defenses", nargs="*", default=None, help="keep only these families")
    ap.add_argument(
        "--textcrafter-eps",
        nargs="+",
        type=float,
        default=None,
        help="override the TextCrafter eps grid (and the matched Gaussians)",
    )


def build_grid(args: argparse.Namespace, *, policies: PolicySource, dim: int) -> list[MechanismSpec]:
    """:func:`mechanism_grid` with the options of :func:`add_grid_options` and cached TextCrafter policies."""
    values = GRID_VALUES[policies.size]
    if args.textcrafter_eps is not None:
        values = replace(values, textcrafter_eps=tuple(args.textcrafter_eps))
    return mechanism_grid(
        size=policies.size,
        dim=dim,
        textcrafter=lambda eps, seed: policies.textcrafter(eps, noise_seed=seed),
        values=values,
        only=args.mechanisms,
    )


def perturbation_norm(x: np.ndarray, x_prot: np.ndarray) -> float:
    """Measured mean ``||x' - x||`` over rows (in float64, overflow-safe)."""
    return float(np.mean(row_norms(np.asarray(x_prot, dtype=np.float64) - np.asarray(x, dtype=np.float64))))
