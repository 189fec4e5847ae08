"""The report of the two-stage benchmark: the issue's row keys, Markdown tables and the one figure."""

from __future__ import annotations

from typing import Any

from benchmarks.common.reporting import fmt, md_table

from .engines import engines_section
from .tables import (
    REFERENCE,
    attacker_reads_nothing,
    averaging_section,
    privacy_row,
    query_label,
    scale_section,
    utility_section,
)

__all__ = ["ISSUE_KEYS", "annotate", "render_markdown"]

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
RULE = {"fetch_k": 200, "ndcg_ratio": 0.95, "f1_share": 30.0, "vs_reference": 0.5}
AIM = {"fetch_k": 200, "ndcg_ratio": 0.97, "f1_share": 20.0, "pii_vs_floor": 2.0}


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
            doc = privacy_row(priv, "docs", "wikitext", r.get("doc_strength"))
            pii = privacy_row(priv, "docs", "pii", r.get("doc_strength"))
            qry = privacy_row(priv, "queries", "scifact-queries", r.get("query_strength"))
            r["content_f1_adaptive"] = doc and doc.get("content_f1")
            r["pii_entity_recovery_adaptive"] = pii and pii.get("pii_entity_recovery")
            r["query_content_f1_adaptive"] = qry and qry.get("content_f1")
            if cost is not None and r.get("encoding") == "float16" and r.get("search") == "two-stage":
                r["bytes_per_record"] = cost["bytes_per_record"]
                if r.get("fetch_k") == cost["fetch_k"] and r.get("part") == "utility":
                    r["latency_ms_p50"], r["latency_ms_p95"] = cost["latency_ms_p50"], cost["latency_ms_p95"]
        out.append(r)
    for corpus in ("wikitext", "pii", "scifact-queries"):
        none = privacy_row(priv, "queries" if corpus == "scifact-queries" else "docs", corpus, None)
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
                else ("floor" if r["mechanism"] == "floor" else _strength_label(r)),
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
        (
            f"**Attacker at parity.** {pm.get('attacker', '')}. "
            if pm.get("parity")
            else f"**Attacker weaker than parity: numbers are lower bounds.** {pm.get('attacker', '')}. Clean "
            f"inverter: {pm.get('clean_inverter_training')} on {pm.get('n_train')} WikiText-2 train sentences. "
        )
        + f"Adaptive fine-tuning on {pm.get('adaptive_pairs')} pairs ({pm.get('adaptive_training')}); "
        f"{pm.get('n_test')} victim texts per corpus. `none` = the clean inverter on clean vectors (as in the "
        "frontier); each strength = the adaptive attacker on Gaussian candidate vectors of that strength "
        "(queries: the query vectors the store receives at that query strength); *"
        + REFERENCE
        + "* = the single-stage Gaussian release that keeps 0.95 of clean NDCG@10 by itself (the default rule's "
        "comparison"
        + (
            f"; measured: strength {ref['doc_strength']:.3f} keeps {ref['one_stage_ndcg_ratio']:.4f} of clean"
            if (ref := pm.get("reference"))
            else ""
        )
        + "). *share* = content-F1 as % of `none` in the same run."
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


def _strength_label(r: dict[str, Any]) -> str:
    return f"{r['doc_strength']:.2f} ({r['reference']})" if r.get("reference") else fmt(r["doc_strength"], 1)


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
        if r.get("part") == "privacy" and r.get("mechanism") != "floor" and not r.get("reference")
    }
    base = pr.get(("docs", "wikitext", None))
    ref = next((r for r in rows if r.get("part") == "privacy" and r.get("reference") == REFERENCE), None)
    ref_f1 = ref.get("content_f1") if ref else None
    out = ["## Default rule and aim (issue 21)", ""]
    cands = []
    for r in util:
        if r["fetch_k"] > RULE["fetch_k"]:
            continue
        doc = pr.get(("docs", "wikitext", r["doc_strength"]))
        share = 100 * doc["content_f1"] / base["content_f1"] if doc and base and base.get("content_f1") else None
        vs_ref = doc["content_f1"] / ref_f1 if doc and ref_f1 else None
        cands.append(
            {
                "r": r["doc_strength"],
                "q": query_label(r["query_strength"]),
                "k": r["fetch_k"],
                "n": r["ndcg_ratio"],
                "s": share,
                "v": vs_ref,
                "rule": r["ndcg_ratio"] >= RULE["ndcg_ratio"]
                and share is not None
                and share <= RULE["f1_share"]
                and vs_ref is not None
                and vs_ref <= RULE["vs_reference"],
                "aim": r["ndcg_ratio"] >= AIM["ndcg_ratio"]
                and r["query_strength"] is not None
                and share is not None
                and share <= AIM["f1_share"],
            }
        )
    cands.sort(key=lambda c: (c["k"], -c["r"], c["q"]))
    out += [
        f"Rule: at fetch_k <= {RULE['fetch_k']}, >= {RULE['ndcg_ratio']} of clean NDCG@10 while the adaptive attacker "
        f"on the stored vectors gets <= {RULE['f1_share']:.0f} % of its undefended content-F1 (WikiText-2) and <= "
        f"{RULE['vs_reference']}x what it gets from the {REFERENCE} release. Aim: >= {AIM['ndcg_ratio']} at fetch_k "
        f"{AIM['fetch_k']} with queries protected, <= {AIM['f1_share']:.0f} % content-F1 (and PII-entity recovery <= "
        "2x the floor, see the privacy table). Shares are against this run's attacker (see the privacy section).",
        "",
        md_table(
            cands,
            ["r", "q", "k", "n", "s", "v", "rule", "aim"],
            headers=[
                "r",
                "query",
                "fetch_k",
                "NDCG ratio",
                "content-F1 share %",
                "vs single-stage @0.95",
                "rule met",
                "aim met",
            ],
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
        utility_section(rows),
        scale_section(rows),
        averaging_section(rows),
        _privacy_section(rows, meta),
        _cost_section(rows),
        engines_section(rows),
        _verdict(rows),
        [f"![NDCG@10 against adaptive content-F1]({plot_name})"],
    ]
    body = [line for sec in sections for line in [*sec, ""]]
    return "\n".join(head + body)
