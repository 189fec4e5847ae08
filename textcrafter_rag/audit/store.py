"""Read a sample of a vector store (``.npy``, ``.parquet``, ``.jsonl``) and the texts of its first rows.

The files are read by :mod:`textcrafter_rag.vectorfiles` (the same layer ``textcrafter protect``
streams with), which materialises only the sampled rows: ``.npy`` stores are memory-mapped,
Parquet stores are read one row group (and only the needed columns) at a time, and JSONL stores
are streamed line by line, parsing only the sampled lines. Every problem with the input raises
:class:`AuditInputError` (a :class:`~textcrafter_rag.errors.VectorFileError`, so a ``ValueError``
and the CLI exits with code 2) with a message that names the file and the problem, never the
vector values or texts.

The sample also says whether the store keeps the plaintext beside the vectors
(:attr:`StoreSample.plaintext_columns`): protecting the vectors is moot when a ``text`` column
or a ``metadata.page_content`` field hands the documents to whoever reads the store.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import vectorfiles
from ..errors import VectorFileError
from ..sealed.candidates import VECTOR_KEY
from ..sealed.core import MARKER_KEY, MODE_KEY
from ..sealed.records import ID_FIELD, IDS_KEY, USER_ID_FIELD
from ..sealing import Sealer

__all__ = [
    "AuditInputError",
    "StoreSample",
    "is_natural_language",
    "load_sample",
    "plaintext_columns",
    "read_store_vectors",
    "sealed_vector_fields",
    "sealed_search_fields",
    "read_texts",
    "sample_indices",
    "store_rows",
]

FORMATS = vectorfiles.FORMATS


#: Id fields a store or the sealed store keeps plain on purpose (not reported as left in clear).
_ID_LEAVES = frozenset({"id", "_id", "pk", "doc_id", "ref_doc_id", "document_id", "node_id"})


class AuditInputError(VectorFileError):
    """Bad audit input: a missing or unreadable file, a wrong shape, or texts that do not match the store."""


@dataclass
class StoreSample:
    """The sampled rows of a store.

    Attributes:
        vectors: ``(n, D)`` float32 vectors, in store order.
        indices: Their row numbers in the store (sorted).
        texts: The texts of those rows, or ``None`` without a texts file.
        n_store: Rows in the store.
        n_texts: Rows in the texts file (0 without one).
        plaintext_columns: Columns (``.parquet``) or fields (``.jsonl``) beside the vectors that hold
            natural-language text on the sampled rows, nested ones as ``metadata.page_content``
            (see :func:`plaintext_columns`); empty for ``.npy`` stores and in-memory arrays.
        sealed_vector_fields: Fields holding a two-stage store's sealed clean vectors (``metadata._tc_vec``):
            the stored vectors are then candidate vectors (see :mod:`textcrafter_rag.sealed.candidates`).
        search_modes: The sealed-search modes the rows name (``"candidates"``, ``"index"``), if any.
        clear_fields: Fields beside the vectors holding unsealed strings (what a thief reads without a key).
        record_ids: How a sealed store's rows are identified: ``"keyed"`` (keyed UUIDs, the user's ids only
            sealed inside), ``"clear"`` (the user's own ids, written with ``record_ids="clear"`` or by a release
            before ids were keyed), ``"mixed"``, or ``None`` (no sealed-store rows).
    """

    vectors: np.ndarray
    indices: np.ndarray
    texts: list[str] | None
    n_store: int
    n_texts: int
    plaintext_columns: tuple[str, ...] = ()
    sealed_vector_fields: tuple[str, ...] = ()
    search_modes: tuple[str, ...] = ()
    clear_fields: tuple[str, ...] = ()
    record_ids: str | None = None


def _check_file(path: str | os.PathLike[str], what: str) -> None:
    with vectorfiles.raising(AuditInputError):
        vectorfiles.check_file(path, role=what)


@vectorfiles.raising(AuditInputError)
def store_rows(path: str | os.PathLike[str], *, column: str = "embedding") -> int:
    """Number of rows in a store (reads no vectors; ``.jsonl`` lines are counted, not parsed)."""
    _check_file(path, "store")
    return vectorfiles.count_rows(path, column=column)


def _sample_rows(
    path: str | os.PathLike[str], indices: np.ndarray, *, column: str, with_columns: bool, progress: bool
) -> vectorfiles.Rows:
    """The store rows ``indices`` with the audit's checks: float vectors, no NaN or Inf, as float32."""
    idx = np.asarray(indices, dtype=np.int64)
    with vectorfiles.raising(AuditInputError):
        rows = vectorfiles.read_rows(path, idx, column=column, with_columns=with_columns, progress=progress)
    out = rows.vectors
    if out.ndim != 2 or out.dtype.kind != "f":
        raise AuditInputError(f"store {path} does not hold float vectors (got dtype {out.dtype}, shape {out.shape})")
    if not np.isfinite(out).all():
        bad = int(np.flatnonzero(~np.isfinite(out).all(axis=1))[0])
        raise AuditInputError(f"store {path} has NaN or Inf in sampled row {int(idx[bad])}")
    rows.vectors = np.ascontiguousarray(out, dtype=np.float32)
    return rows


def read_store_vectors(
    path: str | os.PathLike[str], indices: np.ndarray, *, column: str = "embedding", progress: bool = True
) -> np.ndarray:
    """The store rows ``indices`` (sorted, unique) as a float32 ``(len(indices), D)`` array."""
    return _sample_rows(path, indices, column=column, with_columns=False, progress=progress).vectors


@vectorfiles.raising(AuditInputError)
def read_texts(path: str | os.PathLike[str], *, field: str = "text") -> list[str]:
    """The ``field`` of every line of a JSONL file (a bare JSON string per line also works)."""
    _check_file(path, "texts file")
    if Path(path).suffix.lower() != ".jsonl":
        raise AuditInputError(f"texts file {path} must be .jsonl with a {field!r} field per line")
    texts = vectorfiles.read_texts(path, field=field)
    if not texts:
        raise AuditInputError(f"texts file {path} is empty")
    return texts


def sample_indices(n_rows: int, n: int, *, seed: int = 0) -> np.ndarray:
    """``min(n, n_rows)`` sorted row numbers drawn without replacement (all rows when ``n >= n_rows``)."""
    if n <= 0:
        raise AuditInputError(f"the sample size must be positive, got {n}")
    if n >= n_rows:
        return np.arange(n_rows)
    return np.sort(np.random.default_rng(seed).choice(n_rows, size=n, replace=False))


def load_sample(
    vectors: str | os.PathLike[str],
    *,
    texts: str | os.PathLike[str] | None = None,
    column: str = "embedding",
    n: int = 200,
    seed: int = 0,
    progress: bool = True,
) -> StoreSample:
    """Sample ``n`` rows of a store; with ``texts`` (aligned with the store's first rows) only from those rows.

    The other columns of the sampled rows are checked for plaintext (:func:`plaintext_columns`).
    """
    n_store = store_rows(vectors, column=column)
    if n_store == 0:
        raise AuditInputError(f"store {vectors} has no rows")
    all_texts = read_texts(texts) if texts is not None else None
    if all_texts is not None and len(all_texts) > n_store:
        raise AuditInputError(
            f"texts file {texts} has {len(all_texts)} rows but the store only {n_store}; "
            "row i of the texts must belong to row i of the store"
        )
    pool = len(all_texts) if all_texts is not None else n_store
    idx = sample_indices(pool, n, seed=seed)
    rows = _sample_rows(vectors, idx, column=column, with_columns=True, progress=progress)
    if rows.vectors.shape[0] != len(idx):
        raise AuditInputError(f"read {rows.vectors.shape[0]} rows from {vectors}, expected {len(idx)}")
    sample_texts = [all_texts[i] for i in idx] if all_texts is not None else None
    return StoreSample(
        vectors=rows.vectors,
        indices=idx,
        texts=sample_texts,
        n_store=n_store,
        n_texts=len(all_texts) if all_texts is not None else 0,
        plaintext_columns=plaintext_columns(rows.columns),
        sealed_vector_fields=sealed_vector_fields(rows.columns),
        search_modes=sealed_search_fields(rows.columns)[0],
        clear_fields=sealed_search_fields(rows.columns)[1],
        record_ids=record_id_scheme(rows.columns),
    )


# ------------------------------------------------------------------ plaintext beside the vectors
#: A word: letters (any script), with inner apostrophes or hyphens ("don't", "well-known").
_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")
_PUNCT = "\"'“”‘’«»()[]{}<>.,;:!?…*_"
MIN_WORDS = 4  # "Business news" or "John Smith" is a label; four words and up read as prose
MIN_WORD_SHARE = 0.6  # of the whitespace-separated tokens: keeps out id lists, hashes, numbers
MIN_ROW_SHARE = 0.5  # of a column's sampled strings that must read as prose
_MAX_DEPTH, _MAX_ITEMS, _MAX_CHARS = 4, 20, 4000


def is_natural_language(value: str) -> bool:
    """Whether a string reads as prose: at least four words, most of its tokens words.

    Ids, hashes, URLs, file paths, numbers, dates and short labels fail: they have no spaces or
    too few alphabetic words. Scripts written without spaces (Chinese, Japanese) are not recognised.
    """
    tokens = value[:_MAX_CHARS].split()
    if len(tokens) < MIN_WORDS:
        return False
    words = sum(1 for t in tokens if _WORD.fullmatch(t.strip(_PUNCT)))
    return words >= MIN_WORDS and words >= MIN_WORD_SHARE * len(tokens)


def _strings(value: Any, name: str, depth: int = 0) -> Iterator[tuple[str, str]]:
    """``(field path, string)`` for every string in a value, looking into dicts, lists and JSON strings."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(value, list) and value and all(isinstance(i, tuple) and len(i) == 2 for i in value):
        value = {str(k): v for k, v in value}  # pyarrow gives a map value as a list of (key, value) pairs
    if isinstance(value, str):
        s = value.strip()
        if len(s) >= 2 and (s[0], s[-1]) in (("{", "}"), ("[", "]")):  # a JSON document stored as a string
            try:
                yield from _strings(json.loads(s), name, depth + 1)
                return
            except ValueError:
                pass
        yield name, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{name}.{key}", depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value[:_MAX_ITEMS]:
            yield from _strings(item, name, depth + 1)


def plaintext_columns(columns: dict[str, list[Any]]) -> tuple[str, ...]:
    """The columns, or nested fields, whose sampled strings are mostly natural language.

    Args:
        columns: Column (or field) name to its values on the sampled rows, as
            :func:`textcrafter_rag.vectorfiles.read_rows` returns them with ``with_columns``.

    Returns:
        Names in store order; nested fields as ``metadata.page_content``. A path is flagged when
        at least half of its non-empty sampled strings pass :func:`is_natural_language`.
    """
    seen: dict[str, list[int]] = {}  # path -> [strings, prose strings]
    for name, values in columns.items():
        for value in values:
            for path, s in _strings(value, name):
                if s.strip():
                    counts = seen.setdefault(path, [0, 0])
                    counts[0] += 1
                    counts[1] += is_natural_language(s)
    return tuple(path for path, (total, prose) in seen.items() if prose >= MIN_ROW_SHARE * total)


def sealed_vector_fields(columns: dict[str, list[Any]]) -> tuple[str, ...]:
    """The fields named like a two-stage store's sealed clean vector (``..._tc_vec``) that hold sealed values."""
    found: dict[str, None] = {}
    for name, values in columns.items():
        for value in values:
            for path, s in _strings(value, name):
                if path.split(".")[-1] == VECTOR_KEY and Sealer.is_sealed(s):
                    found[path] = None
    return tuple(found)


def sealed_search_fields(columns: dict[str, list[Any]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The sealed-search modes the rows name (``_tc_mode``) and the fields left in clear beside them.

    A field is left in clear when it holds a string that is not sealed and is not one of the sealed
    store's own plain fields (``_tc_*``, ids): what a store thief reads without any key, named for the
    report (values are never reported).
    """
    modes: dict[str, None] = {}
    clear: dict[str, None] = {}
    for name, values in columns.items():
        for value in values:
            for path, s in _strings(value, name):
                leaf = path.split(".")[-1]
                if leaf == MODE_KEY:
                    modes[s] = None
                elif not leaf.startswith("_tc_") and leaf not in _ID_LEAVES and s.strip() and not Sealer.is_sealed(s):
                    clear[path] = None
    return tuple(modes), tuple(clear)


def record_id_scheme(columns: dict[str, list[Any]]) -> str | None:
    """``"keyed"``, ``"clear"`` or ``"mixed"``: how the sealed store's sampled rows are identified; ``None`` if none is.

    A row of a sealed store carries its store id in ``_tc_id``; a keyed one also its user's id, sealed, in
    ``_tc_uid`` (LangChain), or names its scheme in ``_tc_ids`` (LlamaIndex shells, whose node is sealed whole).
    Clear ids give a thief who knows which id belongs to which text known (text, stored vector) pairs.
    """
    keyed = clear = 0
    for name, values in columns.items():
        for value in values:
            leaves = {path.split(".")[-1]: s for path, s in _strings(value, name)}
            if ID_FIELD in leaves and MARKER_KEY not in leaves:  # the marker record is the store's own
                is_keyed = Sealer.is_sealed(leaves.get(USER_ID_FIELD)) or leaves.get(IDS_KEY) in ("keyed", "sealed")
                keyed, clear = keyed + is_keyed, clear + (not is_keyed)
    if not keyed and not clear:
        return None
    return "mixed" if keyed and clear else ("keyed" if keyed else "clear")
