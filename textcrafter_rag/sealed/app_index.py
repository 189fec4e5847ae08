"""The app-side index file: the application ranks, the store holds nothing rankable, the index is a local file.

The store holds the sealed records under keyed random unit vectors (no relation to the text); the application
keeps a compressed index of the clean vectors, scans it for the ``open_k`` best records, fetches those by id and
ranks them exactly. Below ``train_at`` records the index is exact; from there it keeps ``code_bytes`` bytes of
product-quantization code a record (k-means per sub-vector, asymmetric scan; the exact re-rank means the codes
only have to put the true top ``k`` among the first ``open_k``). It is persisted sealed (AES-256-GCM under its
own subkey, bound to the tenant and format) to a local file, one writer at a time (:class:`IndexFile`,
:class:`IndexConflictError`). The store-held index (:mod:`textcrafter_rag.sealed`) keeps it in the store instead,
which every process shares: the default.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import struct
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import InvalidInputError, InvalidTypeError, TextcrafterError
from ..numerics import unit_rows
from ..sealing import NotPicklable, SealError, SecretKey
from ..validation import check_int

__all__ = [
    "DEFAULT_CODE_BYTES",
    "DEFAULT_OPEN_K",
    "DEFAULT_TRAIN_AT",
    "AppIndex",
    "AppIndexSearch",
    "IndexConflictError",
    "IndexFile",
    "ProductQuantizer",
    "SingleProcessIndexWarning",
]

#: Records opened and ranked exactly per query (the measured default: 1.000 of clean NDCG@10 at 1,000,000).
DEFAULT_OPEN_K = 100
#: Bytes of product-quantization code per record once a codebook is trained.
DEFAULT_CODE_BYTES = 48
#: Records held exactly before a codebook is trained (k-means needs a few dozen points per centroid).
DEFAULT_TRAIN_AT = 20_000
_CENTROIDS = 256
_TRAIN_SAMPLE = 32_768
_KMEANS_ITERS = 16
_SCAN_CHUNK = 262_144
_FORMAT = b"TCIDX1"
_NONCE = 12


class SingleProcessIndexWarning(UserWarning):
    """The app-side index file serves one process: the store-held index (the default) is what holds across them."""


class IndexConflictError(TextcrafterError, RuntimeError):
    """The index file was written by another process since this one loaded it (one writer at a time)."""


@dataclass(frozen=True)
class AppIndexSearch:
    """The options of app-side index search, validated once here.

    Args:
        open_k: Records fetched by id, opened and ranked exactly per query; must be at least the ``k``
            of every search.
        code_bytes: Bytes of code per record once the codebook is trained (memory per record is this
            plus the record id).
        train_at: Records kept exactly before the codebook is trained on them.
        index_path: A local file the sealed index is loaded from and saved to after every write, so a
            new process searches at once. ``None``: the index lives in this process only.
        autosave: Save the file after every add and delete (the default). Each save writes the whole
            index, so a bulk load of many small batches into a large store should pass ``False`` and call
            ``save_index()`` once at the end.
    """

    open_k: int = DEFAULT_OPEN_K
    code_bytes: int = DEFAULT_CODE_BYTES
    train_at: int = DEFAULT_TRAIN_AT
    index_path: str | os.PathLike[str] | None = None
    autosave: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "open_k", check_int(self.open_k, name="open_k", low=1, high=100_000))
        object.__setattr__(self, "code_bytes", check_int(self.code_bytes, name="code_bytes", low=1, high=4096))
        object.__setattr__(self, "train_at", check_int(self.train_at, name="train_at", low=_CENTROIDS, high=1 << 40))
        if self.index_path is not None and not isinstance(self.index_path, (str, os.PathLike)):
            raise InvalidTypeError(f"index_path must be a path or None, got {type(self.index_path).__name__}")
        if not isinstance(self.autosave, bool):
            raise InvalidTypeError(f"autosave must be a bool, got {type(self.autosave).__name__}")
        warnings.warn(
            "AppIndexSearch keeps the sealed index in one process's file: a second writer process, a crash with "
            "autosave off, a process without the file that writes first, or an older copy of the file put back "
            "leaves records in the store that no search finds. StoreIndexSearch (the default) keeps the index in "
            "the store and holds under each of these",
            SingleProcessIndexWarning,
            stacklevel=3,
        )


class ProductQuantizer:
    """Product quantization of unit vectors: ``m`` sub-vectors, 256 centroids each (k-means, numpy).

    Deterministic: the same training vectors always give the same codebook (a fixed seed for the
    initial centroids and the training sample; the codebook is sealed with the index, never published).
    """

    def __init__(self, centroids: np.ndarray) -> None:
        c = np.asarray(centroids, dtype=np.float32)
        if c.ndim != 3 or c.shape[1] != _CENTROIDS:
            raise InvalidInputError(f"centroids must have shape (m, {_CENTROIDS}, dsub), got {c.shape}")
        self.centroids = np.ascontiguousarray(c)
        self._norms = np.einsum("mkd,mkd->mk", c, c)

    @property
    def m(self) -> int:
        """Sub-vectors (bytes of code per vector)."""
        return self.centroids.shape[0]

    @property
    def dim(self) -> int:
        """The padded dimension ``m * dsub``."""
        return self.centroids.shape[0] * self.centroids.shape[2]

    @staticmethod
    def split(x: np.ndarray, m: int) -> np.ndarray:
        """``x`` zero-padded to a multiple of ``m`` columns, as ``(m, n, dsub)``."""
        n, d = x.shape
        dsub = math.ceil(d / m)
        padded = np.zeros((n, m * dsub), dtype=np.float32)
        padded[:, :d] = x
        return np.ascontiguousarray(padded.reshape(n, m, dsub).transpose(1, 0, 2))

    @classmethod
    def fit(cls, x: np.ndarray, *, m: int, seed: int = 0) -> ProductQuantizer:
        """k-means (``_KMEANS_ITERS`` Lloyd steps) per sub-vector on up to ``_TRAIN_SAMPLE`` rows of ``x``."""
        rng = np.random.default_rng(seed)
        if len(x) > _TRAIN_SAMPLE:
            x = x[np.sort(rng.choice(len(x), _TRAIN_SAMPLE, replace=False))]
        if len(x) < _CENTROIDS:
            raise InvalidInputError(f"a codebook needs at least {_CENTROIDS} vectors, got {len(x)}")
        subs = cls.split(np.asarray(x, dtype=np.float32), m)
        centroids = np.empty((m, _CENTROIDS, subs.shape[2]), dtype=np.float32)
        for j, sub in enumerate(subs):
            c = sub[rng.choice(len(sub), _CENTROIDS, replace=False)].copy()
            for _ in range(_KMEANS_ITERS):
                assign = np.argmin(np.einsum("kd,kd->k", c, c)[None, :] - 2.0 * (sub @ c.T), axis=1)
                counts = np.bincount(assign, minlength=_CENTROIDS)
                sums = np.zeros_like(c)
                np.add.at(sums, assign, sub)
                empty = counts == 0
                c[~empty] = sums[~empty] / counts[~empty, None]
                if empty.any():  # restart an empty centroid on a random point (deterministic: seeded)
                    c[empty] = sub[rng.choice(len(sub), int(empty.sum()), replace=False)]
            centroids[j] = c
        return cls(centroids)

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Codes of shape ``(n, m)`` (uint8, one byte per sub-vector; FAISS's ``IndexPQ`` layout)."""
        subs = self.split(np.asarray(x, dtype=np.float32), self.m)
        codes = np.empty((subs.shape[1], self.m), dtype=np.uint8)
        for j, sub in enumerate(subs):
            codes[:, j] = np.argmin(self._norms[j][None, :] - 2.0 * (sub @ self.centroids[j].T), axis=1)
        return codes

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """Approximate vectors ``(n, m * dsub)`` of ``(n, m)`` codes."""
        return np.concatenate([self.centroids[j][codes[:, j]] for j in range(self.m)], axis=1)

    def scores(self, query: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """Inner products of ``query`` with every coded vector (asymmetric: the query is exact), in numpy."""
        q = self.split(np.asarray(query, dtype=np.float32).reshape(1, -1), self.m)[:, 0, :]
        lut = np.einsum("mkd,md->mk", self.centroids, q).astype(np.float32)
        out = np.empty(len(codes), dtype=np.float32)
        for start in range(0, len(codes), _SCAN_CHUNK):
            block = np.ascontiguousarray(codes[start : start + _SCAN_CHUNK].T)
            acc = lut[0].take(block[0])
            for j in range(1, self.m):
                acc += lut[j].take(block[j])
            out[start : start + len(acc)] = acc
        return out

    def faiss_index(self, codes: np.ndarray) -> Any:
        """The same codebook and codes as a FAISS ``IndexPQ`` (inner product), or ``None`` without FAISS.

        FAISS only scans faster (its SIMD lookup tables): its scores are the same asymmetric inner products
        as :meth:`scores` (``tests/test_app_index.py`` compares the two paths' rankings).
        """
        try:
            import faiss
        except ImportError:
            return None
        index = faiss.IndexPQ(self.dim, self.m, 8, faiss.METRIC_INNER_PRODUCT)
        faiss.copy_array_to_vector(self.centroids.ravel(), index.pq.centroids)
        index.is_trained = True
        faiss.copy_array_to_vector(np.ascontiguousarray(codes).ravel(), index.codes)
        index.ntotal = len(codes)
        return index


class AppIndex:
    """Record ids and their clean directions, compressed, for the application's first-stage scan.

    Args:
        dim: The encoder's dimension.
        search: The options (``code_bytes``, ``train_at``).

    ``add`` upserts (an id added again replaces its vector), ``remove`` forgets ids, ``search``
    returns the ids of the best ``k`` by (approximate) cosine.
    """

    def __init__(self, dim: int, *, search: AppIndexSearch) -> None:
        self.dim = check_int(dim, name="dim", low=1, high=1 << 16)
        self.search_options = search
        self._ids: list[str] = []
        self._pos: dict[str, int] = {}
        self._exact = np.empty((0, self.dim), dtype=np.float32)
        self._pq: ProductQuantizer | None = None
        self._codes = np.empty((0, 0), dtype=np.uint8)
        self._scan: Any = None  # FAISS's view of the codes, rebuilt after a write (None: stale or no FAISS)

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def trained(self) -> bool:
        """Whether the index holds codes (a codebook was trained) rather than exact directions."""
        return self._pq is not None

    @property
    def bytes_per_record(self) -> int:
        """The vector payload per record in memory (codes, or float32 directions before training)."""
        return self._pq.m if self._pq is not None else 4 * self.dim

    def ids(self) -> list[str]:
        """Every record id in the index (in insertion order, compacted by removals)."""
        return list(self._ids)

    def _check(self, vectors: Any, n: int) -> np.ndarray:
        x = np.asarray(vectors, dtype=np.float32)
        if x.ndim != 2 or x.shape != (n, self.dim):
            raise InvalidInputError(f"expected {n} vectors of dimension {self.dim}, got shape {x.shape}")
        return unit_rows(x.astype(np.float64)).astype(np.float32)

    def add(self, ids: Sequence[str], vectors: Any) -> None:
        """Add (or replace) the records ``ids`` with their clean vectors."""
        ids = [str(i) for i in ids]
        x = self._check(vectors, len(ids))
        last = {rid: i for i, rid in enumerate(ids)}  # a batch naming one id twice keeps its last vector
        replaced = [rid for rid in last if rid in self._pos]
        if replaced:
            self.remove(replaced)
        keep = sorted(last.values())
        ids, x = [ids[i] for i in keep], x[keep]
        for rid in ids:
            self._pos[rid] = len(self._ids)
            self._ids.append(rid)
        if self._pq is None:
            self._exact = np.concatenate([self._exact, x])
            if len(self._ids) >= self.search_options.train_at:
                self._train()
        else:
            self._codes = np.concatenate([self._codes, self._pq.encode(x)])
        self._scan = None

    def _train(self) -> None:
        exact = self._exact
        self._pq = ProductQuantizer.fit(exact, m=self.search_options.code_bytes)
        self._codes = self._pq.encode(exact)
        self._exact = np.empty((0, self.dim), dtype=np.float32)

    def remove(self, ids: Sequence[str]) -> int:
        """Forget these ids (unknown ones are ignored); returns how many were removed."""
        drop = sorted({self._pos[str(i)] for i in ids if str(i) in self._pos})
        if not drop:
            return 0
        keep = np.ones(len(self._ids), dtype=bool)
        keep[drop] = False
        self._ids = [rid for rid, k in zip(self._ids, keep) if k]
        self._pos = {rid: i for i, rid in enumerate(self._ids)}
        if self._pq is None:
            self._exact = self._exact[keep]
        else:
            self._codes = np.ascontiguousarray(self._codes[keep])
        self._scan = None
        return len(drop)

    def search(self, query: Any, k: int) -> list[str]:
        """The ids of the ``k`` records of highest (approximate) cosine with ``query``, best first."""
        if not self._ids:
            return []
        q = self._check(np.asarray(query, dtype=np.float32).reshape(1, -1), 1)[0]
        k = min(int(k), len(self._ids))
        if self._pq is not None:
            if self._scan is None:
                self._scan = self._pq.faiss_index(self._codes) or False
            if self._scan is not False:
                _, found = self._scan.search(self._pq.split(q[None, :], 1)[0], k)
                return [self._ids[i] for i in found[0] if i >= 0]
            scores = self._pq.scores(q, self._codes)
        else:
            scores = self._exact @ q
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [self._ids[i] for i in top]

    # -- persistence (a documented binary layout, never pickle) -----------------------------------

    def to_bytes(self) -> bytes:
        """The index as bytes: a JSON header, then the arrays it names (little-endian)."""
        arrays: list[tuple[str, np.ndarray]] = []
        if self._pq is None:
            arrays.append(("exact", self._exact.astype("<f2")))
        else:
            arrays += [("centroids", self._pq.centroids.astype("<f4")), ("codes", self._codes)]
        header = {
            "dim": self.dim,
            "ids": self._ids,
            "options": {"code_bytes": self.search_options.code_bytes, "train_at": self.search_options.train_at},
            "arrays": [[name, a.dtype.str, list(a.shape)] for name, a in arrays],
        }
        head = json.dumps(header, separators=(",", ":")).encode("utf-8")
        return struct.pack("<Q", len(head)) + head + b"".join(np.ascontiguousarray(a).tobytes() for _, a in arrays)

    @classmethod
    def from_bytes(cls, data: bytes, *, search: AppIndexSearch) -> AppIndex:
        """Read :meth:`to_bytes`.

        Raises:
            SealError: The bytes are not an index of this layout.
        """
        try:
            (n_head,) = struct.unpack_from("<Q", data, 0)
            header = json.loads(data[8 : 8 + n_head].decode("utf-8"))
            index = cls(int(header["dim"]), search=search)
            offset = 8 + n_head
            arrays = {}
            for name, dtype, shape in header["arrays"]:
                size = int(np.prod(shape)) * np.dtype(dtype).itemsize
                arrays[name] = np.frombuffer(data, dtype=dtype, count=int(np.prod(shape)), offset=offset).reshape(shape)
                offset += size
            if offset != len(data):
                raise SealError("the index opened but has trailing bytes")
            ids = [str(i) for i in header["ids"]]
            index._ids, index._pos = ids, {rid: i for i, rid in enumerate(ids)}
            if "exact" in arrays:
                index._exact = arrays["exact"].astype(np.float32)
            else:
                index._pq = ProductQuantizer(arrays["centroids"])
                index._codes = np.ascontiguousarray(arrays["codes"])
            n_rows = len(index._exact) if index._pq is None else len(index._codes)
            if n_rows != len(ids) or len(index._pos) != len(ids):
                raise SealError("the index opened but its ids and vectors differ in number")
        except (KeyError, TypeError, ValueError, struct.error, UnicodeDecodeError, json.JSONDecodeError):
            raise SealError("the index opened but is not an index of this format") from None
        return index


class IndexFile(NotPicklable):
    """The sealed index in a local file, one writer at a time.

    The file is ``TCIDX1``, a 12-byte nonce, then AES-256-GCM of (generation, :meth:`AppIndex.to_bytes`)
    under the key's ``"app-index"`` subkey for this tenant, with the format and tenant as associated data:
    an index of another key or tenant, or an edited one, is refused, never used. Each save writes a
    generation one higher than the one loaded; a save that finds a higher generation on disk (another
    writer saved since) raises :class:`IndexConflictError`. Writes go to a temporary file renamed into
    place, so a reader never sees half a file.

    Args:
        path: The file.
        key: The store's key.
        context: The tenant, as given to the sealed store.
    """

    __slots__ = ("_aad", "_aead", "_generation", "path")

    def __init__(self, path: str | os.PathLike[str], *, key: SecretKey, context: str = "") -> None:
        self.path = Path(path)
        self._aead = AESGCM(SecretKey(key).subkey("app-index", context=context))
        self._aad = _FORMAT + b"\x00" + context.encode("utf-8")
        self._generation = 0

    def _read(self) -> tuple[int, bytes] | None:
        try:
            blob = self.path.read_bytes()
        except FileNotFoundError:
            return None
        if not blob.startswith(_FORMAT) or len(blob) < len(_FORMAT) + _NONCE + 16:
            raise SealError(f"{self.path.name} is not a sealed index file")
        nonce = blob[len(_FORMAT) : len(_FORMAT) + _NONCE]
        try:
            plain = self._aead.decrypt(nonce, blob[len(_FORMAT) + _NONCE :], self._aad)
        except InvalidTag:
            raise SealError(
                f"{self.path.name} does not open: another key or tenant, or edited; it is not used"
            ) from None
        (generation,) = struct.unpack_from("<Q", plain, 0)
        return generation, plain[8:]

    def load(self, *, search: AppIndexSearch) -> AppIndex | None:
        """The index in the file (``None`` if there is none yet); remembers its generation for :meth:`save`.

        Raises:
            SealError: The file is not an index sealed under this key and tenant.
        """
        read = self._read()
        if read is None:
            self._generation = 0
            return None
        self._generation, data = read
        return AppIndex.from_bytes(data, search=search)

    def save(self, index: AppIndex) -> None:
        """Seal and write ``index`` (atomically).

        Raises:
            IndexConflictError: Another process saved the file since this one loaded or saved it.
        """
        on_disk = self._read()
        if on_disk is not None and on_disk[0] != self._generation:
            raise IndexConflictError(
                f"{self.path.name} was written by another process since this one loaded it (generation "
                f"{on_disk[0]}, expected {self._generation}): one writer at a time; reopen the store to continue"
            )
        generation = self._generation + 1
        nonce = secrets.token_bytes(_NONCE)
        sealed = self._aead.encrypt(nonce, struct.pack("<Q", generation) + index.to_bytes(), self._aad)
        tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}.tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            tmp.write_bytes(_FORMAT + nonce + sealed)
            os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)
        self._generation = generation

    def __repr__(self) -> str:
        return f"IndexFile(path={str(self.path)!r}, key=<redacted>)"
