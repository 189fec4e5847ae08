"""The report of the memory part of ``benchmarks.sealed_search.store_index``: opening from a snapshot, a live
reader, and a write during a compaction.

Apart from :mod:`.store_index_memory`, which the memory child imports: the reporting helpers import torch and
scikit-learn, whose libraries would then be loaded before the child reads its baseline RSS (a run that did so
grew 16 MB less from the log at both sizes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.common.reporting import md_table

__all__ = ["snapshot_section"]


def snapshot_section(snaps: Sequence[dict[str, Any]]) -> list[str]:
    """The report's lines on opening from a snapshot, a live reader and a compaction's stall (none: no lines)."""
    if not snaps:
        return []
    stalled = [r for r in snaps if "write_ms_longest_during_compaction" in r]
    lines = [
        "### Opening from a compaction snapshot",
        "",
        "The same process then compacts the log (`StoreIndex.compact()`: the index sealed as one snapshot, "
        "the segments it covers deleted), and a second fresh `StoreIndex` opens the port with only the key: "
        "it reads the newest snapshot and the segments past it (a trained snapshot needs no training after "
        "it). RSS: the process's growth by the second index, from a baseline taken after the first was "
        "deleted and the heap trimmed (FAISS reads each inverted list at its size, where a list built by adds "
        "grows by doubling). `same`: its `open_k` candidates for the query above and its size equal the first "
        "index's. `live`: the same process's growth, per record held, after another writer then added "
        f"{snaps[0].get('live_records_added', 0):,} records in segments of 2,000 and the reopened index read "
        "each one (a reader serving while the store grows); the log records written meanwhile (the store's "
        "sealed text, held by this process's `MemoryPort`) are deleted and the heap trimmed before the RSS "
        "is read.",
        "",
        md_table(
            snaps,
            [
                "n_records",
                "build_seconds",
                "build_and_train_seconds",
                "compact_seconds",
                "log_chunks_before_compaction",
                "log_chunks_after_compaction",
                "snapshot_records",
                "snapshot_mb",
                "open_from_snapshot_seconds",
                "snapshot_same_candidates",
                "rss_snapshot_bytes_per_record",
                "rss_snapshot_trimmed_bytes_per_record",
                "rss_live_bytes_per_record",
            ],
            headers=[
                "records",
                "open from the log s",
                "and trained s",
                "compact s",
                "log records before",
                "log records after",
                "snapshot records",
                "snapshot MB",
                "open from the snapshot s",
                "same",
                "RSS B / record",
                "after malloc_trim",
                "live B / record",
            ],
            digits=2,
        ),
        "",
    ]
    if stalled:
        lines += [
            "### A write during a compaction",
            "",
            "Last, the live reader writes segments of 2,000 records (each `StoreIndex.add`: the log read, the "
            "segment logged, the index updated), timed one by one: five alone, then one after another while the "
            "same index compacts in a thread of its own, as a background compaction does. A compaction reads the "
            "log and copies the index under the lock that writes take, then serializes the copy, seals it and "
            "stores it without the lock; `bytes taken` is the copy and its serialization timed alone, before the "
            "writes.",
            "",
            md_table(
                stalled,
                [
                    "n_records",
                    "index_bytes_taken_ms",
                    "write_ms_median_alone",
                    "writes_during_compaction",
                    "write_ms_longest_during_compaction",
                    "compaction_with_writes_seconds",
                ],
                headers=[
                    "records",
                    "bytes taken ms",
                    "write ms, alone (median)",
                    "writes during it",
                    "longest write during it, ms",
                    "compaction s",
                ],
                digits=1,
            ),
            "",
        ]
    return lines
