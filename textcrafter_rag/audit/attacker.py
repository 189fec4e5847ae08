"""Which inverter the audit attacked with and how strong it is, as recorded beside its weights.

A saved inverter may carry ``strength.json`` (:data:`~textcrafter_rag.attacks.inverter_io.STRENGTH_NAME`):
its measured reconstruction on undefended text, written by ``benchmarks.attack_strength`` and
``benchmarks.gpu_inverter``. The audit quotes it, so a report says how strong its attacker is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..attacks.inverter_io import STRENGTH_NAME

__all__ = ["attacker_name", "strength_summary", "strength_text"]

#: The columns of an inverter's recorded strength rows that the report quotes.
_STRENGTH_KEYS = ("attack", "defense", "bleu", "token_f1", "content_f1", "n_test", "n_train", "train_minutes")


def _f(v: Any) -> str:
    return "–" if v is None else f"{float(v):.2f}"


def strength_summary(rows: list[dict[str, Any]] | None, *, prefer: str | None = None) -> dict[str, Any] | None:
    """The recorded strength of an inverter, compacted for the report's metadata.

    ``best`` is the undefended row of the audit's own decoding (``prefer``, e.g. ``inverter-beam4-rerank``) when
    recorded, else the strongest by content-F1; ``floor`` is the best floor row; ``None`` without rows.
    """
    if not rows:
        return None
    keep = [{k: r.get(k) for k in _STRENGTH_KEYS} for r in rows if r.get("defense", "none") == "none"]
    attacks = [r for r in keep if not str(r["attack"]).startswith("floor")]
    floors = [r for r in keep if str(r["attack"]).startswith("floor")]
    same = [r for r in attacks if r["attack"] == prefer]
    best = same[0] if same else max(attacks, key=lambda r: r.get("content_f1") or 0.0) if attacks else None
    top_floor = max(floors, key=lambda r: r.get("content_f1") or 0.0) if floors else None
    return {"file": STRENGTH_NAME, "best": best, "floor": top_floor, "rows": keep}


def attacker_name(inv: dict[str, Any]) -> str:
    """Which inverter attacked: the given one (its folder) or the cached clean one."""
    where = f" ({Path(inv['path']).name})" if inv.get("path") else ""
    return f"{inv.get('source', 'inverter')}{where}"


def strength_text(strength: dict[str, Any] | None) -> str:
    """How strong the attacker is on undefended text (one clause of the report), from :func:`strength_summary`."""
    if not strength or not strength.get("best"):
        return f"its strength on undefended text is not recorded beside it (no {STRENGTH_NAME})."
    b, fl = strength["best"], strength.get("floor") or {}
    floor = f"; best floor content-F1 {_f(fl.get('content_f1'))}" if fl else ""
    return (
        f"its recorded strength on undefended text ({strength['file']} beside its weights, {b.get('n_test')} "
        f"held-out sentences): {b.get('attack')} BLEU {_f(b.get('bleu'))} / token-F1 {_f(b.get('token_f1'))} / "
        f"content-F1 {_f(b.get('content_f1'))}{floor}."
    )
