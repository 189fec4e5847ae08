"""AES-GCM sealing: round trips, tamper evidence, binding to record and field, no key in any message."""

from __future__ import annotations

import base64
import json
import pickle

import pytest

from textcrafter_rag.sealing import SEALED_PREFIX, InvalidKeyError, Sealer, SealError, SecretKey, generate_key

TEXT = "Jane Doe, card 4111 1111 1111 1111, moved to Leeds."


@pytest.fixture
def key() -> str:
    return generate_key()


def test_round_trip_and_fresh_nonce(key: str) -> None:
    s = Sealer(key)
    a, b = s.seal(TEXT, record_id="doc-1"), s.seal(TEXT, record_id="doc-1")
    assert a != b and a.startswith(SEALED_PREFIX) and b.isascii()  # a fresh nonce every time
    assert s.open(a, record_id="doc-1") == s.open(b, record_id="doc-1") == TEXT
    assert "Jane" not in a and "4111" not in a
    assert Sealer(base64.urlsafe_b64decode(key)).open(a, record_id="doc-1") == TEXT  # raw bytes work too


def test_json_values(key: str) -> None:
    s = Sealer(key)
    value = {"author": "Jane Doe", "pages": [1, 2], "ok": True}
    assert s.open_json(s.seal_json(value, record_id="7", field="meta"), record_id="7", field="meta") == value


@pytest.mark.parametrize("change", ["record", "field", "key", "context", "edit", "truncate", "plain"])
def test_anything_else_fails_loudly(key: str, change: str) -> None:
    s = Sealer(key, context="tenant-a")
    token = s.seal(TEXT, record_id="doc-1", field="text")
    opener, record, field = s, "doc-1", "text"
    if change == "record":
        record = "doc-2"
    elif change == "field":
        field = "title"
    elif change == "key":
        opener = Sealer(generate_key(), context="tenant-a")
    elif change == "context":
        opener = Sealer(key, context="tenant-b")
    elif change == "edit":
        raw = bytearray(base64.urlsafe_b64decode(token[len(SEALED_PREFIX) :]))
        raw[-1] ^= 1
        token = SEALED_PREFIX + base64.urlsafe_b64encode(bytes(raw)).decode()
    elif change == "truncate":
        token = token[:-8]
    else:
        token = TEXT
    with pytest.raises(SealError) as info:
        opener.open(token, record_id=record, field=field)
    assert key not in str(info.value) and "Jane" not in str(info.value)


@pytest.mark.parametrize("bad", ["", "short", "A" * 43 + "!", b"\x00" * 31, 12345])
def test_bad_keys_are_refused_without_echoing_them(bad: object) -> None:
    with pytest.raises(InvalidKeyError) as info:
        SecretKey(bad)  # type: ignore[arg-type]
    if isinstance(bad, str) and bad:
        assert bad not in str(info.value)


def test_keys_never_show(key: str) -> None:
    secret = SecretKey(key)
    assert key not in repr(secret) and key not in repr(Sealer(key)) and "redacted" in repr(secret)
    with pytest.raises(TypeError):
        pickle.dumps(secret)


def test_subkeys_are_separate_per_purpose_and_context(key: str) -> None:
    k = SecretKey(key)
    keys = {k.subkey("seal"), k.subkey("rotate"), k.subkey("seal", context="t1"), k.subkey("rotate", context="t1")}
    assert len(keys) == 4 and all(len(x) == 32 for x in keys)
    assert k.subkey("seal") == SecretKey(key).subkey("seal")  # deterministic


@pytest.mark.parametrize("record_id", ["r1", 'q"uote\\back', "naïve ☃ 𝄞", "tab\there\nline\x00\x1f", ""])
def test_a_values_binding_is_the_json_of_version_id_and_field_as_written_before(record_id: str) -> None:
    # the bytes every stored value is bound to: a change would make every earlier store unreadable
    for field in ("text", "meta:ключ", 'f"'):
        assert Sealer._aad(record_id, field) == json.dumps([SEALED_PREFIX, record_id, field]).encode("utf-8")
        assert Sealer._aad(record_id, field, version="tcsealed:v1:") == json.dumps([record_id, field]).encode()
        sealer = Sealer(b"k" * 32)
        assert sealer.open(sealer.seal("x", record_id=record_id, field=field), record_id=record_id, field=field) == "x"
