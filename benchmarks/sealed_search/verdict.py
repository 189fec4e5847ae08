"""The verdict against issues 29 and 30, and the helpers the report's tables share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["STORE_SIDE", "verdict_rows"]

#: Attackers that hold no key: every one must stay at chance for issue 30's target.
STORE_SIDE = ("thief", "pairs-", "inserter-")
#: The vector attacks (the access pattern is judged on its own row).
VECTOR_ATTACKS = ("guess-notes", "query-guess-disease")
#: The previous inverter numbers this study does not rerun (``two_stage.md``, attacker at parity).
INVERTER_NOTE = (
    "The adaptive inverter was **not rerun** for this study. Its last numbers (`benchmarks/results/two_stage.md`, "
    "the attacker at parity adapted on 30,000 (clean, stored) pairs, on the *unrotated* candidates): content-F1 "
    "8.16 on WikiText-2 documents at doc strength 2.0 (25% of the undefended 32.26; floor 0.80), 7.75 on PII notes "
    "(46% of 16.96; floor 4.99), 9.23 on SciFact queries at query strength 0.5 (82% of 11.27; floor 0.08). An "
    "inverter trained on clean vectors meets rotated candidates as vectors in an unknown basis; one adapted on "
    "known pairs learns the rotation with them (the pairs rows of the battery say how many it takes to guess)."
)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table of ready-made cells (first column left-aligned, the others right-aligned)."""
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|",
    ]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _store_side(attacker: str) -> bool:
    return attacker == "thief" or attacker.startswith(("pairs-", "inserter-"))


def _battery(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("part") == "battery"]


def _scale(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("part") == "scale"]


def _f(v: Any, nd: int = 3) -> str:
    return "–" if v is None else f"{v:.{nd}f}" if isinstance(v, float) else str(v)


def _worst(
    rows: Sequence[dict[str, Any]], mode: str, attacks: Sequence[str], *, store_side: bool
) -> dict[str, Any] | None:
    """The strongest store-side (or key-holder) row of ``mode`` among ``attacks`` (by multiple of chance / AUC)."""
    got = [
        r
        for r in _battery(rows)
        if r["mode"] == mode and r["attack"] in attacks and _store_side(r["attacker"]) == store_side
    ]
    if not got:
        return None
    return max(got, key=lambda r: r.get("x_chance", 0.0) if r["metric"] == "accuracy" else r["value"])


def _largest(rows: Sequence[dict[str, Any]], kind: str = "clustered") -> int | None:
    sizes = [r["n_records"] for r in _scale(rows) if r["distractors"] in (kind, "none")]
    return max(sizes) if sizes else None


def _scale_row(rows: Sequence[dict[str, Any]], size: int, mode: str, setting_has: str) -> dict[str, Any] | None:
    got = [
        r
        for r in _scale(rows)
        if r["n_records"] == size
        and r["mode"] == mode
        and setting_has in r["setting"]
        and r["distractors"] != "gaussian"
    ]
    return got[0] if got else None


def _upper(value: float, low: float, target: float) -> str:
    """``met`` (at or below the target), ``within noise`` (above it, but its 95% interval reaches it), ``not met``."""
    if value <= target:
        return "met"
    return "within noise" if low <= target else "not met"


def _ci(r: dict[str, Any]) -> str:
    return f"95% CI {r['ci_low']:.3f}-{r['ci_high']:.3f}, n {r['n']}"


def verdict_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (target, mode): what was measured and the verdict.

    Verdicts: ``met``; ``not met``; ``within noise`` (an attack row above its bound whose 95% interval still
    reaches it: this many targets cannot tell); ``not measured``. The attack rows are the worst of several
    attackers, which biases a mode at chance upward: read them with their intervals.
    """
    out: list[dict[str, Any]] = []
    big = _largest(rows)
    small = min((r["n_records"] for r in _scale(rows)), default=None)
    modes = list(dict.fromkeys(r["mode"] for r in _battery(rows)))

    def add(issue: str, target: str, mode: str, measured: str, met: str) -> None:
        out.append({"issue": issue, "target": target, "mode": mode, "measured": measured, "met": met})

    def yes(ok: bool) -> str:
        return "met" if ok else "not met"

    # -- issue 29 (candidate mode) ---------------------------------------------------------------------------
    if small is not None and (r := _scale_row(rows, small, "candidates", "(shipped)")):
        add(
            "29",
            "NDCG@10 >= 0.99 of clean on SciFact",
            f"candidates ({r['setting']})",
            f"{r['ndcg_ratio']:.3f} at {small:,} records",
            yes(r["ndcg_ratio"] >= 0.99),
        )
    if big is not None:
        cands = [
            r
            for r in _scale(rows)
            if r["n_records"] == big and r["mode"] == "candidates" and r["distractors"] != "gaussian"
        ]
        if cands:
            ok = [r for r in cands if r["ndcg_ratio"] >= 0.97 and r["opened_p95"] <= 2000 and r["app_ms_p50"] <= 50]
            measured = ", ".join(
                f"{r['setting'].replace(' (shipped)', ' (shipped)')}: {r['ndcg_ratio']:.3f} "
                f"({r['app_ms_p50']:.0f} ms app + {r['store_ms_p50']:.0f} ms store search)"
                for r in cands
            )
            add(
                "29",
                "NDCG@10 >= 0.97 at the largest store with fetched p95 <= 2,000 and app p50 <= 50 ms (any fetch_k)",
                f"candidates ({big:,} records)",
                measured,
                yes(bool(ok)),
            )
    for r in _scale(rows):
        if "recall_target" in r and r["distractors"] != "gaussian" and r["n_records"] in (small, big):
            add(
                "29",
                f"recall target {r['recall_target']}: a full scan's top 10 found at that rate; reaching fetch_k "
                "reported, never silent",
                f"candidates, {r['setting']} ({r['n_records']:,} records)",
                f"{r['recall_vs_scan']:.3f} found, NDCG ratio {r['ndcg_ratio']:.3f}, read p95 {r['opened_p95']:.0f}, "
                f"{r['capped_share']:.0%} of queries capped (warned and counted)",
                yes(r["recall_vs_scan"] >= r["recall_target"]),
            )
    for mode in ("candidates", "candidates-norot"):
        thief = [r for r in _battery(rows) if r["mode"] == mode and r["attacker"] == "thief"]
        if not thief:
            continue
        for r in thief:
            if r["attack"] in VECTOR_ATTACKS:
                add(
                    "29",
                    f"thief without key or pairs: {r['attack']} <= 1.5x chance",
                    mode,
                    f"{r['value']:.3f} = {r['x_chance']:.2f}x chance ({_ci(r)})",
                    _upper(r["value"], r["ci_low"], 1.5 * r["chance"]),
                )
            if r["attack"] == "membership":
                add(
                    "29",
                    "thief without key or pairs: membership AUC <= 0.6",
                    mode,
                    f"{r['value']:.3f} ({_ci(r)})",
                    _upper(r["value"], r["ci_low"], 0.6),
                )
    add(
        "29",
        "thief without key or pairs: inverter content-F1 <= 2x floor",
        "candidates",
        "not rerun (see the inverter note)",
        "not measured",
    )
    if _battery(rows):
        add(
            "29",
            "every other attacker row measured and printed beside it",
            "all",
            f"{len({r['attacker'] for r in _battery(rows)})} attackers x {len(modes)} modes (tables below)",
            "met",
        )
    # -- issue 30 (the default choice) -----------------------------------------------------------------------
    if big is not None:
        for mode, setting in (("candidates", "(shipped)"), ("index", "(shipped)")):
            r = _scale_row(rows, big, mode, setting)
            if r:
                add(
                    "30",
                    "NDCG@10 >= 0.99 of clean at the largest store, <= 200 opened, <= 30 ms p50 added",
                    f"{mode} ({r['setting']})",
                    f"{r['ndcg_ratio']:.3f}, {r['opened_p95']:.0f} opened, {r['app_ms_p50']:.1f} ms app p50 "
                    f"(+ store search {r['store_ms_p50']:.1f} ms) at {big:,} records",
                    yes(r["ndcg_ratio"] >= 0.99 and r["opened_p95"] <= 200 and r["app_ms_p50"] <= 30),
                )
    for mode in modes:
        for attacks, what, bound in (
            (VECTOR_ATTACKS, "guessing (notes pooled, queries) <= 1.2x chance", 1.2),
            (("membership",), "membership AUC <= 0.55", None),
            (("access-pattern",), "query guessing from the records a query opens <= 1.2x chance", 1.2),
        ):
            w = _worst(rows, mode, attacks, store_side=True)
            if not w:
                continue
            if bound is None:
                add(
                    "30",
                    f"every store-side attacker: {what}",
                    mode,
                    f"worst {w['attacker']}: {w['value']:.3f} ({_ci(w)}; {w['strategy']})",
                    _upper(w["value"], w["ci_low"], 0.55),
                )
            else:
                add(
                    "30",
                    f"every store-side attacker: {what}",
                    mode,
                    f"worst {w['attacker']} on {w['attack']}: {w['value']:.3f} = {w['x_chance']:.2f}x ({_ci(w)})",
                    _upper(w["value"], w["ci_low"], bound * w["chance"]),
                )
    if big is not None:
        for r in _scale(rows):
            if r["n_records"] == big and r["mode"] == "index" and r["distractors"] != "gaussian" and r["open_k"] <= 100:
                add(
                    "30",
                    "<= 64 bytes of app memory per record",
                    f"index ({r['setting']})",
                    f"{r['app_bytes_per_record_measured']:.0f} B measured "
                    f"(codes {r['app_vector_bytes_per_record']:.0f} B + ids and their dict)",
                    yes(r["app_bytes_per_record_measured"] <= 64),
                )
    return out
