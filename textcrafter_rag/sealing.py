"""Sealed documents: texts and chosen metadata are encrypted before a vector store sees them.

A protected vector stored beside its plaintext protects nothing: whoever reads the store (the
database host, a leaked backup) reads the text. The adapters' sealed stores therefore keep only
ciphertext in the store and decrypt on the way out, with the key held by the application.

* :class:`SecretKey` — 32 random bytes, written as URL-safe base64 (``textcrafter keygen``).
  Every use gets its own subkey derived with HKDF-SHA256 (``"seal"`` here; the keyed rotation
  uses another), so one secret serves several purposes without reusing key material.
* :class:`Sealer` — AES-256-GCM with a fresh 96-bit random nonce per value; the record id and
  the field name are bound as associated data, so a ciphertext moved to another record or field,
  edited, or opened with another key fails with :class:`SealError` instead of returning garbage.

Keys never appear in reprs, errors or logs.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .errors import InvalidInputError, InvalidTypeError, NotPicklableError, TextcrafterError

__all__ = [
    "SecretKey",
    "Sealer",
    "SealError",
    "InvalidKeyError",
    "KeyFileNotFoundError",
    "generate_key",
    "load_key",
    "SEALED_PREFIX",
    "KEY_BYTES",
]

KEY_BYTES = 32
NONCE_BYTES = 12
#: Every sealed value starts with this (versioned) prefix.
SEALED_PREFIX = "tcsealed:v1:"
_INFO = b"textcrafter-rag/v1/"
_TO_STANDARD_B64 = str.maketrans("-_", "+/")


class SealError(TextcrafterError, ValueError):
    """A sealed value could not be opened: wrong key, edited, truncated, or moved to another record."""


class InvalidKeyError(TextcrafterError, ValueError):
    """A key is not 32 bytes or their URL-safe base64 string."""


class KeyFileNotFoundError(TextcrafterError, FileNotFoundError):
    """The key file named does not exist."""


def generate_key() -> str:
    """A new random key as URL-safe base64 (what ``textcrafter keygen`` prints)."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode("ascii")


class SecretKey:
    """A 32-byte secret, given as raw bytes or as the URL-safe base64 string ``textcrafter keygen`` prints.

    Args:
        key: The secret (bytes, base64 string, or another :class:`SecretKey`).

    Pickling: a key given by value refuses to be pickled (:class:`NotPicklableError`), so no copy
    ever carries it. A key read by :func:`load_key` pickles as its file path or variable name (with
    a non-secret check value): the process that unpickles it reads the key itself, and refuses a
    different one. That is how a keyed object reaches a process pool.

    Raises:
        InvalidKeyError: Not 32 bytes once decoded (the message never contains the key).
    """

    __slots__ = ("_raw", "_source")

    def __init__(self, key: bytes | str | SecretKey) -> None:
        self._source: tuple[str, str] | None = None
        if isinstance(key, SecretKey):
            raw = key._raw
            self._source = key._source
        elif isinstance(key, (bytes, bytearray)):
            raw = bytes(key)
        elif isinstance(key, str):
            text = key.strip()
            try:
                # validate=True: characters outside the alphabet are an error, not silently skipped
                padded = text.translate(_TO_STANDARD_B64) + "=" * (-len(text) % 4)
                raw = base64.b64decode(padded, validate=True)
            except (binascii.Error, ValueError):
                raise InvalidKeyError("the key is not valid URL-safe base64 (use `textcrafter keygen`)") from None
        else:
            raise InvalidKeyError(f"a key must be bytes or a base64 string, got {type(key).__name__}")
        if len(raw) != KEY_BYTES:
            raise InvalidKeyError(f"a key must be {KEY_BYTES} bytes, got {len(raw)} (use `textcrafter keygen`)")
        self._raw = raw

    def subkey(self, purpose: str, *, context: str = "") -> bytes:
        """A 32-byte subkey for one purpose (and tenant or other context), by HKDF-SHA256."""
        info = _INFO + purpose.encode("utf-8") + b"\x00" + context.encode("utf-8")
        return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=info).derive(self._raw)

    def __repr__(self) -> str:
        return "SecretKey(<redacted>)"

    def _check_value(self) -> str:
        # One-way and independent of every other subkey: identifies the key without revealing it.
        return self.subkey("reference-check")[:8].hex()

    def __reduce__(self) -> Any:
        if self._source is None:
            raise NotPicklableError(
                "a key given by value is not picklable (a copy would carry it): to use it in other processes, "
                "read it with load_key(PATH) or load_key(env=NAME) -- such a key pickles as that reference "
                "and each process reads the key itself -- or build the keyed object in each process"
            )
        return (_reload_key, (*self._source, self._check_value()))

    def __copy__(self) -> SecretKey:
        return self  # immutable; lets objects holding a key (pydantic models, dataclasses) be copied

    def __deepcopy__(self, memo: dict[int, Any]) -> SecretKey:
        return self


def _is_key_itself(name: str | os.PathLike[str]) -> bool:
    """Whether a file path or variable name given for a key decodes as a key: the key passed by mistake."""
    try:
        SecretKey(os.fspath(name) if not isinstance(name, bytes) else name)
    except (InvalidKeyError, TypeError):
        return False
    return True


def _shown(name: str | os.PathLike[str], what: str) -> str:
    """``name`` for an error message, unless it may be the key itself (then the message says so instead)."""
    if _is_key_itself(name):
        return f"(the {what} given looks like a key itself, so it is not shown: pass the {what}, not the key)"
    return os.fspath(name) if not isinstance(name, bytes) else repr(name)


def load_key(path: str | os.PathLike[str] | None = None, *, env: str | None = None) -> SecretKey:
    """Read a key from a file holding what ``textcrafter keygen`` printed, or from an environment variable.

    Why a path or a variable name rather than the key itself: command lines, job specs and Ray task
    arguments are logged or stored; a mounted secret file or a variable set by a secret manager is not.
    Errors never show a path or name that decodes as a key (the key passed there by mistake).

    Args:
        path: A file whose content (surrounding whitespace ignored) is the key.
        env: The name of an environment variable holding the key (e.g. ``"TEXTCRAFTER_KEY"``).

    Raises:
        InvalidInputError: Neither or both of ``path`` and ``env`` given, or the variable is unset.
        FileNotFoundError: The file does not exist (a :class:`KeyFileNotFoundError`).
        InvalidKeyError: The content is not a key (the message never contains it).
    """
    if (path is None) == (env is None):
        raise InvalidInputError("give exactly one of a key file path or an environment variable name")
    if env is not None:
        value = os.environ.get(env)
        if not value:
            shown = _shown(env, "variable name")
            raise InvalidInputError(f"the environment variable holding the key is not set: {shown}")
        key = SecretKey(value)
        key._source = ("env", env)
        return key
    shown = _shown(path, "file path")  # type: ignore[arg-type]
    file = Path(path)  # type: ignore[arg-type]
    if not file.is_file():
        raise KeyFileNotFoundError(f"the key file does not exist or is not a file: {shown}")
    try:
        key = SecretKey(file.read_text(encoding="ascii"))
    except UnicodeDecodeError:
        raise InvalidKeyError(f"the key file does not hold a key (use `textcrafter keygen`): {shown}") from None
    key._source = ("file", str(file.resolve()))
    return key


def _reload_key(kind: str, location: str, check: str) -> SecretKey:
    """Unpickle a key read by :func:`load_key`: read it again here, and refuse another key."""
    key = load_key(location) if kind == "file" else load_key(env=location)
    if key._check_value() != check:
        raise InvalidKeyError(
            "the key read again from its file or environment variable in this process differs from the key "
            "the pickled object was built with"
        )
    return key


class Sealer:
    """Encrypt and decrypt strings and JSON values bound to a record id and a field name.

    Args:
        key: A :class:`SecretKey`, or what its constructor accepts.
        context: Optional tenant or collection name mixed into the subkey: values sealed under
            one context cannot be opened under another.
    """

    def __init__(self, key: bytes | str | SecretKey, *, context: str = "") -> None:
        self._aead = AESGCM(SecretKey(key).subkey("seal", context=context))

    @staticmethod
    def is_sealed(value: Any) -> bool:
        """Whether ``value`` is a string produced by :meth:`seal`."""
        return isinstance(value, str) and value.startswith(SEALED_PREFIX)

    @staticmethod
    def _aad(record_id: str, field: str) -> bytes:
        return json.dumps([str(record_id), str(field)]).encode("utf-8")

    def seal(self, text: str, *, record_id: str, field: str = "text") -> str:
        """Encrypt ``text``; the result is ASCII, safe to store as a string anywhere."""
        if not isinstance(text, str):
            raise InvalidTypeError(f"only str values can be sealed, got {type(text).__name__}; use seal_json")
        nonce = os.urandom(NONCE_BYTES)
        ct = self._aead.encrypt(nonce, text.encode("utf-8"), self._aad(record_id, field))
        return SEALED_PREFIX + base64.urlsafe_b64encode(nonce + ct).decode("ascii")

    def open(self, token: str, *, record_id: str, field: str = "text") -> str:
        """Decrypt a value from :meth:`seal`.

        Raises:
            SealError: Not a sealed value, or the key, record id or field differ, or it was edited.
        """
        if not self.is_sealed(token):
            raise SealError(f"field {field!r} of record {record_id!r} is not a sealed value")
        try:
            blob = base64.urlsafe_b64decode(token[len(SEALED_PREFIX) :])
            plain = self._aead.decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], self._aad(record_id, field))
        except (InvalidTag, binascii.Error, ValueError):
            raise SealError(
                f"field {field!r} of record {record_id!r} cannot be opened: wrong key, edited, or moved from "
                "another record"
            ) from None
        return plain.decode("utf-8")

    def seal_json(self, value: Any, *, record_id: str, field: str) -> str:
        """Seal any JSON-serialisable value (metadata fields)."""
        return self.seal(json.dumps(value, ensure_ascii=False), record_id=record_id, field=field)

    def open_json(self, token: str, *, record_id: str, field: str) -> Any:
        """Open a value sealed with :meth:`seal_json`."""
        return json.loads(self.open(token, record_id=record_id, field=field))

    def __repr__(self) -> str:
        return "Sealer(key=<redacted>)"
