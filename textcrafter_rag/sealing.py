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
  Every value is padded inside the encryption to a size class (:func:`padded_size`), so the length
  of a token tells little about its value.

Keys never appear in reprs, errors or logs, and no object holding key material can be pickled
(:class:`KeyHolder`).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any, NoReturn

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .errors import InvalidInputError, InvalidTypeError, NotPicklableError, TextcrafterError

__all__ = [
    "KeyHolder",
    "NotPicklable",
    "SecretKey",
    "Sealer",
    "SealError",
    "InvalidKeyError",
    "KeyFileNotFoundError",
    "generate_key",
    "load_key",
    "SEALED_PREFIX",
    "KEY_BYTES",
    "VALUE_MIN_BYTES",
    "TEXT_MIN_BYTES",
    "padded_size",
]

KEY_BYTES = 32
NONCE_BYTES = 12
#: Every value sealed now starts with this (versioned) prefix: v2, padded to a size class.
SEALED_PREFIX = "tcsealed:v2:"
#: Values sealed before padding (unpadded); they still open.
_SEALED_PREFIX_V1 = "tcsealed:v1:"
_PREFIXES = (SEALED_PREFIX, _SEALED_PREFIX_V1)
#: Smallest padded size (bytes of plaintext) of a JSON value (:meth:`Sealer.seal_json`: metadata fields).
VALUE_MIN_BYTES = 64
#: Smallest padded size (bytes of plaintext) of a text (:meth:`Sealer.seal`).
TEXT_MIN_BYTES = 256
#: ISO/IEC 7816-4 padding: this byte, then zero bytes up to the size class.
_PAD_MARK = b"\x80"
_INFO = b"textcrafter-rag/v1/"
_TO_STANDARD_B64 = str.maketrans("-_", "+/")


class NotPicklable:
    """Mixin: an object holding key material refuses every way of being serialised.

    ``pickle`` (so Ray, joblib, multiprocessing), ``copyreg`` and serialisers that call
    ``__getstate__`` themselves all get :class:`~textcrafter_rag.errors.NotPicklableError`. Without
    this, ``__getstate__`` of a slotted class (Python's default since 3.11) returns the raw key, and
    a copy made elsewhere would carry it. Build the object from the key in each process instead.
    """

    __slots__ = ()

    def _refuse_pickling(self) -> NoReturn:
        raise NotPicklableError(
            f"a {type(self).__name__} holds key material and is not picklable (a copy would carry the key): build "
            "it from the key in each process; a key read with load_key(PATH) or load_key(env=NAME) pickles as "
            "that reference"
        )

    def __reduce_ex__(self, protocol: Any) -> Any:
        self._refuse_pickling()

    def __reduce__(self) -> Any:
        self._refuse_pickling()

    def __getstate__(self) -> Any:
        self._refuse_pickling()

    def __setstate__(self, state: Any) -> None:
        self._refuse_pickling()


class KeyHolder(NotPicklable):
    """Mixin for objects holding key material: never serialised, and a copy is the object itself.

    ``copy.copy`` and ``copy.deepcopy`` return ``self`` (they would otherwise go through the refused
    ``__reduce_ex__``), so objects that hold one (pydantic models, dataclasses) can still be copied,
    and no copy ever duplicates the key. For immutable holders, and for those whose copies must share one
    state (a sealed store's search core: a copy of the store searches the same index, with the same counters).
    """

    __slots__ = ()

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self


def padded_size(n: int, *, minimum: int) -> int:
    """The size class a plaintext of ``n`` bytes is padded to: ``minimum``, or the next power of two above.

    Powers of two leave one class per doubling, so a token tells its value's length only to within
    a factor of two (for texts of 256 B to 16 KiB: 7 classes, at most 3 bits); the price is at most
    as many padding bytes as plaintext, about 40% on average (``benchmarks/sealing_padding.py``
    measures it). ``n`` counts the padding mark, so a value of exactly ``minimum - 1`` bytes still fits.
    """
    return max(minimum, 1 << max(n - 1, 0).bit_length())


def _pad(plain: bytes, minimum: int) -> bytes:
    marked = plain + _PAD_MARK
    return marked + b"\x00" * (padded_size(len(marked), minimum=minimum) - len(marked))


def _unpad(padded: bytes) -> bytes | None:
    """Remove ISO/IEC 7816-4 padding (the last non-zero byte must be the mark); ``None`` if malformed."""
    stripped = padded.rstrip(b"\x00")
    return stripped[:-1] if stripped.endswith(_PAD_MARK) else None


class SealError(TextcrafterError, ValueError):
    """A sealed value could not be opened: wrong key, edited, truncated, or moved to another record."""


class InvalidKeyError(TextcrafterError, ValueError):
    """A key is not 32 bytes or their URL-safe base64 string."""


class KeyFileNotFoundError(TextcrafterError, FileNotFoundError):
    """The key file named does not exist."""


def generate_key() -> str:
    """A new random key as URL-safe base64 (what ``textcrafter keygen`` prints)."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode("ascii")


class SecretKey(KeyHolder):
    """A 32-byte secret, given as raw bytes or as the URL-safe base64 string ``textcrafter keygen`` prints.

    Args:
        key: The secret (bytes, base64 string, or another :class:`SecretKey`).

    Pickling: a key given by value refuses to be pickled (:class:`NotPicklableError`), so no copy
    ever carries it. A key read by :func:`load_key` pickles as its file path or variable name (with
    a non-secret check value): the process that unpickles it reads the key itself, and refuses a
    different one. That is how a keyed object reaches a process pool. ``__getstate__`` always
    refuses (the default of a slotted class would return the raw key); copies are the key itself.

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

    def __reduce_ex__(self, protocol: Any) -> Any:
        return self.__reduce__()  # a reference or a refusal, never the state


#: A run of URL-safe (or standard, without "/") base64 characters as long as a key, or longer: a key may sit
#: inside a longer name (``secrets-<KEY>``, ``<KEY>_v2``). ``/`` and ``\\`` end a run: they separate a path.
_KEY_RUN = re.compile(r"[A-Za-z0-9+_-]{43,}=*")


def key_like_runs(text: str) -> list[str]:
    """The runs of ``text`` that may hold a key: 43 or more base64 characters mixing upper and lower case.

    Why a run and not the whole text: a key passed inside a path (``--key-file /run/secrets/<KEY>``) is
    no key as a whole, and was printed in full. Why mixed case: a random key has both (but for a chance
    of about 1e-10), while hex digests and long ``UPPER_CASE`` or ``snake_case`` names, which messages
    may show, do not.
    """
    return [run for run in _KEY_RUN.findall(text) if any(c.isupper() for c in run) and any(c.islower() for c in run)]


def _is_key_itself(name: str | os.PathLike[str]) -> bool:
    """Whether a file path or variable name given for a key decodes as a key, or holds one: a mistake."""
    try:
        text = os.fspath(name) if not isinstance(name, bytes) else name
        SecretKey(text)
    except (InvalidKeyError, TypeError):
        return isinstance(name, (str, os.PathLike)) and bool(key_like_runs(str(os.fspath(name))))
    return True


def _shown(name: str | os.PathLike[str], what: str) -> str:
    """``name`` for an error message, unless it may be or hold the key (then the message says so instead)."""
    if _is_key_itself(name):
        return f"(the {what} given looks like a key or holds one, so it is not shown: pass the {what}, not the key)"
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


class Sealer(KeyHolder):
    """Encrypt and decrypt strings and JSON values bound to a record id and a field name.

    Args:
        key: A :class:`SecretKey`, or what its constructor accepts.
        context: Optional tenant or collection name mixed into the subkey: values sealed under
            one context cannot be opened under another.

    Length: every value is padded inside the encryption (ISO/IEC 7816-4: a ``0x80`` byte, then
    zeros), so the padding is authenticated with it, to a size class (:func:`padded_size`): at
    least :data:`VALUE_MIN_BYTES` for a JSON value (``True`` and ``False``, ``"flu"`` and
    ``"pancreatic cancer"``, salaries of any number of digits give tokens of one length) and at
    least :data:`TEXT_MIN_BYTES` for a text, then the next power of two. Tokens sealed before
    padding (``tcsealed:v1:``) still open; every new token is ``tcsealed:v2:``, whose version is
    bound into the associated data so a token cannot be relabelled as the other version.
    """

    __slots__ = ("_aead",)

    def __init__(self, key: bytes | str | SecretKey, *, context: str = "") -> None:
        self._aead = AESGCM(SecretKey(key).subkey("seal", context=context))

    @staticmethod
    def is_sealed(value: Any) -> bool:
        """Whether ``value`` is a string produced by :meth:`seal` (this version or the unpadded v1)."""
        return isinstance(value, str) and value.startswith(_PREFIXES)

    @staticmethod
    def _aad(record_id: str, field: str, *, version: str = SEALED_PREFIX) -> bytes:
        """What a value is bound to: ``json.dumps([version, record_id, field])`` (v1: without the version), its
        bytes made by json's own string encoder without ``dumps``' machinery (a search opens dozens of values)."""
        binding = (
            (str(record_id), str(field)) if version == _SEALED_PREFIX_V1 else (version, str(record_id), str(field))
        )
        return ("[" + ", ".join(map(encode_basestring_ascii, binding)) + "]").encode("ascii")

    def _seal(self, plain: bytes, *, record_id: str, field: str, minimum: int) -> str:
        nonce = os.urandom(NONCE_BYTES)
        ct = self._aead.encrypt(nonce, _pad(plain, minimum), self._aad(record_id, field))
        return SEALED_PREFIX + base64.urlsafe_b64encode(nonce + ct).decode("ascii")

    def seal(self, text: str, *, record_id: str, field: str = "text") -> str:
        """Encrypt ``text``, padded to a text size class; the result is ASCII, safe to store as a string anywhere."""
        if not isinstance(text, str):
            raise InvalidTypeError(f"only str values can be sealed, got {type(text).__name__}; use seal_json")
        return self._seal(text.encode("utf-8"), record_id=record_id, field=field, minimum=TEXT_MIN_BYTES)

    def open(self, token: str, *, record_id: str, field: str = "text") -> str:
        """Decrypt a value from :meth:`seal` or :meth:`seal_json` (padded v2, or unpadded v1).

        Raises:
            SealError: Not a sealed value, or the key, record id or field differ, or it was edited.
        """
        if not self.is_sealed(token):
            raise SealError(f"field {field!r} of record {record_id!r} is not a sealed value")
        version = SEALED_PREFIX if token.startswith(SEALED_PREFIX) else _SEALED_PREFIX_V1
        try:
            blob = base64.urlsafe_b64decode(token[len(version) :])
            aad = self._aad(record_id, field, version=version)
            plain: bytes | None = self._aead.decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], aad)
            if version == SEALED_PREFIX:
                plain = _unpad(plain)  # type: ignore[arg-type]
            if plain is None:  # authenticated yet malformed: only a sealer with the key could have made it
                raise InvalidTag
            return plain.decode("utf-8")
        except (InvalidTag, binascii.Error, ValueError):
            raise SealError(
                f"field {field!r} of record {record_id!r} cannot be opened: wrong key, edited, or moved from "
                "another record"
            ) from None

    def seal_json(self, value: Any, *, record_id: str, field: str) -> str:
        """Seal any JSON-serialisable value (metadata fields), padded to at least :data:`VALUE_MIN_BYTES`."""
        plain = json.dumps(value, ensure_ascii=False).encode("utf-8")
        return self._seal(plain, record_id=record_id, field=field, minimum=VALUE_MIN_BYTES)

    def open_json(self, token: str, *, record_id: str, field: str) -> Any:
        """Open a value sealed with :meth:`seal_json`."""
        return json.loads(self.open(token, record_id=record_id, field=field))

    def __repr__(self) -> str:
        return "Sealer(key=<redacted>)"
