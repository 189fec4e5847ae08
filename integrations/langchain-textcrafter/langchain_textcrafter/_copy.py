"""Copying records from one sealed store to another (rekeying, a new tenant, another collection), in batches.

Sealed search to sealed search, no text goes through an encoder: each batch's clean vectors are opened and
sealed again under the target's key, with the noise seed sealed in each source record, so a copy is its
source's draw, never a second one. Batches are at most the records one search opens (``open_hits`` caps
there), so any number of ids can be copied.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from textcrafter_rag.errors import InvalidInputError

if TYPE_CHECKING:
    from .sealed import SealedVectorStore

__all__ = ["copy_records"]


def copy_records(
    source: SealedVectorStore,
    target: SealedVectorStore,
    ids: Sequence[Any],
    *,
    delete_source: bool,
    batch_size: int,
    progress: bool,
    kwargs: dict[str, Any],
) -> list[str]:
    """Copy ``ids`` from ``source`` to ``target`` in batches; the target's ids, in order (see ``copy_to``)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size must be a positive int, got {batch_size!r}")
    batch_size = min(batch_size, source._search.open_k)
    ids = list(ids)
    out: list[str] = []
    with tqdm(total=len(ids), desc="copying sealed records", unit="records", disable=not progress) as bar:
        for start in range(0, len(ids), batch_size):
            part = ids[start : start + batch_size]
            out += _copy_batch(source, target, part, delete_source=delete_source, kwargs=kwargs)
            bar.update(len(part))
    return out


def _copy_batch(
    source: SealedVectorStore, target: SealedVectorStore, ids: list[Any], *, delete_source: bool, kwargs: dict
) -> list[str]:
    raw = source._find(ids)
    if len(raw) != len(ids):
        raise InvalidInputError(f"{len(ids) - len(raw)} of the {len(ids)} ids are not in this store")
    opened = [source._open(d) for d in raw]
    record_ids = [d.id for d in opened]
    out = target._answers.add_copies(opened, record_ids, source._answers.copied_vectors(raw), dict(kwargs))
    if delete_source:
        source._delete_stored(source._delete_ids(record_ids, raw))
    return out
