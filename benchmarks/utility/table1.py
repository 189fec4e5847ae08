"""Table I across datasets: one summary of the per-dataset privacy runs of ``benchmarks.utility``.

Measures nothing. It reads ``results/utility_privacy_*.json`` (the ``--privacy`` runs of
``benchmarks.utility``, one or more per dataset: non-adaptive over the whole TextCrafter grid, and both
attackers at eps 1.0) and writes ``results/table1.{json,md}``: per dataset, development accuracy
and inversion content-F1 / BLEU / ROUGE-L for no defense, TextCrafter and Gaussian noise of the
same norm, under each attacker that was run, with the floor row of the same run. Rows are copied,
never recomputed; each keeps the name of the file it came from.

Usage::

    python -m benchmarks.utility.table1                # after the utility --privacy runs
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from benchmarks.common.attack_rows import floor_row
from benchmarks.common.options import script_parser
from benchmarks.common.reporting import RESULTS_DIR, Script, load_results, make_meta, md_table, write_results

NAME = "table1"
SCRIPT = Script(NAME, "benchmarks.utility.table1")
COLUMNS = [
    "dataset",
    "mechanism_label",
    "perturbation_norm",
    "dev_acc",
    "mode",
    "pairs_seen",
    "content_f1",
    "bleu",
    "rouge_l",
    "keyword_f1",
    "pii_auc",
    "source",
]
HEADERS = [
    "dataset",
    "mechanism",
    "‖x'−x‖",
    "dev acc",
    "attacker",
    "pairs",
    "content-F1",
    "BLEU",
    "ROUGE-L",
    "keyword-F1",
    "PII AUC",
    "from",
]


def collect(paths: list[Path]) -> list[dict[str, Any]]:
    """Privacy rows (with their dataset's development accuracy) and one floor row per dataset and file."""
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str]] = set()
    for path in paths:
        _, all_rows = load_results(path)
        acc = {
            (r["dataset"], r["mechanism_label"]): r["accuracy"]
            for r in all_rows
            if r.get("scenario") == "development" and "accuracy" in r
        }
        priv = [r for r in all_rows if r.get("kind") == "privacy"]
        for ds in dict.fromkeys(r["dataset"] for r in priv):
            mine = [r for r in priv if r["dataset"] == ds]
            for r in mine:
                key = (ds, r["mechanism_label"], r["mode"])
                if key in seen:  # the same measurement in two runs: keep the first file's
                    continue
                seen.add(key)
                rows.append(
                    {
                        **{k: r.get(k) for k in COLUMNS},
                        "comparison": r.get("comparison"),
                        "mechanism": r["mechanism"],
                        "dev_acc": acc.get((ds, r["mechanism_label"])),
                        "pairs_seen": r.get("pairs_seen") if r["mode"] == "adaptive" else None,
                        "source": path.name,
                    }
                )
            floor = floor_row(mine, dataset=ds)  # same test sentences and seed in every run of ds
            if floor is not None and (ds, "floor", "") not in seen:
                seen.add((ds, "floor", ""))
                rows.append({**floor, "mechanism": "floor", "source": path.name})
    order = {"none": 0, "textcrafter": 1, "gaussian": 2, "shuffle": 3, "ldp": 4, "purkayastha": 5, "floor": 9}
    rows.sort(
        key=lambda r: (
            r["dataset"],
            order.get(r["mechanism"], 9),
            r.get("perturbation_norm") or 0,
            r.get("mode") != "non-adaptive",
            r["source"],
        )
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = script_parser(SCRIPT, __doc__)
    ap.add_argument("--results-dir", default=str(RESULTS_DIR), help="where the utility_privacy_*.json are")
    ap.add_argument("--out-dir", default=str(RESULTS_DIR))
    args = ap.parse_args(argv)
    paths = sorted(
        p for p in Path(args.results_dir).glob("utility_privacy_*.json") if not p.stem.endswith(("_quick", "_smoke"))
    )
    if not paths:
        print(
            f"error: no utility_privacy_*.json in {args.results_dir}: "
            "run `python -m benchmarks.utility --privacy` first",
            file=sys.stderr,
        )
        return 2
    rows = collect(paths)
    settings = {
        "sources": [p.name for p in paths],
        "note": "collected from benchmarks.utility --privacy runs; nothing measured here",
    }
    meta = make_meta(SCRIPT, argv, size="full", seed=0, **settings)
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    md = [
        f"# Table I across datasets ({', '.join(datasets)})",
        "",
        (
            "Collected by `python -m benchmarks.utility.table1` from the `python -m benchmarks.utility --privacy` "
            "runs listed in the last column (each file's own Markdown has every column, the settings and the machine). "
            "Encoder "
            "all-MiniLM-L6-v2 (384-d); 200 test sentences per dataset; the attacker is trained on WikiText-2 "
            "(the adaptive one fine-tuned on 30,000 protected WikiText-2 pairs, one pass); dev acc: logistic "
            "regression trained and tested on protected vectors. `floor` ignores the vector. Content-F1 first: "
            "function words give BLEU/ROUGE-L a floor of their own."
        ),
        "",
    ]
    for ds in datasets:
        md += [f"## {ds}", "", md_table([r for r in rows if r["dataset"] == ds], COLUMNS[1:], headers=HEADERS[1:]), ""]
    write_results(NAME, size="full", meta=meta, rows=rows, markdown="\n".join(md), out_dir=args.out_dir)
    print(f"[table1] {len(rows)} rows from {len(paths)} files -> {args.out_dir}/{NAME}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
