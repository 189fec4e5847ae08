"""The size rule of the store-held index (:mod:`textcrafter_rag.sealed.sizing`): records a query opens and codes it
scans, by the records the index holds, where the options leave them unset."""

from __future__ import annotations

import itertools
import math

import pytest
from _store_index_helpers import DIM, KEY, vectors

from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.sealed import StoreIndex, StoreIndexSearch, sizing
from textcrafter_rag.sealed.core import SealedSearch
from textcrafter_rag.sealed.sizing import BY_SIZE, OPEN_K_MOST, sized
from textcrafter_rag.testing.memory_port import MemoryPort


def test_a_larger_store_opens_no_fewer_records_and_scans_no_fewer_codes() -> None:
    bounds = [bound for bound, _, _ in BY_SIZE]
    assert bounds == sorted(set(bounds)) and bounds[-1] >= 1 << 40  # every size has a row
    for (bound, opened, codes), (_, more, wider) in itertools.pairwise(BY_SIZE):
        assert sized(bound) == (opened, codes) and sized(bound + 1) == (more, wider)
        assert more >= opened and wider >= codes
    assert sized(0) == BY_SIZE[0][1:] and max(opened for _, opened, _ in BY_SIZE) == OPEN_K_MOST


def test_unset_options_follow_the_rule_and_set_ones_are_used_as_given_at_every_size() -> None:
    unset, fixed = StoreIndexSearch(), StoreIndexSearch(open_k=7, scan_codes=9)
    assert unset.open_k is None and unset.scan_codes is None
    for n in (0, 20_000, 1_000_000, 3_000_001, 10_000_000):
        assert unset.opened(n) == sized(n)[0] and fixed.opened(n) == 7
    assert unset.most_opened == OPEN_K_MOST and fixed.most_opened == 7


def test_a_search_may_ask_for_up_to_the_most_the_rule_opens() -> None:
    core = SealedSearch(KEY, tenant="t", options=StoreIndexSearch())
    assert core.open_k == OPEN_K_MOST and core.check_k(OPEN_K_MOST) == OPEN_K_MOST
    with pytest.raises(InvalidInputError, match="open_k"):
        core.check_k(OPEN_K_MOST + 1)
    assert SealedSearch(KEY, tenant="t", options=StoreIndexSearch(open_k=30)).open_k == 30


def test_an_unset_scan_probes_the_lists_the_rule_gives_for_the_records_held(monkeypatch) -> None:
    # rows small enough for a test store: past 2,000 records a query scans 32 times the codes
    monkeypatch.setattr(sizing, "BY_SIZE", ((2_000, 10, 64), (1 << 62, 10, 2_048)))
    held = StoreIndex(
        KEY,
        tenant="t",
        options=StoreIndexSearch(train_at=1_000, background_training=False, compact_every=0),
        port=MemoryPort(),
        dim=DIM,
    )
    x = vectors(3_000, 9)
    probes = []
    for n in (1_500, 3_000):
        held.add([f"r{i}" for i in range(len(held.index), n)], x[len(held.index) : n])
        assert held.index.trained and held.candidates(x[5], 10)[0] == "r5"
        lists, probed = held.index.lists
        probes.append(probed)
    assert probes[0] < probes[1] == min(lists, math.ceil(2_048 / (3_000 / lists)))  # not every list: the rule's
