"""The port: the five things the sealed-search core asks of a vector store, and nothing more.

Each adapter (LangChain, LlamaIndex, or an application's own store) implements :class:`RecordPort`
over the store it wraps. The core never imports a framework: it reads and writes :class:`PortRecord`
values (an id, the vector the store ranks, the sealed text, the plain fields) and leaves to the adapter
how the framework spells them. A store that cannot list its records raises
:class:`~textcrafter_rag.errors.NotSupportedError` from :meth:`RecordPort.enumerate`; everything else is required.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = ["PortRecord", "RecordPort"]


@dataclass(frozen=True)
class PortRecord:
    """One record as the store holds it.

    Attributes:
        id: The store's id of the record (canonical string form).
        text: What the store keeps as the record's text (always sealed by the core).
        fields: The plain metadata fields (strings) the core reads back, such as ``_tc_log``.
        vector: The vector the store ranks this record by (``None`` when reading back).
    """

    id: str
    text: str
    fields: dict[str, str] = field(default_factory=dict)
    vector: Sequence[float] | None = None


@runtime_checkable
class RecordPort(Protocol):
    """What the core needs of a store: put, get by ids, delete, search by vector, enumerate.

    ``put`` must replace a record whose id exists (upsert); ``get`` returns the records it finds, in any
    order, and may return fewer than asked (a missing id is simply absent); ``search`` returns up to ``k``
    records best first. Implementations raise the store's own errors: the core never treats an error, or
    an empty answer, as "deleted".
    """

    def put(self, records: Sequence[PortRecord]) -> None:
        """Write (upsert) these records."""

    def get(self, ids: Sequence[str]) -> list[PortRecord]:
        """The records with these ids that the store holds."""

    def delete(self, ids: Sequence[str]) -> None:
        """Delete these records (ids not held are ignored)."""

    def search(self, vector: Sequence[float], k: int) -> list[PortRecord]:
        """Up to ``k`` records whose vectors the store ranks best for ``vector``."""

    def enumerate(self, batch_size: int) -> Iterator[list[PortRecord]]:
        """Every record the store holds, in batches (``NotSupportedError`` where the store cannot list)."""
