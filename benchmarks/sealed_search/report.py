"""The report: the verdict against issues 29 and 30, the battery and scale tables, and the plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.reporting import setup_matplotlib

__all__ = ["STORE_SIDE", "make_plot", "render_markdown", "verdict_rows"]

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
            "candidates (fetch_k 200)",
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


def _mark(met: str) -> str:
    return f"**{met}**" if met == "met" else met


def _battery_tables(rows: Sequence[dict[str, Any]]) -> list[str]:
    bat = _battery(rows)
    if not bat:
        return ["(battery not measured)"]
    modes = list(dict.fromkeys(r["mode"] for r in bat))
    labels = {r["mode"]: r["mode_label"] for r in bat}
    attackers = list(dict.fromkeys(r["attacker"] for r in bat))
    out: list[str] = []
    titles = {
        "guess-notes": "Guessing a stored note's disease, city or name (pooled; 20 values each, chance 0.05)",
        "guess-disease": "Guessing the disease of a stored note (20 values, chance 0.05)",
        "guess-city": "Guessing the city of a stored note (20 values)",
        "guess-name": "Guessing the name of a stored note (20 values)",
        "query-guess-disease": "Guessing the disease of a stored query (20 values)",
        "membership": "Membership (AUC; chance 0.5)",
        "access-pattern": "Access pattern: the query's disease from the records it opens (20 values)",
    }
    for attack, title in titles.items():
        got = {(r["mode"], r["attacker"]): r for r in bat if r["attack"] == attack}
        if not got:
            continue
        n = next(iter(got.values()))["n"]
        table = []
        for a in attackers:
            cells = []
            for m in modes:
                r = got.get((m, a))
                if r is None:
                    cells.append("–")
                elif r["metric"] == "accuracy":
                    cells.append(f"{r['value']:.2f} ({r['x_chance']:.1f}x)")
                else:
                    cells.append(f"{r['value']:.3f}")
            if any(c != "–" for c in cells):
                table.append([a, *cells])
        out += [f"### {title}", "", f"{n} targets per cell; accuracy (multiple of chance) or AUC.", ""]
        out.append(_table(["attacker", *(labels[m] for m in modes)], table))
        out.append("")
    out.append(
        "Each row's method is its `strategy` in the JSON: the thief compares as is, pair holders through their "
        "Procrustes rotation, inserters with the stored vectors of their own records (`compare-max`; membership: "
        "insert the probed text and look for its twin), the key holder recomputes the release."
    )
    return out


def _scale_tables(rows: Sequence[dict[str, Any]]) -> list[str]:
    sc = _scale(rows)
    if not sc:
        return ["(scale grid not measured)"]
    out: list[str] = []
    sizes = sorted({r["n_records"] for r in sc if r["distractors"] != "gaussian"})
    settings = list(dict.fromkeys((r["mode"], r["setting"]) for r in sc))
    clean = {r["n_records"]: r["clean_ndcg10"] for r in sc if r["mode"] == "none" and r["distractors"] != "gaussian"}
    out += [
        "Clean NDCG@10 (exact search of the grown store): " + ", ".join(f"{s:,}: {clean[s]:.2f}" for s in sizes),
        "",
    ]
    table = []
    for mode, setting in settings:
        cells = []
        for s in sizes:
            r = next(
                (
                    r
                    for r in sc
                    if r["n_records"] == s
                    and (r["mode"], r["setting"]) == (mode, setting)
                    and r["distractors"] != "gaussian"
                ),
                None,
            )
            cells.append("–" if r is None else f"{r['ndcg_ratio']:.3f}")
        table.append([f"{mode}: {setting}", *cells])
    out += ["NDCG@10 ratio to clean per store size (SciFact + clustered distractors):", ""]
    out.append(_table(["mode: setting", *(f"{s:,}" for s in sizes)], table))
    out.append("")
    for s in sizes[-1:]:
        table = []
        for r in sc:
            if r["n_records"] != s or r["distractors"] == "gaussian":
                continue
            table.append(
                [
                    f"{r['mode']}: {r['setting']}",
                    _f(r["ndcg_ratio"]),
                    f"{r['opened_p50']:.0f} / {r['opened_p95']:.0f}",
                    f"{r['app_ms_p50']:.1f} / {r['app_ms_p95']:.1f}",
                    f"{r['store_ms_p50']:.1f} / {r['store_ms_p95']:.1f}",
                    f"{r['app_vector_bytes_per_record']:.0f} / {r['app_bytes_per_record_measured']:.0f}",
                    f"{r['store_bytes_per_record']:.0f}",
                ]
            )
        out += [f"At {s:,} records (latency in ms, in-process, one query at a time):", ""]
        out.append(
            _table(
                [
                    "mode: setting",
                    "NDCG ratio",
                    "opened p50 / p95",
                    "app work p50 / p95",
                    "store search p50 / p95",
                    "app bytes/record: vectors / measured",
                    "store bytes/record",
                ],
                table,
            )
        )
        out.append("")
    idx = {}
    for r in sc:
        if r["mode"] == "index" and r["distractors"] != "gaussian":
            idx.setdefault((r["n_records"], r["code_bytes"]), r)
    if idx:
        out += [
            "App-side index memory and persistence (per code size; exact float16 directions below train_at):",
            "",
            _table(
                [
                    "records",
                    "code bytes",
                    "trained",
                    "app bytes/record measured",
                    "sealed-file bytes/record (plain)",
                    "add µs/record",
                    "to_bytes ms",
                ],
                [
                    [
                        f"{n:,}",
                        cb,
                        r["trained"],
                        f"{r['app_bytes_per_record_measured']:.0f}",
                        f"{r.get('index_bytes_per_record_serialized', float('nan')):.0f}",
                        f"{r.get('index_add_us_per_record', float('nan')):.1f}",
                        f"{r.get('index_to_bytes_ms', float('nan')):.0f}",
                    ]
                    for (n, cb), r in sorted(idx.items())
                ],
            ),
            "",
            "Measured bytes: the codes (or float16 directions) plus the index's id list, id -> position dict and id "
            "strings (36-character UUIDs), by `sys.getsizeof`. Add µs/record: the records added since the previous "
            "size (the first add past train_at includes training the codebook).",
            "",
        ]
    gauss = [r for r in sc if r["distractors"] == "gaussian"]
    if gauss:
        out += [f"The same at {gauss[0]['n_records']:,} records with one-Gaussian distractors (for comparison):", ""]
        out.append(
            _table(
                ["mode: setting", "NDCG ratio", "clean NDCG@10"],
                [[f"{r['mode']}: {r['setting']}", _f(r["ndcg_ratio"]), _f(r["clean_ndcg10"], 2)] for r in gauss],
            )
        )
        out.append("")
    lat = [r for r in sc if r["mode"] != "none" and r["distractors"] != "gaussian"]
    table = []
    for mode, setting in settings:
        if mode == "none":
            continue
        cells = []
        for s in sizes:
            r = next((r for r in lat if r["n_records"] == s and (r["mode"], r["setting"]) == (mode, setting)), None)
            cells.append("–" if r is None else f"{r['app_ms_p50']:.1f} / {r['app_ms_p95']:.1f}")
        table.append([f"{mode}: {setting}", *cells])
    out += ["App work per query, p50 / p95 ms, per store size:", ""]
    out.append(_table(["mode: setting", *(f"{s:,}" for s in sizes)], table))
    return out


def render_markdown(rows: Sequence[dict[str, Any]], meta: dict[str, Any], plot_name: str) -> str:
    """The whole report."""
    lines = [
        "# Sealed search: every mode against every store-side attacker, and at a million records",
        "",
        f"`{meta['command']}` on {meta['date']} ({meta['size']}); encoder {meta.get('encoder', '?')}; "
        f"measured in {_part_times(meta)}; this invocation {meta.get('runtime_seconds', '?')} s; "
        f"machine: {meta['machine'].get('cpu_count')} CPUs, load average {meta['machine'].get('load_avg_1m', '?')}. "
        f"Parts: {', '.join(meta.get('parts', []))}.",
        "",
        "Modes: **none** (clean vectors in the store, the reference); **candidates, no rotation** (the previous "
        "release: `unit(unit(x) + 2.0 u)`, queries at 0.5); **candidates** (shipped: the same under the tenant's "
        "secret Haar rotation `Q`, fetch_k 200); **app-side index** (the store holds a keyed random vector per "
        "record id; the app scans PQ codes of the clean vectors and opens `open_k` records by id). Everything the "
        "store receives comes from the core (`SealedSearch.store_vectors` / `store_query`) under one fixed "
        "benchmark key.",
        "",
        "## Verdict",
        "",
        _table(
            ["issue", "target", "mode", "measured", "verdict"],
            [[v["issue"], v["target"], v["mode"], v["measured"], _mark(v["met"])] for v in verdict_rows(rows)],
        ),
        "",
        "Store-side attackers hold no key: the thief (what the store holds), pair holders (known (text, stored "
        "vector) pairs, rotation fitted by orthogonal Procrustes), inserters (texts of their choice stored through "
        "the app). The key holder is the bound, not a target. 'App work' is what the application adds per query "
        "(candidates: protect the query, open fetch_k sealed vectors, rank; index: scan the codes, open open_k, "
        "rank); the candidate store's own flat search is listed beside it. Targets at 1.2x chance are below what "
        f"{meta.get('battery', {}).get('n_members', '?')} targets can resolve: read the 95% intervals.",
        "",
        "## Attack battery",
        "",
        _battery_note(meta),
        "",
        *_battery_tables(rows),
        "",
        INVERTER_NOTE,
        "",
        "## Scale",
        "",
        _scale_note(meta),
        "",
        *_scale_tables(rows),
        "",
        f"![NDCG ratio by store size; guessing accuracy by attacker]({plot_name})",
        "",
        "## Not covered",
        "",
        *[f"* {x}" for x in meta.get("not_covered", [])],
    ]
    return "\n".join(lines)


def _part_times(meta: dict[str, Any]) -> str:
    """Each part's measuring time (parts come from the part cache when measured before)."""
    out = []
    for part in ("battery", "scale"):
        m = meta.get(part) or {}
        if "seconds" in m:
            emb = m.get("embedding_seconds")
            out.append(f"{part} {m['seconds']:.0f} s" + (f" (embedding {emb:.0f} s)" if emb else ""))
    return ", ".join(out) or "?"


def _battery_note(meta: dict[str, Any]) -> str:
    b = meta.get("battery", {})
    if not b:
        return ""
    return (
        f"Store: {b.get('n_background', '?'):,} background records ({b.get('background', '')}) + "
        f"{b.get('n_members', '?')} victim notes; {b.get('n_members', '?')} non-members of the same family; "
        f"{b.get('n_queries', '?')} victim queries. Templates: {b.get('templates', '')}. The attacker knows each "
        "victim's template and every field but the one guessed, embeds the 20 candidate texts with the public "
        "encoder (its own calls, not the app's), maps them (none, its rotation estimate) and picks the value of "
        "highest cosine with the stored vector; the key holder recomputes the release. Pairs are background "
        "records whose texts the attacker knows. Inserters store per question the 20 candidate texts (and with "
        "200 texts nine more notes per value). Access pattern: the store sees the ranked ids a query opens "
        "(candidates: the store's own top fetch_k; index: the ids fetched; none: the top 10); the inserter "
        "guesses the value of its best-ranked opened record, the pair holder takes a rank-weighted vote of its "
        "known notes' diseases, a random value when nothing it knows is opened. Access-pattern rows are measured "
        f"at the battery's store size ({b.get('n_background', 0) + b.get('n_members', 0):,} records), the small "
        "store where they leak most."
    )


def _scale_note(meta: dict[str, Any]) -> str:
    s = meta.get("scale", {})
    if not s:
        return ""
    check = s.get("distractor_check", {})
    c = "; ".join(
        f"{k}: mean best cosine of a distractor to a real document {v['distractor_nn_cosine_mean']:.3f} "
        f"(p99 {v['distractor_nn_cosine_p99']:.3f}) vs {v['real_nn_cosine_mean']:.3f} between real documents"
        for k, v in check.items()
    )
    t = s.get("throughput", {})
    return (
        f"{s.get('about', '')} Distractor check: {c or '–'}. Core throughput on this machine: candidate "
        f"vectors {t.get('core_store_vectors_candidates_us_per_record', float('nan')):.0f} µs per record, keyed "
        f"index vectors {t.get('core_store_vectors_index_us_per_record', float('nan')):.0f} µs per record."
    )


def make_plot(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """NDCG ratio against store size per mode setting; guessing accuracy per attacker and mode."""
    plt = setup_matplotlib()
    fig, axes = plt.subplots(1, 4, figsize=(22, 4.8))
    sc = [r for r in _scale(rows) if r["distractors"] != "gaussian"]
    ax = axes[0]
    for mode, setting in dict.fromkeys((r["mode"], r["setting"]) for r in sc):
        pts = sorted((r["n_records"], r["ndcg_ratio"]) for r in sc if (r["mode"], r["setting"]) == (mode, setting))
        if mode == "none":
            continue
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker="o",
            label=f"{mode}: {setting}",
            linestyle="-" if mode == "index" else "--",
        )
    ax.axhline(0.99, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xscale("log")
    ax.set_xlabel("records in the store")
    ax.set_ylabel("NDCG@10 / clean")
    ax.set_title("Retrieval vs store size")
    ax.legend(fontsize=7)
    bat = _battery(rows)
    modes = list(dict.fromkeys(r["mode"] for r in bat))
    attackers = list(dict.fromkeys(r["attacker"] for r in bat))
    for ax, attack, title in (
        (axes[1], "guess-disease", "Stored notes: disease guessed"),
        (axes[2], "query-guess-disease", "Stored queries: disease guessed"),
        (axes[3], "access-pattern", "Queries: disease from the records opened"),
    ):
        width = 0.8 / max(1, len(modes))
        names = [a for a in attackers if any(r["attacker"] == a and r["attack"] == attack for r in bat)]
        for j, m in enumerate(modes):
            vals = [
                next((r["value"] for r in bat if r["mode"] == m and r["attacker"] == a and r["attack"] == attack), 0.0)
                for a in names
            ]
            ax.bar([i + j * width for i in range(len(names))], vals, width=width, label=m)
        ax.axhline(0.05, color="k", linewidth=0.8, linestyle=":")
        ax.axhline(0.06, color="r", linewidth=0.8, linestyle=":")
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(names))])
        ax.set_xticklabels(names, rotation=35, ha="right", fontsize=8)
        ax.set_ylim(0, 1.02)
        ax.set_ylabel("accuracy (chance 0.05, 1.2x dotted red)")
        ax.set_title(title)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
