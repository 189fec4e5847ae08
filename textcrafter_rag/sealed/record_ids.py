"""The ids a vector store holds its records under: keyed by default, so they link no record to a known text.

A thief who can tell which stored record belongs to which known text (meaningful ids such as
``"patient-1234"``) holds known (text, stored vector) pairs, and 400 of them undo a candidate store's
rotation. So the sealed stores never hand a store the user's ids:

* ``"keyed"`` (the default): HMAC-SHA256 of the canonical id under the ``"record-id"`` subkey of the key and
  tenant, laid out as a version-4 UUID, valid in every store (Qdrant takes only UUIDs and ints). One id gives
  one store id, so reads and deletes find it; other tenants and keys give unrelated ones. It cannot be turned
  back: the sealed record carries the user's id inside.
* ``"sealed"``: deterministic AES-SIV encryption of the (padded) id, so the key holder can turn a store id back
  into the user's id without reading the record. For stores that answer queries with ids alone (LlamaIndex
  stores that keep no text, such as FAISS: the index maps those ids to its nodes). Equal ids give equal store
  ids, as keyed ones do; lengths are padded to 32-byte classes.
* ``"clear"``: the user's ids themselves, for external systems keyed by them. Weaker; records written by
  releases before ids were keyed look like this.

A lookup by id that misses under a keyed or sealed id is never retried under the user's clear id (that
would hand the store the id the scheme keeps from it) unless the caller says the store holds clear ids:
``legacy_clear_ids=True``, for stores written before ids were keyed or with ``record_ids="clear"``. Nothing
the store holds decides it: a host can delete or edit any plain marker. A clear reader looks up keyed ids
on a miss (they name nothing), so it finds records of every scheme.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import uuid
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESSIV

from ..errors import InvalidInputError
from ..sealing import KeyHolder, SealError, SecretKey

__all__ = ["RECORD_ID_SCHEMES", "RecordIds", "canonical_record_id", "check_writable", "keyed_only"]

#: ``record_ids=``: keyed store ids (the default), sealed ones (for stores that answer with ids alone), or clear.
RECORD_ID_SCHEMES = ("keyed", "clear", "sealed")
_SEALED_PREFIX = "tcid1."
_PAD = 32
_AD = [b"textcrafter-record-id"]
#: A UUID as ``str(uuid.UUID(...))`` spells it (lower-case hex, dashed): its own canonical form.
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def canonical_record_id(value: Any) -> str:
    """The id as bound into the associated data: UUIDs in canonical form, everything else ``str``.

    Stores echo ids in their own spelling (an int as ``"0"``, a UUID hex as the dashed lower-case
    form); binding the canonical spelling keeps a record openable whichever spelling comes back.
    """
    if value is None:
        raise SealError("a sealed record needs an id")
    if isinstance(value, uuid.UUID):
        return str(value)
    text = str(value)
    if _CANONICAL_UUID.fullmatch(text):  # already canonical (every keyed id): hundreds a search, parsed for nothing
        return text
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return text


class RecordIds(KeyHolder):
    """Map the user's record ids to a store's and back, under one key and tenant (see the module).

    Instances hold key material: they refuse to be pickled and copy as themselves.
    """

    __slots__ = ("_hmac_key", "_siv", "_siv_key", "legacy_clear_ids", "scheme")

    def __init__(
        self, key: SecretKey, *, context: str = "", scheme: str = "keyed", legacy_clear_ids: bool = False
    ) -> None:
        if scheme not in RECORD_ID_SCHEMES:
            raise InvalidInputError(f"record_ids must be one of {RECORD_ID_SCHEMES}, got {scheme!r}")
        if not isinstance(legacy_clear_ids, bool):
            raise InvalidInputError(f"legacy_clear_ids must be True or False, got {type(legacy_clear_ids).__name__}")
        self.scheme = scheme
        #: Whether the caller said the store may hold clear ids (see :attr:`looks_up_other`).
        self.legacy_clear_ids = legacy_clear_ids
        self._hmac_key = key.subkey("record-id", context=context)
        self._siv_key = key.subkey("record-id-siv", context=context) + key.subkey("record-id-siv-2", context=context)
        self._siv: AESSIV | None = None  # built on first use: only stores that answer with ids alone need it

    def keyed_id(self, user_id: Any) -> str:
        """The keyed store id of a user's id: a version-4 UUID that names nothing."""
        digest = hmac.new(self._hmac_key, canonical_record_id(user_id).encode("utf-8"), hashlib.sha256).digest()
        return str(uuid.UUID(bytes=digest[:16], version=4))

    def sealed_id(self, user_id: Any) -> str:
        """The sealed store id of a user's id: deterministic AES-SIV, padded, that :meth:`opened_id` turns back."""
        plain = canonical_record_id(user_id).encode("utf-8") + b"\x80"
        plain += b"\x00" * (-len(plain) % _PAD)
        return _SEALED_PREFIX + base64.urlsafe_b64encode(self._cipher().encrypt(plain, _AD)).decode("ascii").rstrip("=")

    def opened_id(self, store_id: Any) -> str | None:
        """The user's id of a sealed store id; ``None`` for any other id (keyed, clear, a store's own)."""
        if not isinstance(store_id, str) or not store_id.startswith(_SEALED_PREFIX):
            return None
        body = store_id[len(_SEALED_PREFIX) :]
        try:
            plain = self._cipher().decrypt(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)), _AD)
        except (InvalidTag, binascii.Error, ValueError):
            return None
        return plain.rstrip(b"\x00")[:-1].decode("utf-8")

    def _cipher(self) -> AESSIV:
        if self._siv is None:
            self._siv = AESSIV(self._siv_key)
        return self._siv

    def store_id(self, user_id: Any) -> Any:
        """The id a new record of ``user_id`` is stored under in this scheme (``"clear"``: the id as given)."""
        if self.scheme == "keyed":
            return self.keyed_id(user_id)
        return self.sealed_id(user_id) if self.scheme == "sealed" else user_id

    def other_store_id(self, user_id: Any) -> Any:
        """Where a record of ``user_id`` written under another scheme is found: clear, or (clear readers) keyed."""
        return self.keyed_id(user_id) if self.scheme == "clear" else user_id

    @property
    def looks_up_other(self) -> bool:
        """Whether an id missed under this scheme may be sent to the store under :meth:`other_store_id`.

        A clear reader's other ids are keyed ones, which name nothing: always. A keyed or sealed reader's are
        the user's clear ids: only with ``legacy_clear_ids=True``. A marker in the store cannot decide it: the
        host can delete or edit it, and then answer "not found" to get the user's ids.
        """
        return self.scheme == "clear" or self.legacy_clear_ids

    def user_id(self, store_id: Any, claimed: Any) -> str:
        """The user's id of a record held under ``store_id`` whose sealed contents name ``claimed``.

        ``claimed`` must be ``store_id`` itself (a clear id), or the user id whose keyed or sealed id it is.

        Raises:
            SealError: Neither (the sealed id belongs to another record).
        """
        rid, uid = canonical_record_id(store_id), canonical_record_id(claimed)
        if uid != rid and self.keyed_id(uid) != rid and self.opened_id(rid) != uid:
            raise SealError(f"record {rid!r} holds the sealed id of another record: moved or edited")
        return uid

    def __repr__(self) -> str:
        return f"RecordIds(scheme={self.scheme!r}, key=<redacted>)"


def keyed_only(record_ids: str, marker_scheme: str | None) -> bool:
    """Whether a store holds keyed ids only: this writer's scheme and the one its marker names are both keyed.

    Informative only (the audit, messages): whether a clear id may be sent is :attr:`RecordIds.looks_up_other`,
    which no plain marker can change.
    """
    return record_ids == "keyed" and marker_scheme == "keyed"


def check_writable(record_ids: str, marker_scheme: str | None) -> None:
    """Refuse a clear-id writer in a store whose marker says keyed only: keyed readers would not look it up.

    Raises:
        InvalidInputError: ``record_ids="clear"`` on a store written with keyed ids.
    """
    if record_ids == "clear" and marker_scheme == "keyed":
        raise InvalidInputError(
            "this store was written with keyed record ids: open it with record_ids='keyed' (the default) to "
            "add to it; readers of a keyed store do not look up clear ids"
        )
