"""The report of ``benchmarks.retrieval``: the plot, the ``protect_queries`` verdict and the Markdown.

Kept apart from the measurement so that ``--from-json`` can rebuild a report from an earlier
run's JSON, and so that a layout change never needs a rerun.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.attack_rows import floor_row
from benchmarks.common.reporting import fmt, load_results, md_table, setup_matplotlib, write_markdown

__all__ = ["make_plot", "protect_queries_verdict", "render_markdown", "rerender"]

_STYLES = {"gaussian": "o-", "ldp": "s-", "purkayastha": "^-", "textcrafter": "D-", "shuffle": "x", "none": "*"}
_COLORS = {"gaussian": "C0", "ldp": "C1", "purkayastha": "C2", "textcrafter": "C3", "shuffle": "C4", "none": "k"}


def _panels(ret: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    """``(x key, x label, privacy metric)`` per panel: the norm, then each measured inversion metric."""
    panels: list[tuple[str, str, str | None]] = [
        ("perturbation_norm", "measured perturbation norm ||x' - x|| (log)", None)
    ]
    for metric, name in (("bleu", "BLEU"), ("content_f1", "content-F1")):
        for mode in ("non_adaptive", "adaptive"):
            if any(r.get(f"{metric}_{mode}") is not None for r in ret):
                label = f"inversion {name}, {mode.replace('_', '-')} attacker (lower = more private)"
                panels.append((f"{metric}_{mode}", label, metric))
    return panels


def _family_points(ret: list[dict[str, Any]], fam: str, xkey: str) -> list[tuple[float, float]]:
    if fam == "none":
        return [(r[xkey], r["ndcg@10"]) for r in ret if r["scenario"] == "clean" and r.get(xkey) is not None]
    return sorted(
        (r[xkey], r["ndcg@10"])
        for r in ret
        if r["mechanism"] == fam
        and r.get("comparison") == "grid"
        and r.get(xkey) is not None
        and r["scenario"] != "clean"
    )


def make_plot(rows: list[dict[str, Any]], path: Path, *, privacy_rows: list[dict[str, Any]]) -> None:
    """NDCG@10 (flat index, protected docs) vs perturbation norm, and vs inversion BLEU / content-F1 with the floor."""
    plt = setup_matplotlib()
    ret = [r for r in rows if r.get("index") == "flat" and r["scenario"] in ("clean", "protected_docs")]
    clean = next((r["ndcg@10"] for r in ret if r["scenario"] == "clean"), None)
    panels = _panels(ret)
    floor = floor_row(privacy_rows) or {}
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.6), squeeze=False)
    for ax, (xkey, xlabel, metric) in zip(axes[0], panels):
        for fam, style in _STYLES.items():
            pts = _family_points(ret, fam, xkey)
            if not pts:
                continue
            xs, ys = zip(*pts)
            if xkey == "perturbation_norm":
                xs = tuple(max(x, 1e-3) for x in xs)
            ax.plot(xs, ys, style, label=fam, ms=7, color=_COLORS[fam])
        eq = sorted(
            (r[xkey], r["ndcg@10"]) for r in ret if r.get("comparison") == "equal_norm" and r.get(xkey) is not None
        )
        if eq:
            ax.plot(*zip(*eq), "o--", color="grey", label="gaussian @ TextCrafter norm")
        if xkey == "perturbation_norm":
            ax.set_xscale("log")
        elif floor.get(metric) is not None:
            ax.axvline(floor[metric], color="gray", ls=":", label=f"floor (ignores the vector) {floor[metric]:.2f}")
        if clean is not None:
            ax.axhline(clean, color="k", lw=0.6, ls=":")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("NDCG@10 (SciFact, exact IP, protected docs)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("At a given level of protection, how much retrieval quality is kept?")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def protect_queries_verdict(rows: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Compare NDCG@10 with and without query protection per defense (flat index): the default's evidence."""
    by: dict[str, dict[str, float]] = {}
    for r in rows:
        if r.get("index") == "flat" and r["scenario"] in ("protected_docs", "protected_docs_queries"):
            by.setdefault(r["mechanism_label"], {})[r["scenario"]] = r["ndcg@10"]
    table = [
        {
            "mechanism_label": k,
            "docs_only": v.get("protected_docs"),
            "docs_and_queries": v.get("protected_docs_queries"),
            "delta": v.get("protected_docs_queries", np.nan) - v.get("protected_docs", np.nan),
        }
        for k, v in by.items()
    ]
    tc = [t for t in table if t["mechanism_label"].startswith("textcrafter")]
    noisy = [t for t in table if not t["mechanism_label"].startswith(("shuffle", "none"))]
    better_off = sum(1 for t in noisy if t["delta"] < -0.5)
    text = (
        f"Protecting queries as well lowers NDCG@10 for {better_off} of {len(noisy)} noise-based settings "
        "(by more than 0.5 point); "
    )
    mean_tc = float(np.nanmean([t["delta"] for t in tc])) if tc else float("nan")
    if tc:
        changes = ", ".join(f"{t['mechanism_label']}: {t['delta']:+.2f}" for t in tc)
        text += f"for TextCrafter the change is {changes} NDCG@10 points (mean {mean_tc:+.2f}). "
    shuf = next((t for t in table if t["mechanism_label"] == "shuffle"), None)
    if shuf:
        text += (
            "Shuffling is the exception: it only works when queries get the same permutation "
            f"(docs only {fmt(shuf['docs_only'])} vs both {fmt(shuf['docs_and_queries'])}). "
        )
    if tc and math.isfinite(mean_tc):
        if mean_tc < 0:
            text += (
                "**Recommendation: keep `protect_queries=False` as the default** for TextCrafter: queries are "
                "not stored, and adding independent noise to them only costs retrieval quality."
            )
        else:
            text += (
                "**Recommendation: consider `protect_queries=True`**: in this run query protection did not "
                "cost TextCrafter retrieval quality."
            )
    return text, table


_EQUAL_NORM_NOTE = (
    "`cos(x', x)` is the mean cosine of a release with its clean vector; the correlation column is, per query, the "
    "correlation over documents of the clean score with the score change caused by the perturbation (0 for "
    "isotropic noise). A negative value means the perturbation is not noise-like: it systematically lowers the "
    "scores of the documents closest to the query, which is what the reward's pull toward the nearest 'safe' "
    "cluster centroid (`-gamma*||f_adv - f_mu||`) does once eps is comparable to ||x|| = 1."
)
_NOTES = [
    "## Notes",
    "",
    "* Similarity is the inner product of the released vectors as stored: Gaussian, LDP and TextCrafter outputs are "
    "not re-normalised (Purkayastha releases are unit vectors). Measured norms are in the JSON.",
    "* `shuffle` is only usable when queries get the same secret permutation; with clean queries it breaks "
    "retrieval (its 'protection' is the secrecy of the permutation, not noise).",
]


def _index_tables(rows: list[dict[str, Any]]) -> list[str]:
    cols = ["mechanism_label", "perturbation_norm", "recall@1", "recall@10", "mrr@10", "ndcg@10"]
    hdr = ["mechanism", "‖x'−x‖", "R@1", "R@10", "MRR@10", "NDCG@10"]
    parts: list[str] = []
    for kind, title in (("flat", "Exact inner product (IndexFlatIP)"), ("hnsw", "HNSW (IndexHNSWFlat, inner product)")):
        for scen, stitle in (
            ("protected_docs", "protected documents, clean queries"),
            ("protected_docs_queries", "protected documents and queries"),
        ):
            sel = [r for r in rows if r["index"] == kind and r["scenario"] in ("clean", scen)]
            parts += [f"## {title}: {stitle}", "", md_table(sel, cols, headers=hdr), ""]
    return parts


def _equal_norm_table(rows: list[dict[str, Any]]) -> list[str]:
    eq = [
        r
        for r in rows
        if r["index"] == "flat"
        and r["scenario"] == "protected_docs"
        and (r["mechanism"] == "textcrafter" or r.get("comparison") == "equal_norm")
    ]
    if not eq:
        return []
    eq.sort(key=lambda r: (r.get("param_eps") or r.get("matched_textcrafter_eps") or 0, r["mechanism"]))
    cols = ["mechanism_label", "perturbation_norm", "cosine_to_clean", "score_noise_corr", "recall@10", "ndcg@10"]
    hdr = ["mechanism", "‖x'−x‖", "cos(x', x)", "corr(<q,x>, <q,x'−x>)", "R@10", "NDCG@10"]
    return [
        "## TextCrafter vs Gaussian at equal perturbation norm (exact IP, protected docs)",
        "",
        md_table(eq, cols, headers=hdr),
        "",
        _EQUAL_NORM_NOTE,
        "",
    ]


def render_markdown(
    rows: list[dict[str, Any]], privacy_rows: list[dict[str, Any]], meta: dict[str, Any], plot_name: str
) -> str:
    """The human-readable report."""
    ds = meta["dataset"]
    verdict, pq_table = protect_queries_verdict(rows)
    parts = [
        f"# Retrieval under protection (SciFact, {meta['size']})",
        "",
        (
            f"Encoder {meta['encoder']} ({meta['dimension']}-d, {meta['normalisation']}); {ds['n_docs']} documents, "
            f"{ds['n_queries']} test queries; FAISS inner product. Metrics in percent. Seed {meta['seeds']['seed']}. "
            f"Runtime {meta['runtime_seconds']:.0f} s on {meta['machine']['cpu_count']} CPUs "
            f"(torch {meta['machine']['torch']}). Command: `{meta['command']}`."
        ),
        "",
        f"![NDCG@10 vs protection]({plot_name})",
        "",
        "## `protect_queries`",
        "",
        verdict,
        "",
        md_table(
            pq_table,
            ["mechanism_label", "docs_only", "docs_and_queries", "delta"],
            headers=["mechanism", "NDCG@10 docs only", "NDCG@10 docs + queries", "Δ"],
        ),
        "",
        *_index_tables(rows),
        *_equal_norm_table(rows),
    ]
    if privacy_rows:
        pcols = ["mechanism_label", "mode", "attacker", "bleu", "token_f1", "content_f1", "cosine"]
        floor = floor_row(privacy_rows)
        parts += [
            "## Inversion of protected document sentences",
            "",
            f"Attack config: {meta['attack_config']}",
            "",
            md_table([*privacy_rows, *([floor] if floor else [])], pcols),
            "",
        ]
    else:
        parts += [
            "## Privacy",
            "",
            (
                "Inversion metrics were not measured in this run (`--no-privacy`); the plot "
                "uses the measured perturbation norm as the protection axis."
            ),
            "",
        ]
    policies = f"* TextCrafter policies: {meta.get('textcrafter_policies')}; fit sizes {meta.get('textcrafter_fit')}."
    return "\n".join([*parts, *_NOTES, policies])


def rerender(results_json: str, out_dir: str) -> None:
    """Rebuild the Markdown and plot of an earlier run from its results JSON (measures nothing)."""
    meta, all_rows = load_results(results_json)
    rows = [r for r in all_rows if r.get("kind") != "privacy"]
    privacy_rows = [r for r in all_rows if r.get("kind") == "privacy"]
    out, base = Path(out_dir), Path(results_json).stem
    make_plot(rows, out / f"{base}.png", privacy_rows=privacy_rows)
    write_markdown(out / f"{base}.md", render_markdown(rows, privacy_rows, meta, f"{base}.png"))
