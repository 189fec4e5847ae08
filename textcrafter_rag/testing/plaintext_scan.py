"""Scan every byte a store wrote for the plaintext it must not hold.

A sealed store is only as good as the least careful file its backend writes: a payload index, a
write-ahead log, a pickled docstore, a JSON dump that escapes non-ASCII characters. Asserting on
the store's API says nothing about those, so the sealed-store tests read the files themselves.

:func:`scan_for_plaintext` looks, in every file under the given paths, for each text in full and
for every run of ``fragment_words`` consecutive words of it (exact, case-sensitive substrings of
the text, separators included), each in two spellings: UTF-8 and JSON with ``ensure_ascii`` (so a
``json.dump`` of a name with an accent is still found). It is exact, not sampled: every 8-byte
window of every file is compared (vectorised) with the needles' prefixes, and each candidate is
then checked in full. Reuse it for any backend (Chroma, Milvus Lite, ...): give it the directories
the backend wrote and the texts that went in.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InvalidInputError, MissingPathError

__all__ = ["PlaintextHit", "plaintext_needles", "scan_for_plaintext", "scanned_files"]

_WORD = re.compile(r"\S+")
_PREFIX = 8  # bytes compared per window (needles shorter than this are compared at their own length)
_CHUNK = 1 << 22  # windows per vectorised step: memory stays ~16 bytes x this (64 MiB), whatever the file size


@dataclass(frozen=True)
class PlaintextHit:
    """One needle found in one file (the first offset only)."""

    path: Path
    offset: int
    text_index: int
    needle: str
    kind: str  # "text" (the whole text) or "fragment"
    encoding: str  # "utf-8" or "json-ascii"

    def __str__(self) -> str:
        return f"{self.path}@{self.offset}: text {self.text_index} {self.kind} ({self.encoding}) {self.needle!r}"


@dataclass(frozen=True)
class _Needle:
    data: bytes
    text_index: int
    needle: str
    kind: str
    encoding: str


def _fragments(text: str, words: int) -> list[str]:
    spans = [m.span() for m in _WORD.finditer(text)]
    return [text[spans[i][0] : spans[i + words - 1][1]] for i in range(len(spans) - words + 1)]


def plaintext_needles(texts: Sequence[str], *, fragment_words: int = 3) -> list[tuple[int, str, str]]:
    """``(text index, needle, kind)`` for each text and each of its ``fragment_words``-word runs.

    Raises:
        ValueError: No texts, an empty text, or ``fragment_words < 1``.
    """
    if fragment_words < 1:
        raise InvalidInputError("fragment_words must be >= 1")
    if not texts:
        raise InvalidInputError("no texts to look for: a scan for nothing would always pass")
    out: list[tuple[int, str, str]] = []
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise InvalidInputError(f"text {i} is empty or not a str")
        out.append((i, text, "text"))
        out += [(i, f, "fragment") for f in dict.fromkeys(_fragments(text, fragment_words)) if f != text]
    return out


def scanned_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Every regular file under ``paths`` (files or directories, recursively; links not followed)."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_file() and not p.is_symlink():
            files.append(p)
        elif p.is_dir():
            files += sorted(f for f in p.rglob("*") if f.is_file() and not f.is_symlink())
        else:
            raise MissingPathError(f"nothing to scan at {p}")
    return files


def _encoded(needles: list[tuple[int, str, str]]) -> list[_Needle]:
    out = []
    for i, text, kind in needles:
        utf8 = text.encode("utf-8")
        out.append(_Needle(utf8, i, text, kind, "utf-8"))
        escaped = json.dumps(text, ensure_ascii=True)[1:-1].encode("ascii")
        if escaped != utf8:
            out.append(_Needle(escaped, i, text, kind, "json-ascii"))
    return out


def _windows(data: bytes, width: int, start: int, stop: int) -> np.ndarray:
    """The ``width``-byte windows starting at ``start..stop-1``, each packed into one uint64."""
    arr = np.frombuffer(data, dtype=np.uint8, count=min(len(data), stop + width - 1) - start, offset=start)
    n = stop - start
    keys = np.zeros(n, dtype=np.uint64)
    for k in range(width):
        keys |= arr[k : k + n].astype(np.uint64) << np.uint64(8 * k)
    return keys


def _scan_bytes(data: bytes, needles: list[_Needle], width: int) -> dict[int, int]:
    """``needle position in needles -> first offset`` of every needle found in ``data``."""
    buckets: dict[int, list[int]] = {}
    for j, n in enumerate(needles):
        buckets.setdefault(int.from_bytes(n.data[:width], "little"), []).append(j)
    prefixes = np.fromiter(buckets, dtype=np.uint64, count=len(buckets))
    found: dict[int, int] = {}
    last = len(data) - width + 1
    for start in range(0, max(last, 0), _CHUNK):
        stop = min(start + _CHUNK, last)
        keys = _windows(data, width, start, stop)
        for pos in np.flatnonzero(np.isin(keys, prefixes)):
            offset = start + int(pos)
            for j in buckets[int(keys[pos])]:
                if j not in found and data.startswith(needles[j].data, offset):
                    found[j] = offset
    return found


def scan_for_plaintext(
    paths: Iterable[str | os.PathLike[str]], texts: Sequence[str], *, fragment_words: int = 3
) -> list[PlaintextHit]:
    """Every place a text, or a run of ``fragment_words`` of its words, occurs in the files under ``paths``.

    Args:
        paths: Files or directories (scanned recursively) that the store wrote.
        texts: The texts (and sealed metadata values) that must not be there.
        fragment_words: Words per fragment (3: a name plus a word, an address line).

    Returns:
        One :class:`PlaintextHit` per (file, needle, spelling) found; empty for a clean store.

    Raises:
        FileNotFoundError: A path does not exist.
        ValueError: No file under ``paths`` or no text: a scan of nothing would pass vacuously.
    """
    files = scanned_files(paths)
    if not files:
        raise InvalidInputError("no file under the given paths: a scan of nothing would always pass")
    needles = _encoded(plaintext_needles(texts, fragment_words=fragment_words))
    width = min(_PREFIX, min(len(n.data) for n in needles))
    hits = []
    for path in files:
        data = path.read_bytes()
        for j, offset in sorted(_scan_bytes(data, needles, width).items(), key=lambda kv: kv[1]):
            n = needles[j]
            hits.append(PlaintextHit(path, offset, n.text_index, n.needle, n.kind, n.encoding))
    return hits
