"""Keyed rotation: a per-tenant secret orthogonal transform applied to releases and queries.

Noise alone pays for protection in retrieval quality. A secret orthogonal matrix ``Q`` costs nothing
in retrieval (``<Qx, Qy> = <x, y>`` and ``||Qx - Qy|| = ||x - y||`` exactly) and moves a stored vector
out of the encoder's basis, so an inverter trained on clean embeddings no longer applies to it
unless the attacker first recovers ``Q`` (:mod:`textcrafter_rag.attacks.keys` measures how well that
works). Documents are rotated after the noise mechanism, queries are rotated too.

How ``Q`` is made (algorithm ``haar-qr-aes256ctr-v1``; changing any step changes every tenant's
matrix, so each step is pinned by a test):

1. ``subkey = SecretKey(key).subkey("rotate", context=tenant)`` (HKDF-SHA256; sealing uses the
   ``"seal"`` subkey of the same secret, so the two never share key material).
2. A byte stream from AES-256-CTR under ``subkey``; the 16-byte initial counter block is ``D`` as
   8 big-endian bytes followed by 8 zero bytes, so each dimension gets its own stream. AES-CTR rather
   than numpy's ``Generator``: it is a CSPRNG, and its output is fixed by the AES standard, whereas
   NEP 19 lets numpy change ``Generator.standard_normal`` between releases, which would silently
   change every tenant's matrix and orphan every stored vector.
3. Little-endian 64-bit words -> 53-bit uniforms ``(k + 0.5) / 2**53`` in (0, 1) -> standard normals
   by Box-Muller (``r cos t`` then ``r sin t`` per pair) -> a ``D x D`` matrix ``G``, row-major.
4. ``G = QR`` (LAPACK Householder), then ``Q <- Q diag(sign(diag R))`` (Mezzadri 2007): the QR
   factorisation with a positive diagonal is unique, so ``Q`` is Haar-distributed and does not depend
   on the LAPACK's own sign convention.

Reproducibility caveat: ``Q`` is unique in exact arithmetic, not bitwise guaranteed across machines,
since ``log``/``cos`` (SIMD kernels) and QR (LAPACK build, threads) may round differently. Measured
(x86-64, D = 384 and 768): numpy's and scipy's LAPACK and 1 or 2 BLAS threads gave bitwise-equal
``Q``; torch's QR differed by <= 4e-15 with the same float32 matrix; numpy's ``log``/``cos``/``sin``
matched the C library bit for bit on 20,000 normals. A last-bit difference in the float32 matrix
moves a release by ~1e-7 relative, which no retrieval can see; tests pin values to 1e-12.

Matrices are cached per (subkey, D) in-process (thread-safe LRU, 256 MiB), so constructing a
:class:`KeyedRotation` per call is cheap (building one took 0.08 s at D=384, 3 s at D=1536 on one core).
Keys and subkeys never appear in reprs or errors.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from .errors import InvalidInputError, InvalidTypeError
from .sealing import KeyHolder, SecretKey
from .validation import check_released, check_vectors

__all__ = [
    "ALGORITHM",
    "MAX_DIM",
    "KeyArg",
    "KeyedRotation",
    "TenantKey",
    "Whitening",
    "clear_rotation_cache",
    "haar_from_subkey",
]

#: Name of the construction above; stored beside keyed data so a future change is detected.
ALGORITHM = "haar-qr-aes256ctr-v1"
#: Largest supported dimension (a 8192 x 8192 float64 matrix is 512 MiB).
MAX_DIM = 8192
_CACHE_BYTES = 256 << 20  # ~140 tenants at D=384; always at least the newest matrix
_CHUNK_WORDS = 1 << 20  # uniforms drawn per AES call (8 MiB), so memory stays ~2x the matrix
_CACHE: OrderedDict[tuple[bytes, int], tuple[np.ndarray, np.ndarray]] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_BUILD_LOCKS: dict[tuple[bytes, int], threading.Lock] = {}

#: What a ``key=`` argument accepts: the ``textcrafter keygen`` string, its 32 bytes, or a :class:`SecretKey`.
KeyArg = bytes | str | SecretKey


def _check_dim(dim: Any) -> int:
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
        raise InvalidTypeError(f"dim must be an int, got {type(dim).__name__}")
    if not 1 <= int(dim) <= MAX_DIM:
        raise InvalidInputError(f"dim must be between 1 and {MAX_DIM}, got {int(dim)}")
    return int(dim)


def keyed_normals(subkey: bytes, dim: int, n: int) -> np.ndarray:
    """``n`` standard normals (float64) from AES-256-CTR under ``subkey``, by Box-Muller."""
    n_words = 2 * ((n + 1) // 2)
    nonce = dim.to_bytes(8, "big") + bytes(8)
    encryptor = Cipher(algorithms.AES(subkey), modes.CTR(nonce)).encryptor()
    out = np.empty(n_words, dtype=np.float64)
    for start in range(0, n_words, _CHUNK_WORDS):
        m = min(_CHUNK_WORDS, n_words - start)
        words = np.frombuffer(encryptor.update(bytes(8 * m)), dtype="<u8") >> np.uint64(11)
        u = (words.astype(np.float64) + 0.5) * 2.0**-53
        r = np.sqrt(-2.0 * np.log(u[0::2]))
        t = 2.0 * np.pi * u[1::2]
        out[start : start + m : 2] = r * np.cos(t)
        out[start + 1 : start + m : 2] = r * np.sin(t)
    return out[:n]


def haar_from_subkey(subkey: bytes, dim: int) -> np.ndarray:
    """The Haar-distributed orthogonal ``dim x dim`` matrix (float64) of steps 2-4 above, uncached.

    Args:
        subkey: 32 secret bytes (the ``"rotate"`` subkey of a :class:`SecretKey`).
        dim: The dimension ``D``.
    """
    if not isinstance(subkey, bytes) or len(subkey) != 32:
        raise InvalidInputError("subkey must be 32 bytes")
    dim = _check_dim(dim)
    g = keyed_normals(subkey, dim, dim * dim).reshape(dim, dim)
    q, r = np.linalg.qr(g)
    signs = np.sign(np.diag(r))
    signs[signs == 0] = 1.0  # probability zero for a Gaussian matrix; keeps Q orthogonal regardless
    return np.ascontiguousarray(q * signs[None, :])


def _cached_matrices(subkey: bytes, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """``(Q float64, Q float32)``, read-only, built once per (subkey, dim) even under concurrent calls."""
    tag = (hashlib.sha256(subkey).digest(), dim)
    with _CACHE_LOCK:
        hit = _CACHE.get(tag)
        if hit is not None:
            _CACHE.move_to_end(tag)
            return hit
        build_lock = _BUILD_LOCKS.setdefault(tag, threading.Lock())
    with build_lock:  # one builder per tag; others wait here and then find it in the cache
        with _CACHE_LOCK:
            hit = _CACHE.get(tag)
            if hit is not None:
                return hit
        q64 = haar_from_subkey(subkey, dim)
        q32 = q64.astype(np.float32)
        q64.setflags(write=False)
        q32.setflags(write=False)
        with _CACHE_LOCK:
            _CACHE[tag] = (q64, q32)
            while len(_CACHE) > 1 and sum(a.nbytes + b.nbytes for a, b in _CACHE.values()) > _CACHE_BYTES:
                _CACHE.popitem(last=False)
            _BUILD_LOCKS.pop(tag, None)
    return q64, q32


def clear_rotation_cache() -> None:
    """Drop every cached matrix (tests, or to release memory after a tenant is done)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def _fingerprint(secret: SecretKey, tenant: str) -> str:
    # A one-way, independent subkey: safe to store (config, logs, reports) to detect a wrong key early.
    return secret.subkey("rotate-fingerprint", context=tenant)[:8].hex()


class KeyedRotation(KeyHolder):
    """The secret rotation ``x -> Q x`` of one tenant under one key, for ``D``-dimensional vectors.

    Args:
        key: The secret ``textcrafter keygen`` prints (a :class:`SecretKey`, 32 bytes, or their
            URL-safe base64 string).
        tenant: The tenant (or collection) id mixed into the subkey: each tenant gets an
            independent matrix from one secret. ``""`` is the single-tenant default.
        dim: The embedding dimension ``D``.

    Raises:
        InvalidKeyError: The key is malformed (the message never contains it).
        TypeError, ValueError: ``tenant`` is not a string or ``dim`` is not an int in ``[1, MAX_DIM]``.

    Instances are immutable and cheap (the matrix is cached per process). They refuse to be
    pickled, and ``__getstate__`` refuses too (its default would return the matrix), like
    :class:`SecretKey`: pass the key to each process (Ray actor) explicitly. Copies are the object itself.
    """

    __slots__ = ("_dim", "_fingerprint", "_q32", "_q64", "_tenant")

    def __init__(self, key: bytes | str | SecretKey, *, tenant: str = "", dim: int) -> None:
        if not isinstance(tenant, str):
            raise InvalidTypeError(f"tenant must be a str, got {type(tenant).__name__}")
        self._dim = _check_dim(dim)
        self._tenant = tenant
        secret = SecretKey(key)
        self._q64, self._q32 = _cached_matrices(secret.subkey("rotate", context=tenant), self._dim)
        self._fingerprint = _fingerprint(secret, tenant)

    @property
    def dim(self) -> int:
        """The dimension ``D`` this rotation applies to."""
        return self._dim

    @property
    def tenant(self) -> str:
        """The tenant id (not secret)."""
        return self._tenant

    @property
    def fingerprint(self) -> str:
        """16 hex characters identifying (key, tenant); not secret, reveals nothing about ``Q``."""
        return self._fingerprint

    def matrix(self) -> np.ndarray:
        """A float64 copy of ``Q`` (as secret as the key: for evaluating attacks, never for storage)."""
        return self._q64.copy()

    def apply(self, x: Any, *, name: str = "embeddings") -> np.ndarray:
        """Rotate a batch: ``x @ Q.T`` (float32 in and out; the input is validated, never modified).

        All-zero rows are accepted (a rotation maps them to zero), so a whole stored matrix can
        always be moved; the protection entry points reject them before they get here.
        """
        x = check_vectors(x, dim=self._dim, name=name, allow_zero_rows=True)
        with np.errstate(over="ignore", invalid="ignore"):  # a row near float32's limit: refused, named, below
            out = x @ self._q32.T
        return check_released(out, shape=x.shape, by="the keyed rotation", name=name)

    def invert(self, y: Any, *, name: str = "stored vectors") -> np.ndarray:
        """Undo :meth:`apply`: ``y @ Q`` (only the key holder can)."""
        y = check_vectors(y, dim=self._dim, name=name, allow_zero_rows=True)
        with np.errstate(over="ignore", invalid="ignore"):
            out = y @ self._q32
        return check_released(out, shape=y.shape, by="the keyed rotation", name=name)

    def rekey_matrix(self, other: KeyedRotation) -> np.ndarray:
        """The float32 ``M = Q_self Q_other^T``, so ``y @ M == other.apply(self.invert(y))``.

        Computed in float64, so moving a store costs one float32 rounding, not two.
        """
        if not isinstance(other, KeyedRotation):
            raise InvalidTypeError(f"other must be a KeyedRotation, got {type(other).__name__}")
        if other.dim != self._dim:
            raise InvalidInputError(f"cannot rekey: this rotation is {self._dim}-d, the other {other.dim}-d")
        return (self._q64 @ other._q64.T).astype(np.float32)

    def rekey(self, y: Any, other: KeyedRotation, *, name: str = "stored vectors") -> np.ndarray:
        """Move vectors stored under this rotation to ``other`` in one matrix product, without the clean vectors.

        For a big store call it chunk by chunk with a matrix from :meth:`rekey_matrix` computed once,
        or simply call this per chunk (the ``D x D`` product is small next to a chunk).
        """
        m = self.rekey_matrix(other)
        y = check_vectors(y, dim=self._dim, name=name, allow_zero_rows=True)
        with np.errstate(over="ignore", invalid="ignore"):
            out = y @ m
        return check_released(out, shape=y.shape, by="the rekeying", name=name)

    def __repr__(self) -> str:
        return f"KeyedRotation(tenant={self._tenant!r}, dim={self._dim}, key=<redacted>)"


@dataclass(frozen=True, eq=False)
class TenantKey:
    """A secret key and the tenant it serves: the two keyed-protection options as one value.

    Entry points that take many options already (:func:`~textcrafter_rag.streaming.protect_file`,
    :func:`~textcrafter_rag.streaming.rekey_file`) take this instead of ``key=`` and ``tenant=``.

    Attributes:
        key: The secret (anything :class:`SecretKey` accepts; stored as a :class:`SecretKey`,
            left out of the repr). Instances compare by identity, never by key.
        tenant: The tenant id (not secret); ``""`` is the single-tenant default.
    """

    key: SecretKey = field(repr=False)
    tenant: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", SecretKey(self.key))
        if not isinstance(self.tenant, str):
            raise InvalidTypeError(f"tenant must be a str, got {type(self.tenant).__name__}")

    @classmethod
    def of(cls, key: KeyArg | TenantKey, *, tenant: str = "") -> TenantKey:
        """``key`` itself if it is a :class:`TenantKey`, else ``TenantKey(key, tenant)``.

        Raises:
            ValueError: ``key`` is a :class:`TenantKey` of another tenant than a non-empty ``tenant``.
        """
        if isinstance(key, TenantKey):
            if tenant and tenant != key.tenant:
                raise InvalidInputError(f"tenant={tenant!r} contradicts the TenantKey's tenant {key.tenant!r}")
            return key
        return cls(key, tenant)  # type: ignore[arg-type]

    @property
    def fingerprint(self) -> str:
        """The :attr:`KeyedRotation.fingerprint` of this key and tenant (any dimension): safe to store."""
        return _fingerprint(self.key, self.tenant)

    def rotation(self, dim: int) -> KeyedRotation:
        """The :class:`KeyedRotation` of this key and tenant for ``dim``-dimensional vectors."""
        return KeyedRotation(self.key, tenant=self.tenant, dim=dim)


class Whitening:
    """A fixed affine map ``x -> (x - mean) @ W`` that makes calibration embeddings (nearly) isotropic.

    Why: a rotation preserves the covariance's eigenvalues, so an attacker can line up the stored
    vectors' principal axes with those of its own embeddings (:func:`~textcrafter_rag.attacks.keys.align_rotation`).
    Whitening before rotating leaves identity covariance and removes that handle (higher moments
    remain). It is not free: inner products become ``(x - m)^T (C + s I)^-1 (y - m)``, so retrieval
    changes and must be measured. ``W = (C + shrinkage * mean(eig C) * I)^(-1/2)`` (symmetric, ZCA);
    shrinkage keeps the tiny-variance directions, mostly noise, from being blown up.

    Not secret (it comes from calibration data) but it must be the same for documents and queries,
    so store :meth:`state` beside the index. Construct with :meth:`fit` or :meth:`from_state`.
    """

    __slots__ = ("_inverse", "_mean", "_w")

    def __init__(self, mean: np.ndarray, matrix: np.ndarray) -> None:
        mean = np.asarray(mean, dtype=np.float64)
        matrix = np.asarray(matrix, dtype=np.float64)
        d = mean.shape[0] if mean.ndim == 1 else -1
        if mean.ndim != 1 or matrix.shape != (d, d) or not (np.isfinite(mean).all() and np.isfinite(matrix).all()):
            raise InvalidInputError("a whitening needs a finite mean (D,) and a finite matrix (D, D)")
        self._mean, self._w = mean, matrix
        self._inverse = np.linalg.inv(matrix)  # raises LinAlgError for a singular matrix

    @classmethod
    def fit(cls, calibration: Any, *, shrinkage: float = 0.1) -> Whitening:
        """Estimate mean and ``W`` from calibration embeddings ``(n, D)`` (``n`` well above ``D``)."""
        x = check_vectors(calibration, name="calibration embeddings").astype(np.float64)
        if not (np.isfinite(shrinkage) and shrinkage >= 0):
            raise InvalidInputError("shrinkage must be a finite number >= 0")
        if x.shape[0] < 2:
            raise InvalidInputError("whitening needs at least 2 calibration embeddings")
        vals, vecs = np.linalg.eigh(np.cov(x, rowvar=False))
        vals = np.maximum(vals, 0.0) + float(shrinkage) * max(float(vals.mean()), 1e-12)
        if vals.min() <= 0:
            raise InvalidInputError("the calibration covariance is singular: use shrinkage > 0 or more embeddings")
        return cls(x.mean(axis=0), (vecs / np.sqrt(vals)) @ vecs.T)

    @property
    def dim(self) -> int:
        """The dimension ``D``."""
        return int(self._mean.shape[0])

    def apply(self, x: Any, *, name: str = "embeddings") -> np.ndarray:
        """``(x - mean) @ W`` as float32 (``W`` is symmetric)."""
        x = check_vectors(x, dim=self.dim, name=name, allow_zero_rows=True).astype(np.float64)
        return ((x - self._mean) @ self._w).astype(np.float32)

    def invert(self, y: Any, *, name: str = "whitened vectors") -> np.ndarray:
        """Undo :meth:`apply`."""
        y = check_vectors(y, dim=self.dim, name=name, allow_zero_rows=True).astype(np.float64)
        return (y @ self._inverse + self._mean).astype(np.float32)

    def state(self) -> dict[str, np.ndarray]:
        """``{"mean", "matrix"}`` as float64 arrays, e.g. for safetensors."""
        return {"mean": self._mean.copy(), "matrix": self._w.copy()}

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> Whitening:
        """Rebuild from :meth:`state`."""
        return cls(state["mean"], state["matrix"])

    def __repr__(self) -> str:
        return f"Whitening(dim={self.dim})"
