"""The measured parts of ``benchmarks.sealed_search.bulk_load``: the synthetic records, the timed Ray Data load,
and the check a fresh process makes afterwards. What each measures is said in :mod:`.bulk_load`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import chromadb
import numpy as np
import ray
from chromadb.config import Settings
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from tqdm.auto import tqdm

from benchmarks.common.reporting import Script
from langchain_textcrafter import SealedVectorStore
from langchain_textcrafter.ray_load import ChromaHttpFactory, SealedLoad, unindexed
from textcrafter_rag.sealed import StoreIndexSearch
from textcrafter_rag.sealed.log import LOG_FIELD

NAME = "bulk_load"
SCRIPT = Script(NAME, "benchmarks.sealed_search.bulk_load")
DIM = 384
#: Rows generated from one seed: a record's vector depends on its number only, never on how Ray cut batches.
_BLOCK = 1_000
#: Variable holding the key for the verifying child process (generated per run, never written to results).
KEY_ENV = "TEXTCRAFTER_BULK_LOAD_KEY"


@dataclass(frozen=True)
class Config:
    """One size: (records, workers) runs, records per batch (one sealed add), records checked by search."""

    runs: tuple[tuple[int, int], ...]
    batch: int = 2_000
    sample: int = 200


SIZES: dict[str, Config] = {
    "smoke": Config(runs=((1_000, 1), (1_000, 2)), batch=250, sample=20),
    "quick": Config(runs=((20_000, 1), (20_000, 2))),
    "full": Config(runs=((20_000, 1), (20_000, 2), (1_000_000, 2))),
}


def record_text(i: int) -> str:
    """The synthetic text of record ``i`` (short, distinct; sealed, so its content only sets the payload size)."""
    return f"record {i}: a synthetic note of the bulk-load benchmark, batch {i // _BLOCK}, topic {i % 97}"


def record_vectors(numbers: np.ndarray, seed: int) -> np.ndarray:
    """Random unit 384-d vectors of these record numbers (float32), the same whoever asks."""
    out = np.empty((len(numbers), DIM), dtype=np.float32)
    blocks = numbers // _BLOCK
    for b in np.unique(blocks):
        x = np.random.default_rng([seed, int(b)]).standard_normal((_BLOCK, DIM))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        rows = blocks == b
        out[rows] = x[numbers[rows] % _BLOCK]
    return out


def synthetic_batch(batch: dict[str, np.ndarray], *, seed: int) -> dict[str, np.ndarray]:
    """``ray.data.range`` rows as records: ``id``, ``text`` and their clean ``embedding``."""
    numbers = np.asarray(batch["id"], dtype=np.int64)
    return {
        "id": np.array([f"r{i}" for i in numbers.tolist()], dtype=object),
        "text": np.array([record_text(i) for i in numbers.tolist()], dtype=object),
        "embedding": record_vectors(numbers, seed),
    }


class TimedChroma(Chroma):
    """Chroma that adds each write's seconds to this process's tally: index-log records or data records."""

    tally: ClassVar[dict[str, float]] = {"log_s": 0.0, "records_s": 0.0, "log_writes": 0.0, "records_writes": 0.0}

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        t0 = time.perf_counter()
        out = super().add_documents(documents, **kwargs)
        kind = "log" if any(LOG_FIELD in (d.metadata or {}) for d in documents) else "records"
        TimedChroma.tally[f"{kind}_s"] += time.perf_counter() - t0
        TimedChroma.tally[f"{kind}_writes"] += 1
        return out


@dataclass(frozen=True)
class TimedChromaFactory(ChromaHttpFactory):
    """:class:`ChromaHttpFactory` building :class:`TimedChroma`."""

    def __call__(self, embedding: Embeddings) -> Chroma:
        client = chromadb.HttpClient(host=self.host, port=int(self.port), settings=Settings(anonymized_telemetry=False))
        return TimedChroma(client=client, collection_name=self.collection, embedding_function=embedding)


class TimedLoad(SealedLoad):
    """:class:`SealedLoad` that also returns, per row, its batch's seconds in the actor and the write tallies."""

    def __call__(self, batch: Any) -> dict[str, np.ndarray]:
        before = dict(TimedChroma.tally)
        t0 = time.perf_counter()
        out = super().__call__(batch)
        seconds = time.perf_counter() - t0
        n = len(out["id"])
        share = {k: (TimedChroma.tally[k] - before[k]) / max(n, 1) for k in ("log_s", "records_s")}
        out["actor_s"] = np.full(n, seconds / max(n, 1))  # per row: summing a column gives the batch totals
        out["log_s"] = np.full(n, share["log_s"])
        out["records_s"] = np.full(n, share["records_s"])
        return out


def load_once(
    *,
    host: str,
    port: int,
    collection: str,
    key_file: Path,
    n: int,
    workers: int,
    batch: int,
    seed: int,
    progress: bool,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Load ``n`` synthetic records through Ray Data with ``workers`` actors; the timings and the output check."""
    factory = TimedChromaFactory(host=host, port=port, collection=collection)
    t0 = time.perf_counter()
    ds = ray.data.range(n).map_batches(synthetic_batch, fn_kwargs={"seed": seed}, batch_size=batch)
    ds = ds.map_batches(
        TimedLoad,
        fn_constructor_kwargs={"store": factory, "key_file": str(key_file), "search": StoreIndexSearch()},
        batch_size=batch,
        compute=ray.data.ActorPoolStrategy(size=workers, max_tasks_in_flight_per_actor=2),
        num_cpus=0.5,  # the actors mostly wait on the server; the generator tasks need the rest
    )
    ids: list[np.ndarray] = []
    writers: set[str] = set()
    sums = {"actor_s": 0.0, "log_s": 0.0, "records_s": 0.0}
    first: float | None = None
    every, done = max(n // 20, 1), 0
    first_rows = 0
    with tqdm(total=n, desc=f"bulk load, {workers} worker(s)", unit="records", disable=not progress) as bar:
        for out in ds.iter_batches(batch_format="numpy", batch_size=None):
            if first is None:
                first, first_rows = time.perf_counter() - t0, len(out["id"])
            ids.append(out["id"])
            writers |= set(out["writer"].tolist())
            for k in sums:
                sums[k] += float(np.sum(out[k]))
            bar.update(len(out["id"]))
            done += len(out["id"])
            if done // every > (done - len(out["id"])) // every:  # a line a twentieth, for a log file
                elapsed = time.perf_counter() - t0
                log(f"{done:,} of {n:,} records in {elapsed:,.0f} s ({done / elapsed:,.0f} records/s so far)")
    seconds = time.perf_counter() - t0
    got = np.concatenate(ids) if ids else np.array([], dtype=object)
    unique = len(set(got.tolist()))
    first = first if first is not None else seconds
    after = (len(got) - first_rows) / (seconds - first) if seconds > first else float("nan")
    return {
        "n_records": n,
        "workers": workers,
        "batch": batch,
        "seconds": round(seconds, 2),
        "records_per_s": round(len(got) / seconds, 1),
        "s_to_first_output": round(first, 2),
        "records_per_s_after_first_output": round(after, 1),
        "rows_out": len(got),
        "unique_ids_out": unique,
        "writers": len(writers - {""}),
        "actor_busy_s": round(sums["actor_s"], 1),
        "log_writes_s": round(sums["log_s"], 1),
        "record_writes_s": round(sums["records_s"], 1),
        "sealing_and_rest_s": round(sums["actor_s"] - sums["log_s"] - sums["records_s"], 1),
    }


def verify_child(host: str, port: int, collection: str, n: int, sample: int, seed: int) -> dict[str, Any]:
    """In a fresh process: open the store with only the key, check every record is indexed and stored, search."""
    t0 = time.perf_counter()
    store = SealedVectorStore(
        ChromaHttpFactory(host=host, port=port, collection=collection),
        embedding=_NoQueries(),
        key=os.environ[KEY_ENV],
        search=StoreIndexSearch(),
    )
    ids = [f"r{i}" for i in range(n)]
    missing = unindexed(store, ids)  # reads the whole log, as any new process's first search does
    open_s = time.perf_counter() - t0
    client = chromadb.HttpClient(host=host, port=port, settings=Settings(anonymized_telemetry=False))
    coll = client.get_collection(collection)
    sids = store.store_ids(ids)
    stored = 0
    for start in range(0, len(sids), 5_000):
        stored += len(coll.get(ids=sids[start : start + 5_000], include=[])["ids"])
    heads = len(coll.get(where={LOG_FIELD: "head"}, include=[])["ids"])
    numbers = np.random.default_rng(seed + 1).choice(n, size=min(sample, n), replace=False)
    vectors = record_vectors(numbers, seed)
    found = 0
    t1 = time.perf_counter()
    for i, v in zip(numbers.tolist(), vectors, strict=True):
        hits = store.similarity_search_by_vector(v.tolist(), k=1)
        found += bool(hits) and hits[0].id == f"r{i}" and hits[0].page_content == record_text(i)
    search_ms = (time.perf_counter() - t1) / max(len(numbers), 1) * 1000
    return {
        "open_and_index_check_s": round(open_s, 2),
        "indexed": n - len(missing),
        "stored": stored,
        "store_count": coll.count(),
        "log_heads": heads,
        "sample": len(numbers),
        "sample_found_top1": int(found),
        "search_ms_mean": round(search_ms, 1),
        "dead": store._search.dead,
    }


class _NoQueries(Embeddings):
    """The verifier searches by the records' own vectors; a text query would be a bug in the benchmark."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise AssertionError("the verifier embeds nothing")

    def embed_query(self, text: str) -> list[float]:
        raise AssertionError("the verifier embeds nothing")


def verify_in_fresh_process(
    *, host: str, port: int, collection: str, n: int, sample: int, seed: int, key: str, log: Callable[[str], None]
) -> dict[str, Any]:
    """Run :func:`verify_child` in a new interpreter (nothing of the load's processes is reused)."""
    args = json.dumps({"host": host, "port": port, "collection": collection, "n": n, "sample": sample, "seed": seed})
    env = {**os.environ, KEY_ENV: key, "ANONYMIZED_TELEMETRY": "False"}
    cmd = [sys.executable, "-m", SCRIPT.module, "--verify-child", args]
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root, check=False)
    if done.returncode != 0:
        log(f"verifier failed:\n{done.stderr[-4000:]}")
        raise RuntimeError("the verifying process failed")
    return json.loads(done.stdout.strip().splitlines()[-1])
