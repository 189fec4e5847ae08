"""Sealing whole records (a text, its metadata, its id) for the adapters' sealed vector stores.

:class:`~textcrafter_rag.sealing.Sealer` seals one value bound to one record id and field. A
vector-store record is more than one value, and both framework adapters must agree on what is
sealed and how, so that rule lives here, free of any framework:

* the **text** is always sealed (field ``"text"``);
* the **metadata fields the user names** are sealed, each as JSON (field ``"metadata.<name>"``);
  every other field stays plain, so the store can still filter on it. A filter on a sealed field
  can never match (the store only holds ciphertext): :meth:`RecordSealer.check_filter_keys` refuses it;
* the **set of sealed fields present** is bound into the text's associated data (the sorted names
  of the ``sealed_metadata`` fields the record holds; reserved ``_tc_*`` keys are never part of
  it), so a record whose sealed field was deleted (a payload overwritten) or added refuses to open
  instead of opening without it;
* the **record id** is the associated data of every sealed value, so a value moved to another
  record fails to open. Stores spell ids their own way (Qdrant returns ``"0"`` for ``0`` and a
  UUID in canonical form), so ids are compared by :func:`canonical_record_id`. The id is also kept
  in a plain metadata field (:data:`ID_FIELD`) for stores that return no id with a hit;
* **record ids are keyed** (``record_ids="keyed"``, the default; :mod:`textcrafter_rag.sealed.record_ids`): the
  store's id of a record is a keyed UUID of the user's id that names nothing and links no record to a known
  text. The user's id travels sealed (:data:`USER_ID_FIELD`, bound to the store's id, which must be its keyed
  or sealed id), and its presence is bound into the text's associated data, so a record stripped of it does
  not open (instead of opening under its keyed id); records without it (``record_ids="clear"``, or written
  by the previous release) carry the user's id in clear and open as before. Keyed records written before
  that binding still open, and stripped of the field they still open under their keyed id (nothing in them
  tells them from a clear-id record): re-adding them, or ``copy_to``, binds them.

Filters: :func:`filter_field_names` reads the field names of a store filter whatever its form (dicts,
Qdrant ``models.Filter``, LlamaIndex ``MetadataFilters``, Weaviate-style ``target`` objects, string
expressions such as Milvus' ``metadata["author"] == "Jane"``), without importing any store package,
and :meth:`RecordSealer.check_store_kwargs` finds every filter a store call carries (``filter=``,
``expr=``, ``where=``, ``qdrant_filters=``...), so both frameworks' sealed stores refuse a filter on a
sealed field instead of sending its value to the store in clear and silently matching nothing.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..deprecation import renamed_keyword
from ..errors import InvalidInputError, InvalidTypeError
from ..sealing import KeyHolder, Sealer, SealError, SecretKey
from .filters import TEXT_SEARCH_KWARGS, filter_field_names, is_filter_kwarg, names_field
from .record_ids import RECORD_ID_SCHEMES, RecordIds, canonical_record_id

__all__ = [
    "IDS_KEY",
    "ID_FIELD",
    "RECORD_ID_SCHEMES",
    "TEXT_FIELD",
    "USER_ID_FIELD",
    "OpenedRecord",
    "RecordSealer",
    "SealedRecord",
    "canonical_record_id",
    "filter_field_names",
    "new_record_id",
]

#: Plain metadata field holding the record id the sealed values are bound to.
ID_FIELD = "_tc_id"
#: Metadata field of a record with a keyed id: the user's id, sealed (bound to the keyed id).
USER_ID_FIELD = "_tc_uid"
#: Plain field of a store's marker record naming the scheme its records were written with (absent: clear ids).
IDS_KEY = "_tc_ids"
#: Field name the text is sealed under.
TEXT_FIELD = "text"
_METADATA_FIELD = "metadata."
#: Fields holding the (sealed) text in the stores' own layouts: a filter on them is a filter on a sealed field.
_TEXT_FIELDS = (TEXT_FIELD, "page_content", "_node_content")


def new_record_id() -> str:
    """A fresh random id (UUID4) for a record the caller gave none: every sealed record needs one."""
    return str(uuid.uuid4())


@dataclass(frozen=True)
class SealedRecord:
    """What a store may see: the sealed text, the metadata with the named fields sealed, and the store's id."""

    text: str
    metadata: dict[str, Any]
    #: The id the store holds the record under (the keyed id; the user's id with ``record_ids="clear"``).
    store_id: Any = None


@dataclass(frozen=True)
class OpenedRecord:
    """A record as the application sees it again: the user's id, and the store id its values were bound to."""

    record_id: str
    text: str
    metadata: dict[str, Any]
    store_id: str = ""


class RecordSealer(KeyHolder):
    """Seal and open vector-store records: the text, the named metadata fields, bound to the record id.

    Args:
        key: 32 bytes or their URL-safe base64 string (``textcrafter keygen``), or a
            :class:`~textcrafter_rag.sealing.SecretKey`.
        sealed_metadata: Metadata fields to encrypt. The others stay plain (filterable); list
            every field that may hold personal data.
        tenant: Tenant or collection name mixed into the key: records sealed under one tenant do not open
            under another (``context=``: its deprecated name).
        record_ids: ``"keyed"`` (default): the store holds each record under its keyed id
            (:meth:`keyed_id`), the user's id sealed inside. ``"sealed"``: under an id only the key turns
            back (for stores that answer with ids alone). ``"clear"``: under the user's id itself, for
            external systems keyed by it; weaker, as meaningful ids link stored records to known texts.
        legacy_clear_ids: The store may hold records under the users' clear ids (written before ids were
            keyed, or with ``record_ids="clear"``): a keyed or sealed lookup that misses is retried under the
            clear id, which the store then receives. Off by default: nothing the store holds turns it on.

    Raises:
        TypeError: ``sealed_metadata`` is a single string (it would be read letter by letter).
        ValueError: ``sealed_metadata`` names a reserved field, or ``record_ids`` is unknown.

    Instances hold key material: they refuse to be pickled and copy as themselves (:class:`KeyHolder`).
    """

    __slots__ = ("_fields", "_ids", "_sealer")

    def __init__(
        self,
        key: bytes | str | SecretKey,
        *,
        sealed_metadata: Sequence[str] = (),
        tenant: str = "",
        record_ids: str = "keyed",
        legacy_clear_ids: bool = False,
        context: str | None = None,
    ) -> None:
        context = renamed_keyword(tenant, context, new="tenant=", old="RecordSealer(context=)", default="")
        if isinstance(sealed_metadata, (str, bytes)):
            raise InvalidTypeError("sealed_metadata must be a sequence of field names, e.g. ('author',), not a string")
        fields = tuple(dict.fromkeys(sealed_metadata))
        if not all(isinstance(f, str) and f for f in fields):
            raise InvalidTypeError("sealed_metadata must contain non-empty field names (str)")
        if ID_FIELD in fields or USER_ID_FIELD in fields:
            raise InvalidInputError(f"{ID_FIELD!r} and {USER_ID_FIELD!r} are reserved for the record id")
        secret = SecretKey(key)
        self._ids = RecordIds(secret, context=context, scheme=record_ids, legacy_clear_ids=legacy_clear_ids)
        self._sealer = Sealer(secret, context=context)
        self._fields = fields

    @property
    def sealed_metadata(self) -> tuple[str, ...]:
        """The metadata fields that are sealed."""
        return self._fields

    @property
    def record_ids(self) -> str:
        """``"keyed"``, ``"sealed"`` or ``"clear"``: how new records' store ids are made."""
        return self._ids.scheme

    @property
    def ids(self) -> RecordIds:
        """The id mapping (:meth:`RecordIds.store_id`, ``keyed_id``, ``opened_id``...)."""
        return self._ids

    def keyed_id(self, user_id: Any) -> str:
        """:meth:`RecordIds.keyed_id`: the keyed store id of a user's id (a version-4 UUID naming nothing)."""
        return self._ids.keyed_id(user_id)

    def store_id(self, user_id: Any) -> Any:
        """:meth:`RecordIds.store_id`: the id a new record of ``user_id`` is stored under."""
        return self._ids.store_id(user_id)

    def other_store_id(self, user_id: Any) -> Any:
        """:meth:`RecordIds.other_store_id`: where a record of ``user_id`` written under another scheme is."""
        return self._ids.other_store_id(user_id)

    def user_id(self, store_id: Any, claimed: Any) -> str:
        """:meth:`RecordIds.user_id`: the user's id of a record, checked against its store id (``SealError``)."""
        return self._ids.user_id(store_id, claimed)

    @property
    def sealer(self) -> Sealer:
        """The value-level sealer (for adapters that seal whole serialised objects)."""
        return self._sealer

    def seal(self, text: str, metadata: Mapping[str, Any] | None, *, record_id: Any) -> SealedRecord:
        """Seal ``text`` and the named fields of ``metadata`` for record ``record_id``.

        Raises:
            TypeError: ``text`` is not a string.
            ValueError: ``text`` is already sealed (sealing twice would store a sealed value as
                the plaintext), or ``metadata`` uses the reserved :data:`ID_FIELD`.
        """
        uid = canonical_record_id(record_id)
        rid = canonical_record_id(self.store_id(uid))
        if not isinstance(text, str):
            raise InvalidTypeError(f"record {rid!r}: the text must be a str, got {type(text).__name__}")
        if Sealer.is_sealed(text):
            raise InvalidInputError(f"record {rid!r}: the text is already sealed; add the opened record instead")
        meta = dict(metadata or {})
        if ID_FIELD in meta or USER_ID_FIELD in meta:
            raise InvalidInputError(f"record {rid!r}: metadata fields {ID_FIELD!r} and {USER_ID_FIELD!r} are reserved")
        for name in self._fields:
            if name in meta:
                meta[name] = self._sealer.seal_json(meta[name], record_id=rid, field=_METADATA_FIELD + name)
        text_field = self._text_field(meta, user_id=rid != uid)
        meta[ID_FIELD] = rid
        if rid != uid:
            meta[USER_ID_FIELD] = self._sealer.seal_json(uid, record_id=rid, field=USER_ID_FIELD)
        sealed_text = self._sealer.seal(text, record_id=rid, field=text_field)
        return SealedRecord(text=sealed_text, metadata=meta, store_id=self.store_id(record_id))

    def _text_field(self, metadata: Mapping[str, Any], *, bound: bool = True, user_id: bool = False) -> str:
        """The text's field name, binding the sorted names of the sealed fields the record holds.

        Only names from ``sealed_metadata`` count: plain fields and reserved ``_tc_*`` keys may be
        added by stores and other layers. A record with no sealed field keeps the plain name.
        ``bound`` also binds a digest of those fields' sealed tokens, so the text opens only beside
        the very values it was sealed with: an old sealed ``author`` spliced beside a new text (or the
        reverse) does not open. ``bound=False`` is the name of records sealed before that binding.
        ``user_id``: the record carries its user's id sealed (:data:`USER_ID_FIELD`; keyed and sealed ids),
        which is bound too: without it, deleting that field made the record open under its keyed id instead
        of the user's, with no error.
        """
        if user_id:
            return json.dumps([USER_ID_FIELD, self._text_field(metadata, bound=bound)], ensure_ascii=True)
        present = sorted(name for name in self._fields if name in metadata)
        if not present:
            return TEXT_FIELD
        if not bound:
            return json.dumps([TEXT_FIELD, present], ensure_ascii=True)
        tokens = json.dumps([[name, str(metadata[name])] for name in present], ensure_ascii=True)
        digest = hashlib.sha256(tokens.encode("utf-8")).hexdigest()[:32]
        return json.dumps([TEXT_FIELD, present, digest], ensure_ascii=True)

    def open(self, text: Any, metadata: Mapping[str, Any] | None, *, store_id: Any = None) -> OpenedRecord:
        """Open a record read back from a store.

        Args:
            text: The stored (sealed) text.
            metadata: The stored metadata; store-added plain fields are kept, :data:`ID_FIELD` is removed.
            store_id: The id the store returned with the hit, if it returns one.

        Raises:
            SealError: The text or a named field is not sealed, or does not open under this key,
                context and record id (wrong key, edited, or moved from another record).
        """
        meta = dict(metadata or {})
        rid = self.resolve_record_id(store_id, meta.pop(ID_FIELD, None))
        uid = meta.pop(USER_ID_FIELD, None)
        has_uid = uid is not None
        if has_uid:  # a keyed id: the user's id is sealed, bound to it, and must map to it
            uid = self.user_id(rid, self.open_value(uid, record_id=rid, field=USER_ID_FIELD))
        elif self._ids.opened_id(rid) is not None:  # a sealed id is never written without the user's id beside it
            raise SealError(f"record {rid!r} has a sealed id but no sealed user id ({USER_ID_FIELD!r}): edited")
        token = text if isinstance(text, str) else ""
        try:
            opened_text = self._open_text(token, rid, meta, user_id=has_uid)
        except SealError:
            if not Sealer.is_sealed(token):
                raise
            raise SealError(
                f"record {rid!r} cannot be opened: wrong key or tenant, edited, moved from another record, or a "
                "sealed metadata field was removed or added (or sealed_metadata differs from when it was sealed)"
            ) from None
        for name in self._fields:
            if name in meta:
                meta[name] = self._sealer.open_json(meta[name], record_id=rid, field=_METADATA_FIELD + name)
        return OpenedRecord(record_id=uid if uid is not None else rid, text=opened_text, metadata=meta, store_id=rid)

    def _open_text(self, token: str, rid: str, meta: Mapping[str, Any], *, user_id: bool = False) -> str:
        """The text, bound to its sealed fields' tokens (and the presence of a sealed user id); older records open.

        A record without :data:`USER_ID_FIELD` opens only under names that bind no user id, so a new keyed
        record stripped of it does not open. With the field, the names of records sealed before it was bound
        are tried too (the sealed user id itself is checked against the record id either way).
        """
        names = [self._text_field(meta), self._text_field(meta, bound=False)]
        if user_id:
            names.insert(0, self._text_field(meta, user_id=True))
        names = list(dict.fromkeys(names))
        for name in names[:-1]:
            try:
                return self._sealer.open(token, record_id=rid, field=name)
            except SealError:
                pass
        return self._sealer.open(token, record_id=rid, field=names[-1])

    def seal_value(self, value: Any, *, record_id: Any, field: str) -> str:
        """Seal any JSON value (a whole serialised node, a key-value entry) bound to a record and field."""
        return self._sealer.seal_json(value, record_id=canonical_record_id(record_id), field=field)

    def open_value(self, token: Any, *, record_id: Any, field: str) -> Any:
        """Open a value from :meth:`seal_value`.

        Raises:
            SealError: Not sealed, or not under this key, context, record id and field.
        """
        token = token if isinstance(token, str) else ""
        return self._sealer.open_json(token, record_id=canonical_record_id(record_id), field=field)

    @staticmethod
    def resolve_record_id(store_id: Any, stored_id: Any) -> str:
        """The id a hit's values must open under: the store's own id, checked against :data:`ID_FIELD`.

        Raises:
            SealError: Neither id is known, or they differ (the record's values were moved).
        """
        if store_id is None and stored_id is None:
            raise SealError(f"a hit has no id (no store id and no {ID_FIELD!r} field): it cannot be opened")
        if store_id is None:
            return canonical_record_id(stored_id)
        rid = canonical_record_id(store_id)
        if stored_id is not None and canonical_record_id(stored_id) != rid:
            raise SealError(f"record {rid!r} carries the values of record {str(stored_id)!r}: moved or edited")
        return rid

    def plain_metadata(self, metadata: Mapping[str, Any] | None) -> dict[str, Any]:
        """``metadata`` without the sealed fields: what may sit in a store beside an opaque sealed record."""
        return {k: v for k, v in (metadata or {}).items() if k not in self._fields}

    def check_filter(self, flt: Any) -> None:
        """Refuse a filter on a sealed field, whatever its form (see :func:`filter_field_names`).

        Raises:
            InvalidInputError: The filter names a sealed field.
        """
        self.check_filter_keys(filter_field_names(flt))

    def check_store_kwargs(self, kwargs: Mapping[str, Any]) -> None:
        """Refuse the keyword arguments of a store call that filter on a sealed field or search the sealed texts.

        The one rule both frameworks' sealed stores apply to what they pass through to a store: every
        keyword whose name contains ``filter``, ``expr`` or ``where`` (``filter=``, Milvus ``expr=``,
        Chroma ``where=``, ``qdrant_filters=``, ``pre_filter=``...) is read as a filter
        (:func:`filter_field_names`), and a search over the documents' content (``where_document=``,
        ``body_search=``) is refused outright: the texts are always sealed.

        Raises:
            InvalidInputError: A filter names a sealed field (or the field holding the sealed text),
                or a content search is given.
        """
        for name, value in kwargs.items():
            if value is None:
                continue
            if isinstance(name, str) and name.lower() in TEXT_SEARCH_KWARGS:
                raise InvalidInputError(
                    f"cannot search the documents' content ({name}=): the texts are sealed, so it never matches "
                    "and would send its terms to the store in clear"
                )
            if is_filter_kwarg(name):
                keys = filter_field_names(value)
                self.check_filter_keys(keys)
                text = sorted({f for f in _TEXT_FIELDS for k in keys if names_field(k, f)})
                if text:
                    raise InvalidInputError(
                        f"cannot filter on the sealed text ({text}): the store only holds its ciphertext"
                    )

    def check_filter_keys(self, keys: Iterable[str]) -> None:
        """Refuse a filter on sealed fields: the store holds only ciphertext there, so it never matches.

        A key names a field if it is the field, a path under it (``author.city``) or the same under
        ``metadata.`` (how ``langchain_qdrant`` addresses metadata).

        Raises:
            InvalidInputError: A key names a sealed field.
        """
        bad = sorted({f for f in self._fields for k in keys if isinstance(k, str) and names_field(k, f)})
        if bad:
            raise InvalidInputError(
                f"cannot filter on sealed metadata field(s) {bad}: the store only holds their ciphertext. "
                "Leave a field out of sealed_metadata to filter on it."
            )

    def __repr__(self) -> str:
        return f"RecordSealer(key=<redacted>, sealed_metadata={self._fields!r})"
