"""The Markdown of :mod:`benchmarks.threat_models`: the matrix, key recovery, details, and a generated summary.

Everything is computed from the result rows (``--from-json`` re-renders it); the summary's rule is
stated in the text: a protection *holds* against an attacker when the attacker's content-F1 closes at
least :data:`HOLD_FRACTION` of the gap between the unprotected store and the floor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.common.reporting import fmt, md_table

__all__ = ["HOLD_FRACTION", "render_markdown", "summary_lines"]

#: Share of the none-to-floor content-F1 gap an attacker must lose for a protection to "hold".
HOLD_FRACTION = 0.9
#: Content-F1 points within which "key + TextCrafter" counts as no worse than TextCrafter.
NO_WORSE_POINTS = 1.0
#: The plain query-access column (the inverter fine-tuned on the releases, no key estimate).
ADAPTIVE = "query access (adaptive)"
#: Key-recovery score (centred cosine, or share of coordinates) at which a key counts as recovered.
KEY_RECOVERED = 0.9


def _cell(r: dict[str, Any] | None, key: str) -> str:
    if r is None:
        return "–"
    status = str(r.get("status", "done"))
    if status == "pending":
        return "pending"
    if status.startswith("unavailable"):
        return "unavailable"
    if status.startswith("n/a"):
        return "n/a"
    return fmt(r.get(key))


def _protections(rows: Sequence[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["protection"] for r in rows if r.get("family") != "floor"))


def _lookup(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["protection"], r["attacker"]): r for r in rows}


def _matrix(rows: Sequence[dict[str, Any]], cols: list[str], key: str, *, ndcg: bool) -> str:
    at = _lookup(rows)
    table = []
    for p in _protections(rows):
        first = next(r for r in rows if r["protection"] == p)
        line: dict[str, Any] = {"protection": p, **{c: _cell(at.get((p, c)), key) for c in cols}}
        if ndcg:
            line["ndcg"], line["ndcg_q"] = fmt(first.get("ndcg10_key_only_queries")), fmt(first.get("ndcg10"))
        table.append(line)
    extra = ["ndcg", "ndcg_q"] if ndcg else []
    heads = ["protection", *cols] + (
        ["NDCG@10 (queries keyed, no mechanism noise; DCPE adds its own)", "NDCG@10 (queries released too)"]
        if ndcg
        else []
    )
    return md_table(table, ["protection", *cols, *extra], headers=heads)


def _key_value(r: dict[str, Any]) -> Any:
    if r.get("family") == "permutation":
        return r.get("key_permutation_recovered")
    return r.get("key_centered_cosine")


def _holds(cf1: Any, none: float, floor: float) -> bool:
    return isinstance(cf1, (int, float)) and cf1 <= floor + (1.0 - HOLD_FRACTION) * max(none - floor, 0.0)


def summary_lines(rows: Sequence[dict[str, Any]], cols: list[str]) -> list[str]:
    """The "which protection for which threat" bullets, from the rows alone."""
    at = _lookup(rows)
    none = at.get(("none", cols[0]), {}).get("content_f1")
    floor = next((r.get("content_f1") for r in rows if r.get("family") == "floor"), None)
    if not isinstance(none, (int, float)) or not isinstance(floor, (int, float)):
        return ["- Not enough finished cells for a summary yet (none and floor rows are needed)."]
    # the product's default: documents released, queries keyed but never noised (protect_queries=False)
    ndcg = {r["protection"]: r.get("ndcg10_key_only_queries") for r in rows if r.get("ndcg10") is not None}
    out = [
        f"Rule: a protection *holds* against an attacker when content-F1 <= floor + {1 - HOLD_FRACTION:.0%} of "
        f"(none - floor) = {floor + (1 - HOLD_FRACTION) * max(none - floor, 0.0):.2f} here "
        f"(none {none:.2f}, floor {floor:.2f}).",
        "",
    ]
    store = [c for c in cols if not c.startswith("query")]
    groups = [("the store only", [c for c in store if c.startswith("store only")])]
    groups += [
        (f"the store + {c.split('+ ')[1]}", store[: store.index(c) + 1]) for c in store if c.startswith("store +")
    ]
    # query access: the better of its two attacks (adapt to the releases; un-key with own pairs, then adapt)
    groups += [("query access (the better of its two attacks)", [c for c in cols if c.startswith("query")])]
    for threat, group in groups:
        done = []
        for p in _protections(rows):
            cells = [at.get((p, c)) for c in group]
            cells = [c for c in cells if c is None or not str(c.get("status")).startswith("n/a")]
            if not cells or any(c is None or c.get("status") != "done" for c in cells):
                continue
            done.append((p, max(float(c["content_f1"]) for c in cells)))
        holding = [(p, cf1) for p, cf1 in done if _holds(cf1, none, floor)]
        if not done:
            continue
        if holding:
            best = max(holding, key=lambda pc: ndcg.get(pc[0]) or 0.0)
            names = ", ".join(p for p, _ in holding)
            out.append(
                f"- Against {threat}: holding: {names}. Best retrieval among them: **{best[0]}** "
                f"(NDCG@10 {fmt(ndcg.get(best[0]))}, content-F1 {best[1]:.2f})."
            )
        else:
            worst = min(done, key=lambda pc: pc[1])
            out.append(f"- Against {threat}: nothing measured holds; lowest content-F1 {worst[1]:.2f} ({worst[0]}).")
    for p in _protections(rows):
        keyed = [at.get((p, c)) for c in cols if c != ADAPTIVE]
        keyed = [r for r in keyed if r and r.get("status") == "done" and _key_value(r) is not None]
        if keyed:
            broken = next((r["attacker"] for r in keyed if float(_key_value(r)) >= KEY_RECOVERED), None)
            out.append(
                f"- {p}: key recovered (>= {KEY_RECOVERED:g}) first by: {broken}."
                if broken
                else f"- {p}: key not recovered (>= {KEY_RECOVERED:g}) by any store attacker measured."
            )
    tc = next((p for p in _protections(rows) if p.startswith("TextCrafter")), None)
    ktc = next((p for p in _protections(rows) if p.startswith("key + TextCrafter")), None)
    if tc and ktc:
        # TextCrafter has no key: its adaptive cell answers every query-access attack
        pairs = [(at.get((tc, ADAPTIVE if c.startswith("query") else c)), at.get((ktc, c))) for c in cols]
        both = [(a, b) for a, b in pairs if a and b and a.get("status") == b.get("status") == "done"]
        ok = sum(float(b["content_f1"]) <= float(a["content_f1"]) + NO_WORSE_POINTS for a, b in both)
        out.append(
            f"- {ktc} vs {tc}: no worse (within {NO_WORSE_POINTS:g} content-F1 point) against {ok} of {len(both)} "
            f"attackers measured; NDCG@10 {fmt(ndcg.get(ktc))} vs {fmt(ndcg.get(tc))}."
        )
    return out


def render_markdown(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The whole report."""
    cols = list(meta["columns"])
    dom = meta["domains"]
    ret = meta["retrieval"]
    ac = meta["attack_config"]
    detail_cols = ["protection", "attacker", "method", "content_f1", "bleu", "token_f1", "cosine", "unkeyed_cosine"]
    detail_cols += ["key_centered_cosine", "key_permutation_recovered", "key_relative_frobenius", "status"]
    details = [dict(r, status=str(r.get("status"))[:60]) for r in rows]
    keyed = [r for r in rows if r.get("family") in ("rotation", "permutation")]
    key_cols = [c for c in cols if c != ADAPTIVE]  # the un-key column estimates the key too
    key_rows = [dict(r, key_value=_key_value(r)) for r in keyed if r.get("column") in ("store", "pairs", "unkey")]
    lines = [
        "# Threat models: which protection survives which attacker",
        "",
        f"Victim store: {dom['victim_store']}. Public text the attacker embeds itself: same domain = "
        f"{dom['same_domain_public']}; other domain = {dom['other_domain_public']}. Known pairs: "
        f"{dom['known_pairs']}. Attacker: {ac['inverter']}; query access = the inverter fine-tuned on "
        f"{ac['adapt_pairs']:,} (text, release) pairs; for keyed rows also un-key with a key estimated from its own "
        f"{ac.get('key_pairs', '?')} pairs first, then fine-tune on the un-keyed releases. "
        f"Retrieval: {ret['dataset']}, {ret['n_docs']} documents, {ret['n_queries']} queries, "
        f"{ret['index']}; documents released, queries keyed "
        "but not noised (the product's default, `protect_queries=False`), and beside it queries released like the "
        "documents. IronCore: "
        f"{meta.get('ironcore')}. Pending cells: {meta.get('pending', 0)}.",
        "",
        "## Content-F1 of the reconstructions (lower is better; none and floor rows from the same run)",
        "",
        _matrix(rows, cols, "content_f1", ndcg=True),
        "",
        f"Floor (an attacker that ignores the vector): content-F1 "
        f"{fmt(next((r.get('content_f1') for r in rows if r.get('family') == 'floor'), None))}.",
        "",
        "## Key recovery (rotations: centred cosine of un-keyed vs clean vectors; permutations: share of coordinates)",
        "",
        _matrix(key_rows, key_cols, "key_value", ndcg=False) if key_rows else "(no keyed rows)",
        "",
        "## Every cell",
        "",
        md_table(details, detail_cols),
        "",
        "## Which protection for which threat (generated from the rows above)",
        "",
        *summary_lines(rows, cols),
        "",
        f"Command: `{meta['command']}`",
    ]
    return "\n".join(lines)
