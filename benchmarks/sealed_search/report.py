"""The report: the verdict against issues 29 and 30, the battery and scale tables, and the plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.reporting import setup_matplotlib

from .verdict import (
    INVERTER_NOTE,
    STORE_SIDE,
    _battery,
    _f,
    _scale,
    _table,
    verdict_rows,
)

__all__ = ["STORE_SIDE", "make_plot", "render_markdown", "verdict_rows"]


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
    real = sorted({r["n_records"] for r in sc if r["distractors"] == "real"})
    out += [
        "Clean NDCG@10 (exact search of the grown store): " + ", ".join(f"{s:,}: {clean[s]:.2f}" for s in sizes),
        "",
        *(
            [
                f"{', '.join(f'{s:,}' for s in real)} records: SciFact + real out-of-domain sentences (the `real` "
                "kind); the other sizes: SciFact + clustered fitted distractors.",
                "",
            ]
            if real
            else []
        ),
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
    out += ["NDCG@10 ratio to clean per store size (SciFact + distractors):", ""]
    out.append(_table(["mode: setting", *(f"{s:,}" for s in sizes)], table))
    out.append("")
    rounds = [r for r in sc if "recall_target" in r and r["distractors"] != "gaussian"]
    if rounds:
        out += [
            "Candidate search in rounds (`TwoStageSearch(recall=...)`, first round 100, doubling up to fetch_k): "
            "the share of a full scan's top 10 (over the sealed vectors) found, records read, store rounds, and the "
            "share of queries that reached fetch_k before the rule was met (each is warned and counted):",
            "",
            _table(
                [
                    "records",
                    "setting",
                    "recall vs full scan",
                    "NDCG ratio",
                    "read p50 / p95",
                    "rounds p50 / p95",
                    "capped",
                ],
                [
                    [
                        f"{r['n_records']:,}",
                        r["setting"],
                        f"{r['recall_vs_scan']:.3f}",
                        _f(r["ndcg_ratio"]),
                        f"{r['opened_p50']:.0f} / {r['opened_p95']:.0f}",
                        f"{r['rounds_p50']:.0f} / {r['rounds_p95']:.0f}",
                        f"{r['capped_share']:.0%}",
                    ]
                    for r in rounds
                ],
            ),
            "",
        ]
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
    carried = meta.get("parts_carried") or {}
    lines = [
        "# Sealed search: every mode against every store-side attacker, and at a million records",
        "",
        f"`{meta['command']}` on {meta['date']} ({meta['size']}); encoder {meta.get('encoder', '?')}; "
        f"measured in {_part_times(meta)}; this invocation {meta.get('runtime_seconds', '?')} s; "
        f"machine: {meta['machine'].get('cpu_count')} CPUs, load average {meta['machine'].get('load_avg_1m', '?')}. "
        f"Parts: {', '.join(meta.get('parts', []))}."
        + "".join(
            f" The {p} part is carried from {src}, not measured by this invocation." for p, src in carried.items()
        ),
        "",
        "Modes: **none** (clean vectors in the store, the reference); **candidates, no rotation** (the previous "
        "release: `unit(unit(x) + 2.0 u)`, queries at 0.5); **candidates** (shipped: the same under the tenant's "
        "secret Haar rotation `Q`; the battery's access pattern reads the store's top 200; the scale grid adds "
        "the shipped search in rounds to an expected recall of 0.95, at most 2,000 records); **app-side index** "
        "(the store holds a keyed random vector per record id; the app scans PQ codes of the clean vectors and "
        "opens `open_k` records by id); **store-held index** "
        "(`StoreIndexSearch()`, the adapters' default; battery only: the same keyed random vectors, and the index's "
        "sealed log in the store; with and without `replica=True`). Everything the store receives comes from the "
        "core (`SealedSearch.store_vectors` / `store_query`; the store-held modes: written and searched through the "
        "core into a dict store that records every request, as the adapters do) under one fixed benchmark key.",
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
        "known notes' diseases, a random value when nothing it knows is opened. Store-held modes: the attackers hold "
        "every record of the store, the library's own (marker, log heads and segment chunks) included (membership "
        "compares with all of them); the query vector is the one the store was searched with (the log's heads "
        "search); the pair holder votes with the records the store was asked for per victim query "
        "(`store_reads_per_query`), and the inserter stores its records through the app before each victim query "
        "(in a random order), sees which of them the store is asked for, and deletes them after (with the replica, "
        "the next query's sync reads all of them, whatever it asks). Access-pattern rows are measured "
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
    sc = [r for r in _scale(rows) if r["distractors"] in ("clustered", "none")]
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
