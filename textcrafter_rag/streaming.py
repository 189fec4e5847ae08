"""Protect big files in bounded memory: ``.npy``, ``.parquet`` and ``.jsonl``, chunk by chunk.

:func:`protect_file` reads an input file ``chunk_size`` rows at a time, protects each chunk with a
:class:`~textcrafter_rag.protector.Protector` and writes it out before reading the next, so peak
memory depends on the chunk size, not on the file size (``benchmarks/streaming_memory.py``
measures it). ``textcrafter protect`` is a thin wrapper around it. :func:`rekey_file`
(``textcrafter rekey``) streams stored keyed releases through the same loop to move them to
another key or tenant without re-embedding.

The files are read and written by :mod:`textcrafter_rag.vectorfiles` (the same layer
``textcrafter audit`` reads stores with): ``.npy`` memory-mapped, ``.parquet`` page-wise with
every other column passing through, ``.jsonl`` line by line with the other fields passing through.
A ``.parquet`` / ``.jsonl`` input with no embedding column but a text column is embedded with the
encoder. Suffixes are matched in any case.

The output format follows the output suffix: the input's own format, or ``.npy`` (the protected
vectors only) from any input. When the output column differs from the embedding column, the
clean embedding column is dropped: clean vectors never travel on. The output is written to a
temporary sibling and renamed into place only after the last chunk succeeded, so an error (or
Ctrl-C) never leaves a partial file at the output path. Errors name the file, the chunk and the
row (0-based) or line (1-based), never the values.
"""

from __future__ import annotations

import hmac
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from .errors import InvalidInputError, VectorFileError
from .keyed import KeyArg, TenantKey
from .options import ProtectionOptions
from .protector import protector_for
from .validation import check_vectors
from .vectorfiles import (
    AtomicWriter,
    Chunk,
    ReadOptions,
    VectorFileNotFoundError,
    WriteOptions,
    file_format,
    open_reader,
    raising,
)

__all__ = ["SUPPORTED_CONVERSIONS", "StreamError", "StreamReport", "protect_file", "rekey_file"]

#: (input suffix, output suffix) pairs :func:`protect_file` accepts.
SUPPORTED_CONVERSIONS: frozenset[tuple[str, str]] = frozenset(
    {
        (".npy", ".npy"),
        (".npy", ".parquet"),
        (".npy", ".jsonl"),
        (".parquet", ".parquet"),
        (".parquet", ".npy"),
        (".jsonl", ".jsonl"),
        (".jsonl", ".npy"),
    }
)


class StreamError(VectorFileError):
    """A file could not be protected. The message names the file and the chunk, row or line.

    Every :class:`~textcrafter_rag.errors.VectorFileError` from reading or writing the files is
    raised as this class, so one ``except StreamError`` covers :func:`protect_file`.
    """


@dataclass(frozen=True)
class StreamReport:
    """What :func:`protect_file` did.

    Attributes:
        input: The input path.
        output: The output path (complete: it exists only once every chunk succeeded).
        rows: Number of vectors protected.
        dim: Their dimension.
        chunks: Number of chunks processed.
        embedded: Whether texts were embedded (else precomputed vectors were protected).
        seconds: Wall time of the streaming loop (reading, embedding, protecting, writing).
        mechanism: ``repr`` of the protecting mechanism.
        key_fingerprint: The fingerprint of the key and tenant the output is stored under
            (:attr:`~textcrafter_rag.keyed.TenantKey.fingerprint`, not secret), or ``None`` without a
            key. Keep it with the store: :func:`rekey_file` checks it before it moves anything.
    """

    input: Path
    output: Path
    rows: int
    dim: int
    chunks: int
    embedded: bool
    seconds: float
    mechanism: str
    key_fingerprint: str | None = None

    @property
    def vectors_per_s(self) -> float:
        """Throughput of the streaming loop."""
        return self.rows / self.seconds if self.seconds > 0 else float("inf")


# --------------------------------------------------------------------------- driver
_ROW_REF = re.compile(r"\brow (\d+)|\btexts\[(\d+)\]")


def _absolute(message: str, chunk: Chunk) -> str:
    """Turn the chunk-relative ``row 3`` / ``texts[3]`` of a validation message into absolute ones."""

    def sub(m: re.Match[str]) -> str:
        i = int(m.group(1) or m.group(2))
        return chunk.row_name(i) if i < chunk.n else m.group(0)

    return _ROW_REF.sub(sub, message)


def protect_file(
    input: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    protector: Any = None,
    options: ProtectionOptions | None = None,
    encoder: str | None = None,
    column: str = "embedding",
    output_column: str | None = None,
    text_column: str | None = "text",
    progress: bool = True,
    **overrides: Any,
) -> StreamReport:
    """Protect every vector of a ``.npy``, ``.parquet`` or ``.jsonl`` file in bounded memory.

    Args:
        input: The file to read; its suffix gives its format.
        output: The file to write (``.npy``, ``.parquet`` or ``.jsonl``, see
            :data:`SUPPORTED_CONVERSIONS`). It appears only when every chunk succeeded.
        protector: A ready :class:`~textcrafter_rag.protector.Protector`; default one built from
            ``options`` and ``encoder`` (:func:`~textcrafter_rag.protector.protector_for`).
        options: The protection options (:class:`~textcrafter_rag.options.ProtectionOptions`), as
            :class:`~textcrafter_rag.protector.Protector` takes them: the mechanism (default: the
            shipped policy, see ``protector_for``), ``secure_mode``, ``key`` (a secret, or a
            :class:`~textcrafter_rag.keyed.TenantKey`), ``tenant``, ``chunk_size`` ...; for the default
            protector only (a ready ``protector`` carries its own), except ``chunk_size``, which is also
            the number of rows read, protected and written per step and so bounds peak memory.
        encoder: For text inputs: ``"bundled"`` (the default when texts must be embedded) or a
            sentence-transformers model name or path.
        column: The embedding column (parquet) or field (jsonl).
        output_column: Where protected vectors go; default ``column``. If it differs, the clean
            embedding column is dropped from the output.
        text_column: The text column or field embedded when there is no embedding column.
        progress: Show a progress bar (rows; bytes for ``.jsonl``).
        **overrides: Any protection option by keyword, applied over ``options``
            (``protect_file(src, dst, mechanism="gaussian:s=0.01", chunk_size=1024)``); ``policy=`` is the
            deprecated name of ``mechanism=``.

    Raises:
        FileNotFoundError: The input file or the output folder does not exist (a
            :class:`~textcrafter_rag.vectorfiles.VectorFileNotFoundError`).
        InvalidTypeError, InvalidInputError: A bad option, as for ``Protector`` (``chunk_size < 1``, a
            tenant without a key, ``policy=`` and ``mechanism=`` both); a ``protector`` together with a
            protection option other than ``chunk_size``.
        StreamError: An unsupported format or conversion, a missing column, an invalid row; the
            message names the chunk and row or line. Nothing is left at ``output`` then.
    """
    given = options is not None or bool(set(overrides) - {"chunk_size"})
    settings = ProtectionOptions.build(options, overrides)  # checked once, before any file is touched
    if protector is not None and given:
        raise InvalidInputError(
            "pass key= and the other protection options to the Protector (Protector(key=..., tenant=...)), "
            "not to protect_file as well (only chunk_size= applies to a ready protector)"
        )
    read = ReadOptions(column=column, text_column=text_column, chunk_size=settings.chunk_size)
    src, dst = Path(input), Path(output)
    out_fmt = _check_paths(src, dst)
    with raising(StreamError), open_reader(src, read) as reader:
        n_rows = reader.count_rows() if out_fmt == ".npy" else reader.n_rows  # .npy output: rows up front
        if n_rows == 0:
            raise StreamError(f"{src} has no rows to protect")
        if protector is None:
            name = encoder if encoder is not None else ("bundled" if reader.embeds else None)
            protector = protector_for(encoder=name, options=settings)
        elif reader.embeds and protector.encoder is None:
            raise StreamError(f"{src} holds texts to embed but the protector has no encoder")
        dim = protector.dimension
        if dim is not None and reader.dim is not None and reader.dim != dim:
            raise StreamError(f"{src}: the vectors have dimension {reader.dim}, expected {dim} for this policy")
        out_col = output_column or column
        write = WriteOptions(
            output_column=out_col,
            column=column,
            text_column=text_column or "text",
            drop_clean=not reader.embeds and out_col != column,
            n_rows=n_rows,
        )
        rows = chunks = 0
        t0 = time.perf_counter()
        desc = "Embedding + protecting" if reader.embeds else "Protecting"
        with (
            AtomicWriter(dst, write) as writer,
            tqdm(
                total=reader.total,
                unit=reader.unit,
                unit_scale=reader.unit == "B",
                desc=desc,
                disable=not progress,
                dynamic_ncols=True,
            ) as bar,
        ):
            for chunk in reader:
                try:
                    y = (
                        protector.embed_documents(chunk.texts)
                        if chunk.vectors is None
                        else protector.protect(chunk.vectors)
                    )
                except (TypeError, ValueError) as exc:
                    raise StreamError(
                        f"{src}: {chunk.where()}: {_absolute(str(exc), chunk)}; nothing was written"
                    ) from exc
                writer.write(chunk, y)
                rows, chunks, dim = rows + chunk.n, chunks + 1, int(y.shape[1])
                bar.update(chunk.consumed)
            if rows == 0:
                raise StreamError(f"{src} has no rows to protect")
        seconds = time.perf_counter() - t0
    return StreamReport(
        input=src,
        output=dst,
        rows=rows,
        dim=int(dim or 0),
        chunks=chunks,
        embedded=reader.embeds,
        seconds=seconds,
        mechanism=repr(protector.mechanism),
        key_fingerprint=getattr(protector, "key_fingerprint", None),
    )


class _Rekey:
    """The protector-shaped step :func:`rekey_file` streams a file through: ``y -> y Q_old Q_new^T``."""

    encoder = None

    def __init__(self, old: TenantKey, new: TenantKey) -> None:
        self._old, self._new = old, new
        self._matrix: np.ndarray | None = None
        self.dimension: int | None = None  # fixed by the first chunk
        self.mechanism = self
        self.key_fingerprint = new.fingerprint  # what the output is stored under

    def protect(self, vectors: Any) -> np.ndarray:
        y = check_vectors(vectors, dim=self.dimension, name="stored vectors", allow_zero_rows=True)
        if self._matrix is None:
            dim = int(y.shape[1])
            self._matrix = self._old.rotation(dim).rekey_matrix(self._new.rotation(dim))
            self.dimension = dim
        return y @ self._matrix

    def __repr__(self) -> str:
        return f"rekey(tenant {self._old.tenant!r} -> {self._new.tenant!r}, key=<redacted>)"


def rekey_file(
    input: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    key: KeyArg | TenantKey,
    new_key: KeyArg | TenantKey,
    column: str = "embedding",
    chunk_size: int = 4096,
    progress: bool = True,
    expected_fingerprint: str | None = None,
) -> StreamReport:
    """Move a stored matrix from one key (or tenant) to another, chunk by chunk, without re-embedding.

    Each chunk ``Y`` (released under ``key``) becomes ``Y Q_old Q_new^T``, as if it had been released
    under ``new_key``: the un-keyed vectors are never formed, the noise already in the releases is
    kept (no new noise is drawn), and one float32 rounding is added. Files, formats, pass-through
    columns and the atomic output are those of :func:`protect_file`.

    Args:
        input: The stored vectors (``.npy``, ``.parquet`` or ``.jsonl``).
        output: Where the re-keyed vectors go (see :data:`SUPPORTED_CONVERSIONS`).
        key: The key (tenant ``""``) or :class:`~textcrafter_rag.keyed.TenantKey` they are stored under.
        new_key: The key or :class:`~textcrafter_rag.keyed.TenantKey` to move them to.
        column: The embedding column (parquet) or field (jsonl), rewritten in place.
        chunk_size: Rows per step; bounds peak memory.
        progress: Show a progress bar.
        expected_fingerprint: The ``key_fingerprint`` the store was written with (its
            :class:`StreamReport`'s). A rotation by the wrong key cannot be told from a right one
            by looking at the vectors, and re-keying with it garbles the store silently; with this
            set, a key that does not match is refused before anything is read.

    Raises:
        ValueError: ``key`` and ``new_key`` give the same rotation (nothing to move), or ``key``
            does not match ``expected_fingerprint``.
        InvalidKeyError: A key is malformed (the message never contains it).
        FileNotFoundError, StreamError: As :func:`protect_file`.
    """
    old, new = TenantKey.of(key), TenantKey.of(new_key)
    if expected_fingerprint is not None and not hmac.compare_digest(old.fingerprint, expected_fingerprint.lower()):
        raise InvalidInputError(
            f"the key and tenant given have fingerprint {old.fingerprint}, the store {expected_fingerprint}: "
            "wrong key or tenant (nothing was read or written)"
        )
    if hmac.compare_digest(old.key.subkey("rotate", context=old.tenant), new.key.subkey("rotate", context=new.tenant)):
        raise InvalidInputError("the old and new key and tenant are the same: there is nothing to move")
    return protect_file(
        input,
        output,
        protector=_Rekey(old, new),
        column=column,
        text_column=None,
        chunk_size=chunk_size,
        progress=progress,
    )


def _check_paths(src: Path, dst: Path) -> str:
    """The output format, once the conversion is supported, the input exists and the output is another file."""
    with raising(StreamError):
        in_fmt, out_fmt = file_format(src, role="input"), file_format(dst, role="output")
    if (in_fmt, out_fmt) not in SUPPORTED_CONVERSIONS:
        raise StreamError(
            f"cannot write {in_fmt} input to {out_fmt}: write {in_fmt} (pass-through columns "
            "kept) or .npy (the protected vectors only)"
        )
    if not src.is_file():  # a VectorFileNotFoundError is a FileNotFoundError too
        raise VectorFileNotFoundError(f"input file {src} does not exist or is not a file")
    if not dst.parent.is_dir():
        raise VectorFileNotFoundError(f"output folder {dst.parent} does not exist")
    if dst.exists() and dst.resolve() == src.resolve():
        raise StreamError(f"the output {dst} is the input file; write to another path")
    return out_fmt
