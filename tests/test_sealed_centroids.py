"""The trained index's centroids in bfloat16: a query's lists found in NumPy are FAISS's own, and so are its hits."""

from __future__ import annotations

import faiss
import numpy as np
import pytest
from _store_index_helpers import DIM, vectors

from textcrafter_rag.sealed import centroids, vector_index
from textcrafter_rag.sealed.centroids import Centroids, in_bfloat16, round_to_bfloat16
from textcrafter_rag.sealed.vector_index import VectorIndex


def _trained(seed: int) -> tuple[VectorIndex, np.ndarray]:
    x = vectors(2_000, seed)  # 200 lists, 16 of them scanned (the fewest): which ones matters
    index = VectorIndex(DIM, code_bytes=8, train_at=600, background=False, scan_codes=100)
    index.add([f"r{i}" for i in range(len(x))], x)
    assert index.trained
    return index, x


def _faiss_own(index: VectorIndex, query: np.ndarray, k: int) -> list[str]:
    """What FAISS's own search (the quantizer's assignment, then the scan) returns, as ids."""
    full = index._index  # the rotation and the inverted file
    index._probe(index._ivf())
    _, labels = full.search(np.asarray(query, dtype=np.float32)[None, :], k)
    return index._ids.ids(labels[0][labels[0] != -1])


def test_the_trained_quantizer_holds_the_centroids_in_bfloat16() -> None:
    index, _ = _trained(0)
    quantizer = faiss.downcast_index(index._ivf().quantizer)
    assert isinstance(quantizer, faiss.IndexScalarQuantizer)
    assert quantizer.sq.qtype == faiss.ScalarQuantizer.QT_bf16
    assert quantizer.sa_code_size() == 2 * DIM  # two bytes a component, where float32 takes four


def test_a_query_scans_the_lists_faiss_would_and_gets_its_hits(monkeypatch) -> None:
    monkeypatch.setattr(centroids, "_BLOCK", 5)  # blocks that do not divide the lists, a short last one
    index, x = _trained(1)
    queries = vectors(40, 2)
    for q in [*queries, *x[:10]]:
        assert index.search(q, 10) == _faiss_own(index, q, 10)
    assert index.lists == (200, 16)


def test_nearest_lists_are_the_best_by_the_decoded_centroids() -> None:
    index, _ = _trained(3)
    ivf = index._ivf()
    decoded = ivf.quantizer.reconstruct_n(0, ivf.nlist)
    for q in vectors(10, 4):
        lists, scores = Centroids(faiss, ivf).nearest(q, 7)
        best = np.argsort(-(decoded @ q), kind="stable")[:7]
        assert lists.shape == scores.shape == (1, 7)
        assert lists[0].tolist() == best.tolist()
        np.testing.assert_allclose(scores[0], (decoded @ q)[best], rtol=1e-5, atol=1e-6)
    assert Centroids(faiss, ivf).nearest(q, 10_000)[0].shape == (1, ivf.nlist)  # all of them, at most


def test_a_snapshot_opens_with_its_centroids_and_answers_the_same() -> None:
    index, _ = _trained(5)
    reader = VectorIndex(DIM, code_bytes=8, train_at=600, background=False, scan_codes=100)
    reader.restore(index.to_bytes())
    assert reader._centroids is not None
    for q in vectors(20, 6):
        assert reader.search(q, 10) == index.search(q, 10)


def test_a_float32_quantizer_as_written_before_still_searches_as_faiss_does(monkeypatch) -> None:
    monkeypatch.setattr(vector_index, "in_bfloat16", lambda faiss, ivf: None)  # the flat quantizer kept
    index, _ = _trained(7)
    assert isinstance(faiss.downcast_index(index._ivf().quantizer), faiss.IndexFlat)
    reader = VectorIndex(DIM, code_bytes=8, train_at=600, background=False, scan_codes=100)
    reader.restore(index.to_bytes())  # such a snapshot opens as it is
    assert isinstance(faiss.downcast_index(reader._ivf().quantizer), faiss.IndexFlat)
    for q in vectors(20, 8):
        assert reader.search(q, 10) == index.search(q, 10) == _faiss_own(index, q, 10)


def test_centroids_are_rounded_only_before_the_first_code_and_replaced_only_once_rounded() -> None:
    index, _ = _trained(9)
    with pytest.raises(ValueError, match="before the first code"):
        round_to_bfloat16(faiss, index._ivf())
    x = vectors(2_000, 10)
    flat = faiss.IndexFlatIP(DIM)
    ivf = faiss.IndexIVFPQ(flat, DIM, 20, 8, 8, faiss.METRIC_INNER_PRODUCT)
    ivf.train(x)
    with pytest.raises(ValueError, match="does not own its quantizer"):
        in_bfloat16(faiss, ivf)
    ivf.own_fields = True  # as a training makes it: the index owns (and frees) its quantizer
    flat.this.disown()
    with pytest.raises(ValueError, match="not bfloat16 values"):  # codes taken from other centroids: refused
        in_bfloat16(faiss, ivf)
    assert isinstance(faiss.downcast_index(ivf.quantizer), faiss.IndexFlat)
    round_to_bfloat16(faiss, ivf)
    before = ivf.quantizer.reconstruct_n(0, 20)
    ivf.add(x)
    in_bfloat16(faiss, ivf)
    assert isinstance(faiss.downcast_index(ivf.quantizer), faiss.IndexScalarQuantizer)
    assert np.array_equal(ivf.quantizer.reconstruct_n(0, 20), before)  # the same values, held in half the bytes


def test_a_batch_of_adds_goes_to_the_lists_faiss_would_assign() -> None:
    index, _ = _trained(11)
    ivf = index._ivf()
    rotated = faiss.downcast_VectorTransform(index._index.chain.at(0)).apply_py(vectors(500, 12))
    assert index._centroids.assign(rotated).tolist() == ivf.quantizer.assign(rotated, 1)[:, 0].tolist()
