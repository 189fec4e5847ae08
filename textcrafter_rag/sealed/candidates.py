"""Two-stage sealed search: the store finds candidates with heavy noise, the application ranks them exactly.

One vector cannot serve both the ranking and the secrecy: the store ranks with the same information
an inverter reads, so every single-stage mechanism that keeps 0.9 of clean retrieval leaks most of
what a clean vector leaks (``benchmarks/results/frontier_parity.md``). A sealed store already keeps
an encrypted payload beside each vector, so it can split the two jobs:

1. **add** — the store receives a *candidate vector* ``y = x + r u`` rescaled to ``||x||`` (``u`` a
   unit direction, ``r = doc_strength``), far noisier than a single-stage release; the clean vector
   ``x``, compact (int8 with one scale: 748 base64 characters sealed at 384-d, the same NDCG@10 as
   float16 in ``benchmarks/results/two_stage.md``), is sealed into the payload like the text, bound to
   the record id;
2. **search** — the store receives a protected query vector (``query_strength``; the clean query
   never leaves the process) and returns ``open_k`` candidates; the application opens their sealed
   vectors and ranks them by exact cosine with the clean query.

Rescaling to ``||x||`` makes L2, inner-product and cosine stores rank candidates alike.

Noise directions come from a keyed PRF (AES-256-CTR under an HKDF subkey, as the keyed rotation in
:mod:`textcrafter_rag.keyed`) of (tenant, record id, text): re-adding the same record gives the store
the *same* candidate vector, never a fresh draw it could average with the first. A query direction
comes from the query text (or the query vector's bytes), so a repeated query is sent identically.
Without the key nothing can be predicted: no direction is derived from public data alone.

Framework-free; both adapters' sealed stores use :class:`TwoStage`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..deprecation import warn_renamed
from ..errors import InvalidInputError, InvalidTypeError, NotPicklableError
from ..keyed import KeyedRotation, keyed_normals
from ..numerics import row_norms, unit_rows
from ..sealing import KeyHolder, Sealer, SealError, SecretKey
from ..validation import check_store_vectors
from .records import canonical_record_id

__all__ = [
    "DEFAULT_DOC_STRENGTH",
    "DEFAULT_FETCH_K",
    "DEFAULT_QUERY_STRENGTH",
    "DEFAULT_SEARCH",
    "NOISE_ALGORITHM",
    "VECTOR_FIELD",
    "VECTOR_KEY",
    "TwoStage",
    "TwoStageSearch",
    "noise_to_norm",
    "pack_vector",
    "random_directions",
    "rerank",
    "unpack_vector",
]

# The defaults come from ``benchmarks/results/two_stage.md`` (SciFact, 5,183 records): the strongest
# document noise on its grid that keeps >= 0.95 of clean NDCG@10 at open_k 200 with the query noised
# too (62.0 of 64.97). Larger stores need a larger open_k (the same file's scale tables).
#: Candidates fetched per query (the added cost per query grows linearly with it).
DEFAULT_FETCH_K = 200
#: Norm of the noise added to a unit document vector before it reaches the store.
DEFAULT_DOC_STRENGTH = 2.0
#: Norm of the noise added to a unit query vector before it reaches the store.
DEFAULT_QUERY_STRENGTH = 0.5
#: The metadata key under which a record's sealed clean vector is stored.
VECTOR_KEY = "_tc_vec"
#: The field name the clean vector is sealed under (bound as associated data with the record id).
VECTOR_FIELD = "vector"
#: How a clean vector is packed before it is sealed: the prefix of each format.
_PACKS = {"int8": "i8:", "float16": "f16:"}
_MAX_FETCH_K = 100_000
#: Separates a sealed vector's packing from its noise seed (base64 never contains it).
_SEED_MARK = ";n="
#: Prefix of the rotation's tenant: the candidate rotation never equals a keyed ProtectedEmbeddings' one.
_ROTATION_TENANT = "\x00two-stage\x00"


@dataclass(frozen=True, init=False)
class TwoStageSearch:
    """The options of two-stage search, validated once here.

    Args:
        open_k: The most records one query reads: candidates the store returns, which the application opens
            and ranks (the name every mode's options use). Must be at least the ``k`` of every search.
            Without ``recall`` it has to grow with the store's size; with it, it is the cap of the rounds.
        doc_strength: Norm ``r`` of the noise on each (unit) document vector the store receives.
        query_strength: Norm of the noise on each query vector the store receives (0 sends the clean query).
        recall: Search in rounds until each record of the exact top ``k`` is found with at least this
            probability, by the rule of :mod:`textcrafter_rag.sealed.rounds`; reaching ``open_k`` first is
            counted and warned. ``None``: one round of ``open_k`` records.
        fetch_k: The deprecated name of ``open_k`` (warns).
    """

    open_k: int = DEFAULT_FETCH_K
    doc_strength: float = DEFAULT_DOC_STRENGTH
    query_strength: float = DEFAULT_QUERY_STRENGTH
    recall: float | None = None

    def __init__(
        self,
        open_k: int | None = None,
        doc_strength: float = DEFAULT_DOC_STRENGTH,
        query_strength: float = DEFAULT_QUERY_STRENGTH,
        recall: float | None = None,
        *,
        fetch_k: int | None = None,
    ) -> None:
        if fetch_k is not None:
            warn_renamed("TwoStageSearch(fetch_k=...)", "TwoStageSearch(open_k=...)")
            if open_k is not None:
                raise InvalidInputError("give either open_k= or its deprecated name fetch_k=, not both")
            open_k = fetch_k
        object.__setattr__(self, "open_k", DEFAULT_FETCH_K if open_k is None else open_k)
        object.__setattr__(self, "doc_strength", doc_strength)
        object.__setattr__(self, "query_strength", query_strength)
        object.__setattr__(self, "recall", recall)
        self._check()

    def _check(self) -> None:
        if self.recall is not None:
            if isinstance(self.recall, bool) or not isinstance(self.recall, (int, float, np.floating)):
                raise InvalidInputError(
                    f"recall must be a number in (0.5, 1) or None, got {type(self.recall).__name__}"
                )
            if not 0.5 < float(self.recall) < 1.0:
                raise InvalidInputError("recall must be in (0.5, 1): 1 would mean fetching every record")
            object.__setattr__(self, "recall", float(self.recall))
        if isinstance(self.open_k, bool) or not isinstance(self.open_k, (int, np.integer)):
            raise InvalidInputError(f"open_k must be an int, got {type(self.open_k).__name__}")
        if not 1 <= int(self.open_k) <= _MAX_FETCH_K:
            raise InvalidInputError(f"open_k must be between 1 and {_MAX_FETCH_K}, got {int(self.open_k)}")
        for name in ("doc_strength", "query_strength"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
                raise InvalidInputError(f"{name} must be a finite number >= 0, got {type(value).__name__}")
            if not (math.isfinite(value) and value >= 0):
                raise InvalidInputError(f"{name} must be a finite number >= 0")
        object.__setattr__(self, "open_k", int(self.open_k))
        object.__setattr__(self, "doc_strength", float(self.doc_strength))
        object.__setattr__(self, "query_strength", float(self.query_strength))

    @property
    def fetch_k(self) -> int:
        """The deprecated name of :attr:`open_k` (warns)."""
        warn_renamed("TwoStageSearch.fetch_k", "TwoStageSearch.open_k", stacklevel=3)
        return self.open_k

    @classmethod
    def of(cls, value: int | TwoStageSearch | None) -> TwoStageSearch | None:
        """``None`` (single-stage), an ``open_k`` with the default strengths, or the options themselves."""
        if value is None or isinstance(value, TwoStageSearch):
            return value
        return cls(open_k=value)


#: LangChain's default candidate search: rounds until the expected recall of the exact top ``k`` reaches 0.95,
#: at most 2,000 records (on SciFact it keeps all of clean NDCG@10 reading a median 800; past about 20,000
#: records most searches reach the cap and are warned and counted: ``benchmarks/results/sealed_search.md``).
DEFAULT_SEARCH = TwoStageSearch(open_k=2000, recall=0.95)


def random_directions(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` uniformly random unit directions in ``dim`` dimensions (experiments; the stores use keyed ones)."""
    return unit_rows(rng.standard_normal((n, dim)))


def noise_to_norm(clean: np.ndarray, directions: np.ndarray, strength: float) -> np.ndarray:
    """``x + strength * ||x|| * u`` for unit rows ``u``, rescaled to ``||x||`` (float32).

    ``strength`` is relative to the vector's norm, so it is the absolute noise norm for unit
    vectors (MiniLM, OpenAI) and means the same for encoders that do not normalise.
    """
    x = np.asarray(clean, dtype=np.float64)
    norms = row_norms(x)[:, None]
    y = x + float(strength) * norms * unit_rows(directions)
    return (unit_rows(y) * norms).astype(np.float32)


def pack_vector(vector: np.ndarray, *, dtype: str = "int8") -> str:
    """A vector as compact text for sealing into a payload (URL-safe base64 after a format prefix).

    ``"int8"`` (the default): one little-endian float32 scale (max-abs / 127), then one signed byte per
    component; ``"float16"``: little-endian half floats. Both re-rank alike (``two_stage.md``).
    """
    v = np.asarray(vector, dtype=np.float32).reshape(-1)
    if dtype == "int8":
        peak = float(np.abs(v).max()) if v.size else 0.0
        scale = np.float32(peak / 127.0 if peak > 0 else 1.0)
        raw = np.asarray([scale], dtype="<f4").tobytes() + np.round(v / scale).astype(np.int8).tobytes()
    elif dtype == "float16":
        raw = v.astype("<f2").tobytes()
    else:
        raise InvalidInputError(f"dtype must be one of {sorted(_PACKS)}, got {dtype!r}")
    return _PACKS[dtype] + base64.urlsafe_b64encode(raw).decode("ascii")


def unpack_vector(text: Any) -> np.ndarray:
    """The float32 vector of :func:`pack_vector` (either format).

    Raises:
        SealError: ``text`` is not a packed vector (the message never contains it).
    """
    bad = SealError("a sealed vector opened to something that is not a packed vector")
    dtype = next((d for d, prefix in _PACKS.items() if isinstance(text, str) and text.startswith(prefix)), None)
    if dtype is None:
        raise bad
    try:
        raw = base64.urlsafe_b64decode(text[len(_PACKS[dtype]) :])
    except (binascii.Error, ValueError):
        raise bad from None
    if dtype == "int8":
        if len(raw) < 5:
            raise bad
        return np.frombuffer(raw[4:], dtype=np.int8).astype(np.float32) * np.frombuffer(raw[:4], dtype="<f4")[0]
    if not raw or len(raw) % 2:
        raise bad
    return np.frombuffer(raw, dtype="<f2").astype(np.float32)


def rerank(query: np.ndarray, candidates: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the ``k`` candidates of highest cosine with ``query``, best first, and those cosines."""
    q = unit_rows(np.asarray(query, dtype=np.float64).reshape(1, -1))[0]
    scores = unit_rows(np.asarray(candidates, dtype=np.float64)) @ q
    order = np.argsort(-scores, kind="stable")[: max(0, int(k))]
    return order, scores[order]


#: Quantization step of the unit clean vector the noise is keyed by, relative to a typical component
#: (``1 / sqrt(D)``): coarse enough that the same vector (the same text re-added, a trailing space, a case
#: variant, a rekeyed copy) always gets the same noise, fine enough that distinct texts never share one.
_NOISE_GRID = 0.25
#: The version of the construction below; bound into every subkey so a change never reuses a draw.
NOISE_ALGORITHM = "two-stage-noise-v2"


def _vector_field(record_text: str | None) -> str:
    """The sealed vector's field name: bound to a digest of the record's sealed text when there is one."""
    if record_text is None:
        return VECTOR_FIELD
    return f"{VECTOR_FIELD}:{hashlib.sha256(record_text.encode('utf-8')).hexdigest()[:32]}"


def _noise_item(unit: np.ndarray) -> bytes:
    """What a vector's noise is keyed by: its unit direction, quantized (``_NOISE_GRID``), as bytes."""
    step = _NOISE_GRID / math.sqrt(unit.shape[-1])
    return np.round(np.asarray(unit, dtype=np.float64) / step).astype("<i4").tobytes()


class TwoStage(KeyHolder):  # refuses pickling and __getstate__ (the key); copies are itself
    """Candidate vectors (rotated, noised, unit) and sealed clean vectors for one key and tenant.

    What the store receives for a clean vector ``x`` is ``Q unit(unit(x) + r u)``:

    * ``u`` is a unit direction from a keyed PRF (AES-256-CTR under an HKDF subkey) of ``unit(x)``
      quantized, so every way one vector can reach the store again (the text re-added without ids, under
      new ids, with a trailing space, rekeyed with :meth:`copy_to <langchain_textcrafter.SealedVectorStore>`,
      or the same query in another tenant) releases the *same* candidate: ``n`` copies are worth one.
      The subkey depends on the key only, not on the tenant, so tenants that share a key share draws;
    * ``Q`` is the tenant's secret Haar rotation (:mod:`textcrafter_rag.keyed`, its own subkey): without
      the key, a guess embedded with the public encoder cannot be compared with a candidate;
    * the result is a unit vector: the clean norm (which follows text length for some encoders) never
      reaches the store.

    The clean vector is sealed as its unit direction (int8, one scale), bound to the record id.

    Args:
        key: The store's secret (``textcrafter keygen``), also used for sealing; noise and rotation have
            their own HKDF subkeys, so nothing shares key material.
        context: The tenant or collection name, as given to the sealed store.
        search: The options (open_k and the two strengths).

    Instances hold key material and refuse to be pickled.
    """

    __slots__ = ("_context", "_noise_key", "_sealer", "_search", "_secret")

    def __init__(self, key: bytes | str | SecretKey, *, context: str = "", search: TwoStageSearch) -> None:
        if not isinstance(search, TwoStageSearch):
            raise InvalidTypeError(f"search must be a TwoStageSearch, got {type(search).__name__}")
        secret = SecretKey(key)
        self._secret = secret
        self._context = context
        self._noise_key = secret.subkey(NOISE_ALGORITHM)
        self._sealer = Sealer(secret, context=context)
        self._search = search

    @property
    def search(self) -> TwoStageSearch:
        """The options."""
        return self._search

    def rotation(self, dim: int) -> KeyedRotation:
        """The tenant's secret rotation of the candidate and query vectors (cached per process)."""
        return KeyedRotation(self._secret, tenant=_ROTATION_TENANT + self._context, dim=dim)

    def _seed(self, label: bytes, unit_row: np.ndarray) -> bytes:
        """The keyed seed of one vector's noise direction (a PRF of its quantized unit direction)."""
        return hmac.new(self._noise_key, label + b"\x00" + _noise_item(unit_row), hashlib.sha256).digest()

    def noised(self, unit: np.ndarray, seeds: Sequence[bytes | None], strength: float) -> np.ndarray:
        """``unit(x + strength * u)`` per row, ``u`` the direction of its seed; NaN rows where the seed is ``None``.

        Before the rotation, which keeps inner products: what the application needs to know the score the
        store gave a record it opened (:mod:`textcrafter_rag.sealed.rounds`).
        """
        x = np.asarray(unit, dtype=np.float64)
        known = np.array([seed is not None for seed in seeds], dtype=bool)
        directions = np.zeros_like(x)
        for i, seed in enumerate(seeds):
            if seed is not None:
                directions[i] = keyed_normals(seed, x.shape[1], x.shape[1])
        out = np.full_like(x, np.nan)
        if known.any():  # row by row the same arithmetic as every earlier release: the same vector, the same draw
            out[known] = unit_rows(x[known] + strength * unit_rows(directions[known]))
        return out

    def _units(
        self, label: bytes, clean: np.ndarray, strength: float, seeds: Sequence[bytes | None] | None = None
    ) -> np.ndarray:
        """What the store receives for these rows, before the rotation: the unit rows, noised by their seeds.

        A row whose given seed is ``None`` (or every row, without ``seeds``) is noised by its own vector's seed.
        """
        unit = unit_rows(np.asarray(clean, dtype=np.float64))
        if strength <= 0:
            return unit
        given = list(seeds) if seeds is not None else [None] * len(unit)
        return self.noised(
            unit, [s if s is not None else self._seed(label, row) for s, row in zip(given, unit, strict=True)], strength
        )

    def _release(
        self, label: bytes, clean: np.ndarray, strength: float, name: str, seeds: Sequence[bytes | None] | None = None
    ) -> np.ndarray:
        unit = self._units(label, clean, strength, seeds)
        return self.rotation(unit.shape[1]).apply(unit.astype(np.float32), name=name)

    def query_unit(self, clean: np.ndarray) -> np.ndarray:
        """The unit query the store receives for ``clean`` (one row), before the rotation."""
        return self._units(b"query", np.asarray(clean).reshape(1, -1), self._search.query_strength)[0]

    def protect_documents(
        self, clean: Any, *, name: str = "document vectors", seeds: Sequence[bytes | None] | None = None
    ) -> np.ndarray:
        """The candidate vectors the store receives for these clean vectors (the same vector: the same release).

        ``seeds`` (one per row, ``None`` for a row to use its own): the noise seeds opened with the vectors
        (:meth:`open_vector_and_seed`). A copy of an opened record is noised by the seed its first release
        was, not by one of its int8-rounded vector, which would be a second, independent draw of the noise.

        Raises:
            InvalidTypeError, InvalidInputError, ProtectionError: see :func:`check_store_vectors`.
        """
        x = check_store_vectors(clean, name=name)
        if seeds is not None and len(seeds) != len(x):
            raise InvalidInputError(f"got {len(seeds)} noise seeds for {len(x)} vectors")
        return self._release(b"document", x, self._search.doc_strength, name, seeds)

    def protect_query(self, clean: Any, *, name: str = "query vector") -> np.ndarray:
        """The query vector the store receives (one row); the same vector is always sent the same way."""
        x = check_store_vectors(np.asarray(clean).reshape(1, -1) if not isinstance(clean, str) else clean, name=name)
        return self._release(b"query", x, self._search.query_strength, name)

    def seal_vector(
        self, clean: np.ndarray, *, record_id: Any, record_text: str | None = None, seed: bytes | None = None
    ) -> str:
        """The clean vector's direction, packed and sealed, bound to ``record_id`` (stored under :data:`VECTOR_KEY`).

        With ``record_text`` (the record's sealed text as the store holds it) the vector is also bound to
        that text: a new text spliced beside an old ``_tc_vec`` (or the reverse) does not open. ``seed``: the
        noise seed the record's candidate was drawn with, when it was carried from an opened record
        (:meth:`protect_documents`' ``seeds``); by default the seed of ``clean`` itself.
        """
        unit = unit_rows(np.asarray(clean, dtype=np.float64).reshape(1, -1))[0]
        field = _vector_field(record_text)
        packed = pack_vector(unit)
        if seed is not None and (not isinstance(seed, bytes) or len(seed) != 32):
            raise InvalidInputError("a noise seed is 32 bytes")
        if self._search.doc_strength > 0:  # the noise seed, sealed: the app can tell the store's score of the record
            seed = seed if seed is not None else self._seed(b"document", unit)
            packed += _SEED_MARK + base64.urlsafe_b64encode(seed).decode("ascii")
        return self._sealer.seal(packed, record_id=canonical_record_id(record_id), field=field)

    def open_vector(self, token: Any, *, record_id: Any, record_text: str | None = None) -> np.ndarray:
        """The clean vector sealed in ``token`` for ``record_id`` (and the record's sealed text, if bound to it).

        A vector sealed before texts were bound (no text in its binding) still opens; one bound to
        another text does not.

        Raises:
            SealError: Missing, not sealed, or not under this key, tenant, record id and text.
        """
        return self.open_vector_and_seed(token, record_id=record_id, record_text=record_text)[0]

    def open_vector_and_seed(
        self, token: Any, *, record_id: Any, record_text: str | None = None
    ) -> tuple[np.ndarray, bytes | None]:
        """:meth:`open_vector`, and the seed of the record's candidate noise (``None`` for records sealed without it).

        Raises:
            SealError: as :meth:`open_vector`.
        """
        packed, _, seed = self._open_packed(token, record_id=record_id, record_text=record_text).partition(_SEED_MARK)
        if not seed:
            return unpack_vector(packed), None
        try:
            raw = base64.urlsafe_b64decode(seed)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != 32:
            raise SealError("a sealed vector carries a malformed noise seed")
        return unpack_vector(packed), raw

    def _open_packed(self, token: Any, *, record_id: Any, record_text: str | None) -> str:
        rid = canonical_record_id(record_id)
        if token is None:
            raise SealError(
                f"record {rid!r} has no sealed vector ({VECTOR_KEY!r}): it was added without sealed search "
                "(open such a store with search=None)"
            )
        token = token if isinstance(token, str) else ""
        if record_text is not None:
            try:
                return str(self._sealer.open(token, record_id=rid, field=_vector_field(record_text)))
            except SealError:
                pass  # sealed before vectors were bound to their text (or spliced: refused just below)
        return str(self._sealer.open(token, record_id=rid, field=VECTOR_FIELD))

    def __repr__(self) -> str:
        return f"TwoStage(search={self._search!r}, key=<redacted>)"

    def __reduce__(self) -> Any:
        raise NotPicklableError(
            "a TwoStage holds key material and is not picklable: build it from the key in each process"
        )
