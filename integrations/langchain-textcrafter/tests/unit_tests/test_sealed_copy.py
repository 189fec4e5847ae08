"""``SealedVectorStore.copy_to``: a copy is the same noise draw as its source, never a second one (issue 39.8).

Two independent draws of one record's candidate noise can be averaged: the mean is closer to the clean
vector than either release (0.45 -> 0.58 in the review), and two copies of one record in one tenant are
linked without the key (cosine about ``1 / (1 + r^2)`` instead of about 0). ``copy_to`` only has the
int8-rounded vector it opened, whose quantized direction (what the noise is keyed by) differs from the
clean one's, so it carries the noise seed sealed in the source record instead of re-deriving one.
"""

from __future__ import annotations

import numpy as np
from _langchain_textcrafter_fakes import FakeAsymmetricEmbeddings, RecordingStore, cosine, exact_top

from langchain_textcrafter import SealedVectorStore
from textcrafter_rag.sealed.candidates import TwoStage, TwoStageSearch
from textcrafter_rag.testing import KnownVectors

TEXTS = [f"Patient {i} was treated for condition {i % 7} at ward {i % 5}." for i in range(30)]
IDS = [f"r{i}" for i in range(30)]
KEY = bytes(range(32))  # fixed keys: every vector, seed and draw below is deterministic
OTHER_KEY = bytes(range(32, 64))


def _store(base: FakeAsymmetricEmbeddings, key: bytes, *, context: str = "") -> SealedVectorStore:
    return SealedVectorStore(RecordingStore, embedding=base, key=key, fetch_k=31, context=context)


def _row(store: SealedVectorStore, rid: str) -> dict:
    return store.store.store[store.store_ids([rid])[0]]


def _two(key: bytes, context: str = "") -> TwoStage:
    return TwoStage(key, context=context, search=TwoStageSearch())


def _unrotated(key: bytes, vector: list[float], *, context: str = "") -> np.ndarray:
    """A stored candidate with the tenant's secret rotation undone (only the key holder can)."""
    return _two(key, context).rotation(len(vector)).invert(np.asarray([vector], dtype=np.float32))[0]


def _seed(store: SealedVectorStore, key: bytes, rid: str, *, context: str = "") -> bytes | None:
    """The noise seed sealed beside record ``rid``'s clean vector."""
    row = _row(store, rid)
    sid = store.store_ids([rid])[0]
    return _two(key, context).open_vector_and_seed(row["metadata"]["_tc_vec"], record_id=sid, record_text=row["text"])[
        1
    ]


def test_a_copy_under_the_same_key_is_the_candidate_add_texts_gives_not_a_second_draw() -> None:
    base = FakeAsymmetricEmbeddings(KnownVectors(dim=32))
    source = _store(base, KEY)
    source.add_texts(TEXTS, ids=IDS)
    copy = _store(base, KEY)  # the same tenant, another collection
    assert source.copy_to(copy, IDS) == IDS
    added = _store(base, KEY)  # what the same texts added again give
    added.add_texts(TEXTS, ids=IDS)
    for rid in IDS:
        # one draw: equal up to the int8 rounding of the vector the copy opened (another draw: cosine ~0.2)
        assert cosine(_row(copy, rid)["vector"], _row(added, rid)["vector"]) > 0.999
        assert _seed(copy, KEY, rid) == _seed(source, KEY, rid) == _seed(added, KEY, rid)
    again = _store(base, KEY, context="tenant-b")  # a copy of the copy, into another tenant under the key
    copy.copy_to(again, IDS)
    for rid in IDS:
        np.testing.assert_allclose(
            _unrotated(KEY, _row(again, rid)["vector"], context="tenant-b"),
            _unrotated(KEY, _row(added, rid)["vector"]),
            atol=2e-2,
        )
    # the carried seed scores the copy's records as the store ranked them: rounds and re-rank stay exact
    assert [d.page_content for d in again.similarity_search("q", k=3)] == exact_top(base, TEXTS, "q", 3)


def test_a_rekeyed_copy_is_its_source_s_draw_under_the_new_rotation() -> None:
    base = FakeAsymmetricEmbeddings(KnownVectors(dim=32))
    source = _store(base, KEY)
    source.add_texts(TEXTS, ids=IDS)
    rekeyed = _store(base, OTHER_KEY, context="rotated-2026")
    source.copy_to(rekeyed, IDS)
    for rid in IDS:
        assert _seed(rekeyed, OTHER_KEY, rid, context="rotated-2026") == _seed(source, KEY, rid)
        held = _unrotated(OTHER_KEY, _row(rekeyed, rid)["vector"], context="rotated-2026")
        assert cosine(held, _unrotated(KEY, _row(source, rid)["vector"])) > 0.999  # nothing new to average
    assert [d.page_content for d in rekeyed.similarity_search("q", k=3)] == exact_top(base, TEXTS, "q", 3)
