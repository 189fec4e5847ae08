"""Record the device step here: ``results/attack_strength_gpu.{json,md}`` from the files the GPU machine wrote.

Run after ``unpack`` (on the CPU, with the full package)::

    python -m benchmarks.gpu_inverter.record --from DIR [DIR ...] [--bundle .cache/gpu_bundle] [--out-dir ...]

The strength rows (no defense) are taken as the device measured them (BLEU, token-F1, content-F1, exact match,
cosine: no ROUGE-L there). The attack jobs' predictions are scored again here with
:func:`textcrafter_rag.metrics.text_privacy_metrics` (ROUGE-L included; cosine against the exact vectors of the
bundle, re-embedded with the exact encoder), so their numbers are computed as every other privacy table's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from safetensors.torch import load_file

from benchmarks.common.reporting import RESULTS_DIR, Script, fmt, make_meta, md_table, write_results
from textcrafter_rag.encoders import bundled_minilm
from textcrafter_rag.metrics import text_privacy_metrics

from .adaptive import ADAPTIVE_JSON, GAUSSIAN_SAME_RETRIEVAL_S, REFERENCE_STRENGTH
from .bundle import DEFAULT_BUNDLE, QUERIES, QUERY_VECTORS, check_bundle, read_lines
from .train import INVERTER_JSON, STRENGTH_JSON

__all__ = ["RETRIEVAL", "SCRIPT", "main", "record"]

SCRIPT = Script("attack_strength_gpu", "benchmarks.gpu_inverter.record")
METRICS = ("content_f1", "bleu", "token_f1", "rouge_l", "exact_match", "cosine")
#: What each defense keeps of SciFact retrieval, with the results file it comes from (not measured here).
RETRIEVAL = {
    "none": "NDCG@10 64.97 (retrieval.md)",
    "textcrafter:eps=1": "51.90 (0.799; retrieval.md)",
    "gaussian@norm=1": "55.96 (0.861; retrieval.md)",
    f"gaussian:s={GAUSSIAN_SAME_RETRIEVAL_S}": "51.82 (0.798; frontier_parity.md, target 0.8)",
    "two-stage-candidate:r=2": "62.0 end to end (0.954, fetch_k 200, query 0.5; two_stage.md)",
    f"two-stage-candidate:r={REFERENCE_STRENGTH}": "0.951 by itself, one stage (two_stage.md)",
    "two-stage-query:r=0.5": "the default query noise (two_stage.md)",
}
LABELS = {
    "none": "none",
    "textcrafter:eps=1": "TextCrafter eps 1.0 (default)",
    "gaussian@norm=1": "Gaussian, same norm 1.0",
    f"gaussian:s={GAUSSIAN_SAME_RETRIEVAL_S}": f"Gaussian, same retrieval (s={GAUSSIAN_SAME_RETRIEVAL_S})",
    "two-stage-candidate:r=2": "two-stage default candidates (norm 2.0)",
    f"two-stage-candidate:r={REFERENCE_STRENGTH}": f"single-stage Gaussian @0.95 (norm {REFERENCE_STRENGTH})",
    "two-stage-query:r=0.5": "two-stage query vectors (norm 0.5)",
}


def _victims(bundle: Path) -> dict[str, tuple[list[str], Any]]:
    corpora = {"wikitext": (read_lines(bundle / "test.jsonl.gz"), None)}
    corpora["wikitext"] = (corpora["wikitext"][0], load_file(str(bundle / "test_vectors.safetensors"))["vectors"])
    if (bundle / QUERIES).is_file():
        corpora["scifact-queries"] = (read_lines(bundle / QUERIES), load_file(str(bundle / QUERY_VECTORS))["vectors"])
    return corpora


def _run_rows(
    source: Path, corpora: dict[str, tuple[list[str], Any]], encoder: Any
) -> tuple[list[dict[str, Any]], dict]:
    """The rows of one device run (strength as measured there, attack jobs scored here) and its attack file."""
    strength = json.loads((source / STRENGTH_JSON).read_text(encoding="utf-8"))
    inverter = json.loads((source / INVERTER_JSON).read_text(encoding="utf-8"))
    attacks = (
        json.loads((source / ADAPTIVE_JSON).read_text(encoding="utf-8")) if (source / ADAPTIVE_JSON).is_file() else {}
    )
    run = {
        "run": strength[0]["inverter"],
        "final_loss": inverter.get("meta", {}).get("training", [{}])[-1].get("final_loss"),
    }
    rows: list[dict[str, Any]] = [{"part": "strength", **run, **r} for r in strength]
    for r in attacks.get("rows", []):
        refs, vectors = corpora[r["corpus"]]
        n = r["n_test"]
        scored = text_privacy_metrics(refs[:n], r["predictions"], encoder=encoder, clean_embeddings=vectors[:n].numpy())
        device_scores = {f"device_{k}": r[k] for k in ("bleu", "token_f1", "content_f1", "cosine") if k in r}
        rest = {k: v for k, v in r.items() if k not in (*METRICS, "predictions")}
        rows.append(
            {
                "part": "attack",
                **run,
                **rest,
                **{k: round(float(v), 2) for k, v in scored.items()},
                **device_scores,
                "examples": [[a, b] for a, b in zip(refs[:3], r["predictions"][:3])],
            }
        )
    base = {
        r["corpus"]: r["content_f1"]
        for r in rows
        if r["part"] == "attack" and r["defense"] == "none" and r["mode"] == "non-adaptive"
    }
    for r in rows:
        if r["part"] == "attack" and base.get(r["corpus"]):
            r["share_of_none"] = round(100.0 * r["content_f1"] / base[r["corpus"]], 1)
    return rows, {
        "run": run["run"],
        "attack_meta": attacks.get("meta"),
        "skipped": attacks.get("skipped", []),
        "attack_elapsed_minutes": attacks.get("elapsed_minutes"),
    }


def record(sources: list[Path], bundle: Path, out_dir: Path, *, device_note: str = "") -> tuple[Path, Path]:
    """Score and write the results files of one or more device runs (the first is the reference attacker)."""
    check_bundle(bundle)
    encoder = bundled_minilm()
    corpora = _victims(bundle)
    rows: list[dict[str, Any]] = []
    runs = []
    for source in sources:
        r, info = _run_rows(source, corpora, encoder)
        rows += r
        runs.append(info)
    first = rows[0]
    meta = make_meta(
        SCRIPT,
        None,
        size="full",
        seed=int(first["seed"]),
        encoder=encoder,
        device=first["device_name"],
        device_note=device_note,
        runs=runs,
    )
    return write_results(
        SCRIPT.name, size="full", meta=meta, rows=rows, markdown=_markdown(rows, meta), out_dir=out_dir
    )


def _markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    s = [r for r in rows if r["part"] == "strength"]
    attack = [r for r in rows if r["part"] == "attack"]
    floors = [r for r in s if r["kind"] == "floor" and r["run"] == s[0]["run"]]
    b = s[0]
    lines = [
        "# The GPU-trained inverter: its strength, and the headline rows re-measured against it",
        "",
        f"Encoder `{b['encoder']}`; {b['n_test']} held-out WikiText-2 test sentences ({b['test_set']}), the "
        f"victims of `privacy.md` and `attack_strength*.md`. Each inverter trained {b['train_minutes']} min on one "
        f"{b['device_name']} on {b['n_train']} public sentences ({', '.join(b['sources'])}; deduplicated against "
        f"every test split), batch {b['batch_size']}, lr {b['lr']}, bf16; weights rounded to float16 before "
        f"measuring; seed {b['seed']}. " + (meta.get("device_note") or ""),
        "",
        "## Strength (no defense)",
        "",
    ]
    for run in meta["runs"]:
        r0 = next(r for r in s if r["run"] == run["run"])
        lines.append(
            f"* `{run['run']}`: {r0['train_steps']} steps ({r0['epochs']} passes over the corpus), final training "
            f"loss {fmt(r0['final_loss'], 4)}; device step {r0['total_minutes']} min before its attack jobs"
            + (f", {run['attack_elapsed_minutes']} min in all" if run.get("attack_elapsed_minutes") else "")
            + "."
        )
    lines += [
        "",
        md_table(
            [r for r in s if r["kind"] != "floor"],
            ["run", "attack", "bleu", "token_f1", "content_f1", "exact_match", "cosine"],
            headers=["inverter", "attack", "BLEU", "token-F1", "content-F1", "exact", "cosine"],
        ),
        "",
        "Floor (attackers that ignore the vector, same runs): "
        + "; ".join(
            f"{r['attack']} content-F1 {fmt(r['content_f1'])}, token-F1 {fmt(r['token_f1'])}, BLEU {fmt(r['bleu'])}"
            for r in floors
        )
        + ". Earlier attackers on the same 300 sentences, beam 4 + rerank: "
        "the 20-minute CPU inverter of `attack_strength.md` (the headline's), the parity inverter (content-F1 "
        "35.92, `attack_strength_parity.md`) and its rerun (34.77, `attack_strength_parity2.md`).",
        "",
    ]
    if attack:
        ar = (meta["runs"][0].get("attack_meta") or {}).get("adaptive_run", {})
        lines += [
            "## Defended rows, attacked by these inverters",
            "",
            f"Decoding: beam {ar.get('beam')} + rerank by re-embedding (through the defense when adaptive), the "
            "package's default attacker. *adaptive* = `textcrafter_rag.attacks.adapt_inverter`: the inverter "
            f"fine-tuned on {ar.get('n_pairs')} (text, protected vector) pairs of its own public sentences, one "
            "uncapped pass (the privacy tables' budget). Scores recomputed here with "
            "`textcrafter_rag.metrics.text_privacy_metrics`; *share* = content-F1 as % of `none` non-adaptive "
            "by the same inverter on the same victims. Retrieval is not measured here: the column quotes the file "
            "named.",
            "",
        ]
        columns = [
            "label",
            "mode",
            "content_f1",
            "share_of_none",
            "bleu",
            "token_f1",
            "rouge_l",
            "cosine",
            "perturbation_norm",
            "pairs_seen",
            "retrieval",
        ]
        headers = [
            "defense",
            "attacker",
            "content-F1",
            "share %",
            "BLEU",
            "token-F1",
            "ROUGE-L",
            "cosine",
            "‖x'−x‖",
            "pairs",
            "SciFact retrieval (source)",
        ]
        for run in meta["runs"]:
            for corpus, title in (("wikitext", "WikiText-2 test sentences"), ("scifact-queries", "SciFact queries")):
                part = [
                    {**r, "label": LABELS.get(r["defense"], r["defense"]), "retrieval": RETRIEVAL.get(r["defense"])}
                    for r in attack
                    if r["corpus"] == corpus and r["run"] == run["run"]
                ]
                if part:
                    lines += [
                        f"### `{run['run']}`: {title} ({part[0]['n_test']} victims)",
                        "",
                        md_table(part, columns, headers=headers),
                        "",
                    ]
            skipped = run.get("skipped") or []
            if skipped:
                lines += [
                    f"`{run['run']}`, not measured: " + "; ".join(f"{k['job']} ({k['why']})" for k in skipped) + ".",
                    "",
                ]
    lines += [
        "The weights are not in the repository (about 40 MB as float16): `python -m benchmarks.gpu_inverter "
        "unpack` writes them from the device's files; `textcrafter audit --attacker DIR` reports against them.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {SCRIPT.module}", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--from",
        dest="sources",
        type=Path,
        nargs="+",
        required=True,
        help="the files each device run wrote (the first: the reference attacker)",
    )
    ap.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    ap.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    ap.add_argument("--device-note", default="", help="a sentence on the device run (time used, reruns)")
    args = ap.parse_args(argv)
    for p in record(args.sources, args.bundle, args.out_dir, device_note=args.device_note):
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
