"""Bulk loading a sealed store with Ray Data: each actor writes records and index segments, in parallel.

:class:`SealedLoad` is a callable class for ``Dataset.map_batches``. Ray builds one instance per actor, and
each instance builds its own :class:`~langchain_textcrafter.SealedVectorStore` over the same store, so each
actor is one writer of the store-held index's log (:mod:`textcrafter_rag.sealed.log`): it appends its own
sealed segments under its own random writer id, which no other writer touches, so several actors (on one
machine or many) write the records and the index at once without coordination. Every batch is one sealed
add: its index segment and head first, then its records, as every add of the sealed store writes them, so a
crashed actor leaves no stored record unindexed, and a retried batch only rewrites the same records::

    import ray
    from langchain_textcrafter.ray_load import ChromaHttpFactory, SealedLoad, unindexed

    ds = ray.data.read_parquet("s3://bucket/chunks/")          # "id", "text" and "embedding" columns
    out = ds.map_batches(
        SealedLoad,
        fn_constructor_kwargs={"store": ChromaHttpFactory(host="chroma", port=8000, collection="docs"),
                               "key_file": "/run/secrets/textcrafter.key"},
        batch_size=2_000, concurrency=8,
    )
    written = out.to_pandas()                                  # one row per record: its id and its writer

The batches carry the clean document vectors (``vector_column``, say from an encoder stage before this one,
so the encoder is not the loader's bottleneck), or the texts are embedded by ``embedding=``. The key is read
on each worker from ``key_file=`` or ``key_env=``, never passed: Ray pickles ``fn_constructor_kwargs`` into
its cluster metadata (the rule of :class:`textcrafter_rag.ray_data.Protect`). For the same reason the store
is given as a factory Ray can pickle (a module-level function, a :func:`functools.partial`, or
:class:`ChromaHttpFactory`) that each actor calls to connect on its own: clients hold sockets and locks.

:func:`unindexed` then checks, from a fresh store object with only the key, that the index holds every id
the load wrote.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from textcrafter_rag.batches import column_to_matrix
from textcrafter_rag.deprecation import renamed_keyword
from textcrafter_rag.errors import InvalidInputError, InvalidTypeError, MissingColumnError
from textcrafter_rag.sealed.candidates import TwoStageSearch
from textcrafter_rag.sealed.modes import check_parallel_load
from textcrafter_rag.sealed.record_ids import canonical_record_id
from textcrafter_rag.sealed.store_index import StoreIndexSearch
from textcrafter_rag.sealing import load_key

from .sealed import SealedVectorStore

__all__ = ["ChromaHttpFactory", "SealedLoad", "unindexed"]

_KEY_BY_VALUE = (
    "SealedLoad reads the key on each worker: pass key_file= or key_env=, never the key itself "
    "(Ray pickles fn_constructor_kwargs into its cluster metadata)"
)


@dataclass(frozen=True)
class ChromaHttpFactory:
    """Builds a LangChain ``Chroma`` store over a Chroma server's collection, connecting where it is called.

    A client cannot be pickled to Ray's actors; this names the server instead, and each actor connects.

    Args:
        host: The server's host.
        port: The server's port.
        collection: The collection (created by the first writer if missing).
    """

    host: str
    port: int
    collection: str

    def __call__(self, embedding: Embeddings) -> VectorStore:
        import chromadb  # the engine's client, imported where the store is built (an optional dependency)
        from chromadb.config import Settings
        from langchain_chroma import Chroma

        client = chromadb.HttpClient(host=self.host, port=int(self.port), settings=Settings(anonymized_telemetry=False))
        return Chroma(client=client, collection_name=self.collection, embedding_function=embedding)


class _GivenVectors(Embeddings):
    """The embeddings of a loader whose batches carry their vectors: it embeds nothing, and says why."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise InvalidInputError(
            "this SealedLoad has no embedding=: its batches must carry the clean vectors (vector_column)"
        )

    def embed_query(self, text: str) -> list[float]:
        raise InvalidInputError("a SealedLoad writes; search with a SealedVectorStore built with your embeddings")


def _names(batch: Any) -> list[str]:
    return list(batch.column_names) if hasattr(batch, "column_names") else [str(k) for k in batch]


def _column(batch: Any, name: str) -> list[Any]:
    """One column of a numpy-dict, pandas or pyarrow batch as a list of Python values."""
    if name not in _names(batch):
        raise MissingColumnError(f"batch has no column {name!r}; its columns are {_names(batch)}")
    col = batch[name]
    values = col.to_pylist() if hasattr(col, "to_pylist") else list(col)
    return [v.item() if isinstance(v, np.generic) else v for v in values]


def _rows(batch: Any) -> int:
    if hasattr(batch, "num_rows"):
        return int(batch.num_rows)
    if hasattr(batch, "shape"):
        return int(batch.shape[0])
    return len(next(iter(batch.values()))) if batch else 0


class SealedLoad:
    """Write each batch into a sealed store, through this actor's own writer of the store-held index.

    Args:
        store: A picklable function that builds the LangChain store to hold the records from the embeddings
            it is given (as :class:`~langchain_textcrafter.SealedVectorStore` takes it), called once per actor:
            :class:`ChromaHttpFactory`, or a module-level function or ``functools.partial``.
        key_file: A file on every worker holding the ``textcrafter keygen`` key.
        key_env: Instead of ``key_file``, the name of an environment variable holding the key on every worker.
        embedding: Embeds ``text_column`` where a batch has no ``vector_column`` (its clean vectors); leave it
            out when every batch carries them.
        tenant: Tenant or collection name mixed into the key (as ``SealedVectorStore`` takes it; ``context=``:
            its deprecated name).
        sealed_metadata: Metadata fields to encrypt.
        search: :class:`~textcrafter_rag.sealed.StoreIndexSearch` (the default) or a ``TwoStageSearch``
            (candidates, no index). The app-side index file (one process) and single-stage are refused.
        id_column: Record ids (a batch without it gets random UUIDs, returned).
        text_column: The texts (sealed; the store never sees them).
        vector_column: The clean document vectors, if the batch has this column.
        metadata_columns: Columns that become each record's metadata (``sealed_metadata`` among them sealed).

    Each call returns a numpy batch with one row per record written: ``id`` (yours) and ``writer`` (the
    actor's writer id in the index log, so a caller sees the load ran on several writers).

    Raises:
        InvalidInputError: A key given by value, neither or both of ``key_file``/``key_env``, or a mode refused.
        MissingColumnError: A batch lacks the text column (or the id column it was told of).
    """

    def __init__(
        self,
        *,
        store: Callable[[Embeddings], VectorStore],
        key_file: str | os.PathLike[str] | None = None,
        key_env: str | None = None,
        embedding: Embeddings | None = None,
        tenant: str = "",
        sealed_metadata: Sequence[str] = (),
        search: StoreIndexSearch | TwoStageSearch | None = None,
        id_column: str | None = "id",
        text_column: str = "text",
        vector_column: str | None = "embedding",
        metadata_columns: Sequence[str] = (),
        context: str | None = None,
        **refused: Any,
    ) -> None:
        tenant = renamed_keyword(tenant, context, new="tenant=", old="SealedLoad(context=)", default="")
        if "key" in refused:
            raise InvalidInputError(_KEY_BY_VALUE)
        if refused:
            raise InvalidTypeError(f"SealedLoad got unexpected options {sorted(refused)}")
        if not callable(store) or isinstance(store, VectorStore):
            raise InvalidTypeError(
                "store must be a picklable function building the store on each actor (ChromaHttpFactory, a "
                "module-level function), not a store: a client holds sockets that cannot travel to Ray's actors"
            )
        search = StoreIndexSearch() if search is None else search
        check_parallel_load(search)
        key = load_key(key_file, env=key_env)  # on this worker; the message never contains the key
        self.store = SealedVectorStore(
            store,
            key=key,
            embedding=embedding if embedding is not None else _GivenVectors(),
            sealed_metadata=sealed_metadata,
            tenant=tenant,
            search=search,
        )
        self.id_column, self.text_column, self.vector_column = id_column, text_column, vector_column
        self.metadata_columns = tuple(metadata_columns)

    @property
    def writer(self) -> str:
        """This actor's writer id in the index log (empty before its first batch, or without the index)."""
        search = self.store._search
        held = search.store_index()
        return (held.log.writer or "") if held is not None else ""

    def __call__(self, batch: Any) -> dict[str, np.ndarray]:
        """Write one batch (numpy dict, ``pyarrow.Table`` or pandas DataFrame) in one sealed add."""
        if _rows(batch) == 0:
            return {"id": np.array([], dtype=object), "writer": np.array([], dtype=object)}
        texts = [str(t) for t in _column(batch, self.text_column)]
        names = _names(batch)
        ids = _column(batch, self.id_column) if self.id_column is not None and self.id_column in names else None
        columns = [_column(batch, c) for c in self.metadata_columns]
        metas = [dict(zip(self.metadata_columns, row, strict=True)) for row in zip(*columns, strict=True)]
        metas = metas or [{} for _ in texts]
        docs = [Document(page_content=t, metadata=m) for t, m in zip(texts, metas, strict=True)]
        if self.vector_column is not None and self.vector_column in names:
            vectors = self.store._search.check_vectors(
                column_to_matrix(batch[self.vector_column], name=self.vector_column)
            )
            written = self.store._add(docs, ids, vectors, {})
        else:
            written = self.store.add_documents(docs, ids=ids)
        return {"id": np.array(written, dtype=object), "writer": np.array([self.writer] * len(written), dtype=object)}

    def __repr__(self) -> str:
        return f"SealedLoad(store={type(self.store.store).__name__}, key=<redacted>)"


def unindexed(store: SealedVectorStore, ids: Sequence[Any]) -> list[Any]:
    """The ids among ``ids`` that the store's index log does not hold (empty: every one is indexed).

    Reads the whole log from the store first, so a fresh store object with only the key checks what any
    process would find, not what one writer remembers. Read-only: it writes nothing.

    Raises:
        InvalidInputError: The store does not use the store-held index.
    """
    search = store._search
    if search.indexes is None or not search.indexes.held:
        raise InvalidInputError("unindexed() checks the store-held index (search=StoreIndexSearch())")
    store._marker(write=False)  # learns the index's dimension from the store's marker
    held = search.store_index()
    if held is None:
        return list(ids)
    held.refresh()
    indexed = set(held.index.ids())
    return [i for i, sid in zip(ids, store.store_ids(ids), strict=True) if canonical_record_id(sid) not in indexed]
