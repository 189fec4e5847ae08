"""The library's one logger and the counters a user reads, and the one test of the library's own records.

A warning is shown once per store object, which in a server is once in total; every capped search and every
batch of skipped records is also a log record on ``textcrafter_rag`` (INFO) and a count in ``SearchStats``.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings

import numpy as np
import pytest

from textcrafter_rag import logs
from textcrafter_rag.logs import SearchStats
from textcrafter_rag.sealed import core as sealed_search
from textcrafter_rag.sealed import index_modes
from textcrafter_rag.sealed.candidates import TwoStageSearch
from textcrafter_rag.sealed.core import SealedSearch, SkippedRecordsWarning
from textcrafter_rag.sealed.layout import (
    LIBRARY_FIELDS,
    LOG_FIELD,
    MARKER_KEY,
    MODE_KEY,
    guarded_filters,
    is_library_record,
    without_library_records,
)
from textcrafter_rag.sealed.rounds import CapCounter, RecallCapWarning
from textcrafter_rag.sealing import SecretKey, generate_key

KEY = SecretKey(generate_key())


def _records(caplog: pytest.LogCaptureFixture, words: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "textcrafter_rag" and words in r.getMessage()]


def test_one_logger_defined_once_and_importable_where_it_was() -> None:
    assert logs.logger is index_modes.logger is sealed_search.logger is logging.getLogger("textcrafter_rag")


def test_every_capped_search_is_logged_at_info_and_warned_once(caplog: pytest.LogCaptureFixture) -> None:
    caps = CapCounter(fetch_k=120)
    caplog.set_level(logging.INFO, logger="textcrafter_rag")
    with pytest.warns(RecallCapWarning):
        caps.add()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warning is once per store object ...
        caps.add()
        caps.add()
    logged = _records(caplog, "stopped at open_k=120")
    assert [r.levelno for r in logged] == [logging.INFO] * 3  # ... the log record every time
    assert "(3 so far)" in logged[-1].getMessage() and caps.count == 3


def test_skipped_records_are_logged_and_every_counter_is_in_one_snapshot(caplog: pytest.LogCaptureFixture) -> None:
    core = SealedSearch(KEY, options=TwoStageSearch(fetch_k=5))
    assert core.stats == SearchStats() and dataclasses.is_dataclass(core.stats)
    x = np.eye(4, 8, dtype=np.float32)
    hits = [
        (f"r{i}", f"r{i}", core.seal_vector(v, record_id=f"r{i}", record_text="t"), core.mode, "t")
        for i, v in enumerate(x)
    ]
    hits[1] = ("r1", "r1", None, core.mode, "t")  # no sealed vector: skipped
    hits[2] = ("r2", "r2", hits[0][2], core.mode, "t")  # r0's vector beside r2: bound to r0, skipped
    caplog.set_level(logging.INFO, logger="textcrafter_rag")
    with pytest.warns(SkippedRecordsWarning):
        core.open_hits(hits)
    core.open_hits(hits)
    logged = _records(caplog, "skipped 2 records")
    assert len(logged) == 2 and all(r.levelno == logging.INFO for r in logged)
    assert "r1" not in logged[0].getMessage()  # a message names no record
    core.rounds(x[0], 2, lambda hits: hits)  # a candidate search starts: counted
    assert core.stats == SearchStats(searches=1, capped_searches=0, dead_entries_skipped=0, records_skipped=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        core.stats.searches = 0  # type: ignore[misc]


def test_the_library_s_own_records_are_told_by_their_fields() -> None:
    assert set(LIBRARY_FIELDS) == {MARKER_KEY, LOG_FIELD}
    assert is_library_record({MARKER_KEY: "candidates", MODE_KEY: "candidates"})
    assert is_library_record({LOG_FIELD: "head"}) and is_library_record({LOG_FIELD: "seg", "_tc_chunks": "2"})
    assert not is_library_record({MODE_KEY: "candidates", "topic": "x"}) and not is_library_record({})
    assert not is_library_record(None)


def test_a_user_s_callable_filter_is_never_handed_a_library_record() -> None:
    handed: list[object] = []

    def users(record: object) -> bool:
        handed.append(record)
        return record["topic"] == "x"  # type: ignore[index]

    class Doc:  # a framework record: a LangChain Document, read by its metadata
        def __init__(self, metadata: dict) -> None:
            self.metadata = metadata

    guarded = without_library_records(users)
    assert guarded({MARKER_KEY: "index"}) is False and guarded(Doc({LOG_FIELD: "seg"})) is False
    assert handed == []  # neither reached the user's filter
    assert guarded({"topic": "x"}) is True and guarded({"topic": "y"}) is False and len(handed) == 2
    assert without_library_records(guarded) is guarded  # handed on twice, wrapped once
    kwargs = {"filter": users, "k": 3, "where": {"topic": "x"}, "score_fn": len}
    out = guarded_filters(kwargs)
    assert out["k"] == 3 and out["where"] == {"topic": "x"} and out["score_fn"] is len  # only callable filters
    assert out["filter"] is not users and out["filter"]({MARKER_KEY: "candidates"}) is False
