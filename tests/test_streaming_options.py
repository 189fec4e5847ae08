"""``protect_file`` takes the protection options every entry point takes: ``options=`` and ``mechanism=``.

``policy=`` is only a warning alias of ``mechanism=``; a ready protector takes no other option.
"""

from __future__ import annotations

import numpy as np
import pytest

from textcrafter_rag import Protector
from textcrafter_rag.errors import InvalidInputError, InvalidTypeError
from textcrafter_rag.keyed import KeyedRotation, TenantKey
from textcrafter_rag.mechanisms import NoDefense
from textcrafter_rag.options import ProtectionOptions
from textcrafter_rag.streaming import protect_file

KEY = "8uJ0uB5X2qkq5wq1nQyq2q7w0t9YkB1m0e3cJx8l6Q0="
X = np.random.default_rng(3).standard_normal((11, 16)).astype(np.float32)


@pytest.fixture
def src(tmp_path):
    np.save(tmp_path / "in.npy", X)
    return tmp_path / "in.npy"


def _run(src, name: str, **kwargs) -> np.ndarray:
    protect_file(src, src.parent / name, progress=False, **kwargs)
    return np.load(src.parent / name)


def test_mechanism_names_the_mechanism(src) -> None:
    np.testing.assert_array_equal(_run(src, "none.npy", mechanism="none"), X)
    noised = _run(src, "g.npy", mechanism="gaussian:s=0.5", seed=1)
    assert noised.shape == X.shape and not np.allclose(noised, X, atol=0.05)


def test_policy_warns_and_gives_what_mechanism_gives(src) -> None:
    with pytest.warns(DeprecationWarning, match="policy= is deprecated.*use mechanism=") as record:
        old = _run(src, "old.npy", policy="gaussian:s=0.5", seed=1, chunk_size=4)
    assert record[0].filename == __file__  # points at the caller's line
    new = _run(src, "new.npy", mechanism="gaussian:s=0.5", seed=1, chunk_size=4)
    np.testing.assert_array_equal(old, new)
    assert not np.allclose(new, X, atol=0.05)


def test_policy_and_mechanism_together_are_refused(src) -> None:
    with pytest.raises(InvalidTypeError, match="mechanism= only"), pytest.warns(DeprecationWarning, match="policy="):
        protect_file(src, src.parent / "o.npy", policy="none", mechanism="none", progress=False)
    assert not (src.parent / "o.npy").exists()


def test_an_options_object_is_honoured(src) -> None:
    options = ProtectionOptions(mechanism="gaussian:s=0.5", seed=7, chunk_size=4)
    report = protect_file(src, src.parent / "o.npy", options=options, progress=False)
    assert report.chunks == 3  # 11 rows, 4 per step: the options' chunk_size
    expected = Protector(options=options).protect(X)  # the same seeded noise, chunk by chunk
    np.testing.assert_array_equal(np.load(src.parent / "o.npy"), expected)
    # keywords apply over the object
    np.testing.assert_array_equal(_run(src, "n.npy", options=options, mechanism="none"), X)


def test_an_options_object_carries_the_key_and_tenant(src) -> None:
    options = ProtectionOptions(mechanism=NoDefense(), key=KEY, tenant="acme")
    report = protect_file(src, src.parent / "o.npy", options=options, progress=False)
    np.testing.assert_allclose(np.load(src.parent / "o.npy"), KeyedRotation(KEY, tenant="acme", dim=16).apply(X))
    assert report.key_fingerprint == TenantKey(KEY, "acme").fingerprint


def test_a_tenant_without_a_key_is_refused_by_the_shared_check(src) -> None:
    with pytest.raises(InvalidInputError, match="tenant= needs key="):
        protect_file(src, src.parent / "o.npy", mechanism="none", tenant="acme", progress=False)


def test_a_ready_protector_takes_no_other_option(src) -> None:
    ready = Protector(mechanism=NoDefense())
    for extra in ({"mechanism": "none"}, {"secure_mode": True}, {"options": ProtectionOptions()}):
        with pytest.raises(InvalidInputError, match="not to protect_file"):
            protect_file(src, src.parent / "o.npy", protector=ready, progress=False, **extra)
    report = protect_file(src, src.parent / "o.npy", protector=ready, chunk_size=5, progress=False)
    assert report.chunks == 3  # chunk_size still sets the rows read per step
