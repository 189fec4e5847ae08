"""The marker record: which mode a store was written in, told to a process before it sends a query.

Its id is keyed (``"store-marker"`` subkey of the key and tenant), so it names nothing, and it is the same in
every mode, so a process opening a store in another mode finds it.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from typing import Any

from ..errors import TextcrafterError
from ..sealing import SecretKey
from .layout import MARKER_KEY

__all__ = ["ModeMismatchError", "check_marker_mode", "marker_id_for", "single_stage_marker_id"]


class ModeMismatchError(TextcrafterError, ValueError):
    """The store was written in another search mode than the one it is opened with."""


def marker_id_for(marker_key: bytes) -> str:
    """The marker record id of a ``"store-marker"`` subkey, as a version-4 UUID."""
    digest = hmac.new(marker_key, b"marker-record", hashlib.sha256).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def check_marker_mode(mode: str, fields: dict[str, Any] | None) -> None:
    """Refuse a marker (plain fields of the marker record, or ``None``) that names another mode than ``mode``.

    Raises:
        ModeMismatchError: The store was written in another mode.
    """
    if fields is None:
        return
    written = fields.get(MARKER_KEY)
    if written is not None and written != mode:
        hint = "fetch_k=None" if written == "single" else f"the {written!r} options it was written with"
        raise ModeMismatchError(
            f"this store was written in {written!r} mode and is opened in {mode!r} mode: open it with {hint} "
            "(nothing was sent to the store)"
        )


def single_stage_marker_id(key: SecretKey, *, context: str = "") -> str:
    """The marker id a single-stage store looks up before its first search (the same id as the modes')."""
    return marker_id_for(key.subkey("store-marker", context=context))
