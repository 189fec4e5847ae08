"""The report of ``benchmarks.privacy.frontier``: content-F1 at equal NDCG relative to Gaussian, the verdicts, the plot.

Kept apart from the measurement so that ``--from-json`` rebuilds the report from a run's JSON. The
verdicts are computed from the rows, never typed in: the issue's aim (adaptive content-F1 <= 5 at
NDCG@10 >= 0.9 of clean) and its rule for switching the default (at the 0.9 target, >= 30% lower
adaptive content-F1 than Gaussian and at most half its PII-entity recovery).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.common.reporting import fmt, load_results, md_table, setup_matplotlib, write_markdown

__all__ = ["AIM_CONTENT_F1", "add_relative", "make_plot", "render_markdown", "rerender", "verdicts"]

AIM_CONTENT_F1, AIM_TARGET = 5.0, 0.9
SWITCH_CF_RATIO, SWITCH_PII_RATIO = 0.7, 0.5
TEXT_CORPORA = ("wikitext", "scifact")
_ENTITY_RULE = (
    "**PII-entity recovery**: the share of the victims' entity tokens (names, dates, numbers, e-mail local parts, "
    "8-digit account numbers) that occur in the reconstruction; case-insensitive, whole tokens (`[a-z0-9]+` after "
    "lower-casing, so 'Ann' is not recovered by 'Anna'); a multi-token entity counts token by token ('14 March 2021' "
    "with only '2021' right scores 1/3); `exact` is the share of entities whose whole token sequence appears. Victim "
    "and attacker PII sentences come from disjoint templates and entity values "
    "(benchmarks/privacy/frontier/pii_sentences.py)."
)


def _ref(rows: list[dict[str, Any]], row: dict[str, Any]) -> dict[str, Any] | None:
    """The Gaussian row at the same target, attacker and corpus."""
    return next(
        (
            g
            for g in rows
            if g["mechanism"] == "gaussian"
            and (g["ndcg_target"], g["attacker"], g["corpus"]) == (row["ndcg_target"], row["attacker"], row["corpus"])
        ),
        None,
    )


def _ratio(a: Any, b: Any) -> float | None:
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0 else None


def add_relative(rows: list[dict[str, Any]]) -> None:
    """Set ``content_f1_vs_gaussian`` and ``pii_vs_gaussian`` (ratios) on every mechanism row."""
    for r in rows:
        g = _ref(rows, r) if r.get("ndcg_target") is not None else None
        r["content_f1_vs_gaussian"] = _ratio(r.get("content_f1"), g and g.get("content_f1"))
        r["pii_vs_gaussian"] = _ratio(r.get("pii_entity_recovery"), g and g.get("pii_entity_recovery"))


def _at(rows: list[dict[str, Any]], mech: str, corpus: str, target: float = AIM_TARGET) -> dict[str, Any] | None:
    return next(
        (
            r
            for r in rows
            if (r["mechanism"], r["corpus"], r["attacker"]) == (mech, corpus, "adaptive") and r["ndcg_target"] == target
        ),
        None,
    )


def verdicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per mechanism: adaptive content-F1 at the 0.9 target per corpus, the aim, and the default-switch rule.

    ``cf_<corpus>`` / ``rel_<corpus>`` are content-F1 and its ratio to Gaussian (``pii`` included);
    ``entity`` / ``rel_entity`` are PII-entity recovery on the PII notes and its ratio, which the switch rule uses.
    """
    add_relative(rows)
    out = []
    for mech in dict.fromkeys(r["mechanism"] for r in rows if r.get("ndcg_target") is not None):
        v: dict[str, Any] = {"mechanism": mech}
        cfs, notes = [], []
        for corpus in (*TEXT_CORPORA, "pii"):
            r = _at(rows, mech, corpus)
            v[f"cf_{corpus}"] = r and r.get("content_f1")
            v[f"rel_{corpus}"] = r and r.get("content_f1_vs_gaussian")
            if r is not None:
                cfs.append(r["content_f1"])
                if not r.get("hit", True):
                    notes.append(f"{corpus} point off target")
        pii = _at(rows, mech, "pii")
        v["entity"], v["rel_entity"] = (pii or {}).get("pii_entity_recovery"), (pii or {}).get("pii_vs_gaussian")
        if len(cfs) < len(TEXT_CORPORA) + 1:  # "met" needs every corpus: a missing one could be the leaky one
            v["aim"] = "not met" if any(cf > AIM_CONTENT_F1 for cf in cfs) else "not measured"
        else:
            v["aim"] = "met" if max(cfs) <= AIM_CONTENT_F1 else "not met"
        if mech == "gaussian":
            v["switch"] = "reference"
        else:
            rels = [v[f"rel_{c}"] for c in TEXT_CORPORA if _at(rows, mech, c) is not None]
            if not rels or None in rels or v["rel_entity"] is None:
                v["switch"] = "not measured"
            else:
                ok = max(rels) <= SWITCH_CF_RATIO and v["rel_entity"] <= SWITCH_PII_RATIO
                v["switch"] = "meets" if ok else "fails"
        v["notes"] = "; ".join(notes)
        out.append(v)
    return out


def _pct(ratio: Any) -> str:
    return "–" if ratio is None else f"{ratio:.2f}× ({100 * (ratio - 1):+.0f}%)"


def _verdict_table(rows: list[dict[str, Any]]) -> str:
    vs = verdicts(rows)
    cells = [
        {
            **v,
            **{f"cf_{c}": f"{fmt(v[f'cf_{c}'])} [{_pct(v[f'rel_{c}'])}]" for c in (*TEXT_CORPORA, "pii")},
            "entity": f"{fmt(v['entity'])} [{_pct(v['rel_entity'])}]",
        }
        for v in vs
    ]
    heads = [
        "mechanism",
        "adaptive content-F1 @0.9, WikiText-2 [vs Gaussian]",
        "SciFact sentences",
        "PII notes",
        "adaptive PII-entity recovery @0.9 [vs Gaussian]",
        f"aim: content-F1 <= {AIM_CONTENT_F1:g} on every corpus",
        "default switch (<= 0.7× content-F1 on text corpora and <= 0.5× PII recovery)",
        "notes",
    ]
    cols = ["mechanism", "cf_wikitext", "cf_scifact", "cf_pii", "entity", "aim", "switch", "notes"]
    return md_table(cells, cols, headers=heads)


def _corpus_table(rows: list[dict[str, Any]], corpus: str) -> str:
    sel = [r for r in rows if r["corpus"] == corpus]
    order = {"none": 0, "floor": 1}
    sel.sort(key=lambda r: (order.get(r["mechanism"], 2), r["attacker"], -(r.get("ndcg_target") or 0), r["mechanism"]))
    cells = [
        {
            **r,
            "strength_cell": "–" if r.get("strength") is None else f"{r['strength_name']}={r['strength']:.4g}",
            "ndcg_cell": "–"
            if r.get("ndcg10") is None
            else f"{fmt(r['ndcg10'])} ({fmt(r.get('ndcg_ratio'), 3)})" + (" off" if r.get("hit") is False else ""),
            "rel": _pct(r.get("content_f1_vs_gaussian")),
            "rel_pii": _pct(r.get("pii_vs_gaussian")),
        }
        for r in sel
    ]
    cols = ["mechanism", "ndcg_target", "ndcg_cell", "attacker", "pairs", "content_f1", "rel"]
    heads = ["mechanism", "target", "NDCG@10 (÷clean)", "attacker", "pairs", "content-F1", "content-F1 vs Gaussian"]
    if corpus == "pii":
        cols += ["pii_entity_recovery", "rel_pii", "pii_entity_exact", "pii_recovery_name"]
        heads += ["PII-entity recovery", "vs Gaussian", "exact", "names"]
    cols += ["bleu", "token_f1", "keyword_f1", "strength_cell", "perturbation_norm"]
    heads += ["BLEU", "token-F1", "keyword-F1", "strength", "‖x'−x‖"]
    return md_table(cells, cols, headers=heads)


def render_markdown(rows: list[dict[str, Any]], meta: dict[str, Any], plot_name: str | None) -> str:
    """The report: setup, verdicts, one table per corpus, the bisection, the entity rule and what is missing."""
    add_relative(rows)
    about = "\n".join(f"* `{name}` ({c['strength']}): {c['about']}" for name, c in meta["candidates"].items())
    points = [
        {
            **p,
            "hit_cell": "yes" if p["hit"] else "no",
            "ratio_cell": f"{p['ratio']:.3f}",
            "strength_cell": f"{p['strength_name']}={p['strength']:.4g}",
        }
        for p in meta["points"]
    ]
    corpora = [c for c in meta["corpora"] if any(r["corpus"] == c for r in rows)]
    lines = [
        "# Privacy–retrieval frontier: content-F1 at equal SciFact NDCG@10, relative to Gaussian noise",
        "",
        f"Encoder {meta['encoder']} ({meta['dimension']}-d). Each mechanism is set, by bisection on a seeded noise "
        f"draw, to keep {', '.join(str(t) for t in meta['targets'])} of clean SciFact NDCG@10 "
        f"({meta['n_docs']} documents protected, {meta['n_queries']} clean queries, exact IndexFlatIP; clean "
        f"NDCG@10 {fmt(meta['clean_ndcg10'])}; tolerance ±{meta['tolerance']} of the ratio). At each point the "
        f"inverter attacks {meta['n_test']} victim texts per corpus: non-adaptive (clean inverter), and adaptive "
        f"(fine-tuned on {meta['pairs']} protected pairs of its own texts, one pass) at the 0.9 target for every "
        f"mechanism and at every target for Gaussian and `{meta.get('best') or '–'}`. Content-F1 is token-F1 "
        "without stop words and punctuation (percent). 'vs Gaussian' divides by Gaussian's value at the same "
        "target, attacker and corpus (the NDCG@10 of both is within the tolerance of the target).",
        "",
        about,
        "",
        f"Corpora: {meta['corpora_about']}",
        "",
        "## Verdicts (computed from the rows below)",
        "",
        _verdict_table(rows),
        "",
    ]
    for corpus in corpora:
        lines += [f"## {corpus}", "", _corpus_table(rows, corpus), ""]
    lines += [
        "## Bisection",
        "",
        md_table(
            points,
            [
                "mechanism",
                "target",
                "strength_cell",
                "ndcg10",
                "ratio_cell",
                "hit_cell",
                "evaluations",
                "perturbation_norm",
            ],
            headers=[
                "mechanism",
                "target",
                "strength",
                "NDCG@10",
                "÷ clean",
                "within tolerance",
                "evaluations",
                "‖x'−x‖",
            ],
        ),
        "",
        _ENTITY_RULE,
        "",
    ]
    if meta.get("caveats"):
        lines += ["Caveats: " + " ".join(meta["caveats"]), ""]
    if meta.get("not_measured"):
        lines += [f"Not measured in this run (rerun to continue): {', '.join(meta['not_measured'])}.", ""]
    if plot_name:
        lines += [f"![content-F1 vs NDCG@10]({plot_name})", ""]
    lines += [f"Command: `{meta['command']}`"]
    return "\n".join(lines)


def make_plot(rows: list[dict[str, Any]], path: Path) -> bool:
    """Content-F1 against NDCG@10: one panel per attacker, one colour per mechanism, one line style per corpus."""
    attackers = [a for a in ("non-adaptive", "adaptive") if any(r["attacker"] == a for r in rows)]
    pts = [r for r in rows if r.get("ndcg_target") is not None and r.get("content_f1") is not None]
    if not attackers or not pts:
        return False
    plt = setup_matplotlib()
    fig, axes = plt.subplots(1, len(attackers), figsize=(6.5 * len(attackers), 4.8), squeeze=False)
    mechs = list(dict.fromkeys(r["mechanism"] for r in pts))
    colors = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(mechs)}
    styles = {"wikitext": "o-", "scifact": "s--", "pii": "^:"}
    for ax, attacker in zip(axes[0], attackers):
        for corpus, style in styles.items():
            for m in mechs:
                line = sorted(
                    (r["ndcg10"], r["content_f1"])
                    for r in pts
                    if (r["mechanism"], r["attacker"], r["corpus"]) == (m, attacker, corpus)
                )
                if line:
                    ax.plot(*zip(*line), style, color=colors[m], label=f"{m} ({corpus})")
            none = next((r for r in rows if r["mechanism"] == "none" and r["corpus"] == corpus), None)
            if none is not None and none.get("ndcg10") is not None:
                ax.plot([none["ndcg10"]], [none["content_f1"]], "k*", ms=10)
            floor = next((r for r in rows if r["mechanism"] == "floor" and r["corpus"] == corpus), None)
            if floor is not None and floor.get("content_f1") is not None:
                ax.axhline(floor["content_f1"], color="gray", lw=0.7, ls=style[1:] or ":")
        ax.axhline(AIM_CONTENT_F1, color="tab:green", lw=0.8, ls="-.", label=f"aim {AIM_CONTENT_F1:g}")
        ax.set_xlabel("SciFact NDCG@10 (protected documents, clean queries)")
        ax.set_ylabel("inversion content-F1 (lower = more private)")
        ax.set_title(f"{attacker} attacker (star: no defense; gray: floor)", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def rerender(json_path: str, out_dir: str) -> None:
    """Rebuild the ``.md`` and ``.png`` of a results JSON (no measurement)."""
    meta, rows = load_results(json_path)
    base = Path(json_path).stem
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plot = out / f"{base}.png"
    has_plot = make_plot(rows, plot)
    write_markdown(out / f"{base}.md", render_markdown(rows, meta, plot.name if has_plot else None))
