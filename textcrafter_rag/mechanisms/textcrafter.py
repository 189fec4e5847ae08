"""TextCrafter: the trained policy as a mechanism (work in progress)."""
from __future__ import annotations
from typing import ClassVar
from .base import Mechanism


class TextCrafter(Mechanism):
    name: ClassVar[str] = "textcrafter"
    deterministic_norm: ClassVar[bool] = True

    def _protect(self, x):  # pragma: no cover - placeholder until the policy lands
        raise NotImplementedError
