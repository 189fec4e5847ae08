"""``ray_data.Protect`` takes the protection options every entry point takes (no Ray cluster needed).

``Protect`` is a plain callable over one batch, so these build it directly: ``mechanism=`` and ``options=``
as elsewhere, ``policy=`` only as a warning alias, the key only through ``key_file=`` / ``key_env=``.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from textcrafter_rag.errors import InvalidInputError, InvalidTypeError
from textcrafter_rag.keyed import KeyedRotation
from textcrafter_rag.mechanisms import GaussianNoise, NoDefense
from textcrafter_rag.options import ProtectionOptions
from textcrafter_rag.ray_data import Protect

KEY = "qPFW0X_Gd8LTchRm4indGncnwqv1f6XKPEkkfFRgEUs="
X = np.random.default_rng(5).standard_normal((6, 16)).astype(np.float32)


def _out(protect: Protect) -> np.ndarray:
    return np.asarray(protect({"embedding": X})["embedding"], dtype=np.float32)


def test_mechanism_names_the_mechanism() -> None:
    np.testing.assert_array_equal(_out(Protect(mechanism="none", threads=None)), X)
    assert isinstance(Protect(mechanism="gaussian:s=0.5", threads=None).protector.mechanism, GaussianNoise)


def test_policy_warns_and_builds_what_mechanism_builds() -> None:
    with pytest.warns(DeprecationWarning, match="policy= is deprecated.*use mechanism=") as record:
        old = Protect(policy="gaussian:s=0.5", secure_mode=True, threads=None)
    assert record[0].filename == __file__
    new = Protect(mechanism="gaussian:s=0.5", secure_mode=True, threads=None)
    assert old.protector.options == new.protector.options
    assert old.protector.mechanism.params() == new.protector.mechanism.params()
    assert old.protector.mechanism.secure_mode and new.protector.mechanism.secure_mode
    with pytest.warns(DeprecationWarning, match="policy="):
        np.testing.assert_array_equal(_out(Protect(policy="none", threads=None)), X)


def test_policy_and_mechanism_together_are_refused() -> None:
    with pytest.raises(InvalidTypeError, match="mechanism= only"), pytest.warns(DeprecationWarning, match="policy="):
        Protect(policy="none", mechanism="none", threads=None)


def test_an_options_object_is_honoured_with_the_key_read_on_the_worker(monkeypatch) -> None:
    monkeypatch.setenv("TC_TEST_RAY_KEY", KEY)
    options = ProtectionOptions(mechanism=NoDefense(), chunk_size=2)  # (a tenant comes with its key, below)
    protect = Protect(options=options, key_env="TC_TEST_RAY_KEY", tenant="acme", threads=None)
    assert protect.protector.chunk_size == 2 and protect.protector.keyed
    # chunks of 2 against one call: float32 BLAS rounds by the batch's shape on some CPUs (AMD EPYC: 4e-7)
    np.testing.assert_allclose(_out(protect), KeyedRotation(KEY, tenant="acme", dim=16).apply(X), atol=1e-5)
    over = Protect(options=options, mechanism="gaussian:s=0.5", threads=None)
    assert isinstance(over.protector.mechanism, GaussianNoise)  # keywords apply over the object


def test_the_tenant_check_is_the_shared_one() -> None:
    with pytest.raises(InvalidInputError, match="tenant= needs key_file= or key_env=: without a key"):
        Protect(mechanism="none", tenant="acme", threads=None)
    with pytest.raises(InvalidInputError, match="tenant= needs key_file= or key_env=: without a key"):
        Protect(options=ProtectionOptions(mechanism="none"), tenant="acme", threads=None)


def test_a_key_or_a_seed_as_an_option_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="key_file= or key_env=, never the key"):
        Protect(mechanism="none", key=KEY, threads=None)
    with pytest.raises(InvalidInputError, match="key_file= or key_env=, never the key"):
        Protect(options=ProtectionOptions(mechanism="none", key=KEY), threads=None)
    with pytest.raises(InvalidInputError, match="no seed"):
        Protect(mechanism="none", seed=1, threads=None)


def test_threads_set_torch_threads_only_where_torch_is_installed(monkeypatch) -> None:
    """The runtime install has no torch: ``threads`` must not import it there, and still sets it elsewhere."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    wanted = 1 if before != 1 else 2
    try:
        Protect(mechanism="none", threads=wanted)
        assert torch.get_num_threads() == wanted
    finally:
        torch.set_num_threads(before)
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    np.testing.assert_array_equal(_out(Protect(mechanism="none", threads=2)), X)
