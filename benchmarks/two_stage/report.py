"""The report of the two-stage benchmark: the issue's row keys, Markdown tables and the one figure."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.reporting import fmt, md_table, setup_matplotlib

from .engines import engines_section

__all__ = ["ISSUE_KEYS", "annotate", "min_fetch_k", "make_plot", "render_markdown"]

#: Every row carries these keys (``null`` where not measured).
ISSUE_KEYS = (
    "mechanism",
    "doc_strength",
    "query_strength",
    "fetch_k",
    "n_docs",
    "ndcg10",
    "clean_ndcg10",
    "recall_at_fetch_k",
    "content_f1_adaptive",
    "pii_entity_recovery_adaptive",
    "query_content_f1_adaptive",
    "bytes_per_record",
    "latency_ms_p50",
    "latency_ms_p95",
)
#: The default rule and the aim of issue 21.
RULE = {"fetch_k": 200, "ndcg_ratio": 0.95, "f1_share": 30.0}
AIM = {"fetch_k": 200, "ndcg_ratio": 0.97, "f1_share": 20.0, "pii_vs_floor": 2.0}


def _priv(rows: Sequence[dict[str, Any]], target: str, corpus: str, strength: float | None) -> dict[str, Any] | None:
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


def annotate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with the issue's keys filled in: privacy of the stored candidates and queries joined onto the
    Gaussian utility/scale rows of the same strength, the cost onto the float16 rows, none/floor rows added."""
    priv = [r for r in rows if r.get("part") == "privacy"]
    cost = next((r for r in rows if r.get("part") == "cost" and r.get("encoding") == "float16"), None)
    out = []
    for r in rows:
        r = dict(r)
        if r.get("part") == "privacy":
            r["mechanism"] = "none" if r.get("doc_strength") is None else "gaussian"
            key = {"docs": "content_f1_adaptive", "queries": "query_content_f1_adaptive"}[r["target"]]
            if r.get("corpus") == "pii":
                r["pii_entity_recovery_adaptive"] = r.get("pii_entity_recovery")
            elif r.get("mode") == "adaptive" or r.get("doc_strength") is None:
                r[key] = r.get("content_f1")
        elif r.get("part") in ("utility", "scale") and r.get("mechanism") == "gaussian":
            doc = _priv(priv, "docs", "wikitext", r.get("doc_strength"))
            pii = _priv(priv, "docs", "pii", r.get("doc_strength"))
            qry = _priv(priv, "queries", "scifact-queries", r.get("query_strength"))
            r["content_f1_adaptive"] = doc and doc.get("content_f1")
            r["pii_entity_recovery_adaptive"] = pii and pii.get("pii_entity_recovery")
            r["query_content_f1_adaptive"] = qry and qry.get("content_f1")
            if cost is not None and r.get("encoding") == "float16" and r.get("search") == "two-stage":
                r["bytes_per_record"] = cost["bytes_per_record"]
                if r.get("fetch_k") == cost["fetch_k"] and r.get("part") == "utility":
                    r["latency_ms_p50"], r["latency_ms_p95"] = cost["latency_ms_p50"], cost["latency_ms_p95"]
        out.append(r)
    for corpus in ("wikitext", "pii", "scifact-queries"):
        none = _priv(priv, "queries" if corpus == "scifact-queries" else "docs", corpus, None)
        if none is not None and none.get("floor_content_f1") is not None:
            key = {"wikitext": "content_f1_adaptive", "pii": "pii_entity_recovery_adaptive"}.get(
                corpus, "query_content_f1_adaptive"
            )
            floor = {
                "part": "privacy",
                "mechanism": "floor",
                "target": none["target"],
                "corpus": corpus,
                "mode": "floor (ignores the vector)",
                "content_f1": none["floor_content_f1"],
                "pii_entity_recovery": none.get("floor_pii_entity_recovery"),
            }
            floor[key] = floor["pii_entity_recovery" if corpus == "pii" else "content_f1"]
            out.append(floor)
    return [{**dict.fromkeys(ISSUE_KEYS), **r} for r in out]


def min_fetch_k(rows: Sequence[dict[str, Any]], ratio: float) -> int | None:
    """The smallest ``fetch_k`` among ``rows`` (one setting) whose NDCG@10 reaches ``ratio`` of clean."""
    ok = sorted(r["fetch_k"] for r in rows if r.get("fetch_k") and r["ndcg_ratio"] >= ratio)
    return ok[0] if ok else None


def _q(v: float | None) -> str:
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


def _utility_section(rows: list[dict[str, Any]]) -> list[str]:
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
        _grid_table(two, gauss, fetch_ks, lambda k: f"r {k[1]:.1f}, query {_q(k[2])}"),
        "",
        "Recall@fetch_k (share of the relevant documents among the fetched candidates, %):",
        "",
    ]
    rec = []
    for key in gauss:
        sel = {r["fetch_k"]: r for r in two if (r["mechanism"], r["doc_strength"], r["query_strength"]) == key}
        rec.append(
            {
                "k": f"r {key[1]:.1f}, query {_q(key[2])}",
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
            _grid_table(two, others, fetch_ks, lambda k: f"{k[0]} r {k[1]:.2f}, query {_q(k[2])}"),
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
            f"### Sealed vector encoding (Gaussian r {probe['doc_strength']}, query {_q(probe['query_strength'])}, "
            f"fetch_k {probe['fetch_k']})",
            "",
            md_table(lines, ["e", "n"], headers=["encoding", "NDCG@10"], digits=3),
            "",
        ]
    return out


def _scale_section(rows: list[dict[str, Any]]) -> list[str]:
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
        line = {"s": f"r {r_:.1f}, query {_q(q)}"}
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
            _grid_table(sel, keys, fetch_ks, lambda key: f"r {key[1]:.1f}, query {_q(key[2])}"),
            "",
        ]
    return out


def _averaging_section(rows: list[dict[str, Any]]) -> list[str]:
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


def _privacy_section(rows: list[dict[str, Any]], meta: dict[str, Any]) -> list[str]:
    pr = [r for r in rows if r.get("part") == "privacy"]
    pm = (meta.get("parts") or {}).get("privacy", {})
    if not pr:
        return ["## Privacy of what the store holds", "", "Not measured in this run (rows null)."]
    none = {r["corpus"]: r for r in pr if r.get("doc_strength") is None and r.get("mechanism") != "floor"}
    lines = []
    for r in pr:
        base = none.get(r["corpus"])
        share = None
        if base and r.get("content_f1") is not None and base.get("content_f1"):
            share = 100.0 * r["content_f1"] / base["content_f1"]
        lines.append(
            {
                "t": f"{r['target']} / {r['corpus']}",
                "r": "none"
                if r["mechanism"] == "none"
                else ("floor" if r["mechanism"] == "floor" else fmt(r["doc_strength"], 1)),
                "m": r.get("mode"),
                "f": r.get("content_f1"),
                "s": share,
                "p": r.get("pii_entity_recovery"),
                "n": r.get("pairs"),
            }
        )
    warn = (
        [
            "**This run's attacker reads about nothing even from clean vectors** (its `none` content-F1 is within 2x "
            "the floor's): its shares are noise, and the privacy side of the default rule cannot be judged from "
            "this run. Rerun `--parts privacy` with a parity-trained inverter (a GPU, or an idle machine) to judge it.",
            "",
        ]
        if attacker_reads_nothing(rows)
        else []
    )
    return [
        "## Privacy of what the store holds",
        "",
        *warn,
        f"**Attacker weaker than parity: numbers are lower bounds.** {pm.get('attacker', '')}. Clean inverter: "
        f"{pm.get('clean_inverter_training')} on {pm.get('n_train')} WikiText-2 train sentences; adaptive "
        f"fine-tuning on {pm.get('adaptive_pairs')} pairs ({pm.get('adaptive_training')}); "
        f"{pm.get('n_test')} victim texts per corpus. `none` = the clean inverter on clean vectors (as in the "
        "frontier); each strength = the adaptive attacker on Gaussian candidate vectors of that strength "
        "(queries: the query vectors the store receives at that query strength). *share* = content-F1 as % of "
        "`none` in the same run."
        + (f" Not measured (deadline): {', '.join(pm['skipped'])}." if pm.get("skipped") else ""),
        "",
        md_table(
            lines,
            ["t", "r", "m", "f", "s", "p", "n"],
            headers=[
                "target / corpus",
                "strength",
                "attacker",
                "content-F1",
                "share %",
                "PII entity recovery",
                "pairs",
            ],
            digits=2,
        ),
    ]


def _cost_section(rows: list[dict[str, Any]]) -> list[str]:
    co = [r for r in rows if r.get("part") == "cost"]
    if not co:
        return ["## Cost", "", "Not measured in this run."]
    lines = [
        {
            "e": r["encoding"],
            "t": r["sealed_text_chars"],
            "v": r["sealed_vector_chars"],
            "b": r["bytes_per_record"],
            "c": r["candidate_vector_bytes"],
            "p50": r["latency_ms_p50"],
            "p95": r["latency_ms_p95"],
            "v50": r["latency_vectors_ms_p50"],
        }
        for r in co
    ]
    return [
        "## Cost",
        "",
        f"Per record: the sealed text and the sealed clean vector (base64 characters), beside the float32 candidate "
        f"vector the store indexes. Latency per query at fetch_k {co[0]['fetch_k']}, in-process on one thread "
        f"({co[0]['n_timed_queries']} queries): open the fetch_k sealed vectors, re-rank, open the 10 winners' texts "
        "(*vectors only*: without the texts). Through the sealed store on real engines: the next section.",
        "",
        md_table(
            lines,
            ["e", "t", "v", "b", "c", "p50", "p95", "v50"],
            headers=[
                "vector encoding",
                "sealed text chars",
                "sealed vector chars",
                "bytes/record (sealed)",
                "candidate bytes",
                "p50 ms",
                "p95 ms",
                "vectors only p50 ms",
            ],
            digits=2,
        ),
    ]


def _verdict(rows: list[dict[str, Any]]) -> list[str]:
    util = [
        r
        for r in rows
        if r.get("part") == "utility"
        and r.get("mechanism") == "gaussian"
        and r.get("search") == "two-stage"
        and r.get("encoding") == "float16"
    ]
    pr = {
        (r["target"], r["corpus"], r["doc_strength"]): r
        for r in rows
        if r.get("part") == "privacy" and r.get("mechanism") != "floor"
    }
    base = pr.get(("docs", "wikitext", None))
    out = ["## Default rule and aim (issue 21)", ""]
    cands = []
    for r in util:
        if r["fetch_k"] > RULE["fetch_k"]:
            continue
        doc = pr.get(("docs", "wikitext", r["doc_strength"]))
        share = 100 * doc["content_f1"] / base["content_f1"] if doc and base and base.get("content_f1") else None
        cands.append(
            {
                "r": r["doc_strength"],
                "q": _q(r["query_strength"]),
                "k": r["fetch_k"],
                "n": r["ndcg_ratio"],
                "s": share,
                "rule": r["ndcg_ratio"] >= RULE["ndcg_ratio"] and share is not None and share <= RULE["f1_share"],
                "aim": r["ndcg_ratio"] >= AIM["ndcg_ratio"]
                and r["query_strength"] is not None
                and share is not None
                and share <= AIM["f1_share"],
            }
        )
    cands.sort(key=lambda c: (c["k"], -c["r"], c["q"]))
    out += [
        f"Rule: at fetch_k <= {RULE['fetch_k']}, >= {RULE['ndcg_ratio']} of clean NDCG@10 while the adaptive attacker "
        f"on the stored vectors gets <= {RULE['f1_share']:.0f} % of its undefended content-F1 (WikiText-2). Aim: >= "
        f"{AIM['ndcg_ratio']} at fetch_k {AIM['fetch_k']} with queries protected, <= {AIM['f1_share']:.0f} % "
        "content-F1 (and PII-entity recovery <= 2x the floor, see the privacy table). *share* is against this "
        "run's weaker attacker.",
        "",
        md_table(
            cands,
            ["r", "q", "k", "n", "s", "rule", "aim"],
            headers=["r", "query", "fetch_k", "NDCG ratio", "content-F1 share %", "rule met", "aim met"],
            digits=3,
        ),
    ]
    return out


def render_markdown(rows: list[dict[str, Any]], meta: dict[str, Any], plot_name: str) -> str:
    """The report of ``rows`` (already :func:`annotate`-d)."""
    head = [
        "# Two-stage sealed search: candidates by noisy vectors, re-rank by sealed clean vectors",
        "",
        f"`{meta.get('command')}` on {meta.get('date')} ({meta.get('size')}); encoder {meta.get('encoder')}; "
        f"core: {meta.get('core')}. Status: {meta.get('status')}; parts missing: "
        f"{', '.join(meta.get('parts_missing') or []) or 'none'}.",
        "",
        "A candidate vector is `x + r*u` rescaled to the norm of `x` (`u` a unit direction: a normalised Gaussian "
        "draw unless said otherwise; `r` = doc strength). The query the store receives is the same at the query "
        "strength. Stage 1 fetches `fetch_k` candidates by inner product (`faiss.IndexFlatIP`) on the candidate "
        "vectors; stage 2 re-ranks them by the exact cosine of their clean vectors, sealed in float16 here (the stores "
        "seal int8: the same NDCG@10, see the encoding table), with the clean query, and returns the top 10.",
        "",
    ]
    sections = [
        _utility_section(rows),
        _scale_section(rows),
        _averaging_section(rows),
        _privacy_section(rows, meta),
        _cost_section(rows),
        engines_section(rows),
        _verdict(rows),
        [f"![NDCG@10 against adaptive content-F1]({plot_name})"],
    ]
    body = [line for sec in sections for line in [*sec, ""]]
    return "\n".join(head + body)


def attacker_reads_nothing(rows: Sequence[dict[str, Any]], *, margin: float = 2.0) -> bool:
    """Whether this run's attacker, on clean WikiText-2 vectors, stays within ``margin`` x its floor: its shares
    then say nothing about the mechanisms (the x axis of the figure's right panel is not meaningful)."""
    none = _priv(rows, "docs", "wikitext", None)
    if none is None or none.get("content_f1") is None or none.get("floor_content_f1") is None:
        return False
    return none["content_f1"] <= margin * max(none["floor_content_f1"], 1e-9)


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
                left.plot(*zip(*pts), style, marker="o", color=f"C{n}", label=f"{lab}, query {_q(q)}")
            if base and base.get("content_f1"):
                pts = sorted(
                    (100 * pr[r["doc_strength"]]["content_f1"] / base["content_f1"], r["ndcg10"])
                    for r in util
                    if r["fetch_k"] == f and r["query_strength"] == q and r["doc_strength"] in pr
                )
                if pts:
                    ax.plot(*zip(*pts), style, marker="o", color=f"C{n}", label=f"{lab}, query {_q(q)}")
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
