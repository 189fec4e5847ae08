"""The keyed rotation: exact geometry, determinism pinned to the documented construction, no key leaks."""

from __future__ import annotations

import copy
import math
import pickle
import threading

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from textcrafter_rag.keyed import ALGORITHM, KeyedRotation, Whitening, clear_rotation_cache, haar_from_subkey
from textcrafter_rag.sealing import InvalidKeyError, SecretKey, generate_key

KEY = bytes(range(32))
KEY_B64 = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="  # the same key as `textcrafter keygen` prints it
OTHER_KEY = bytes(range(1, 33))


def _batch(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_rotation_preserves_inner_products_and_distances() -> None:
    rot = KeyedRotation(KEY, tenant="tenant-a", dim=384)  # the pinned test's matrix: built once per process
    x, y = _batch(200, 384, 0), _batch(50, 384, 1)
    rx, ry = rot.apply(x), rot.apply(y)
    assert rx.dtype == np.float32 and rx.shape == x.shape
    np.testing.assert_allclose(rx @ ry.T, x @ y.T, atol=1e-5)
    d_clean = np.linalg.norm(x[:, None, :] - y[None, :, :], axis=2)
    d_rot = np.linalg.norm(rx[:, None, :] - ry[None, :, :], axis=2)
    np.testing.assert_allclose(d_rot, d_clean, atol=1e-5)
    assert np.abs(rx - x).max() > 0.1  # and it does move the vectors


def test_matrix_is_orthogonal_and_not_trivial() -> None:
    q = KeyedRotation(KEY, tenant="acme", dim=64).matrix()
    np.testing.assert_allclose(q @ q.T, np.eye(64), atol=1e-12)
    assert np.abs(np.abs(np.diag(q))).mean() < 0.5  # far from identity or a signed permutation
    assert np.abs(q).max() < 0.9


def test_invert_undoes_apply_and_rekey_equals_invert_then_apply() -> None:
    a = KeyedRotation(KEY, tenant="acme", dim=96)
    b = KeyedRotation(OTHER_KEY, tenant="acme", dim=96)
    x = _batch(100, 96, 2) * 3.0
    stored = a.apply(x)
    np.testing.assert_allclose(a.invert(stored), x, atol=1e-5)
    moved = a.rekey(stored, b)
    np.testing.assert_allclose(moved, b.apply(a.invert(stored)), atol=1e-5)
    np.testing.assert_allclose(moved, b.apply(x), atol=1e-5)
    np.testing.assert_allclose(stored @ a.rekey_matrix(b), moved, atol=1e-6)


def test_inputs_are_validated_and_never_modified() -> None:
    rot = KeyedRotation(KEY, dim=8)
    x = _batch(4, 8, 3)
    before = x.copy()
    rot.apply(x)
    np.testing.assert_array_equal(x, before)
    np.testing.assert_array_equal(rot.apply(np.zeros((2, 8), np.float32)), 0.0)  # zero rows pass through
    with pytest.raises(ValueError, match="dimension 7, expected 8"):
        rot.apply(np.ones((2, 7), np.float32))
    with pytest.raises(ValueError, match="NaN"):
        rot.invert(np.full((1, 8), np.nan, np.float32))
    with pytest.raises(TypeError):
        rot.apply(np.ones((2, 8), np.int64))
    with pytest.raises(ValueError, match="8-d, the other 16-d"):
        rot.rekey(x, KeyedRotation(KEY, dim=16))


def test_same_key_and_tenant_give_the_same_matrix_in_fresh_instances() -> None:
    first = KeyedRotation(KEY, tenant="acme", dim=48).matrix()
    clear_rotation_cache()
    again = KeyedRotation(SecretKey(KEY_B64), tenant="acme", dim=48).matrix()
    np.testing.assert_array_equal(first, again)
    assert (
        KeyedRotation(KEY_B64, tenant="acme", dim=48).fingerprint
        == KeyedRotation(KEY, tenant="acme", dim=48).fingerprint
    )


@pytest.mark.parametrize(("key", "tenant"), [(KEY, "acme-2"), (OTHER_KEY, "acme"), (KEY, "")])
def test_another_tenant_or_key_gives_an_unrelated_matrix(key: bytes, tenant: str) -> None:
    base = KeyedRotation(KEY, tenant="acme", dim=64)
    other = KeyedRotation(key, tenant=tenant, dim=64)
    x = _batch(200, 64, 4)
    cos = np.sum(base.apply(x) * other.apply(x), axis=1)
    assert abs(cos.mean()) < 0.1  # independent Haar matrices: mean cosine ~N(0, 1/64)
    assert base.fingerprint != other.fingerprint


def test_the_rotation_subkey_is_not_the_sealing_subkey() -> None:
    secret = SecretKey(KEY)
    assert secret.subkey("rotate", context="acme") != secret.subkey("seal", context="acme")
    q = KeyedRotation(KEY, tenant="acme", dim=8).matrix()
    np.testing.assert_array_equal(q, haar_from_subkey(secret.subkey("rotate", context="acme"), 8))
    assert not np.allclose(q, haar_from_subkey(secret.subkey("seal", context="acme"), 8))


def test_pinned_values_detect_any_change_of_the_construction() -> None:
    """Stored vectors are only usable under the same matrix: a change here orphans every store."""
    assert ALGORITHM == "haar-qr-aes256ctr-v1"
    q8 = KeyedRotation(KEY, tenant="tenant-a", dim=8).matrix()
    np.testing.assert_allclose(
        q8[0, :4], [-0.8128566276800391, 0.08400347700994602, 0.30130901562686363, -0.10285094215924376], atol=1e-12
    )
    np.testing.assert_allclose(
        q8[7, 4:], [-0.2050726001871878, 0.109526479637547, 0.1475550192043638, -0.4066832958130207], atol=1e-12
    )
    q384 = KeyedRotation(KEY, tenant="tenant-a", dim=384).matrix()
    np.testing.assert_allclose(
        q384[0, :3], [0.01091351096331428, -0.05005029030950846, -0.12309427985546788], atol=1e-12
    )
    np.testing.assert_allclose(
        q384[383, 381:], [0.00996474947842041, 0.01692302040431814, -0.01190189604565291], atol=1e-12
    )
    assert KeyedRotation(KEY, tenant="tenant-a", dim=8).fingerprint == "8200d8f3466d8821"


def _reference_haar(subkey: bytes, dim: int) -> np.ndarray:
    """The construction as the module docstring states it, with the standard library's math and Gram-Schmidt."""
    nonce = dim.to_bytes(8, "big") + bytes(8)
    n = dim * dim + (dim * dim) % 2
    stream = Cipher(algorithms.AES(subkey), modes.CTR(nonce)).encryptor().update(bytes(8 * n))
    u = [((int.from_bytes(stream[8 * i : 8 * i + 8], "little") >> 11) + 0.5) * 2.0**-53 for i in range(n)]
    z: list[float] = []
    for i in range(0, n, 2):
        r, t = math.sqrt(-2.0 * math.log(u[i])), 2.0 * math.pi * u[i + 1]
        z += [r * math.cos(t), r * math.sin(t)]
    g = np.array(z[: dim * dim]).reshape(dim, dim)
    q = np.zeros_like(g)  # Gram-Schmidt on the columns = QR with a positive diagonal of R
    for j in range(dim):
        v = g[:, j] - q[:, :j] @ (q[:, :j].T @ g[:, j])
        v -= q[:, :j] @ (q[:, :j].T @ v)
        q[:, j] = v / np.linalg.norm(v)
    return q


def test_the_construction_is_the_documented_one() -> None:
    """An independent implementation of the docstring agrees, so other languages can reproduce ``Q``."""
    subkey = SecretKey(KEY).subkey("rotate", context="tenant-a")
    for dim in (5, 12):
        np.testing.assert_allclose(
            KeyedRotation(KEY, tenant="tenant-a", dim=dim).matrix(), _reference_haar(subkey, dim), atol=1e-10
        )


def test_cache_is_thread_safe() -> None:
    clear_rotation_cache()
    results: list[np.ndarray] = []
    lock = threading.Lock()

    def build() -> None:
        m = KeyedRotation(KEY, tenant="threads", dim=128).matrix()
        with lock:
            results.append(m)

    threads = [threading.Thread(target=build) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8
    for m in results[1:]:
        np.testing.assert_array_equal(m, results[0])


def test_key_never_appears_in_repr_str_or_errors() -> None:
    key = generate_key()
    rot = KeyedRotation(key, tenant="acme", dim=16)
    raw = SecretKey(key)._raw
    texts = [repr(rot), str(rot), rot.fingerprint]
    for bad in (np.ones((1, 3), np.float32), np.full((1, 16), np.inf, np.float32), "text"):
        with pytest.raises((TypeError, ValueError)) as err:
            rot.apply(bad)
        texts.append(str(err.value))
    with pytest.raises(TypeError) as err:
        pickle.dumps(rot)
    texts.append(str(err.value))
    for text in texts:
        assert key not in text and key[:12] not in text and raw.hex() not in text
    assert "redacted" in repr(rot) and "acme" in repr(rot)
    assert copy.deepcopy(rot) is rot


def test_malformed_keys_and_arguments_are_refused_without_echoing_them() -> None:
    bad_key = "this-is-not-a-key-but-a-secret-" + "x" * 20
    with pytest.raises(InvalidKeyError) as err:
        KeyedRotation(bad_key, dim=8)
    assert "secret" not in str(err.value)
    with pytest.raises(InvalidKeyError) as err:
        KeyedRotation(KEY[:31], dim=8)
    assert KEY[:31].hex() not in str(err.value)
    with pytest.raises(TypeError, match="tenant"):
        KeyedRotation(KEY, tenant=3, dim=8)  # type: ignore[arg-type]
    for dim in (0, -1, 10**6):
        with pytest.raises(ValueError, match="dim"):
            KeyedRotation(KEY, dim=dim)
    with pytest.raises(TypeError, match="dim"):
        KeyedRotation(KEY, dim=True)


def test_whitening_makes_calibration_isotropic_and_inverts() -> None:
    rng = np.random.default_rng(0)
    calib = (rng.standard_normal((4000, 16)) * np.geomspace(2.0, 0.05, 16)) @ KeyedRotation(
        KEY, dim=16
    ).matrix().T + 0.5
    w = Whitening.fit(calib, shrinkage=0.0)
    white = w.apply(calib).astype(np.float64)
    np.testing.assert_allclose(np.cov(white, rowvar=False), np.eye(16), atol=1e-3)
    np.testing.assert_allclose(white.mean(axis=0), 0.0, atol=1e-4)
    x = calib[:50].astype(np.float32)
    np.testing.assert_allclose(w.invert(w.apply(x)), x, atol=1e-4)
    again = Whitening.from_state(w.state())
    np.testing.assert_array_equal(again.apply(x), w.apply(x))
    assert repr(w) == "Whitening(dim=16)"


def test_whitening_changes_inner_products_as_documented() -> None:
    """The retrieval cost: releases compare by (x - m)^T (C + s I)^-1 (y - m), not by x^T y."""
    calib = np.random.default_rng(1).standard_normal((2000, 8)) * np.geomspace(1.0, 0.1, 8)
    w = Whitening.fit(calib, shrinkage=0.1)
    cov = np.cov(calib.astype(np.float32).astype(np.float64), rowvar=False)
    metric = np.linalg.inv(cov + 0.1 * np.trace(cov) / 8 * np.eye(8))
    x, y = _batch(5, 8, 2), _batch(5, 8, 3)
    m = calib.astype(np.float32).astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(w.apply(x) @ w.apply(y).T, (x - m) @ metric @ (y - m).T, rtol=1e-4, atol=1e-4)
    assert not np.allclose(w.apply(x) @ w.apply(y).T, x @ y.T, atol=0.05)


def test_whitening_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="shrinkage"):
        Whitening.fit(np.ones((10, 4), np.float32), shrinkage=-1.0)
    with pytest.raises(ValueError, match="singular"):
        Whitening.fit(np.tile(np.arange(1, 5, dtype=np.float32), (10, 1)), shrinkage=0.0)
    with pytest.raises(ValueError, match="dimension 3, expected 4"):
        Whitening.fit(np.random.default_rng(0).standard_normal((50, 4)).astype(np.float32)).apply(
            np.ones((1, 3), np.float32)
        )
    with pytest.raises(ValueError, match="finite"):
        Whitening(np.zeros(4), np.full((4, 4), np.nan))
