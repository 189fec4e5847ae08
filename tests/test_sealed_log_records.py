"""The log's records: a message is sealed a block at a time into the text one AES-GCM call makes (a compaction's
snapshot, 76 MB at a million records, never holds the GIL in one call), cut into the store's pieces."""

from __future__ import annotations

import base64
import itertools

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
    pieces = list(records._sealed_pieces([plain], kind="snap", ident="w|1", size=size))
    assert pieces == [body[i : i + size] for i in range(0, len(body), size)]
    # given in parts (as a compaction gives the index: header, id table, FAISS's bytes), cut anywhere: the same text
    cuts = sorted({0, n, n // 3, n // 2 + 1, min(n, BLOCK + 5)})
    parts = [plain[a:b] for a, b in itertools.pairwise(cuts)]
    parts[len(parts) // 2 :] = [np.frombuffer(p, dtype=np.uint8) for p in parts[len(parts) // 2 :]]  # any buffer
    assert list(records._sealed_pieces(parts, kind="snap", ident="w|1", size=size)) == pieces
    assert records.seal(plain, kind="snap", ident="w|1") == log_records._PREFIX + body
    standard = "".join(pieces).encode("ascii").translate(log_records._TO_STANDARD)
    assert records.open_body(standard, kind="snap", ident="w|1") == plain


class CallsPort(MemoryPort):
    """A :class:`MemoryPort` that keeps each ``put`` call's record ids, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[str]] = []

    def put(self, records):
        self.calls.append([r.id for r in records])
        super().put(records)


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_a_long_message_is_stored_as_it_is_sealed_with_its_first_chunk_in_the_last_call(batch: int) -> None:
    port = CallsPort()
    records = LogRecords(KEY, tenant="t", port=port, dim=DIM, segment_chars=1024)
    records.write_batch = batch
    plain = np.random.default_rng(batch).bytes(20_000)
    ids = [f"c{i}" for i in range(200)]
    n = records.put_sealed("snap", "w|1", [plain[:1_000], np.frombuffer(plain[1_000:], np.uint8)], ids.__getitem__)
    assert n > 3 * batch  # several calls
    assert [i for call in port.calls for i in call if i != "c0"] == ids[1:n]  # each chunk once, in order
    assert port.calls[-1][0] == "c0" and all("c0" not in call for call in port.calls[:-1])
    assert all(len(call) <= batch for call in port.calls)  # write_batch a call, the first chunk's included
    first = port.records["c0"]
    assert log_records.chunk_count(first) == n
    assert records.read_sealed("snap", "w|1", first, ids.__getitem__) == plain
