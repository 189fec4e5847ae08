"""The policies that ship inside the package, and where to find them.

Each shipped policy is a directory ``config.json`` + ``model.safetensors`` beside this file,
registered below under the encoder it was fitted for and its ``eps``.
"""

from __future__ import annotations

from pathlib import Path

from ..encoders import BUNDLED_MODEL_ID
from ..errors import MissingPolicyError

__all__ = ["BUNDLED_MODEL_ID", "DEFAULT_SHIPPED_EPS", "SHIPPED", "shipped_policy_path", "MissingPolicyError"]

#: Shipped policies: model id -> {eps: folder}.
SHIPPED: dict[str, dict[float, str]] = {
    BUNDLED_MODEL_ID: {1.0: "all-MiniLM-L6-v2-eps1.0", 2.5: "all-MiniLM-L6-v2-eps2.5"},
}

#: The eps used when none is named: the retrieval benchmark's recommendation (README, "Results").
DEFAULT_SHIPPED_EPS = 1.0


def shipped_policy_path(model_id: str | None, *, eps: float = DEFAULT_SHIPPED_EPS) -> Path | None:
    """The directory of the policy shipped for ``model_id`` at ``eps``, if one ships."""
    name = SHIPPED.get(model_id or "", {}).get(float(eps))
    if name is None:
        return None
    path = Path(__file__).parent / name
    return path if (path / "config.json").is_file() else None
