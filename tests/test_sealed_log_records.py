"""The log's records: a message is sealed a block at a time into the text one AES-GCM call makes (a compaction's
snapshot, 76 MB at a million records, never holds the GIL in one call), cut into the store's pieces."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from _store_index_helpers import DIM, KEY
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from textcrafter_rag.sealed import log_records
from textcrafter_rag.sealed.log_records import LogRecords
from textcrafter_rag.sealing import SecretKey
from textcrafter_rag.testing.memory_port import MemoryPort

BLOCK = log_records._SEAL_BLOCK


@pytest.mark.parametrize("n", [0, 1, 2, 3, 47, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK + 2])
def test_a_message_sealed_in_blocks_is_one_aes_gcm_calls_text_cut_into_pieces(monkeypatch, n: int) -> None:
    records = LogRecords(KEY, tenant="t", port=MemoryPort(), dim=DIM, segment_chars=4096)
    nonce = bytes(range(log_records._NONCE))
    monkeypatch.setattr(log_records.secrets, "token_bytes", lambda k: nonce[:k])  # a known nonce
    plain = np.random.default_rng(n).bytes(n)
    # the reference: one AES-GCM call under the log's subkey, as the format was written before blocks
    one_call = AESGCM(SecretKey(KEY).subkey("store-index", context="t")).encrypt(
        nonce, plain, records._aad("snap", "w|1")
    )
    body = base64.urlsafe_b64encode(nonce + one_call).decode("ascii")
    size = 4096 - len(log_records._PREFIX)
    pieces = records._sealed_pieces(plain, kind="snap", ident="w|1", size=size)
    assert pieces == [body[i : i + size] for i in range(0, len(body), size)]
    assert records.seal(plain, kind="snap", ident="w|1") == log_records._PREFIX + body
    standard = "".join(pieces).encode("ascii").translate(log_records._TO_STANDARD)
    assert records.open_body(standard, kind="snap", ident="w|1") == plain
