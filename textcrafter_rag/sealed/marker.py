"""The marker record: which mode a store was written in, told to a process before it sends a query.

Its id is keyed (``"store-marker"`` subkey of the key and tenant), so it names nothing, and it is the same in
every mode, so a process opening a store in another mode finds it.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from collections.abc import Mapping
from typing import Any

from ..errors import TextcrafterError
from ..sealing import Sealer, SealError, SecretKey
from .layout import MARKER_KEY

__all__ = [
    "ModeMismatchError",
    "StoreMarker",
    "StoreRanksWarning",
    "UnprotectedVectorsWarning",
    "check_marker_mode",
    "marker_id_for",
    "single_stage_marker_id",
]

_FIELD = "marker"


class ModeMismatchError(TextcrafterError, ValueError):
    """The store was written in another search mode than the one it is opened with."""


class UnprotectedVectorsWarning(UserWarning):
    """Single-stage search with embeddings that are not protected: the store ranks (and holds) clean vectors."""


class StoreRanksWarning(UserWarning):
    """The default store-held index is not possible on this store (it cannot read by id): the store ranks."""


def marker_id_for(marker_key: bytes) -> str:
    """The marker record id of a ``"store-marker"`` subkey, as a version-4 UUID."""
    digest = hmac.new(marker_key, b"marker-record", hashlib.sha256).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


class StoreMarker:
    """A tenant's marker record: its keyed id, its sealed text, and the mode read back from that text.

    The marker's plain ``_tc_marker`` field is the store's to edit; the mode is taken from the sealed text, so a
    host cannot steer a process into another mode (a downgrade) by editing a field.
    """

    def __init__(self, key: SecretKey, *, tenant: str = "") -> None:
        self.id = single_stage_marker_id(key, tenant=tenant)
        self._sealer = Sealer(key, context=tenant)

    def text(self, mode: str) -> str:
        """The marker record's sealed text: the mode, bound to the marker id."""
        return self._sealer.seal(mode, record_id=self.id, field=_FIELD)

    def mode(self, fields: Mapping[str, Any] | None, text: Any) -> str | None:
        """The mode the marker record read back names (``None``: no marker).

        Raises:
            SealError: The marker does not open under this key and tenant, or its plain field was edited.
        """
        if fields is None:
            return None
        try:
            sealed = self._sealer.open(text, record_id=self.id, field=_FIELD) if isinstance(text, str) else None
        except SealError:
            sealed = None
        if sealed is None:
            raise SealError(
                "this store's marker record does not open under this key and tenant (edited, forged, or another "
                "key); nothing was sent to the store"
            )
        plain = fields.get(MARKER_KEY)
        if plain is not None and plain != sealed:
            raise SealError(
                "this store's marker record was edited: its plain mode field disagrees with its sealed mode; "
                "nothing was sent to the store"
            )
        return sealed


def check_marker_mode(mode: str, written: str | None) -> None:
    """Refuse a store whose marker (the sealed mode read back, ``None`` if absent) names another mode than ``mode``.

    The message states the facts and recommends no mode: a weaker one opened on a host's word would send it
    what the stronger one keeps.

    Raises:
        ModeMismatchError: The store was written in another mode.
    """
    if written is not None and written != mode:
        single = (
            " A single-stage store ranks the vectors of `embedding` itself: open one that way only with protected "
            "embeddings (ProtectedEmbeddings)."
            if written == "single"
            else ""
        )
        raise ModeMismatchError(
            f"this store's sealed marker says it was written in {written!r} mode, and it is opened in {mode!r} mode; "
            f"nothing was sent to the store (the mode is chosen by search=).{single}"
        )


def single_stage_marker_id(key: SecretKey, *, tenant: str = "") -> str:
    """The marker id a single-stage store looks up before its first search (the same id as the modes')."""
    return marker_id_for(key.subkey("store-marker", context=tenant))
