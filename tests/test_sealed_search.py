"""The one sealed-search core: hits skipped and counted, de-duplicated, capped; modes and their marker."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

from textcrafter_rag.errors import InvalidInputError, InvalidTypeError, NotPicklableError
from textcrafter_rag.sealed.app_index import AppIndexSearch
from textcrafter_rag.sealed.candidates import TwoStageSearch
from textcrafter_rag.sealed.core import (
    ModeMismatchError,
    SealedSearch,
    SkippedRecordsWarning,
    check_marker_mode,
)
from textcrafter_rag.sealing import SealError, SecretKey, generate_key

KEY = SecretKey(generate_key())


def _unit(n: int, d: int = 32, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _core(**kwargs) -> SealedSearch:
    return SealedSearch(KEY, options=kwargs.pop("options", TwoStageSearch(fetch_k=5)), **kwargs)


def _hits(core: SealedSearch, x: np.ndarray, ids: list[str]) -> list[tuple]:
    return [(r, r, core.seal_vector(v, record_id=r, record_text=f"t-{r}"), core.mode, f"t-{r}") for v, r in zip(x, ids)]


def test_the_key_is_parsed_once_by_the_caller():
    with pytest.raises(InvalidTypeError, match="SecretKey"):
        SealedSearch(generate_key(), options=TwoStageSearch())  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        SealedSearch(KEY, options=5)  # type: ignore[arg-type]


def test_open_hits_skips_and_counts_what_does_not_open_deduplicates_and_caps():
    x = _unit(12)
    first = "6f1c2b7e-95b4-4c3e-8a53-0c2d1f9b7a11"
    ids = [first] + [f"r{i}" for i in range(1, 12)]
    core = _core()
    hits = _hits(core, x, ids)
    other_tenant = SealedSearch(KEY, context="b", options=TwoStageSearch(fetch_k=5))
    hits[1] = _hits(other_tenant, x[1:2], ids[1:2])[0]  # one record of another tenant under the same key
    hits[2] = (ids[2], ids[2], None, core.mode, "t")  # one record without a sealed vector
    spelled = first.replace("-", "").upper()
    hits.insert(1, (spelled, spelled, hits[0][2], core.mode, hits[0][4]))  # the first record again, in another spelling
    with pytest.warns(SkippedRecordsWarning):
        opened = core.open_hits(hits)
    assert opened.record_ids == [first, "r3", "r4", "r5", "r6"]  # capped at fetch_k=5 opened
    assert core.skipped == 2
    ranked = core.rank(x[4], opened.vectors, 2)
    assert opened.record_ids[ranked[0][0]] == "r4" and ranked[0][1] == pytest.approx(1.0, abs=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per store, not one per search
        core.open_hits(hits)
    assert core.skipped == 4
    with pytest.raises(SealError):
        _core(strict=True).open_hits(hits)


def test_no_hit_that_opens_is_an_error_not_an_empty_answer():
    x = _unit(3)
    ids = ["a", "b", "c"]
    wrong = SealedSearch(SecretKey(generate_key()), options=TwoStageSearch())
    with pytest.warns(SkippedRecordsWarning), pytest.raises(SealError, match="wrong key"):
        wrong.open_hits(_hits(_core(), x, ids))
    assert wrong.open_hits([]).record_ids == []


def test_modes_are_named_on_every_record_and_a_mismatch_is_refused():
    core = _core()
    x = _unit(2)
    fields = core.record_fields(x, ["a", "b"], ["ta", "tb"])
    assert [f["_tc_mode"] for f in fields] == ["candidates", "candidates"]
    index_hits = [("a", "a", fields[0]["_tc_vec"], "index", "ta")]
    with pytest.raises(ModeMismatchError, match="'index' mode"):
        core.open_hits(index_hits)
    single = [("a", "a", None, None, "ta"), ("b", "b", None, None, "tb")]
    with pytest.raises(ModeMismatchError, match="written single-stage") as refused:
        core.open_hits(single)
    check_marker_mode("candidates", "candidates")
    check_marker_mode("single", None)
    with pytest.raises(ModeMismatchError, match="only with protected") as mismatch:
        check_marker_mode("index", "single")
    for error in (refused, mismatch):  # a fact, never a weaker mode to open it in
        assert "fetch_k=None" not in str(error.value) and "search=None" not in str(error.value)
    assert (
        core.marker_id() == _core().marker_id() != SealedSearch(KEY, context="t", options=TwoStageSearch()).marker_id()
    )
    assert core.open_hits([(core.marker_id(), core.marker_id(), None, None, "m")]).record_ids == []


def test_the_index_mode_stores_keyed_random_vectors_unrelated_to_the_text():
    core = _core(options=AppIndexSearch(open_k=10))
    x = _unit(50, 64)
    stored = core.store_vectors(x, [f"r{i}" for i in range(50)])
    np.testing.assert_allclose(np.linalg.norm(stored, axis=1), 1.0, atol=1e-5)
    assert np.abs(np.sum(stored * x, axis=1)).max() < 0.6  # random directions: |cos| ~ 1/8 at 64-d
    np.testing.assert_array_equal(stored[:1], core.store_vectors(_unit(1, 64, seed=5), ["r0"]))  # the id alone
    core.index_add([f"r{i}" for i in range(50)], x)
    assert core.index_candidates(x[7])[0] == "r7" and len(core.index_candidates(x[7])) == 10
    assert core.index_remove(["r7", "missing"]) == 1 and "r7" not in core.index_candidates(x[7])
    with pytest.raises(InvalidInputError, match="open_k=10"):
        core.check_k(11)
    with pytest.raises(InvalidInputError, match="no index_path"):
        core.save_index()


def test_the_core_is_not_picklable():
    with pytest.raises(NotPicklableError):
        pickle.dumps(_core())
    assert "redacted" in repr(_core())


def test_a_sealed_vector_is_bound_to_its_record_text_and_old_unbound_ones_still_open():
    core = _core()
    x = _unit(2)
    bound = core.seal_vector(x[0], record_id="a", record_text="text-v2")
    assert core.open_hits([("a", "a", bound, core.mode, "text-v2")]).record_ids == ["a"]
    with pytest.raises(SealError):  # a new text spliced beside an old sealed vector (or the reverse)
        _core(strict=True).open_hits([("a", "a", bound, core.mode, "text-v3")])
    legacy = core.seal_vector(x[0], record_id="a")  # sealed before texts were bound
    assert core.open_hits([("a", "a", legacy, core.mode, "any text")]).record_ids == ["a"]


def test_the_index_file_is_written_after_each_write_or_only_when_asked(tmp_path):
    x = _unit(30, 16)
    ids = [f"r{i}" for i in range(30)]
    auto = _core(options=AppIndexSearch(index_path=tmp_path / "a.tcidx"))
    auto.index_add(ids, x)
    assert (tmp_path / "a.tcidx").exists()
    bulk = _core(options=AppIndexSearch(index_path=tmp_path / "b.tcidx", autosave=False))
    bulk.index_add(ids[:10], x[:10])
    bulk.index_add(ids[10:], x[10:])
    assert not (tmp_path / "b.tcidx").exists()
    bulk.save_index()
    reopened = _core(options=AppIndexSearch(index_path=tmp_path / "b.tcidx"))
    assert reopened.index_candidates(x[12])[0] == "r12"
    with pytest.raises(InvalidTypeError):
        AppIndexSearch(autosave="yes")  # type: ignore[arg-type]
