from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
from _textcrafter_helpers import make_textcrafter

from textcrafter_rag import GaussianNoise, MissingPolicyError, Protector
from textcrafter_rag.autofit import AUTO_FIT_ENV, HOME_ENV
from textcrafter_rag.encoders import Encoder, as_encoder
from textcrafter_rag.errors import FingerprintMismatch


def _fake_encoder(dim: int = 32) -> Encoder:
    def fn(texts):
        out = np.stack([np.random.default_rng(abs(hash(t)) % 2**32).standard_normal(dim) for t in texts])
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    return Encoder(fn, dimension=dim, model_id="fake")


def test_documents_are_protected_and_queries_are_not_by_default() -> None:
    enc = _fake_encoder()
    p = Protector(base=enc, mechanism=make_textcrafter())
    docs = p.embed_documents(["alpha beta", "gamma delta"])
    raw = enc.encode(["alpha beta", "gamma delta"])
    np.testing.assert_allclose(np.linalg.norm(docs - raw, axis=1), 2.5, rtol=1e-5)
    np.testing.assert_array_equal(p.embed_query("alpha beta"), raw[0])
    pq = Protector(base=enc, mechanism=make_textcrafter(), protect_queries=True)
    assert np.linalg.norm(pq.embed_query("alpha beta") - raw[0]) == pytest.approx(2.5, rel=1e-5)
    assert p.embed_documents([]).shape == (0, 32)


def test_text_validation() -> None:
    p = Protector(base=_fake_encoder(), mechanism=make_textcrafter())
    with pytest.raises(TypeError, match="bare str"):
        p.embed_documents("one string")
    with pytest.raises(TypeError, match=r"texts\[1\] must be str"):
        p.embed_documents(["ok", 3])
    with pytest.raises(ValueError, match=r"texts\[0\] is empty"):
        p.embed_documents(["  ", "ok"])
    with pytest.raises(TypeError):
        p.embed_query(None)
    with pytest.raises(ValueError):
        p.embed_query("")


def test_chunked_protection_releases_nothing_on_failure() -> None:
    p = Protector(mechanism=make_textcrafter(), chunk_size=4)
    x = np.random.default_rng(0).standard_normal((10, 32)).astype(np.float32)
    out = p.protect(x)
    np.testing.assert_allclose(np.linalg.norm(out - x, axis=1), 2.5, rtol=1e-5)
    x[9, 3] = np.nan  # the last chunk is bad: the whole call fails up front
    with pytest.raises(ValueError, match="row 9"):
        p.protect(x)


def test_missing_and_mismatched_policy_errors_explain_how_to_fit() -> None:
    with pytest.raises(MissingPolicyError, match="textcrafter fit"):
        Protector(base=_fake_encoder(8))
    with pytest.raises(FingerprintMismatch, match="32-d"):
        Protector(base=_fake_encoder(8), mechanism=make_textcrafter())
    with pytest.raises(TypeError):
        Protector(base=_fake_encoder(8), mechanism=42)
    with pytest.raises(TypeError, match="base encoder"):
        as_encoder(object())


def test_encoder_output_is_checked() -> None:
    bad = Encoder(lambda texts: np.ones((len(texts) + 1, 32)), dimension=32, model_id="bad")
    with pytest.raises(ValueError, match="returned 3 vectors for 2 texts"):
        Protector(base=bad, mechanism=GaussianNoise(s=0.1)).embed_documents(["a b", "c d"])
    nan = Encoder(lambda texts: np.full((len(texts), 32), np.nan), dimension=32, model_id="nan")
    with pytest.raises(ValueError, match="NaN"):
        Protector(base=nan, mechanism=GaussianNoise(s=0.1)).embed_documents(["a b"])


def test_async_awaits_native_coroutines() -> None:
    calls = []
    enc = _fake_encoder()

    async def afn(texts):
        calls.append(len(texts))
        return enc._fn(texts)

    p = Protector(base=Encoder(enc._fn, async_fn=afn, dimension=32, model_id="fake"), mechanism=make_textcrafter())
    docs = asyncio.run(p.aembed_documents(["x y", "z w"]))
    q = asyncio.run(p.aembed_query("x y"))
    assert calls == [2, 1]
    np.testing.assert_allclose(np.linalg.norm(docs - enc.encode(["x y", "z w"]), axis=1), 2.5, rtol=1e-5)
    np.testing.assert_array_equal(q, enc.encode(["x y"])[0])


def test_threads_and_tasks_get_independent_correct_results() -> None:
    p = Protector(base=_fake_encoder(), mechanism=make_textcrafter(secure_mode=True, seed=None))
    texts = [f"text number {i}" for i in range(16)]
    raw = _fake_encoder().encode(texts)
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        results[i] = p.embed_documents(texts)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    async def many():
        return await asyncio.gather(*(p.aembed_documents(texts) for _ in range(8)))

    outs = list(results.values()) + list(asyncio.run(many()))
    assert len(outs) == 16
    for out in outs:
        np.testing.assert_allclose(np.linalg.norm(out - raw, axis=1), 2.5, rtol=1e-5)
    flat = np.stack([o[0] for o in outs])
    assert len({row.tobytes() for row in flat}) == 16  # no two calls shared noise


def test_shipped_policy_loads_for_the_bundled_encoder(minilm) -> None:
    from textcrafter_rag.policies import shipped_policy_path

    if shipped_policy_path(minilm.model_id) is None:
        pytest.fail("the shipped MiniLM policy is missing from textcrafter_rag/policies")
    p = Protector(base=minilm)
    docs = p.embed_documents(["Jane Doe's card number is 4111 1111 1111 1111."])
    raw = minilm.encode(["Jane Doe's card number is 4111 1111 1111 1111."])
    assert np.linalg.norm(docs - raw) == pytest.approx(p.mechanism.eps, rel=1e-5)


def test_errors_and_logs_never_contain_raw_text_or_vectors(caplog) -> None:
    import logging

    secret = "Jane Q. Secret 4111-1111-1111-1111"
    p = Protector(base=_fake_encoder(), mechanism=make_textcrafter())
    caplog.set_level(logging.DEBUG)
    p.embed_documents([secret, "plain text"])
    for bad in ([secret, 7], [secret, "   "]):
        with pytest.raises((TypeError, ValueError)) as info:
            p.embed_documents(bad)
        assert "Secret" not in str(info.value) and "4111" not in str(info.value)
    x = np.full((3, 32), 123.456, dtype=np.float32)
    x[2, 5] = np.nan
    with pytest.raises(ValueError) as info:
        p.protect(x)
    assert "123.4" not in str(info.value)
    assert all("Secret" not in r.getMessage() and "123.4" not in r.getMessage() for r in caplog.records)


# Moved from the integration suites (core behaviour is tested once, here; the adapters' shared
# contract in textcrafter_rag.testing.contract checks that they hand it through unchanged).


def test_missing_policy_message_names_every_way_to_get_one(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(AUTO_FIT_ENV, "0")
    monkeypatch.setenv(HOME_ENV, str(tmp_path))
    with pytest.raises(MissingPolicyError) as info:
        Protector(base=_fake_encoder(8))
    msg = str(info.value)
    assert "fit_textcrafter" in msg and "textcrafter fit" in msg and "mechanism=" in msg


def test_async_empty_batch_gives_a_0_by_d_array() -> None:
    p = Protector(base=_fake_encoder(), mechanism=make_textcrafter())
    out = asyncio.run(p.aembed_documents([]))
    assert out.shape == (0, 32) and out.dtype == np.float32


def test_query_base_serves_queries_sync_and_async() -> None:
    docs, queries = _fake_encoder(), _fake_encoder()
    served: list[str] = []

    def query_fn(texts):
        served.extend(texts)
        return -queries._fn(texts)  # a different vector than the document path gives

    async def aquery_fn(texts):
        served.extend(texts)
        return -queries._fn(texts)

    query_base = Encoder(query_fn, async_fn=aquery_fn, dimension=32, model_id="fake-query")
    p = Protector(base=docs, query_base=query_base, mechanism=make_textcrafter())
    np.testing.assert_allclose(p.embed_query("who?"), -docs.encode(["who?"])[0], rtol=1e-6)
    np.testing.assert_allclose(asyncio.run(p.aembed_query("who?")), -docs.encode(["who?"])[0], rtol=1e-6)
    assert served == ["who?", "who?"]
    raw_docs = docs.encode(["who?"])
    np.testing.assert_allclose(np.linalg.norm(p.embed_documents(["who?"]) - raw_docs, axis=1), 2.5, rtol=1e-5)
