"""What one search of the default costs on a Chroma server, part by part.

The latency part of :mod:`.store_index` times the default's whole search on a Chroma server at about four times the
plain store's p95, at 20,000 records. This splits it, on the same data (SciFact grown with the scale grid's fitted
distractors, the bundled MiniLM's vectors precomputed) and one ``chroma run`` server holding three collections:

* ``plain query``: the plain LangChain store's ``similarity_search(query, k=10)``: the reference;
* ``default search``: the sealed store's, a store object given only the key (the store-held index);
* ``index scan``: the part of that search made in memory: the in-memory index's scan for the records a search
  opens (:meth:`~textcrafter_rag.sealed.vector_index.VectorIndex.search`, without the log's read);
* ``sealed read``: Chroma's ``get`` of those records by id, with their documents and metadata, as the search makes
  it (less the log's beacon, which the search reads in the same request);
* ``plain read``: the same ``get`` of as many records of the plain collection (random ones);
* ``packed read``: the same ``get`` of the same sealed records, copied into a third collection with every field
  but the record id packed into one metadata field (the same bytes in fewer fields: what a packed record format
  would read; the library does not write it).

A query's six timings are taken one after another, query by query, so the server's state weighs on all alike.
They start after the packed copy is made, so the server has read the sealed collection whole once: a hand check
found Chroma's search of the default much faster then (whether for the read or for the time since the writes was
not separated) than right after the bulk write, which is when the latency part of :mod:`.store_index` times it.
The rest of the default's search (the beacon's check, opening the records' vectors, ranking, opening the texts of
the ``k`` best) is the default's median less the scan's and the sealed read's: a difference of medians, not a
measurement of its own.

**Page cache.** A search reads its records from the server's SQLite file. This machine pages out file pages no
process read for about a minute (a DAMON ``pageout`` scheme; the report gives the setting read from ``/sys``), so
the records a search reads come from disk or from memory by how recently they were read. A second table times
``plain query`` and ``default search`` again, query by query, in two regimes: ``evicted`` (every file of the
server's data folder dropped from the page cache, ``posix_fadvise(DONTNEED)``, before each search: a store read
from disk) and ``resident`` (every file read whole before each block of 50 queries: a store held in memory).

Usage::

    python -m benchmarks.sealed_search.store_index_reads            # full: 20,000 records, 300 queries
    python -m benchmarks.sealed_search.store_index_reads --quick    # 5,000 records, 100 queries
    python -m benchmarks.sealed_search.store_index_reads --n-records 50000 --tag 50k
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
from langchain_chroma import Chroma

from benchmarks.common.caches import cache_dir
from benchmarks.common.options import base_parser, resolve_data_or_none, resolve_size, set_threads
from benchmarks.common.reporting import Script, make_meta, md_table, write_results
from benchmarks.two_stage.engines import _chroma_server
from langchain_textcrafter import SealedVectorStore
from textcrafter_rag.sealed.index_modes import records_read

from .store_index import _git, _load
from .store_index_parts import Retrieval, _held_index, _RowEmbeddings, _scifact, _wait_compacted, first_queries, grow

__all__ = ["NAME", "PARTS", "SCRIPT", "SIZES", "main", "measure", "render_markdown"]

NAME = "store_index_reads"
SCRIPT = Script(NAME, "benchmarks.sealed_search.store_index_reads")
PLAIN_QUERY, DEFAULT, SCAN, SEALED_READ, PLAIN_READ, PACKED_READ = (
    "plain query",
    "default search",
    "index scan",
    "sealed read",
    "plain read",
    "packed read",
)
PARTS = (PLAIN_QUERY, DEFAULT, SCAN, SEALED_READ, PLAIN_READ, PACKED_READ)
#: Metadata field of the packed copy holding every other field of a sealed record, as JSON.
PACK_FIELD = "_tc_pack"
_INCLUDE = ["documents", "metadatas"]
#: Page-cache regimes of the second table (see the module).
EVICTED, RESIDENT = "evicted", "resident"
#: The percentiles the second table gives.
PCTS = ("p50", "p95")
#: Queries between two reads of the server's files in the ``resident`` regime.
_RESIDENT_BLOCK = 50
#: The machine's DAMON scheme (if any): its action, and the age in aggregation intervals it acts at.
_DAMON = Path("/sys/kernel/mm/damon/admin/kdamonds/0/contexts/0")


@dataclass(frozen=True)
class Size:
    n_records: int
    n_queries: int


SIZES = {
    "smoke": Size(n_records=300, n_queries=12),
    "quick": Size(n_records=5_000, n_queries=100),
    "full": Size(n_records=20_000, n_queries=300),
}


def _others(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if k != "_tc_id"}


def _packed_copy(source: Any, target: Any, *, batch: int = 1000) -> int:
    """Every record of ``source`` that carries metadata, into ``target`` with all its fields but the record id in
    :data:`PACK_FIELD`; the number copied."""
    offset = copied = 0
    while True:
        got = source.get(limit=batch, offset=offset, include=[*_INCLUDE, "embeddings"])
        if not got["ids"]:
            return copied
        offset += len(got["ids"])
        keep = [i for i, m in enumerate(got["metadatas"]) if m]
        if keep:
            metas = [got["metadatas"][i] for i in keep]
            target.add(
                ids=[got["ids"][i] for i in keep],
                embeddings=[got["embeddings"][i] for i in keep],
                documents=[got["documents"][i] for i in keep],
                metadatas=[{"_tc_id": m.get("_tc_id", ""), PACK_FIELD: json.dumps(_others(m))} for m in metas],
            )
            copied += len(keep)


def _data_files(folder: Path) -> list[Path]:
    return [p for p in sorted(folder.rglob("*")) if p.is_file()]


def _evict(folder: Path) -> None:
    """Drop every file of ``folder`` from the page cache (clean pages: the server writes nothing while searched)."""
    for path in _data_files(folder):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _read_whole(folder: Path) -> None:
    for path in _data_files(folder):
        with path.open("rb") as f:
            while f.read(1 << 24):
                pass


def page_out_policy() -> str:
    """This machine's DAMON page-out scheme in words, or that none was found."""
    try:
        action = (_DAMON / "schemes/0/action").read_text().strip()
        age = int((_DAMON / "schemes/0/access_pattern/age/min").read_text())
        aggr_us = int((_DAMON / "monitoring_attrs/intervals/aggr_us").read_text())
    except (OSError, ValueError):
        return "no DAMON scheme found"
    return f"DAMON `{action}` of memory not accessed for {age * aggr_us / 1e6:.0f} s"


def cache_rows(searches: dict[str, Callable[[str], Any]], queries: Sequence[str], folder: Path) -> list[dict]:
    """The second table's rows: each search of ``searches`` timed per query in both page-cache regimes."""
    if not hasattr(os, "posix_fadvise"):
        return []  # not Linux: no way to drop a file from the page cache
    rows = []
    for regime in (EVICTED, RESIDENT):
        times: dict[str, list[float]] = {name: [] for name in searches}
        for n, q in enumerate(queries):
            if regime == RESIDENT and n % _RESIDENT_BLOCK == 0:
                _read_whole(folder)
            for name, search in searches.items():
                if regime == EVICTED:
                    _evict(folder)
                t0 = time.perf_counter()
                search(q)
                times[name].append((time.perf_counter() - t0) * 1000)
        for name, ms in times.items():
            rows.append({"part": name, "page_cache": regime, "n_queries": len(queries), **_percentiles(ms)})
    return rows


def _percentiles(ms: Sequence[float]) -> dict[str, float]:
    """``ms_p50`` and ``ms_p95`` of the timings, in milliseconds to two decimals."""
    return {f"ms_{q}": round(float(np.percentile(ms, int(q[1:]))), 2) for q in PCTS}


def measure(
    data: Retrieval, *, key: bytes, work_dir: Path, k: int = 10, progress: Callable[[str], Any] = lambda s: None
) -> list[dict[str, Any]]:
    """One row per part of :data:`PARTS`: its p50 / p95 / mean milliseconds over the queries (see the module); then
    :func:`cache_rows`' rows (each with its ``page_cache`` regime)."""
    embeddings = _RowEmbeddings((data.texts, data.vectors), (data.query_texts, data.query_vectors))
    ids = [str(uuid.UUID(int=i + 1, version=4)) for i in range(len(data.doc_ids))]
    work_dir.mkdir(parents=True, exist_ok=True)
    with _chroma_server(work_dir) as (host, port):
        client = chromadb.HttpClient(host=host, port=port)

        def factory(name: str) -> Callable[[Any], Chroma]:
            return lambda e: Chroma(collection_name=name, embedding_function=e, client=client)

        plain = factory("plain")(embeddings)
        writer = SealedVectorStore(factory("sealed"), embedding=embeddings, key=key)
        for start in range(0, len(ids), 1000):
            texts = list(data.texts[start : start + 1000])
            plain.add_texts(texts, ids=ids[start : start + 1000])
            writer.add_texts(texts, ids=ids[start : start + 1000])
        _held_index(writer).index.wait_trained()  # no training thread of the writer's runs while searches are timed
        _wait_compacted(writer)
        reader = SealedVectorStore(factory("sealed"), embedding=embeddings, key=key)
        reader.similarity_search(data.query_texts[0], k=k)  # reads the whole log
        held = _held_index(reader)
        held.index.wait_trained()
        packed = client.create_collection("packed")
        copied = _packed_copy(client.get_collection("sealed"), packed)
        progress(f"{len(ids):,} records written to each collection ({copied:,} records of the sealed one packed)")
        sealed_coll, plain_coll = client.get_collection("sealed"), client.get_collection("plain")
        rng = np.random.default_rng(0)
        times: dict[str, list[float]] = {p: [] for p in PARTS}
        read_sizes: list[int] = []
        missed = {SEALED_READ: 0, PACKED_READ: 0}

        def timed(part: str, call: Callable[[], Any]) -> Any:
            t0 = time.perf_counter()
            out = call()
            times[part].append((time.perf_counter() - t0) * 1000)
            return out

        opened = records_read(held, held.options.most_opened, k)  # what the default's search reads
        for q in data.query_texts[:3]:  # warm-up: connections, caches
            plain.similarity_search(q, k=k)
            reader.similarity_search(q, k=k)
        for n, (q, vec) in enumerate(zip(data.query_texts, data.query_vectors, strict=True)):
            timed(PLAIN_QUERY, lambda q=q: plain.similarity_search(q, k=k))
            timed(DEFAULT, lambda q=q: reader.similarity_search(q, k=k))
            picked = timed(SCAN, lambda vec=vec: held.index.search(vec, opened))
            read_sizes.append(len(picked))
            got = timed(SEALED_READ, lambda picked=picked: sealed_coll.get(ids=picked, include=_INCLUDE))
            missed[SEALED_READ] += len(picked) - len(got["ids"])
            others = [ids[i] for i in rng.choice(len(ids), len(picked), replace=False)]
            timed(PLAIN_READ, lambda others=others: plain_coll.get(ids=others, include=_INCLUDE))
            got = timed(PACKED_READ, lambda picked=picked: packed.get(ids=picked, include=_INCLUDE))
            missed[PACKED_READ] += len(picked) - len(got["ids"])
            if n % 100 == 99:
                progress(f"{n + 1} queries")
        searches = {PLAIN_QUERY: lambda q: plain.similarity_search(q, k=k),
                    DEFAULT: lambda q: reader.similarity_search(q, k=k)}  # fmt: skip
        by_cache = cache_rows(searches, data.query_texts, work_dir / "data")
        progress("page-cache regimes timed")
        common = {
            "n_records": len(ids),
            "n_queries": len(data.query_texts),
            "k": k,
            "records_read": float(np.mean(read_sizes)),
            "index_trained": bool(held.index.trained),
            "sealed_records_packed": copied,
            "sealed_read_missed": missed[SEALED_READ],
            "packed_read_missed": missed[PACKED_READ],
        }
    parts = [
        {
            "part": part,
            **common,
            **_percentiles(times[part]),
            "ms_mean": round(float(np.mean(times[part])), 2),
        }
        for part in PARTS
    ]
    return parts + by_cache


def _cache_section(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> list[str]:
    """The second table: the plain query and the default per page-cache regime, and the default's ratios."""
    if not rows:
        return ["The page-cache regimes were not measured (no `posix_fadvise` on this system).", ""]
    by = {(r["page_cache"], r["part"]): r for r in rows}
    table, lines = [], []
    for regime in (EVICTED, RESIDENT):
        plain, default = by[(regime, PLAIN_QUERY)], by[(regime, DEFAULT)]
        r50, r95 = default["ms_p50"] / plain["ms_p50"], default["ms_p95"] / plain["ms_p95"]
        row = {"page_cache": regime, "r50": r50, "r95": r95}
        row.update({f"{name}_{q}": r[f"ms_{q}"] for name, r in (("plain", plain), ("default", default)) for q in PCTS})
        table.append(row)
        lines.append(f"{regime}: the default's p95 is {r95:.2f}x the plain query's ({default['ms_p95']:.2f} against "
                     f"{plain['ms_p95']:.2f} ms), its p50 {r50:.2f}x.")  # fmt: skip
    return [
        "## The same searches, read from disk and from memory",
        "",
        f"This machine's page-out policy: {meta.get('page_out', '?')}. {rows[0]['n_queries']} queries per regime, "
        "the plain query and the default interleaved query by query.",
        "",
        md_table(
            table,
            ["page_cache", "plain_p50", "plain_p95", "default_p50", "default_p95", "r50", "r95"],
            headers=[
                "page cache",
                "plain p50 ms",
                "plain p95 ms",
                "default p50 ms",
                "default p95 ms",
                "p50 / plain",
                "p95 / plain",
            ],
        ),
        "",
        *lines,
        "",
    ]


def render_markdown(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    cache = [r for r in rows if "page_cache" in r]
    rows = [r for r in rows if "page_cache" not in r]
    by = {r["part"]: r for r in rows}
    ref = by[PLAIN_QUERY]
    table = [{**r, "p50_ratio": r["ms_p50"] / ref["ms_p50"], "p95_ratio": r["ms_p95"] / ref["ms_p95"]} for r in rows]
    rest = by[DEFAULT]["ms_p50"] - by[SCAN]["ms_p50"] - by[SEALED_READ]["ms_p50"]
    r0 = rows[0]
    return "\n".join(
        [
            "# The default's search on a Chroma server, part by part",
            "",
            f"`{meta['command']}` on {meta['date']}; machine: {meta['machine'].get('cpu_count')} cores, shared (load "
            f"average {meta.get('load_avg_1m_start')} at the start, {meta.get('load_avg_1m_end')} at the end); code "
            f"at {meta.get('git', {}).get('head', '?')}. {meta.get('records', '')}: {r0['n_records']:,} records, "
            f"{r0['n_queries']} queries, k={r0['k']}; one `chroma run` server on this machine (loopback).",
            "",
            (__doc__ or "").split("Usage::")[0].split("\n\n", 1)[1].strip(),
            "",
            md_table(
                table,
                ["part", "ms_p50", "ms_p95", "ms_mean", "p50_ratio", "p95_ratio"],
                headers=["part", "p50 ms", "p95 ms", "mean ms", "p50 / plain query", "p95 / plain query"],
            ),
            "",
            f"Records a search read: {r0['records_read']:.1f} on average (index trained: {r0['index_trained']}); "
            f"records asked for and not returned: {r0['sealed_read_missed']} by the sealed collection, "
            f"{r0['packed_read_missed']} by its packed copy ({r0['sealed_records_packed']:,} records copied).",
            f"The rest of the default's search, by the medians: {rest:.2f} ms "
            f"({by[DEFAULT]['ms_p50']:.2f} less {by[SCAN]['ms_p50']:.2f} and {by[SEALED_READ]['ms_p50']:.2f}).",
            f"The sealed read costs {by[SEALED_READ]['ms_p50'] / by[PLAIN_READ]['ms_p50']:.2f}x the plain read of as "
            f"many records at p50; packed into fewer fields, "
            f"{by[PACKED_READ]['ms_p50'] / by[PLAIN_READ]['ms_p50']:.2f}x.",
            "",
            *_cache_section(cache, meta),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser(SCRIPT, __doc__)
    parser.add_argument("--n-records", type=int, default=None, help="records in each collection (default: the size's)")
    args = parser.parse_args(None if argv is None else list(argv))
    size = resolve_size(args)
    set_threads()
    t_start = time.perf_counter()
    load0 = _load()
    data_dir = resolve_data_or_none(args.data_dir)
    if data_dir is None:
        return 2

    def log(msg: str) -> None:
        print(f"[{NAME}] {msg} ({time.perf_counter() - t_start:.0f} s)", flush=True)

    cfg = SIZES[size]
    data = _scifact(data_dir, cache=cache_dir(args.cache_dir), size=size, seed=args.seed, progress=not args.no_progress)
    n_records = cfg.n_records if args.n_records is None else args.n_records
    data = grow(first_queries(data, cfg.n_queries), n_records, n_clusters=64, seed=args.seed)
    log(data.about)
    work = Path(tempfile.mkdtemp(prefix="store-index-reads-"))
    try:
        rows = measure(data, key=np.random.default_rng(args.seed).bytes(32), work_dir=work, progress=log)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    extra = {"records": data.about, "load_avg_1m_start": load0, "load_avg_1m_end": _load(), "git": _git()}
    extra["page_out"] = page_out_policy()
    extra["runtime_seconds"] = round(time.perf_counter() - t_start, 1)
    meta = make_meta(SCRIPT, argv, size=size, seed=args.seed, **extra)
    markdown = render_markdown(rows, meta)
    paths = write_results(NAME, size=size, meta=meta, rows=rows, markdown=markdown, out_dir=args.out_dir, tag=args.tag)
    log("wrote " + ", ".join(map(str, paths)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
