"""The protections of the threat-model matrix (:mod:`benchmarks.threat_models`) as one release type.

A :class:`Release` is what the store host sees: ``noise -> whitening -> secret rotation`` or a keyed
dimension shuffle with noise (DCPE: IronCore Cloaked AI's construction, through ``ironcore-alloy`` when
it is installed, or :class:`DcpeShuffle`, the same construction in a few lines of NumPy). It has the
``protect``/``spec``/``policy`` surface the attacks package expects of a defense, so the adaptive
attacker queries it as a black box, plus what the evaluation needs and an attacker never gets
(:meth:`Release.true_transform`).

``ironcore-alloy`` is AGPL: an optional benchmark extra (``pip install -e .[benchmarks]``), never a
runtime dependency; without it its rows record why they did not run.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from textcrafter_rag.keyed import KeyedRotation, Whitening
from textcrafter_rag.mechanisms import GaussianNoise, Mechanism
from textcrafter_rag.sealing import SecretKey
from textcrafter_rag.textcrafter import TextCrafter

try:  # optional, AGPL: benchmark extra only
    import ironcore_alloy as alloy
except ImportError:  # pragma: no cover - depends on the environment
    alloy = None

__all__ = ["DcpeShuffle", "IronCoreDcpe", "Release", "benchmark_key", "build_releases", "ironcore_status"]

#: Approximation factors of the DCPE rows (IronCore's default range; the issue's measurements).
DCPE_FACTORS = (1.0, 2.5)


def benchmark_key(seed: int) -> SecretKey:
    """A fixed, public key for the benchmark (a real deployment uses ``textcrafter keygen``)."""
    return SecretKey(hashlib.sha256(f"textcrafter-threat-models-{seed}".encode()).digest())


def ironcore_status() -> str | None:
    """``None`` when ``ironcore-alloy`` can be used, else why not (recorded in the rows)."""
    if alloy is None:
        return "ironcore-alloy is not installed (optional AGPL extra: pip install -e .[benchmarks])"
    return None


class DcpeShuffle:
    """``s * x[:, perm] + noise`` with noise uniform in the ball of radius ``s * af / 4`` (DCPE, scale-and-perturb).

    The permutation is derived from the key (HKDF subkey ``"dcpe-shuffle"``), the noise from ``seed``.
    """

    def __init__(self, key: SecretKey, *, tenant: str, dim: int, af: float, scale: float = 1.0, seed: int = 0) -> None:
        sub = key.subkey("dcpe-shuffle", context=tenant)
        self.af, self.scale = float(af), float(scale)
        self._perm = np.random.default_rng(int.from_bytes(sub, "little")).permutation(dim)
        self._noise = np.random.default_rng(seed)
        self._tag = hashlib.sha256(sub).hexdigest()[:12]

    def permutation(self) -> np.ndarray:
        """The secret permutation (``released[:, j] = s * x[:, perm[j]] + noise``)."""
        return self._perm.copy()

    def encrypt(self, x: np.ndarray) -> np.ndarray:
        n, d = x.shape
        direction = self._noise.standard_normal((n, d))
        direction /= np.linalg.norm(direction, axis=1, keepdims=True)
        radius = self.scale * self.af / 4.0 * self._noise.random((n, 1)) ** (1.0 / d)
        return (self.scale * x[:, self._perm] + radius * direction).astype(np.float32)

    def spec(self) -> str:
        return f"dcpe-shuffle:af={self.af:g}:s={self.scale:g}:key={self._tag}"


class IronCoreDcpe:
    """IronCore Cloaked AI (``ironcore-alloy`` Standalone SDK) encrypting vectors with one vector secret."""

    def __init__(self, key: SecretKey, *, tenant: str, dim: int, af: float) -> None:
        if alloy is None:
            raise RuntimeError(ironcore_status())
        raw = key.subkey("ironcore", context=tenant)
        secret = alloy.RotatableSecret(alloy.StandaloneSecret(1, alloy.Secret(raw)), None)
        config = alloy.StandaloneConfiguration(
            alloy.StandardSecrets(None, []), {}, {"store": alloy.VectorSecret(af, secret)}
        )
        self._sdk = alloy.Standalone(config)
        self._meta = alloy.AlloyMetadata.new_simple(tenant or "tenant")
        self.af, self._dim = float(af), dim
        self._tag = hashlib.sha256(raw).hexdigest()[:12]
        basis = self.encrypt(1000.0 * np.eye(dim, dtype=np.float32))  # noise radius s*af/4 << s*1000
        # row i = s * 1000 * e_i[perm] + noise, so column j peaks at the row i = perm[j]
        self._perm = np.argmax(np.abs(basis), axis=0)
        self.scale = float(np.median(np.abs(basis).max(axis=1)) / 1000.0)

    def permutation(self) -> np.ndarray:
        """The permutation the key induces, read off by encrypting (scaled) basis vectors (the owner can)."""
        return self._perm.copy()

    def encrypt(self, x: np.ndarray) -> np.ndarray:
        """Encrypt the rows of ``x`` with the SDK's batch call (fresh noise per row), in chunks."""
        vec = self._sdk.vector()

        async def run(rows: np.ndarray) -> Any:
            items = {
                str(i): alloy.PlaintextVector(
                    plaintext_vector=[float(v) for v in row], secret_path="store", derivation_path="docs"
                )
                for i, row in enumerate(rows)
            }
            return await vec.encrypt_batch(items, self._meta)

        out = []
        for start in range(0, len(x), 1024):
            res = asyncio.run(run(x[start : start + 1024]))
            if res.failures:
                raise RuntimeError(
                    f"ironcore-alloy refused {len(res.failures)} vectors: {next(iter(res.failures.values()))}"
                )
            out += [res.successes[str(i)].encrypted_vector for i in range(len(res.successes))]
        return np.asarray(out, dtype=np.float32)

    def spec(self) -> str:
        return f"ironcore-dcpe:af={self.af:g}:key={self._tag}"


@dataclass(frozen=True)
class Release:
    """One row of the matrix: ``mech`` noise, then ``whitening``, then ``rotation`` (or a DCPE ``shuffle``).

    Attributes:
        label: The row's name in the tables.
        family: ``none``, ``noise``, ``rotation`` or ``permutation`` (which key attack applies).
        mech: The noise mechanism (``None``: no noise).
        rotation: The secret rotation (:class:`~textcrafter_rag.keyed.KeyedRotation`).
        whitening: The owner's whitening, fitted on its own calibration data (not secret: the attacker gets it).
        shuffle: A DCPE construction (:class:`DcpeShuffle` or :class:`IronCoreDcpe`).
        unavailable: Why this row cannot run here (its cells then say so).
    """

    label: str
    family: str
    mech: Mechanism | None = None
    rotation: KeyedRotation | None = None
    whitening: Whitening | None = None
    shuffle: Any = None
    unavailable: str | None = None

    @property
    def keyed(self) -> bool:
        return self.family in ("rotation", "permutation")

    @property
    def policy(self) -> Any:
        """The noise mechanism's policy network (part of the adaptive attacker's cache key)."""
        return getattr(self.mech, "policy", None)

    def protect(self, x: Any) -> np.ndarray:
        """A document release (fresh noise on every call)."""
        y = np.asarray(x, dtype=np.float32)
        y = self.mech.protect(y) if self.mech is not None else y
        return self._keyed(y)

    def query(self, x: Any) -> np.ndarray:
        """A query with the key only (no noise mechanism): what a keyed deployment sends by default."""
        return self._keyed(np.asarray(x, dtype=np.float32))

    def _keyed(self, y: np.ndarray) -> np.ndarray:
        if self.whitening is not None:
            y = self.whitening.apply(y)
        if self.rotation is not None:
            y = self.rotation.apply(y)
        if self.shuffle is not None:
            y = self.shuffle.encrypt(y)
        return np.asarray(y, dtype=np.float32)

    def spec(self) -> str:
        parts = [self.label, self.mech.spec() if self.mech is not None else "no-noise"]
        if self.whitening is not None:
            state = self.whitening.state()
            parts.append("whiten:" + hashlib.sha256(state["matrix"].tobytes()).hexdigest()[:12])
        if self.rotation is not None:
            parts.append(f"rotation:{self.rotation.fingerprint}")
        if self.shuffle is not None:
            parts.append(self.shuffle.spec())
        return "|".join(parts)

    def true_transform(self) -> np.ndarray:
        """The secret, in :mod:`textcrafter_rag.attacks.keys`' convention (evaluation only)."""
        if self.rotation is not None:
            return self.rotation.matrix()
        if self.shuffle is not None:
            return self.shuffle.permutation()
        raise ValueError(f"{self.label} has no key")

    def attacker_pre(self, x: np.ndarray) -> np.ndarray:
        """What the attacker applies to its own clean embeddings before matching (the non-secret whitening)."""
        return self.whitening.apply(x) if self.whitening is not None else x

    def attacker_post(self, z: np.ndarray) -> np.ndarray:
        """From the un-keyed estimate back to the encoder's space (undo the non-secret whitening)."""
        return self.whitening.invert(z) if self.whitening is not None else z

    def with_whitening(self, calibration: np.ndarray) -> Release:
        """This release with its whitening fitted on ``calibration`` (the owner's own embeddings)."""
        return replace(self, whitening=Whitening.fit(calibration)) if self.whitening is not None else self


def build_releases(*, dim: int, seed: int, calibration: np.ndarray) -> list[Release]:
    """The matrix's rows, in table order; ``calibration`` fits the whitening row (re-fit per context)."""
    key = benchmark_key(seed)
    tc = TextCrafter.load_shipped(seed=seed)
    rows = [
        Release("none", "none"),
        Release(
            f"Gaussian (norm {tc.expected_norm(dim):.2f})",
            "noise",
            mech=GaussianNoise.at_norm(tc.expected_norm(dim), dim=dim, seed=seed),
        ),
        Release(f"TextCrafter eps {tc.eps:g}", "noise", mech=tc),
        Release("key (rotation)", "rotation", rotation=KeyedRotation(key, tenant="key", dim=dim)),
        Release(
            f"key + TextCrafter eps {tc.eps:g}",
            "rotation",
            mech=TextCrafter.load_shipped(seed=seed),
            rotation=KeyedRotation(key, tenant="key+tc", dim=dim),
        ),
        Release(
            "key + whitening",
            "rotation",
            rotation=KeyedRotation(key, tenant="key+whiten", dim=dim),
            whitening=Whitening.fit(calibration),
        ),
    ]
    for af in DCPE_FACTORS:
        label = f"IronCore DCPE af {af:g}"
        why = ironcore_status()
        if why is None:
            try:
                rows.append(Release(label, "permutation", shuffle=IronCoreDcpe(key, tenant=label, dim=dim, af=af)))
                continue
            except Exception as exc:  # any SDK failure becomes the row's reason
                why = f"ironcore-alloy failed: {type(exc).__name__}: {exc}"
        rows.append(Release(label, "permutation", unavailable=why))
    for af in DCPE_FACTORS:
        label = f"shuffle + noise af {af:g}"
        rows.append(Release(label, "permutation", shuffle=DcpeShuffle(key, tenant=label, dim=dim, af=af, seed=seed)))
    return rows
