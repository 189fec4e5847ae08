"""Keyed protection wired through the product: Protector, streaming, rekey, Ray's Protect.

The rotation itself (its construction, pinned values, caching) is tested in ``test_keyed.py``;
this file checks what the wiring adds: retrieval is unchanged with the key, the same key and tenant
give the same release everywhere, other tenants and wrong keys do not match, and the key never
shows in a repr, an error or a written file.
"""

from __future__ import annotations

import base64
import dataclasses
import pickle
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from textcrafter_rag import KeyedRotation, NoDefense, Protector, SecretKey, TenantKey
from textcrafter_rag.mechanisms import GaussianNoise
from textcrafter_rag.options import ProtectionOptions
from textcrafter_rag.randomness import SeedWarning
from textcrafter_rag.ray_data import Protect
from textcrafter_rag.sealing import InvalidKeyError, load_key
from textcrafter_rag.streaming import StreamError, protect_file, rekey_file
from textcrafter_rag.testing.secrets import assert_no_key

KEY = bytes(range(100, 132))
OTHER_KEY = bytes(range(1, 33))
KEY_B64 = base64.urlsafe_b64encode(KEY).decode()


def _unit(n: int, dim: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("protect_queries", [False, True])
def test_inner_products_and_distances_are_those_of_the_unkeyed_path(protect_queries: bool) -> None:
    docs, queries = _unit(50, 48, 0), _unit(7, 48, 1)
    plain = Protector(mechanism=NoDefense(), protect_queries=protect_queries)
    keyed = Protector(mechanism=NoDefense(), protect_queries=protect_queries, key=KEY, tenant="acme")
    d0, q0 = plain.protect(docs), plain.protect_query_vectors(queries)
    d1, q1 = keyed.protect(docs), keyed.protect_query_vectors(queries)
    np.testing.assert_allclose(q1 @ d1.T, q0 @ d0.T, atol=1e-5)
    dist = lambda q, d: np.linalg.norm(q[:, None] - d[None], axis=-1)
    np.testing.assert_allclose(dist(q1, d1), dist(q0, d0), atol=1e-5)
    assert np.abs(d1 - d0).max() > 0.1 and np.abs(q1 - q0).max() > 0.1  # the releases did move
    rotation = KeyedRotation(KEY, tenant="acme", dim=48)
    np.testing.assert_allclose(d1, rotation.apply(docs), atol=1e-6)
    np.testing.assert_allclose(rotation.invert(d1), docs, atol=1e-5)  # the key holder can undo it


def test_the_key_composes_with_a_noise_mechanism(unit_vectors: np.ndarray) -> None:
    with pytest.warns(SeedWarning):
        mechanisms = [GaussianNoise(s=0.1, seed=3), GaussianNoise(s=0.1, seed=3)]
    plain, keyed = Protector(mechanism=mechanisms[0]), Protector(mechanism=mechanisms[1], key=KEY)
    rotation = KeyedRotation(KEY, dim=unit_vectors.shape[1])
    np.testing.assert_allclose(keyed.protect(unit_vectors), rotation.apply(plain.protect(unit_vectors)), atol=1e-6)


def test_chunks_are_rotated_like_one_batch() -> None:
    x = _unit(10, 16, 2)
    whole = Protector(mechanism=NoDefense(), key=KEY).protect(x)
    np.testing.assert_allclose(Protector(mechanism=NoDefense(), key=KEY, chunk_size=3).protect(x), whole, atol=1e-6)


def test_every_form_of_the_key_and_every_construction_gives_the_same_release() -> None:
    x = _unit(5, 24, 3)
    outs = [
        Protector(mechanism=NoDefense(), key=k, tenant="t").protect(x)
        for k in (KEY, KEY_B64, KEY_B64 + "\n", SecretKey(KEY), TenantKey(KEY).key)
    ]
    for out in outs[1:]:
        np.testing.assert_array_equal(out, outs[0])


def test_the_same_key_and_tenant_give_the_same_rotation_in_another_process(tmp_path) -> None:
    x = _unit(4, 32, 4)
    np.save(tmp_path / "x.npy", x)
    code = (
        "import sys, numpy as np; from textcrafter_rag import NoDefense, Protector; "
        "p = Protector(mechanism=NoDefense(), key=sys.argv[1], tenant='acme'); "
        "np.save(sys.argv[3], p.protect(np.load(sys.argv[2])))"
    )
    subprocess.run(
        [sys.executable, "-c", code, KEY_B64, str(tmp_path / "x.npy"), str(tmp_path / "y.npy")], check=True, timeout=120
    )
    here = Protector(mechanism=NoDefense(), key=KEY, tenant="acme").protect(x)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), here, atol=1e-6)


def test_another_tenant_or_a_wrong_key_gives_retrieval_garbage() -> None:
    docs = _unit(200, 64, 5)
    queries = docs + 0.05 * _unit(200, 64, 6)  # each query's own document is its nearest neighbour
    stored = Protector(mechanism=NoDefense(), key=KEY, tenant="acme").protect(docs)
    right = Protector(mechanism=NoDefense(), key=KEY, tenant="acme").protect_query_vectors(queries)
    assert (np.argmax(right @ stored.T, axis=1) == np.arange(200)).all()
    for key, tenant in ((KEY, "other"), (OTHER_KEY, "acme")):
        wrong = Protector(mechanism=NoDefense(), key=key, tenant=tenant).protect_query_vectors(queries)
        assert abs(float(_cos(wrong, stored).mean())) < 0.1  # matching pairs: cosine ~0 on average
        assert (np.argmax(wrong @ stored.T, axis=1) == np.arange(200)).mean() < 0.05  # chance is 0.005


def test_an_unknown_dimension_is_fixed_by_the_first_call() -> None:
    p = Protector(mechanism=NoDefense(), key=KEY)
    assert p.keyed and p.rotation is None and p.dimension is None
    p.protect(_unit(2, 12, 7))
    assert p.rotation is not None and p.dimension == 12
    with pytest.raises(ValueError, match="dimension"):
        p.protect(_unit(2, 13, 7))
    assert not Protector(mechanism=NoDefense()).keyed


def test_a_tenant_needs_a_key_and_a_tenant_key_its_own_tenant() -> None:
    with pytest.raises(ValueError, match="tenant= needs key="):
        Protector(mechanism=NoDefense(), tenant="acme")  # would silently share one unkeyed space
    with pytest.raises(ValueError, match="key_file= or key_env="):
        Protect(tenant="acme")
    tk = TenantKey(KEY, "acme")
    via_tenant_key = Protector(mechanism=NoDefense(), key=tk)
    via_options = Protector(mechanism=NoDefense(), key=KEY, tenant="acme")
    x = _unit(3, 16, 4)
    np.testing.assert_array_equal(via_tenant_key.protect(x), via_options.protect(x))
    assert (
        Protector(mechanism=NoDefense(), key=tk, tenant="acme").protect(x).tobytes() == via_options.protect(x).tobytes()
    )
    with pytest.raises(ValueError, match="contradicts"):
        Protector(mechanism=NoDefense(), key=tk, tenant="globex")


def test_query_vectors_are_checked_with_or_without_a_key() -> None:
    for key in (None, KEY):
        p = Protector(mechanism=NoDefense(), key=key)
        with pytest.raises(ValueError, match=r"NaN|finite"):
            p.protect_query_vectors(np.full((1, 8), np.nan))
        assert p.protect_query_vectors(np.ones((2, 8), dtype=np.float64)).dtype == np.float32


def test_adapter_options_hold_the_key_as_a_secret_key() -> None:
    options = ProtectionOptions(key=KEY_B64, tenant="acme")
    assert isinstance(options.key, SecretKey)
    assert_no_key(KEY, repr(dataclasses.asdict(options)), repr(vars(options)))


def test_texts_embedded_by_a_keyed_protector_are_rotated() -> None:
    encode = lambda texts: np.concatenate([_unit(1, 8, len(t)) for t in texts])  # any text, a probe's too
    p = Protector(base=encode, mechanism=NoDefense(), key=KEY)
    rotation = KeyedRotation(KEY, dim=8)
    np.testing.assert_allclose(p.embed_query("ccc"), rotation.apply(encode(["ccc"]))[0], atol=1e-6)
    np.testing.assert_allclose(p.embed_documents(["a", "bb"]), rotation.apply(encode(["a", "bb"])), atol=1e-6)
    assert p.rotation is not None and p.rotation.fingerprint == rotation.fingerprint


def test_the_key_never_shows(tmp_path) -> None:
    p = Protector(mechanism=NoDefense(), key=KEY_B64, tenant="acme")
    p.protect(_unit(2, 8, 9))
    texts = [repr(p), str(p), repr(p.rotation), repr(TenantKey(KEY)), repr(ProtectionOptions(key=KEY, tenant="acme"))]
    assert "redacted" in repr(p) and "acme" in repr(p)
    errors = []
    for bad in (KEY[:-1], KEY + b"\x00", KEY_B64[:-2], KEY_B64 + "!!", KEY.hex()):
        with pytest.raises(InvalidKeyError) as info:
            Protector(mechanism=NoDefense(), key=bad)
        errors.append(str(info.value))
        assert_no_key(KEY, str(info.value))
    with pytest.raises(ValueError) as bad_input:
        p.protect(np.full((1, 8), np.nan, dtype=np.float32))
    (tmp_path / "k").write_text(KEY.hex())  # a hex key is not the keygen format
    with pytest.raises(InvalidKeyError) as bad_file:
        load_key(tmp_path / "k")
    assert_no_key(KEY, *texts, *errors, str(bad_input.value), str(bad_file.value))
    with pytest.raises(TypeError):
        pickle.dumps(TenantKey(KEY))  # how Ray would fail if handed the key object


def test_load_key_from_a_file_or_an_environment_variable(tmp_path, monkeypatch) -> None:
    (tmp_path / "k").write_text(KEY_B64 + "\n")
    monkeypatch.setenv("TC_TEST_KEY", KEY_B64)
    for key in (load_key(tmp_path / "k"), load_key(env="TC_TEST_KEY")):
        assert key.subkey("x") == SecretKey(KEY).subkey("x")
    with pytest.raises(FileNotFoundError):
        load_key(tmp_path / "missing")
    with pytest.raises(ValueError, match="not set"):
        load_key(env="TC_TEST_UNSET_KEY")
    with pytest.raises(ValueError, match="exactly one"):
        load_key(tmp_path / "k", env="TC_TEST_KEY")


def test_protect_file_with_a_key_rotates_the_shipped_release(tmp_path) -> None:
    x = _unit(12, 384, 10)
    np.save(tmp_path / "in.npy", x)
    report = protect_file(
        tmp_path / "in.npy", tmp_path / "out.npy", key=TenantKey(KEY, "acme"), chunk_size=5, progress=False
    )
    y = np.load(tmp_path / "out.npy")
    back = KeyedRotation(KEY, tenant="acme", dim=384).invert(y)
    np.testing.assert_allclose(np.linalg.norm(back - x, axis=1), 1.0, rtol=1e-4)  # the shipped eps=1 policy
    assert np.linalg.norm(y - x, axis=1).min() > 1.2  # the release itself is rotated away from the input
    assert_no_key(KEY, repr(report), (tmp_path / "out.npy").read_bytes().decode("latin-1"))
    assert report.key_fingerprint == KeyedRotation(KEY, tenant="acme", dim=8).fingerprint  # any dim: the same
    assert report.key_fingerprint != TenantKey(KEY, "other").fingerprint
    with pytest.raises(ValueError, match="not to protect_file"):
        protect_file(
            tmp_path / "in.npy", tmp_path / "o.npy", protector=Protector(mechanism=NoDefense()), key=KEY, progress=False
        )


def test_rekey_file_moves_a_store_without_re_embedding(tmp_path) -> None:
    x = _unit(11, 16, 11)
    old, new = TenantKey(KEY, "acme"), TenantKey(OTHER_KEY, "acme-2")
    stored = Protector(mechanism=NoDefense(), key=old.key, tenant="acme").protect(x)
    table = pa.table({"id": list(range(11)), "embedding": pa.array(stored.tolist(), pa.list_(pa.float32()))})
    pq.write_table(table, tmp_path / "in.parquet")
    report = rekey_file(tmp_path / "in.parquet", tmp_path / "out.parquet", key=old, new_key=new, chunk_size=4)
    out = pq.read_table(tmp_path / "out.parquet")
    assert report.rows == 11 and report.chunks == 3 and out.column("id").to_pylist() == list(range(11))
    moved = np.asarray(out.column("embedding").to_pylist(), dtype=np.float32)
    fresh = Protector(mechanism=NoDefense(), key=OTHER_KEY, tenant="acme-2").protect(x)
    np.testing.assert_allclose(moved, fresh, atol=1e-5)
    assert_no_key(KEY, repr(report))
    assert_no_key(OTHER_KEY, repr(report))
    np.save(tmp_path / "in.npy", stored)  # the same secret, another tenant
    rekey_file(tmp_path / "in.npy", tmp_path / "t.npy", key=old, new_key=TenantKey(KEY, "b"), progress=False)
    np.testing.assert_allclose(
        np.load(tmp_path / "t.npy"), Protector(mechanism=NoDefense(), key=KEY, tenant="b").protect(x), atol=1e-5
    )
    with pytest.raises(ValueError, match="nothing to move"):
        rekey_file(tmp_path / "in.npy", tmp_path / "s.npy", key=KEY_B64 + "\n", new_key=SecretKey(KEY))
    assert report.key_fingerprint == new.fingerprint  # what the output is stored under now
    with pytest.raises(ValueError, match="wrong key or tenant"):  # the store's fingerprint catches a wrong key
        rekey_file(
            tmp_path / "in.npy",
            tmp_path / "w.npy",
            key=TenantKey(OTHER_KEY, "acme"),
            new_key=new,
            expected_fingerprint=old.fingerprint,
        )
    assert not (tmp_path / "w.npy").exists()
    ok = rekey_file(tmp_path / "in.npy", tmp_path / "r.npy", key=old, new_key=new, expected_fingerprint=old.fingerprint)
    assert ok.rows == 11 and Protector(mechanism=NoDefense()).key_fingerprint is None
    (tmp_path / "texts.jsonl").write_text('{"text": "no vectors here"}\n')
    with pytest.raises(StreamError, match="embedding"):
        rekey_file(tmp_path / "texts.jsonl", tmp_path / "x.jsonl", key=old, new_key=new, progress=False)
    assert not (tmp_path / "s.npy").exists() and not (tmp_path / "x.jsonl").exists()


def test_ray_protect_reads_the_key_on_the_worker(tmp_path, monkeypatch) -> None:
    (tmp_path / "k").write_text(KEY_B64)
    monkeypatch.setenv("TC_TEST_KEY", KEY_B64)
    x = _unit(6, 384, 12)
    rotation = KeyedRotation(KEY, tenant="acme", dim=384)
    for kwargs in ({"key_file": str(tmp_path / "k")}, {"key_env": "TC_TEST_KEY"}):
        pickle.dumps(kwargs)  # what Ray ships to each actor: a path or a variable name, not the key
        actor = Protect(threads=None, tenant="acme", **kwargs)
        out = np.asarray(actor({"embedding": x})["embedding"], dtype=np.float32)
        np.testing.assert_allclose(np.linalg.norm(rotation.invert(out) - x, axis=1), 1.0, rtol=1e-4)
        assert_no_key(KEY, repr(actor.protector), repr(vars(actor)))
    with pytest.raises(ValueError, match="exactly one"):
        Protect(threads=None, key_file=str(tmp_path / "k"), key_env="TC_TEST_KEY")
