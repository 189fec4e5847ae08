"""The report's tables of the utility, scale and averaging parts (Markdown, from the annotated rows)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.common.reporting import fmt, md_table

__all__ = [
    "REFERENCE",
    "attacker_reads_nothing",
    "averaging_section",
    "min_fetch_k",
    "privacy_row",
    "query_label",
    "scale_section",
    "utility_section",
]

#: The reference privacy job: the single-stage Gaussian release at 0.95 of clean NDCG@10 (the default rule's
#: comparison).
REFERENCE = "single-stage Gaussian @0.95"


def min_fetch_k(rows: Sequence[dict[str, Any]], ratio: float) -> int | None:
    """The smallest ``fetch_k`` among ``rows`` (one setting) whose NDCG@10 reaches ``ratio`` of clean."""
    ok = sorted(r["fetch_k"] for r in rows if r.get("fetch_k") and r["ndcg_ratio"] >= ratio)
    return ok[0] if ok else None


def query_label(v: float | None) -> str:
    return "clean" if v is None else fmt(v, 1)


def _grid_table(
    rows: Sequence[dict[str, Any]], keys: Sequence[tuple[Any, ...]], fetch_ks: Sequence[int], label: Any
) -> str:
    lines = []
    for key in keys:
        sel = [r for r in rows if (r["mechanism"], r["doc_strength"], r["query_strength"]) == key]
        single = next((r for r in sel if r["search"] == "single-stage"), None)
        cells = {f: next((r for r in sel if r["fetch_k"] == f), None) for f in fetch_ks}
        lines.append(
            {
                "k": label(key),
                "single": single and single["ndcg10"],
                **{str(f): (c and f"{c['ndcg10']:.1f} ({c['ndcg_ratio']:.3f})") for f, c in cells.items()},
            }
        )
    return md_table(
        lines,
        ["k", "single", *[str(f) for f in fetch_ks]],
        headers=["setting", "one stage", *[f"fetch_k {f}" for f in fetch_ks]],
        digits=1,
    )


def utility_section(rows: list[dict[str, Any]]) -> list[str]:
    util = [r for r in rows if r.get("part") == "utility"]
    if not util:
        return ["## Utility on SciFact", "", "Not measured in this run."]
    clean = util[0]["clean_ndcg10"]
    fetch_ks = sorted({r["fetch_k"] for r in util if r.get("search") == "two-stage"})
    two = [r for r in util if r.get("search") in ("two-stage", "single-stage") and r.get("encoding") == "float16"]
    seeds = max((r.get("n_seeds") or 1) for r in two) if two else 1
    gauss = sorted(
        {(r["mechanism"], r["doc_strength"], r["query_strength"]) for r in two if r["mechanism"] == "gaussian"},
        key=lambda k: (k[1], -1 if k[2] is None else k[2]),
    )
    others = sorted(
        {(r["mechanism"], r["doc_strength"], r["query_strength"]) for r in two if r["mechanism"] != "gaussian"},
        key=lambda k: (k[0], k[1], -1 if k[2] is None else k[2]),
    )
    out = [
        "## Utility on SciFact",
        "",
        f"Clean NDCG@10 (exact cosine, clean queries): **{clean:.2f}**. Cells: end-to-end NDCG@10 (ratio to clean), "
        f"mean of {seeds} noise seed(s); *one stage* = the candidate vectors' own top 10 (no re-rank). Query "
        "`clean` = the clean query vector is sent; a number = the Gaussian candidate of the query at that strength.",
        "",
        "### Gaussian candidates (what the sealed stores ship)",
        "",
        _grid_table(two, gauss, fetch_ks, lambda k: f"r {k[1]:.1f}, query {query_label(k[2])}"),
        "",
        "Recall@fetch_k (share of the relevant documents among the fetched candidates, %):",
        "",
    ]
    rec = []
    for key in gauss:
        sel = {r["fetch_k"]: r for r in two if (r["mechanism"], r["doc_strength"], r["query_strength"]) == key}
        rec.append(
            {
                "k": f"r {key[1]:.1f}, query {query_label(key[2])}",
                **{str(f): sel[f]["recall_at_fetch_k"] for f in fetch_ks if f in sel},
            }
        )
    out += [
        md_table(rec, ["k", *[str(f) for f in fetch_ks]], headers=["setting", *[f"@{f}" for f in fetch_ks]], digits=1),
        "",
    ]
    if others:
        out += [
            "### Other candidate mechanisms",
            "",
            "`textcrafter-epsE` = the shipped policy as released (strength = its measured perturbation norm); "
            "`-dir` = its direction moved to norm r; `nullspace` = PII directions projected out, then a Gaussian "
            "direction at norm r (the frontier's best mechanism).",
            "",
            _grid_table(two, others, fetch_ks, lambda k: f"{k[0]} r {k[1]:.2f}, query {query_label(k[2])}"),
            "",
        ]
    enc = [r for r in rows if r.get("part") == "encoding"]
    if enc:
        probe = enc[0]
        f16 = next(
            (
                r
                for r in two
                if r["mechanism"] == "gaussian"
                and r["doc_strength"] == probe["doc_strength"]
                and r["query_strength"] == probe["query_strength"]
                and r["fetch_k"] == probe["fetch_k"]
            ),
            None,
        )
        lines = ([{"e": "float16", "n": f16["ndcg10"]}] if f16 else []) + [
            {"e": r["encoding"], "n": r["ndcg10"]} for r in enc
        ]
        out += [
            f"### Sealed vector encoding (Gaussian r {probe['doc_strength']}, "
            f"query {query_label(probe['query_strength'])}, "
            f"fetch_k {probe['fetch_k']})",
            "",
            md_table(lines, ["e", "n"], headers=["encoding", "NDCG@10"], digits=3),
            "",
        ]
    return out


def scale_section(rows: list[dict[str, Any]]) -> list[str]:
    sc = [r for r in rows if r.get("part") == "scale"]
    if not sc:
        return ["## Scale", "", "Not measured in this run."]
    util = [
        r
        for r in rows
        if r.get("part") == "utility"
        and r.get("mechanism") == "gaussian"
        and r.get("search") == "two-stage"
        and r.get("encoding") == "float16"
    ]
    out = [
        "## Scale: SciFact grown by distractors",
        "",
        "`gaussian-fit`: synthetic, same-domain-ish (a Gaussian with the mean and covariance of the SciFact "
        "document embeddings, normalised). `wikitext2`: real, out-of-domain (MiniLM embeddings of WikiText-2 train "
        "sentences that fit the inverter, all that were embedded). Real same-domain text was not available "
        f"offline at this size. Ratios are to the clean NDCG@10 of the same grown store; "
        f"{max((r.get('n_seeds') or 1) for r in sc)} noise seed(s) per setting (single draws differ by about 1-2 "
        "NDCG@10 points: see the averaging part's n = 1 rows).",
        "",
    ]
    stores = sorted({(r["distractors"], r["n_docs"]) for r in sc}, key=lambda k: (k[1], k[0]))
    clean_rows = [
        {
            "s": f"{k} ({n:,})",
            "c": next(r["ndcg10"] for r in sc if (r["distractors"], r["n_docs"]) == (k, n) and r["search"] == "clean"),
        }
        for k, n in stores
    ]
    out += [md_table(clean_rows, ["s", "c"], headers=["store", "clean NDCG@10"]), ""]
    settings = sorted(
        {(r["doc_strength"], r["query_strength"]) for r in sc if r["search"] == "two-stage"},
        key=lambda k: (k[0], -1 if k[1] is None else k[1]),
    )
    fetch_ks = sorted({r["fetch_k"] for r in sc if r.get("search") == "two-stage"})
    table = []
    for r_, q in settings:
        sci = [u for u in util if u["doc_strength"] == r_ and u["query_strength"] == q]
        line = {"s": f"r {r_:.1f}, query {query_label(q)}"}
        for ratio in (0.95, 0.97):
            line[f"sci{ratio}"] = min_fetch_k(sci, ratio) if sci else None
            for k, n in stores:
                sel = [
                    x
                    for x in sc
                    if (x["distractors"], x["n_docs"], x["doc_strength"], x["query_strength"]) == (k, n, r_, q)
                    and x["search"] == "two-stage"
                ]
                line[f"{k}{n}{ratio}"] = min_fetch_k(sel, ratio) if sel else None
        table.append(line)
    cols, heads = ["s"], ["setting"]
    for ratio in (0.95, 0.97):
        cols.append(f"sci{ratio}")
        heads.append(f"SciFact {util[0]['n_docs']:,} @{ratio}" if util else f"SciFact @{ratio}")
        for k, n in stores:
            cols.append(f"{k}{n}{ratio}")
            heads.append(f"{k} {n:,} @{ratio}")
    out += [
        f"Smallest fetch_k (of {', '.join(str(f) for f in fetch_ks)}) reaching 0.95 / 0.97 of clean NDCG@10 (– = none "
        "of them):",
        "",
        md_table(table, cols, headers=heads),
        "",
        "End-to-end NDCG@10 (ratio) per store:",
        "",
    ]
    for k, n in stores:
        sel = [
            x for x in sc if (x["distractors"], x["n_docs"]) == (k, n) and x["search"] in ("two-stage", "single-stage")
        ]
        keys = [("gaussian", r_, q) for r_, q in settings]
        out += [
            f"**{k}, {n:,} records**",
            "",
            _grid_table(sel, keys, fetch_ks, lambda key: f"r {key[1]:.1f}, query {query_label(key[2])}"),
            "",
        ]
    return out


def averaging_section(rows: list[dict[str, Any]]) -> list[str]:
    av = [r for r in rows if r.get("part") == "averaging"]
    if not av:
        return ["## Averaging attack", "", "Not measured in this run."]
    lines = [
        {
            "r": r["doc_strength"],
            "d": r["draws"],
            "n": r["copies"],
            "c": r["cosine_to_clean"],
            "e": r["equivalent_strength"],
            "i": r["identified_top1"],
            "s": r["ndcg10"],
        }
        for r in av
    ]
    keyed = [r for r in av if r["draws"] == "keyed"]
    note = (
        f"Keyed rows: {keyed[0].get('keyed_derivation')}; copies identical: "
        f"{all(r.get('copies_identical') for r in keyed)}."
        if keyed
        else "Keyed re-protection (a PRF of tenant, record id and text) gives identical copies, whose mean is the "
        "single draw (the n = 1 row); not measured through the core in this run."
    )
    return [
        "## Averaging attack",
        "",
        "A store receiving n independent draws of each SciFact record averages them. *cos* = mean cosine of the "
        "average with the clean vector; *equiv. r* = the single-draw strength with that cosine; *identified* = % of "
        f"records whose average is nearest to their own clean vector among all {av[0]['n_docs']:,}; *store NDCG@10* "
        "= one-stage NDCG@10 of a store holding the averages (clean queries). Independent and keyed n = 1 rows are "
        "two different single draws: their store NDCG@10 differs by draw-to-draw noise, not by the derivation.",
        "",
        md_table(
            lines,
            ["r", "d", "n", "c", "e", "i", "s"],
            headers=["r", "draws", "n", "cos", "equiv. r", "identified %", "store NDCG@10"],
            digits=3,
        ),
        "",
        note,
    ]


def attacker_reads_nothing(rows: Sequence[dict[str, Any]], *, margin: float = 2.0) -> bool:
    """Whether this run's attacker, on clean WikiText-2 vectors, stays within ``margin`` x its floor: its shares
    then say nothing about the mechanisms (the x axis of the figure's right panel is not meaningful)."""
    none = privacy_row(rows, "docs", "wikitext", None)
    if none is None or none.get("content_f1") is None or none.get("floor_content_f1") is None:
        return False
    return none["content_f1"] <= margin * max(none["floor_content_f1"], 1e-9)


def privacy_row(
    rows: Sequence[dict[str, Any]], target: str, corpus: str, strength: float | None
) -> dict[str, Any] | None:
    """The privacy row of one target, corpus and strength (``None``: the unprotected one), if measured."""
    return next(
        (
            r
            for r in rows
            if r.get("part") == "privacy"
            and r.get("target") == target
            and r.get("corpus") == corpus
            and r.get("doc_strength") == strength
        ),
        None,
    )
