"""The report's figure: end-to-end NDCG@10 against the attacker, a curve per fetch_k, beside the frontier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.common.reporting import setup_matplotlib

from .tables import attacker_reads_nothing, query_label

__all__ = ["make_plot"]


def make_plot(rows: list[dict[str, Any]], path: Path, *, frontier: Path | None) -> None:
    """Two panels. Left: end-to-end NDCG@10 against the candidate strength, one curve per fetch_k, beside the
    single-stage frontier's NDCG@10 at its measured perturbation norm (``frontier_parity.json``; no attacker
    involved). Right: NDCG@10 against the adaptive attacker's content-F1 share, one curve per fetch_k, beside the
    single-stage frontier (its attacker is the stronger parity one)."""
    plt = setup_matplotlib()
    fig, (left, ax) = plt.subplots(1, 2, figsize=(14, 5.5))
    pr = {
        r["doc_strength"]: r
        for r in rows
        if r.get("part") == "privacy"
        and r.get("target") == "docs"
        and r.get("corpus") == "wikitext"
        and r.get("mechanism") != "floor"
    }
    base = pr.get(None)
    util = [
        r
        for r in rows
        if r.get("part") == "utility"
        and r.get("mechanism") == "gaussian"
        and r.get("search") in ("two-stage", "single-stage")
        and r.get("encoding") == "float16"
    ]
    ks = [*sorted({r["fetch_k"] for r in util if r["fetch_k"]}), None]
    for q, style in ((None, "-"), (1.0, "--")):
        for n, f in enumerate(ks):
            lab = f"two-stage fetch_k {f}" if f else "one stage (same vectors)"
            pts = sorted(
                (r["doc_strength"], r["ndcg10"]) for r in util if r["fetch_k"] == f and r["query_strength"] == q
            )
            if pts:
                left.plot(*zip(*pts), style, marker="o", color=f"C{n}", label=f"{lab}, query {query_label(q)}")
            if base and base.get("content_f1"):
                pts = sorted(
                    (100 * pr[r["doc_strength"]]["content_f1"] / base["content_f1"], r["ndcg10"])
                    for r in util
                    if r["fetch_k"] == f and r["query_strength"] == q and r["doc_strength"] in pr
                )
                if pts:
                    ax.plot(*zip(*pts), style, marker="o", color=f"C{n}", label=f"{lab}, query {query_label(q)}")
    if frontier is not None and frontier.is_file():
        data = json.loads(frontier.read_text(encoding="utf-8"))
        fr = [r for r in data["rows"] if r.get("corpus") == "wikitext"]
        none = next((r for r in fr if r.get("mechanism") == "none"), None)
        for mech in sorted({r["mechanism"] for r in fr if r.get("attacker") == "adaptive"}):
            color = "grey" if mech != "gaussian" else "black"
            label = f"single-stage frontier: {mech}"
            mine = [r for r in fr if r["mechanism"] == mech and r.get("attacker") == "adaptive"]
            pts = sorted((r["perturbation_norm"], r["ndcg10"]) for r in mine if r.get("perturbation_norm"))
            if pts:
                left.plot(*zip(*pts), ":", marker="x", color=color, label=label)
            if none:
                pts = sorted((100 * r["content_f1"] / none["content_f1"], r["ndcg10"]) for r in mine)
                ax.plot(*zip(*pts), ":", marker="x", color=color, label=f"{label} (parity attacker)")
    for a in (left, ax):
        if util:
            a.axhline(util[0]["clean_ndcg10"], color="grey", lw=0.8)
        a.set_ylabel("NDCG@10 (SciFact)")
    left.set_xlabel("candidate strength r = ||y - x|| before rescaling (frontier: its perturbation norm)")
    left.set_title("NDCG@10 vs candidate strength (dotted: single-stage frontier)", fontsize=9)
    left.legend(fontsize=6, loc="lower left")
    ax.set_xlabel("adaptive content-F1, % of undefended (WikiText-2; attackers differ: see report)")
    title = "NDCG@10 vs what the adaptive attacker reads"
    if attacker_reads_nothing(rows):
        title += "\nTHIS RUN'S ATTACKER READS ~NOTHING EVEN FROM CLEAN VECTORS: its shares are noise"
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
