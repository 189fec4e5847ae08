"""The report of ``benchmarks.sealed_search.bulk_load``: records per second and what the fresh process found."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.common.reporting import md_table

RATE_HEADERS = (
    "records",
    "workers",
    "seconds",
    "records/s (end to end)",
    "s to first output",
    "records/s after it",
    "actor time: index-log writes",
    "data-record writes",
    "sealing and the rest",
    "load avg start / end",
)
CHECK_HEADERS = (
    "records",
    "workers",
    "ids returned (unique / rows)",
    "writers",
    "log heads in the store",
    "indexed",
    "stored",
    "found top-1 by own vector",
    "open + read whole log, s",
    "search ms (mean)",
    "Chroma data, GiB",
)


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "–"


def render_markdown(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The Markdown report: one row per run, then the checks, then how it was measured."""
    machine = meta.get("machine", {})
    git = meta.get("git", {})
    batch = meta.get("config", {}).get("batch")
    per_batch = f"{batch:,}" if isinstance(batch, int) else "?"
    lines = [
        "# Ray Data bulk load into the store-held index",
        "",
        f"`ds.map_batches(SealedLoad, ...)` (`langchain_textcrafter.ray_load`) writes synthetic records (a short "
        f"distinct text and a random unit {meta.get('dimension', 384)}-d clean vector each) into one collection of a "
        f"Chroma server on this machine, {per_batch} records a batch, each batch one sealed add "
        "(index segment and head, then the records); each actor is one writer of the sealed index log.",
        "",
        f"Machine: {machine.get('platform', '?')}, {machine.get('cpu_count', '?')} CPUs shared with other jobs "
        f"(the Chroma server, the Ray actors and the record generator all on them); load average (1 min) at the end: "
        f"{machine.get('load_avg_1m', '?')}. Ray {meta.get('ray', '?')}. Git commit {git.get('head', '?')}"
        f"{' (library files modified)' if git.get('dirty_library') else ''}. Date {meta.get('date', '?')}. "
        f"Command: `{meta.get('command', '?')}`.",
        "",
        "## Records per second",
        "",
    ]
    table = []
    for r in rows:
        busy = r["actor_busy_s"]
        cells = [
            f"{r['n_records']:,}",
            str(r["workers"]),
            f"{r['seconds']:,.1f}",
            f"**{r['records_per_s']:,.0f}**",
            f"{r['s_to_first_output']:.1f}",
            f"{r['records_per_s_after_first_output']:,.0f}",
            _share(r["log_writes_s"], busy),
            _share(r["record_writes_s"], busy),
            _share(r["sealing_and_rest_s"], busy),
            f"{r.get('load_avg_1m_start', '?')} / {r.get('load_avg_1m_end_of_load', '?')}",
        ]
        table.append(dict(zip(RATE_HEADERS, cells, strict=True)))
    lines.append(md_table(table, RATE_HEADERS))
    lines += [
        "",
        "End to end: from building the dataset to the last output row in the driver. Actor time: the seconds the "
        "actors spent in their batches, summed over actors (with 2 workers it exceeds the wall time when they "
        "overlap), split by the wrapped store's `add_documents` calls: the log's segment chunks and heads, and the "
        "data records.",
        "",
        "## Checks (after the timer, a fresh process with only the key)",
        "",
    ]
    checks = []
    for r in rows:
        cells = [
            f"{r['n_records']:,}",
            str(r["workers"]),
            f"{r['unique_ids_out']:,} / {r['rows_out']:,}",
            str(r["writers"]),
            str(r["log_heads"]),
            f"{r['indexed']:,}",
            f"{r['stored']:,}",
            f"{r['sample_found_top1']} / {r['sample']}",
            f"{r['open_and_index_check_s']:.1f}",
            f"{r['search_ms_mean']:.0f}",
            f"{r['data_dir_bytes'] / 2**30:.2f}",
        ]
        checks.append(dict(zip(CHECK_HEADERS, cells, strict=True)))
    lines.append(md_table(checks, CHECK_HEADERS))
    complete = all(
        r["indexed"] == r["stored"] == r["unique_ids_out"] == r["rows_out"] == r["n_records"]
        and r["sample_found_top1"] == r["sample"]
        and 1 <= r["writers"] == r["log_heads"] <= r["workers"]
        for r in rows
    )
    lines += [
        "",
        "Every run: each id returned once, one log head per writer (at most one writer per actor; an actor that "
        "got no batch writes nothing), every record indexed and "
        f"stored, every sampled record found top-1 with its own text: **{'yes' if complete else 'NO'}**.",
        "",
        "Not measured here: the encoder (vectors are precomputed, as a load whose encoder stage runs before it "
        "would feed them), other engines (Qdrant local admits one process at a time, so it cannot take parallel "
        "writers; Milvus cannot read by id, so it gets candidates, which have no index log), and more than 2 workers "
        "(this machine has 2 cores, shared with the server).",
    ]
    return "\n".join(lines) + "\n"
