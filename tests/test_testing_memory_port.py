"""The in-memory port's search: the exact ranking, ties in the order the records were put, an empty answer when told."""

from __future__ import annotations

import numpy as np
import pytest

from textcrafter_rag.sealed.port import PortRecord
from textcrafter_rag.testing.memory_port import MemoryPort


def _port(vectors: np.ndarray) -> MemoryPort:
    port = MemoryPort()
    port.put([PortRecord(f"r{i}", "t", {}, v.tolist()) for i, v in enumerate(vectors)])
    port.put([PortRecord("no-vector", "t", {})])  # read back by id only: never ranked
    return port


@pytest.mark.parametrize("k", [0, 1, 7, 60, 500])
def test_search_is_the_exact_ranking_with_ties_in_put_order(k: int) -> None:
    rng = np.random.default_rng(k)
    vectors = rng.standard_normal((60, 8))
    vectors[10:20] = vectors[3]  # ties: equal scores keep the order they were put in
    q = rng.standard_normal(8)
    scores = vectors @ q
    want = [f"r{i}" for i in np.argsort(-scores, kind="stable")[:k]]
    assert [r.id for r in _port(vectors).search(q.tolist(), k)] == want


def test_search_answers_empty_once_when_told() -> None:
    port = _port(np.eye(4))
    port.empty_answers = 1
    assert port.search([1.0, 0, 0, 0], 2) == []
    assert [r.id for r in port.search([1.0, 0, 0, 0], 2)] == ["r0", "r1"]
