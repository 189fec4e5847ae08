"""Property-based tests of every mechanism's output contract (hypothesis)."""

from __future__ import annotations

import numpy as np
from _textcrafter_helpers import make_textcrafter
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from textcrafter_rag import from_spec

SPECS = ["none", "shuffle", "gaussian:s=0.01", "gaussian:s=1", "ldp:eps=1", "ldp:eps=12", "purkayastha:eps=8"]
_TC = make_textcrafter(dim=16, eps=1.7)

finite_rows = arrays(
    np.float32,
    st.tuples(st.integers(1, 6), st.just(16)),
    elements=st.floats(-1e3, 1e3, width=32, allow_nan=False, allow_subnormal=False),
).filter(lambda x: bool(np.all(np.any(x != 0, axis=1))))


@settings(max_examples=60, deadline=None)
@given(x=finite_rows, spec=st.sampled_from([*SPECS, "textcrafter"]))
def test_shape_dtype_finiteness_and_no_unchanged_rows(x: np.ndarray, spec: str) -> None:
    mech = _TC if spec == "textcrafter" else from_spec(spec, seed=0)
    out = mech.protect(x)
    assert out.shape == x.shape and out.dtype == np.float32 and np.isfinite(out).all()
    unchanged = np.all(out == x, axis=1)
    if spec == "none":
        assert unchanged.all()
    elif spec == "shuffle":
        # A permutation cannot move a row whose entries it only swaps among equal values.
        distinct = np.array([len(np.unique(row)) == row.size for row in x])
        assert not np.any(unchanged & distinct)
    else:
        assert not np.any(unchanged), spec


@settings(max_examples=80, deadline=None)
@given(x=finite_rows, z=arrays(np.float64, (6, 16), elements=st.floats(-1e4, 1e4, allow_nan=False)))
def test_textcrafter_norm_and_orthogonality(x: np.ndarray, z: np.ndarray) -> None:
    f_adv, v = _TC.release_with_noise(x, z[: x.shape[0]])
    diff = f_adv.astype(np.float64) - x.astype(np.float64)
    slack = 1e-5 * _TC.eps + 1e-6 * np.abs(x).max(axis=1)  # float32 rounding of f0 + delta
    assert np.all(np.abs(np.linalg.norm(diff, axis=1) - _TC.eps) <= slack)
    assert np.all(np.abs(np.sum(diff * v, axis=1)) <= slack)


@settings(max_examples=40, deadline=None)
@given(x=finite_rows)
def test_the_callers_array_is_never_modified(x: np.ndarray) -> None:
    before = x.copy()
    for spec in SPECS:
        from_spec(spec, seed=0).protect(x)
    _TC.protect(x)
    assert np.array_equal(x, before)
