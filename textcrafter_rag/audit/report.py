"""Render an :class:`~textcrafter_rag.audit.run.AuditResult`: ``audit.json``, ``.md``, ``.html`` and ``.png``.

The Markdown and HTML reports carry the same content: first, when the store keeps natural-language
text beside the vectors, the finding that it holds the plaintext (no inversion needed); then a
verdict relative to the floor, the table (content-F1 first, the floor row last), the notes, a plot,
the reconstructions and how everything was measured. The HTML file is self-contained (inline CSS,
the PNG as base64) and every piece of text in it goes through :func:`html.escape`.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
from pathlib import Path
from typing import Any

from ..extras import missing_extra
from .attacker import attacker_name, strength_text
from .run import AuditResult

__all__ = [
    "PLAINTEXT_HEADLINE",
    "html_report",
    "markdown",
    "plaintext_finding",
    "plot",
    "summary",
    "table",
    "verdict",
    "write_report",
]

#: The first words of every report on a store that keeps its texts beside the vectors.
PLAINTEXT_HEADLINE = "The store holds the plaintext."

#: ``(key, header)`` of the report table, content-F1 first.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("stage", "stage"),
    ("attacker", "attacker"),
    ("defense", "defense"),
    ("content_f1", "content-F1 [95% CI]"),
    ("bleu", "BLEU"),
    ("token_f1", "token-F1"),
    ("rouge_l", "ROUGE-L"),
    ("exact_match", "exact match"),
    ("keyword_f1", "keyword F1"),
    ("pii_auc", "PII-probe AUC"),
    ("cosine", "recon. cos"),
    ("target_cosine", "target cos"),
    ("vector_cosine", "vector cos"),
    ("recon_pii_rate", "PII in recon."),
)
#: Metrics on a 0-100 scale (the rest are in [0, 1]).
PERCENT = ("content_f1", "bleu", "token_f1", "rouge_l", "exact_match", "keyword_f1")
EXAMPLES_WARNING = (
    "Reconstructions may contain sensitive data recovered from the store: handle this report "
    "like the store itself (run with --examples 0 to leave them out)."
)
LEGEND = (
    "Text metrics in percent (0-100), computed against the sample's texts; content-F1 is token-F1 without stop "
    "words and punctuation: read it first, function words give token-F1 and ROUGE-L a high floor. "
    "PII-probe AUC: 0.5 = chance. recon. cos: cosine(encoder(reconstruction), encoder(text)); target cos: "
    "cosine(encoder(reconstruction), attacked vector); vector cos: cosine(attacked vector, encoder(text)), "
    "1 = raw encoder output; PII in recon.: share of reconstructions in which Presidio finds PII. "
    "floor: the best trivial attacker that ignores the vector (a constant string or a random training "
    "sentence), measured in the same run."
)


def _f(v: Any, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _defense_label(spec: str) -> str:
    """``textcrafter:/long/path/NAME`` -> ``textcrafter:NAME``."""
    if ":" in spec:
        name, rest = spec.split(":", 1)
        if os.sep in rest or "/" in rest:
            return f"{name}:{Path(rest).name}"
    return spec


def table(result: AuditResult) -> tuple[list[str], list[list[str]]]:
    """``(headers, cells)`` of the report table (plain text, unescaped)."""
    headers = [h for _, h in COLUMNS]
    cells = []
    for r in result.rows:
        row = []
        for key, _ in COLUMNS:
            v = r.get(key)
            if key == "defense":
                row.append(_defense_label(str(v)))
            elif key == "content_f1" and r.get("content_f1_ci_low") is not None:
                row.append(f"{_f(v)} [{_f(r['content_f1_ci_low'])}, {_f(r['content_f1_ci_high'])}]")
            elif key == "pii_auc" and v is not None and r.get("pii_auc_on") not in (None, "victims"):
                row.append(f"{_f(v)} ({r['pii_auc_on']})")
            else:
                row.append(_f(v))
        cells.append(row)
    return headers, cells


def _plaintext_details(result: AuditResult) -> str | None:
    """Why a store with text columns beside its vectors leaks regardless of the vectors (``None`` if it has none)."""
    cols = result.meta.get("inputs", {}).get("plaintext_columns") or []
    if not cols:
        return None
    names = ", ".join(f"'{c}'" for c in cols)
    what = f"Column {names} holds" if len(cols) == 1 else f"Columns {names} hold"
    return (
        f"{what} natural-language text beside the vectors: whoever can read the store reads the documents "
        "directly, with no inversion, and protecting the vectors does not hide them. Remove that text from "
        "the store (keep ids and fetch the texts from an access-controlled source) or encrypt it; the attack "
        "numbers below measure only what the vectors themselves leak."
    )


def plaintext_finding(result: AuditResult) -> str | None:
    """The finding that the store holds the plaintext, or ``None``; every report and summary states it first."""
    details = _plaintext_details(result)
    return None if details is None else f"{PLAINTEXT_HEADLINE} {details}"


def summary(result: AuditResult) -> str:
    """The console summary: the plaintext finding (if any), then the verdict."""
    return "\n\n".join(t for t in (plaintext_finding(result), verdict(result)) if t)


def verdict(result: AuditResult) -> str:
    """One paragraph: what the attacker recovers before and after, relative to the floor."""
    before, floor = result.row("before"), result.row("floor")
    afters = [r for r in (result.row("after"), result.row("after", adaptive=True)) if r is not None]
    defense = _defense_label(result.meta["defense"]["spec"])
    if before is None or not afters:
        return "No attack was measured."
    worst = max(afters, key=lambda r: r.get("content_f1") or r.get("target_cosine") or 0.0)
    kind = "adaptive" if worst.get("mode") == "adaptive" else "non-adaptive"
    diag = result.meta.get("diagnostics", {})
    if floor is None or before.get("content_f1") is None:
        return (
            f"No ground truth (--texts not given): the attacker's reconstructions re-embed at cosine "
            f"{_f(before.get('target_cosine'))} to the stored vectors before and {_f(worst.get('target_cosine'))} "
            f"to the protected ones after {defense} ({kind} attacker); Presidio finds PII in "
            f"{_f(_pct(before.get('recon_pii_rate')), 0)}% / {_f(_pct(worst.get('recon_pii_rate')), 0)}% of "
            "the reconstructions. Text-overlap metrics, keyword F1 and the floor need --texts."
        )
    fl, b, a = floor["content_f1"], before["content_f1"], worst["content_f1"]
    if diag.get("two_stage_candidates"):
        what = "two-stage candidate vectors; the clean vectors are sealed beside them"
    elif diag.get("store_is_raw"):
        what = "raw encoder output, i.e. unprotected"
    else:
        what = "not raw encoder output (see the notes)"
    if before["content_f1_ci_low"] > fl:
        first = (
            f"Before protection (the store as it is: {what}) the stored vectors leak: an inversion attacker "
            f"recovers content-F1 {_f(b)} (95% CI {_f(before['content_f1_ci_low'])}-"
            f"{_f(before['content_f1_ci_high'])}) against {_f(fl)} for the floor, an attacker that ignores "
            "the vectors."
        )
    else:
        first = (
            f"Before protection (the store as it is: {what}) no leak is measurable above the floor: content-F1 "
            f"{_f(b)} (95% CI reaches the floor, {_f(fl)})."
        )
    removed = (b - a) / (b - fl) if b > fl else float("nan")
    share = f"{removed:.0%} of the above-floor leakage removed" if math.isfinite(removed) else "nothing to remove"
    if worst["content_f1_ci_low"] > fl:
        second = (
            f"After {defense} the {kind} attacker still recovers content-F1 {_f(a)} ({share}): "
            "protection reduces the leak but does not bring it to the floor."
        )
    else:
        second = f"After {defense} the {kind} attacker recovers content-F1 {_f(a)} ({share}): at the floor."
    if kind == "non-adaptive":
        second += (
            " Only the non-adaptive attacker was run; one that knows the defense recovers more (run with --adaptive)."
        )
    pii = f" PII-probe AUC {_f(before.get('pii_auc'))} before, {_f(worst.get('pii_auc'))} after (0.5 = chance)."
    return f"{first} {second}{pii}"


def _pct(v: Any) -> float | None:
    return None if v is None else 100.0 * float(v)


def _method(result: AuditResult) -> list[str]:
    """ "How this was measured" bullets (plain text)."""
    m = result.meta
    inp, att, inv = m["inputs"], m["attacker"], m["attacker"]["inverter"]
    defense, cfg = m["defense"], inv["config"]
    out = [
        (
            f"Store: {inp['vectors']} ({inp.get('n_store')} rows, {inp.get('dim')}-d); "
            f"texts: {inp.get('texts') or 'none'} ({inp.get('n_texts')} rows)."
        ),
        f"Sample: {m['sample']['n']} rows ({m['sample']['rows']}, seed {m['sample']['seed']}).",
        f"Encoder: {m['encoder']['model_id']} ({m['encoder']['dimension']}-d).",
        (
            f"After: {_defense_label(defense['spec'])} (params {defense['params']}, expected perturbation norm "
            f"{_f(defense['expected_norm'])}, defense seed {defense['seed']})."
        ),
        (
            f"Inversion attacker: {attacker_name(inv)}, a clean-trained decoder ({cfg['n_layers']} layers, at most "
            f"{cfg['max_len']} WordPieces) trained {_f(inv['train_minutes'], 1)} min ({inv['train_steps']} steps) "
            f"on {inv.get('train_pairs')} texts; beam {att['beam']}"
            f"{' + rerank by re-embedding' if att['rerank'] else ''}; {strength_text(inv.get('strength'))}"
        ),
        (
            f"Keyword attack: {att['keyword']}. PII probe: trained on {att['pii_probe']['trained_on']} "
            f"(n={att['pii_probe']['n_pii']}), scored on {att['pii_probe']['scored_on']}."
        ),
    ]
    diag = m.get("diagnostics", {})
    if diag.get("store_cosine_mean") is not None:
        raw = "raw encoder output" if diag.get("store_is_raw") else "not raw encoder output"
        if diag.get("two_stage_candidates"):
            raw += " (two-stage candidate vectors, sealed clean vectors beside them)"
        pii = (
            f"; Presidio finds PII in {_f(_pct(diag['text_pii_rate']), 1)}% of the sample texts"
            if diag.get("text_pii_rate") is not None
            else ""
        )
        out.append(
            f"Store-is-raw diagnostic: mean cosine(stored vector, encoder(text)) "
            f"{diag['store_cosine_mean']:.3f} (min {diag['store_cosine_min']:.3f}): {raw}{pii}."
        )
    else:
        out.append(
            f"Mean norm of the stored vectors: {diag.get('stored_norm_mean', float('nan')):.3f} "
            "(raw output of a normalising encoder has norm 1)."
        )
    if att.get("adaptive"):
        a = att["adaptive"]
        out.append(
            f"Adaptive attacker: the clean inverter fine-tuned on {a['n_pairs']} (text, protected vector) pairs "
            f"of its own texts ({a['pairs_seen']} seen, {_f(a['adapt_minutes'], 1)} min)."
        )
    out.append(
        "A stronger attacker (more training data or compute, Vec2Text-style correction) recovers more: read the "
        "numbers as lower bounds for the attacker named above (`textcrafter audit --attacker DIR` attacks with "
        "a stronger saved inverter)."
    )
    out.append(
        f"Attacker seed {att['seed']}{' (quick mode: numbers are not meaningful)' if att['quick'] else ''}; "
        f"{m['date']}; {m['machine']['platform']}, {m['machine']['cpu_count']} CPUs, "
        f"{m['machine']['torch_threads']} torch threads; {_f(m['minutes'], 1)} min in all."
    )
    return out


def _examples(result: AuditResult) -> tuple[list[str], list[list[str]]]:
    adaptive = any("after_adaptive" in e for e in result.examples)
    headers = ["row", "text", "before", "after"] + (["after (adaptive)"] if adaptive else [])
    cells = [
        [str(e["row"]), e["text"] if e["text"] is not None else "–", e["before"], e["after"]]
        + ([e["after_adaptive"]] if adaptive else [])
        for e in result.examples
    ]
    return headers, cells


def _md_cell(text: str) -> str:
    return html.escape(" ".join(str(text).split()), quote=False).replace("|", "\\|")


def _md_table(headers: list[str], cells: list[list[str]]) -> str:
    lines = [
        "| " + " | ".join(_md_cell(h) for h in headers) + " |",
        "|" + "|".join("---" if i < 3 else "---:" for i in range(len(headers))) + "|",
    ]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in cells]
    return "\n".join(lines)


def markdown(result: AuditResult, *, png_name: str | None = "audit.png") -> str:
    """The Markdown report."""
    headers, cells = table(result)
    parts = ["# Inversion-risk audit", ""]
    details = _plaintext_details(result)
    if details is not None:
        parts += [f"> **{_md_cell(PLAINTEXT_HEADLINE)}** {_md_cell(details)}", ""]
    parts += [f"**Verdict.** {_md_cell(verdict(result))}", "", _md_table(headers, cells), "", _md_cell(LEGEND), ""]
    if result.meta.get("notes"):
        parts += ["## Notes", ""] + [f"- {_md_cell(n)}" for n in result.meta["notes"]] + [""]
    if png_name:
        parts += [f"![before vs after protection]({png_name})", ""]
    if result.examples:
        eh, ec = _examples(result)
        ex_table = _md_table(eh, ec).replace("|---:", "|---")
        parts += ["## Reconstructions", "", f"**Warning.** {_md_cell(EXAMPLES_WARNING)}", "", ex_table, ""]
    parts += ["## How this was measured", ""] + [f"- {_md_cell(b)}" for b in _method(result)]
    return "\n".join(parts) + "\n"


_CSS = (
    "body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}th,td{border:1px solid #ccc;padding:4px 8px;"
    "vertical-align:top}th{background:#f3f3f3}td.num{text-align:right;white-space:nowrap}"
    ".warn{background:#fff4e5;border-left:4px solid #f0a020;padding:0.5em 1em}"
    ".verdict{background:#eef5ff;border-left:4px solid #2a6fdb;padding:0.5em 1em}img{max-width:100%}"
    ".plaintext{background:#fdecea;border-left:4px solid #c62828;padding:0.5em 1em}"
)


def _html_table(headers: list[str], cells: list[list[str]], *, numeric_from: int | None = None) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = []
    for row in cells:
        tds = "".join(
            f'<td class="num">{e(c)}</td>' if numeric_from is not None and i >= numeric_from else f"<td>{e(c)}</td>"
            for i, c in enumerate(row)
        )
        body.append(f"<tr>{tds}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def html_report(result: AuditResult, *, png: bytes | None = None) -> str:
    """The self-contained HTML report (the PNG embedded as base64)."""
    e = html.escape
    headers, cells = table(result)
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>Inversion-risk audit</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>Inversion-risk audit</h1>",
    ]
    details = _plaintext_details(result)
    if details is not None:
        parts.append(f'<p class="plaintext"><strong>{e(PLAINTEXT_HEADLINE)}</strong> {e(details)}</p>')
    parts += [
        f'<p class="verdict"><strong>Verdict.</strong> {e(verdict(result))}</p>',
        _html_table(headers, cells, numeric_from=3),
        f"<p><small>{e(LEGEND)}</small></p>",
    ]
    if result.meta.get("notes"):
        parts += ["<h2>Notes</h2><ul>"] + [f"<li>{e(n)}</li>" for n in result.meta["notes"]] + ["</ul>"]
    if png:
        b64 = base64.b64encode(png).decode("ascii")
        parts.append(f'<p><img alt="before vs after protection" src="data:image/png;base64,{b64}"></p>')
    if result.examples:
        eh, ec = _examples(result)
        parts += [
            "<h2>Reconstructions</h2>",
            f'<p class="warn"><strong>Warning.</strong> {e(EXAMPLES_WARNING)}</p>',
            _html_table(eh, ec),
        ]
    parts += ["<h2>How this was measured</h2><ul>"] + [f"<li>{e(b)}</li>" for b in _method(result)] + ["</ul>"]
    parts += [
        "<details><summary>audit metadata (JSON)</summary><pre>",
        e(json.dumps(result.meta, indent=1)),
        "</pre></details>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def plot(result: AuditResult, path: str | os.PathLike[str]) -> Path:
    """Bars per metric, before vs after (and adaptive), with the floor marked; written with Agg."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise missing_extra("matplotlib", extra="audit", purpose="the audit plot") from exc

    series = [
        (r, lbl, c)
        for r, lbl, c in (
            (result.row("before"), "before (store as is)", "tab:red"),
            (result.row("after"), "after, non-adaptive", "tab:blue"),
            (result.row("after", adaptive=True), "after, adaptive", "tab:purple"),
        )
        if r is not None
    ]
    floor = result.row("floor")
    panels = [
        ("text reconstruction (0-100, lower = more private)", list(PERCENT)),
        ("vector-level measures (0-1)", ["pii_auc", "target_cosine", "recon_pii_rate", "vector_cosine"]),
    ]
    panels = [(t, [k for k in keys if any(r.get(k) is not None for r, _, _ in series)]) for t, keys in panels]
    panels = [(t, keys) for t, keys in panels if keys]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.5), squeeze=False)
    width = 0.8 / max(len(series), 1)
    names = dict(COLUMNS)
    for ax, (title, keys) in zip(axes[0], panels):
        percent = keys[0] in PERCENT
        for j, (r, lbl, color) in enumerate(series):
            xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(keys))]
            bars = ax.bar(xs, [r.get(k) if r.get(k) is not None else 0.0 for k in keys], width, label=lbl, color=color)
            ax.bar_label(bars, fmt="%.1f" if percent else "%.2f", fontsize=7, padding=1)
        marked = False
        for i, k in enumerate(keys):
            fv = floor.get(k) if floor is not None else None
            if k == "pii_auc":
                fv = 0.5
            if fv is not None:
                ax.hlines(
                    fv,
                    i - 0.45,
                    i + 0.45,
                    colors="black",
                    linestyles="--",
                    linewidth=1.5,
                    label=None if marked else "floor (ignores the vector; AUC: chance)",
                )
                marked = True
        ax.set_xticks(range(len(keys)), [names[k].replace(" [95% CI]", "") for k in keys], rotation=20)
        ax.set_title(title, fontsize=10)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.08)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9, frameon=False)
    fig.suptitle(
        f"Inversion risk before vs after {_defense_label(result.meta['defense']['spec'])} "
        f"({result.meta['sample']['n']} stored vectors)",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def write_report(result: AuditResult, out_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """Write ``audit.json``, ``audit.png``, ``audit.md`` and ``audit.html`` to ``out_dir`` (created).

    ``audit.json`` starts with ``plaintext_finding`` (``null`` unless the store holds the plaintext) and
    ``verdict``, then the result itself.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {k: out / f"audit.{k}" for k in ("json", "png", "md", "html")}
    plot(result, paths["png"])
    data = {"plaintext_finding": plaintext_finding(result), "verdict": verdict(result), **result.to_dict()}
    paths["json"].write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    paths["md"].write_text(markdown(result, png_name=paths["png"].name), encoding="utf-8")
    paths["html"].write_text(html_report(result, png=paths["png"].read_bytes()), encoding="utf-8")
    return paths
