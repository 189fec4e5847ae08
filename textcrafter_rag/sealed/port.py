"""The port: the five things the sealed-search core asks of a vector store, and nothing more.

Each adapter (LangChain, LlamaIndex, or an application's own store) implements :class:`RecordPort`
over the store it wraps. The core never imports a framework: it reads and writes :class:`PortRecord`
values (an id, the vector the store ranks, the sealed text, the plain fields) and leaves to the adapter
how the framework spells them. A store that cannot list its records raises
:class:`~textcrafter_rag.errors.NotSupportedError` from :meth:`RecordPort.enumerate`; everything else is required.

A port may say that its store takes calls from two threads at once (``concurrent_calls = True``): the core then
compacts the index in a background thread while the application goes on calling the store, and a search reads
the index log's heads in a thread of its own beside its read of records (one round trip, not two). Without it (the
default) the core never calls the store from a thread of its own: in-process engines (Qdrant local, FAISS, the
in-memory stores) change their arrays in place, and a search made while another thread writes fails or reads
half a write. :func:`serves_concurrent_calls` tells a server's client (Qdrant's remote client, Chroma's HTTP
client), which does take them, from an in-process engine's.

A port may also say that its ``put`` replaces a record it holds, so that every ``get`` made after the ``put``
returned reads the new record (``replaces_records = True``: Chroma's and Qdrant's upserts). The index log then
keeps one record that every write overwrites, its *beacon*, and a search reads it by id with its records: only
when it changed are the heads searched. Without it (FAISS refuses a held id, Milvus keeps both) the heads are
searched before every search.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "PortRecord",
    "RecordPort",
    "concurrent_calls",
    "is_one_of",
    "replaces_records",
    "serves_concurrent_calls",
]


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


def concurrent_calls(port: RecordPort) -> bool:
    """Whether ``port`` says its store takes calls from two threads at once (``concurrent_calls = True``)."""
    return getattr(port, "concurrent_calls", False) is True


def replaces_records(port: RecordPort) -> bool:
    """Whether ``port`` says its ``put`` replaces a held record for every later ``get`` (``replaces_records``)."""
    return getattr(port, "replaces_records", False) is True


def is_one_of(obj: Any, classes: Sequence[tuple[str, str]]) -> bool:
    """Whether ``obj``'s class, or a class it derives from, is one of ``classes`` (``(module prefix, class name)``
    pairs): how an adapter tells a framework's store classes apart without importing their packages."""
    return any(
        kind.__module__.startswith(module) and kind.__name__ == name
        for kind in type(obj).__mro__
        for module, name in classes
    )


def _engine_clients(store: Any) -> Iterator[Any]:
    """``store``, the clients it holds (``client``, ``_client``, ``_collection``) and theirs (``_client``)."""
    yield store
    for name in ("client", "_client", "_collection"):
        held = getattr(store, name, None)
        if held is not None:
            yield held
            inner = getattr(held, "_client", None)
            if inner is not None:
                yield inner


def serves_concurrent_calls(store: Any) -> bool:
    """Whether a framework's store (or an engine client) talks to a server that takes calls from two threads at
    once: Qdrant's remote client (not ``QdrantClient(path=...)`` or ``":memory:"``, which run Qdrant local in the
    process) or Chroma's HTTP client (not its in-process ``PersistentClient``/``EphemeralClient``). Anything
    else: ``False``.

    Read from the clients' own classes and settings, so neither package is imported here.
    """
    for held in _engine_clients(store):
        kind = type(held)
        if kind.__module__.startswith("qdrant_client.") and kind.__name__.endswith(("QdrantRemote", "QdrantLocal")):
            return kind.__name__.endswith("QdrantRemote")
        settings = getattr(held, "get_settings", None)
        if kind.__module__.startswith("chromadb.") and callable(settings):
            return str(getattr(settings(), "chroma_api_impl", "")).startswith("chromadb.api.fastapi.")
    return False
