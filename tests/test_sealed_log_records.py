"""The log's records: a large message (a compaction's snapshot) is sealed a block at a time into the very text one
seal makes, cut into the store's pieces."""

from __future__ import annotations

import numpy as np
import pytest
from _store_index_helpers import DIM, KEY

from textcrafter_rag.sealed import log_records
from textcrafter_rag.sealed.log_records import LogRecords
from textcrafter_rag.testing.memory_port import MemoryPort

BLOCK = log_records._SEAL_BLOCK


@pytest.mark.parametrize("n", [0, 1, 2, 3, 47, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK + 2])
def test_a_message_sealed_in_blocks_is_one_seals_text_cut_into_pieces(monkeypatch, n: int) -> None:
    records = LogRecords(KEY, tenant="t", port=MemoryPort(), dim=DIM, segment_chars=4096)
    nonce = bytes(range(log_records._NONCE))
    monkeypatch.setattr(log_records.secrets, "token_bytes", lambda k: nonce[:k])  # the same nonce for both
    plain = np.random.default_rng(n).bytes(n)
    body = records.seal(plain, kind="snap", ident="w|1")[len(log_records._PREFIX) :]
    size = 4096 - len(log_records._PREFIX)
    pieces = records._sealed_pieces(plain, kind="snap", ident="w|1", size=size)
    assert pieces == [body[i : i + size] for i in range(0, len(body), size)]
    standard = "".join(pieces).encode("ascii").translate(log_records._TO_STANDARD)
    assert records.open_body(standard, kind="snap", ident="w|1") == plain
