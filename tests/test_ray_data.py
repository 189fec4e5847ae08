"""``ds.map_batches(Protect, ...)`` on a local 2-CPU Ray instance, every output row checked.

The main run protects 100,000 synthetic unit-norm 384-d vectors with the shipped eps 1.0 policy
on two actors and checks each row against the single-process protector's invariants: every id
exactly once, float32 ``(n, 384)``, finite, ``||out - in|| == eps``, ``out - in`` orthogonal to
the policy's direction ``v(in)``, fresh noise per row, and the same distribution of perturbation
directions as :class:`~textcrafter_rag.Protector` in this process. Smaller runs cover the
pyarrow batch format (all rows identical, so any noise shared between actors or batches shows),
a text column, and an invalid row failing the job.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")
pa = pytest.importorskip("pyarrow")

from textcrafter_rag import Protector
from textcrafter_rag.batches import column_to_matrix
from textcrafter_rag.encoders import BUNDLED_MODEL_ID
from textcrafter_rag.policies import shipped_policy_path
from textcrafter_rag.ray_data import Protect
from textcrafter_rag.textcrafter import TextCrafter

N = 100_000
DIM = 384
EPS = 1.0  # the shipped default policy
BATCH = 4096
#: float32 rounding of ``in + delta`` with unit-norm ``in`` and ``||delta|| = 1``.
NORM_TOL = 2e-5
ORTHO_TOL = 2e-5


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=300 * 2**20,
        configure_logging=False,
    )
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def policy_dir() -> str:
    path = shipped_policy_path(BUNDLED_MODEL_ID, eps=EPS)
    assert path is not None, "the shipped eps 1.0 policy is missing"
    return str(path)


@pytest.fixture(scope="module")
def policy(policy_dir: str) -> TextCrafter:
    return TextCrafter.load(policy_dir)


def _unit(n: int, *, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _collect(ds: Any, *columns: str) -> dict[str, np.ndarray]:
    """Stream the output blocks back as numpy columns (rows in arbitrary order)."""
    parts: dict[str, list[np.ndarray]] = {c: [] for c in columns}
    for batch in ds.iter_batches(batch_format="numpy", batch_size=None):
        for c in columns:
            parts[c].append(column_to_matrix(batch[c], name=c) if c == "embedding" else np.asarray(batch[c]))
    return {c: np.concatenate(v) for c, v in parts.items()}


def _directions(policy: TextCrafter, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the policy's unit direction ``v`` and the unit projection of ``mu`` orthogonal to it."""
    vs, pmus = [], []
    for start in range(0, len(x), 8192):
        out = policy.policy_outputs(x[start : start + 8192])
        v, mu = np.asarray(out.v, dtype=np.float64), np.asarray(out.mu, dtype=np.float64)
        pmu = mu - np.sum(mu * v, axis=1, keepdims=True) * v
        vs.append(v)
        pmus.append(pmu / np.linalg.norm(pmu, axis=1, keepdims=True))
    return np.concatenate(vs), np.concatenate(pmus)


def _check_rows(out: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Every row: shape, dtype, finite, ``||out - in|| == eps``, orthogonal to ``v``; returns ``(out - in) / eps``."""
    assert out.shape == x.shape and out.dtype == np.float32
    assert np.isfinite(out).all()
    d = out.astype(np.float64) - x.astype(np.float64)
    norms = np.linalg.norm(d, axis=1)
    assert np.abs(norms - EPS).max() < NORM_TOL, f"{int(np.sum(np.abs(norms - EPS) >= NORM_TOL))} rows off eps"
    assert np.abs(np.sum(d * v, axis=1)).max() < ORTHO_TOL
    return d / EPS


def test_map_batches_protects_every_row_like_the_single_process_protector(local_ray, policy_dir, policy) -> None:
    from ray.data.extensions import ArrowTensorArray

    x = _unit(N, seed=0)
    table = pa.table({"id": np.arange(N, dtype=np.int64), "embedding": ArrowTensorArray.from_numpy(x)})
    ds = ray.data.from_arrow([table.slice(i, 12_500) for i in range(0, N, 12_500)])  # 8 input blocks
    protected = ds.map_batches(
        Protect, fn_constructor_kwargs={"mechanism": policy_dir}, batch_size=BATCH, concurrency=2
    )
    got = _collect(protected, "id", "embedding")

    ids = got["id"]
    assert ids.shape == (N,) and np.array_equal(np.sort(ids), np.arange(N))  # every id exactly once
    out = got["embedding"][np.argsort(ids)]
    assert not np.isclose(out, x, atol=1e-3).all(axis=1).any()  # every row moved
    v, pmu = _directions(policy, x)
    unit_d = _check_rows(out, x, v)
    assert len({r.tobytes() for r in out}) == N  # no two rows share a release
    assert np.abs(unit_d[:-1] - unit_d[1:]).max(axis=1).min() > 1e-3  # neighbours got different noise

    # The same distribution of perturbation directions as the single-process Protector: the policy
    # was loaded and applied correctly on every actor (the eps 2.5 policy gives ~0.53 here).
    ref_x = x[:20_000]
    ref = (Protector(mechanism=TextCrafter.load(policy_dir)).protect(ref_x).astype(np.float64) - ref_x) / EPS
    ray_cos = np.sum(unit_d * pmu, axis=1)
    ref_cos = np.sum(ref * pmu[:20_000], axis=1)
    assert abs(ray_cos.mean() - ref_cos.mean()) < 5e-3
    assert np.quantile(ray_cos, 0.01) == pytest.approx(np.quantile(ref_cos, 0.01), abs=0.01)
    assert np.quantile(ray_cos, 0.99) == pytest.approx(np.quantile(ref_cos, 0.99), abs=0.01)


def test_pyarrow_batches_of_identical_rows_get_independent_noise(local_ray, policy_dir, policy) -> None:
    """Identical inputs in every batch: shared noise anywhere would repeat a release.

    Nothing here depends on how Ray schedules the batches: whether one actor or both protect
    them, a noise stream replayed by two actors, by two batches of one actor, or a seed shared by
    every worker would make some released rows equal, and every row is checked.
    """
    n = 16_384
    c = _unit(1, seed=1)
    flat = np.tile(c, (n, 1))
    emb = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), DIM)  # what most parquet stores hold
    table = pa.table({"id": np.arange(n, dtype=np.int64), "embedding": emb, "doc": [f"d{i}" for i in range(n)]})
    ds = ray.data.from_arrow([table.slice(i, 4096) for i in range(0, n, 4096)])
    protected = ds.map_batches(
        Protect, fn_constructor_kwargs={"mechanism": policy_dir}, batch_format="pyarrow", batch_size=1024, concurrency=2
    )
    got = _collect(protected, "id", "embedding", "doc")
    order = np.argsort(got["id"])
    assert np.array_equal(got["id"][order], np.arange(n))
    assert list(got["doc"][order][:3]) == ["d0", "d1", "d2"]  # other columns pass through
    v, _ = _directions(policy, c)
    out = got["embedding"][order]
    unit_d = _check_rows(out, flat, np.repeat(v, n, axis=0))
    assert len({r.tobytes() for r in out}) == n
    assert np.abs(unit_d @ unit_d[0] - 1.0)[1:].min() > 1e-4


def test_text_column_is_embedded_on_the_actor(local_ray, minilm) -> None:
    texts = [f"Customer {i} wrote to ask about invoice number {1000 + i}." for i in range(48)]
    ds = ray.data.from_items([{"id": i, "text": t} for i, t in enumerate(texts)])
    protected = ds.map_batches(
        Protect, fn_constructor_kwargs={"text_column": "text", "encoder": "bundled"}, batch_size=16, concurrency=1
    )
    got = _collect(protected, "id", "embedding")
    order = np.argsort(got["id"])
    assert np.array_equal(got["id"][order], np.arange(48))
    clean = minilm.encode(texts).astype(np.float64)
    norms = np.linalg.norm(got["embedding"][order].astype(np.float64) - clean, axis=1)
    np.testing.assert_allclose(norms, EPS, atol=1e-4)


def test_an_invalid_row_fails_the_job(local_ray, policy_dir) -> None:
    x = _unit(2048, seed=2)
    x[1500, 7] = np.nan
    ds = ray.data.from_numpy(x).map_batches(lambda b: {"embedding": b["data"]}, batch_size=None)
    protected = ds.map_batches(Protect, fn_constructor_kwargs={"mechanism": policy_dir}, batch_size=1024, concurrency=1)
    with pytest.raises(Exception, match=r"column 'embedding' contains NaN or Inf in 1 row\(s\), first at row \d+"):
        protected.materialize()
