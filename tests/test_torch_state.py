"""Protection is immune to the caller's torch state: autocast, default dtype, grad mode, threads.

A RAG application may call ``protect()`` from inside its own ``torch.autocast`` region (mixed
precision encoders), with a float64 default dtype, under ``torch.inference_mode()`` or with one
torch thread. None of that may change what is released, or weaken the norm guarantee.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from _textcrafter_helpers import make_textcrafter

from textcrafter_rag.textcrafter import TextCrafter


@pytest.fixture(scope="module")
def shipped() -> TextCrafter:
    return TextCrafter.load_shipped(seed=0)


@pytest.fixture(scope="module")
def batch() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 384)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, rng.standard_normal(x.shape)


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


CALLER_STATES = {
    "autocast-bf16": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    "autocast-fp16": lambda: torch.autocast("cpu", dtype=torch.float16),
    "default-float64": lambda: default_dtype(torch.float64),
    "enable-grad": torch.enable_grad,
    "inference-mode": torch.inference_mode,
    "one-thread": lambda: threads(1),
}


def _assert_guarantee(tc: TextCrafter, x: np.ndarray, out: np.ndarray) -> None:
    assert out.dtype == np.float32 and out.shape == x.shape
    norms = np.linalg.norm(out.astype(np.float64) - x, axis=1)
    np.testing.assert_allclose(norms, tc.eps, rtol=1e-5)


@pytest.mark.parametrize("state", sorted(CALLER_STATES))
def test_release_is_the_same_in_any_caller_state(state: str, shipped: TextCrafter, batch) -> None:
    x, z = batch
    reference, v_ref = shipped.release_with_noise(x, z)
    with CALLER_STATES[state]():
        got, v = shipped.release_with_noise(x, z)
        protected = shipped.protect(x)
    assert got.dtype == np.float32 and v.dtype == np.float32
    np.testing.assert_allclose(got, reference, rtol=0, atol=1e-6)
    np.testing.assert_allclose(v, v_ref, rtol=0, atol=1e-6)
    _assert_guarantee(shipped, x, protected)


def test_a_policy_loaded_under_a_float64_default_is_float32(batch) -> None:
    x, z = batch
    reference = TextCrafter.load_shipped(seed=0).release_with_noise(x, z)[0]
    with default_dtype(torch.float64):
        tc = TextCrafter.load_shipped(seed=0)
    assert {p.dtype for p in tc.policy.parameters()} == {torch.float32}
    np.testing.assert_allclose(tc.release_with_noise(x, z)[0], reference, rtol=0, atol=1e-6)


@pytest.mark.parametrize("state", ["autocast-bf16", "inference-mode", "default-float64"])
def test_refinement_works_in_any_caller_state(state: str, unit_vectors: np.ndarray) -> None:
    tc = make_textcrafter(refine_steps=2)
    with CALLER_STATES[state]():
        out = tc.protect(unit_vectors)
    _assert_guarantee(tc, unit_vectors, out)


def test_protection_leaves_the_callers_torch_state_alone(shipped: TextCrafter, batch) -> None:
    before = (
        torch.get_num_threads(),
        torch.get_default_dtype(),
        torch.is_grad_enabled(),
        torch.is_autocast_enabled("cpu"),
        torch.is_inference_mode_enabled(),
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        shipped.protect(batch[0])
        assert torch.is_autocast_enabled("cpu")
    shipped.protect(batch[0])
    after = (
        torch.get_num_threads(),
        torch.get_default_dtype(),
        torch.is_grad_enabled(),
        torch.is_autocast_enabled("cpu"),
        torch.is_inference_mode_enabled(),
    )
    assert after == before
