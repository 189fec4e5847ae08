"""The app-side index: exact then product-quantized scans, upserts and removals, the sealed file."""

from __future__ import annotations

import numpy as np
import pytest

from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.sealed.app_index import AppIndex, AppIndexSearch, IndexConflictError, IndexFile, ProductQuantizer
from textcrafter_rag.sealing import SealError, SecretKey, generate_key

KEY = SecretKey(generate_key())


def _clustered(n: int, d: int = 32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((20, d))
    x = centers[rng.integers(0, 20, n)] + 0.4 * rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_options_are_validated():
    for bad in ({"open_k": 0}, {"code_bytes": 0}, {"train_at": 10}, {"open_k": 2.0}):
        with pytest.raises(InvalidInputError):
            AppIndexSearch(**bad)


def test_exact_below_train_at_then_codes_that_keep_the_true_neighbours_in_the_opened_set():
    x = _clustered(3000)
    index = AppIndex(32, search=AppIndexSearch(train_at=2000, code_bytes=8))
    index.add([f"r{i}" for i in range(1000)], x[:1000])
    assert not index.trained and index.bytes_per_record == 128
    assert index.search(x[5], 3)[0] == "r5"
    index.add([f"r{i}" for i in range(1000, 3000)], x[1000:])
    assert index.trained and index.bytes_per_record == 8 and len(index) == 3000
    queries = _clustered(50, seed=1)
    recall = []
    for q in queries:
        truth = {f"r{i}" for i in np.argsort(-(x @ q))[:10]}
        recall.append(len(truth & set(index.search(q, 100))) / 10)
    assert np.mean(recall) > 0.9  # the exact re-rank of 100 opened records finds ~all of the true top 10


def test_upsert_and_remove_keep_ids_and_vectors_aligned():
    x = _clustered(400)
    index = AppIndex(32, search=AppIndexSearch(train_at=300, code_bytes=4))
    index.add([f"r{i}" for i in range(400)], x)
    index.add(["r3"], x[9:10])  # r3 now holds r9's vector
    assert len(index) == 400 and set(index.search(x[9], 2)) == {"r3", "r9"}
    assert index.remove(["r9", "r3", "nope"]) == 2 and len(index) == 398
    assert not {"r3", "r9"} & set(index.search(x[9], 20))


def test_product_quantizer_is_deterministic_and_its_scan_matches_decoded_inner_products():
    x = _clustered(600, d=30)  # not a multiple of m: zero-padded
    a, b = ProductQuantizer.fit(x, m=4), ProductQuantizer.fit(x, m=4)
    np.testing.assert_array_equal(a.centroids, b.centroids)
    codes = a.encode(x)
    q = x[0]
    padded = np.concatenate([q, np.zeros(2, dtype=np.float32)])
    np.testing.assert_allclose(a.scores(q, codes), a.decode(codes) @ padded, atol=1e-5)


def test_the_sealed_file_round_trips_refuses_foreign_or_edited_ones_and_a_second_writer(tmp_path):
    x = _clustered(500)
    search = AppIndexSearch(train_at=300, code_bytes=4)
    index = AppIndex(32, search=search)
    index.add([f"r{i}" for i in range(500)], x)
    path = tmp_path / "docs.tcidx"
    writer = IndexFile(path, key=KEY, context="t")
    assert writer.load(search=search) is None
    writer.save(index)
    data, plain = path.read_bytes(), index.to_bytes()
    ids = b'"r16","r17","r18"'  # long enough that random ciphertext never holds it by chance (a 3-byte id could)
    assert ids in plain and ids not in data and plain[-64:] not in data  # ids and codes are sealed
    loaded = IndexFile(path, key=KEY, context="t").load(search=search)
    assert loaded.ids() == index.ids() and loaded.search(x[17], 5) == index.search(x[17], 5)
    for key, context in ((SecretKey(generate_key()), "t"), (KEY, "other-tenant")):
        with pytest.raises(SealError, match="does not open"):
            IndexFile(path, key=key, context=context).load(search=search)
    other = IndexFile(path, key=KEY, context="t")
    other.load(search=search)
    other.save(index)  # a second process writes ...
    with pytest.raises(IndexConflictError, match="one writer at a time"):
        writer.save(index)  # ... so the first one's next save is refused, not merged
    blob = bytearray(path.read_bytes())
    blob[-1] ^= 1
    path.write_bytes(bytes(blob))
    with pytest.raises(SealError):
        IndexFile(path, key=KEY, context="t").load(search=search)


def test_the_faiss_scan_gives_the_numpy_scan_s_scores():
    pytest.importorskip("faiss")
    x = _clustered(2000)
    pq = ProductQuantizer.fit(x, m=8)
    codes = pq.encode(x)
    index = pq.faiss_index(codes)
    q = x[3]
    scores, found = index.search(pq.split(q[None, :], 1)[0], 20)
    numpy_scores = pq.scores(q, codes)
    np.testing.assert_allclose(scores[0], numpy_scores[found[0]], atol=1e-5)
    np.testing.assert_allclose(scores[0], np.sort(numpy_scores)[::-1][:20], atol=1e-5)


def test_choosing_the_file_index_says_what_it_cannot_hold():
    from textcrafter_rag.sealed.app_index import SingleProcessIndexWarning

    with pytest.warns(SingleProcessIndexWarning, match="StoreIndexSearch"):
        AppIndexSearch(index_path="docs.tcidx")
