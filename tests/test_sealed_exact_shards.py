"""The exact part of the store-held index: FAISS's answers, without starting an OpenMP team a query."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import faiss
import numpy as np
import pytest

from textcrafter_rag.sealed import exact_shards
from textcrafter_rag.sealed.exact_shards import ExactShards


def _unit(n: int, dim: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_the_shards_answer_as_one_faiss_id_map_would(monkeypatch) -> None:
    monkeypatch.setattr(exact_shards, "SHARD", 100)
    x = _unit(350, 16, 0)
    labels = np.random.default_rng(1).choice(2**62, size=350, replace=False).astype(np.int64) - 2**61
    shards, one = ExactShards(faiss, 16), faiss.IndexIDMap(faiss.IndexFlatIP(16))
    shards.add_with_ids(x, labels)
    one.add_with_ids(x, labels)
    gone = faiss.IDSelectorBatch(labels[::7])
    assert shards.remove_ids(gone) == one.remove_ids(faiss.IDSelectorBatch(labels[::7])) == 50
    assert len(shards.shards) == 4 and shards.ntotal == one.ntotal == 300
    for q, k in ((x[3:4], 10), (-x[10:11], 40), (x[100:101], 1)):
        got, want = shards.search(q, k), one.search(q, k)
        assert got[1].tolist() == want[1].tolist()  # the same labels, best first (no ties among random vectors)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    small = ExactShards(faiss, 16)
    small.add_with_ids(x[:3], labels[:3])
    _, got = small.search(x[:1], 5)
    assert got.shape == (1, 3) and set(got[0].tolist()) == set(labels[:3].tolist())  # never a -1 of FAISS's


_PROBE = textwrap.dedent(
    """
    import os, sys
    import numpy as np, faiss
    from textcrafter_rag.sealed.exact_shards import ExactShards

    def threads():
        return len(os.listdir("/proc/self/task"))

    index = ExactShards(faiss, 64)
    x = np.random.default_rng(0).standard_normal((2000, 64)).astype(np.float32)
    index.add_with_ids(x, np.arange(2000, dtype=np.int64) * 3 + 1)
    before = threads()
    for i in range(20):
        index.search(x[i : i + 1], 100)
    print(before, threads())
    """
)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc (Linux)")
def test_a_query_starts_no_openmp_team() -> None:
    """FAISS's ``IndexIDMap.search`` maps labels in an OpenMP loop: a team of threads a query, which on a busy
    machine waits for a descheduled thread (the default's p95 at 5,183 records on Qdrant local went from 16.1 to
    6.05 ms without it). libgomp starts its threads at the first such loop, so a query must start none."""
    env = {**os.environ, "OMP_NUM_THREADS": "4", "OMP_WAIT_POLICY": "passive"}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True)
    before, after = (int(v) for v in out.stdout.split())
    assert after == before, f"a query started {after - before} threads"
