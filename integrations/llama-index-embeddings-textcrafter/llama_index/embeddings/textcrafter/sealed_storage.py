"""Sealed docstores: the LlamaIndex way to keep text out of storage for stores that keep no text.

With a vector store that keeps no text (FAISS: ``stores_text=False``), a ``VectorStoreIndex`` puts
every node, with its text and metadata, into the storage context's **docstore**, and
``storage_context.persist`` writes it as JSON (``docstore.json``; the ``ref_doc_info`` collection
holds the source documents' metadata, the ``metadata`` collection a hash of each text). LlamaIndex
builds every docstore and index store on a key-value store (``KVDocumentStore(kvstore)``), so
:class:`SealedKVStore`, a ``BaseKVStore`` that seals each value, seals any docstore built on it,
whatever the backend (the in-memory/JSON ``SimpleKVStore``, Redis, MongoDB, Postgres, ...).

:func:`sealed_storage_context` puts it together: a sealed docstore and index store, and the
vector store wrapped in a :class:`~.sealed_vector_store.SealedVectorStore`, new or loaded from a
persist directory.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from llama_index.core import StorageContext
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.storage.index_store import SimpleIndexStore
from llama_index.core.storage.kvstore import SimpleKVStore
from llama_index.core.storage.kvstore.types import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_COLLECTION,
    BaseInMemoryKVStore,
    BaseKVStore,
    MutableMappingKVStore,
)
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from textcrafter_rag.deprecation import renamed_keyword, warn_renamed
from textcrafter_rag.errors import InvalidInputError, InvalidTypeError
from textcrafter_rag.sealed.app_index import AppIndexSearch
from textcrafter_rag.sealed.candidates import TwoStageSearch
from textcrafter_rag.sealed.records import RecordSealer
from textcrafter_rag.sealed.store_index import StoreIndexSearch
from textcrafter_rag.sealing import SealError, SecretKey

from .sealed_vector_store import SealedVectorStore

__all__ = ["SEALED_VALUE", "SealedKVStore", "sealed_storage_context"]

#: ``search=`` left out: the vector store's default mode (see :class:`SealedVectorStore`).
_DEFAULT: Any = object()
#: The only key of a stored value: the sealed JSON of the real value.
SEALED_VALUE = "_tc_sealed"
DOCSTORE_FILE = "docstore.json"
INDEX_STORE_FILE = "index_store.json"


class SealedKVStore(BaseInMemoryKVStore):
    """A key-value store whose values are sealed, each bound to its key and collection.

    Keys stay plain (docstores use node and document ids as keys). A value that is not sealed,
    or does not open under this key and tenant, or was moved to another key or collection,
    raises :class:`~textcrafter_rag.sealing.SealError`.

    Args:
        store: The key-value store that holds the sealed values (default: a new ``SimpleKVStore``).
        key: 32 bytes or their URL-safe base64 string (``textcrafter keygen``).
        tenant: Tenant or collection name mixed into the key (``context=``: its deprecated name, warned).
    """

    def __init__(
        self, store: BaseKVStore | None = None, *, key: bytes | str | SecretKey, tenant: str = "", context: Any = None
    ) -> None:
        tenant = renamed_keyword(tenant, context, new="tenant=", old="SealedKVStore(context=)", default="")
        self._store = store if store is not None else SimpleKVStore()
        self._records = RecordSealer(key, tenant=tenant)

    @property
    def store(self) -> BaseKVStore:
        """The wrapped key-value store (it holds only sealed values)."""
        return self._store

    @staticmethod
    def _field(collection: str) -> str:
        return f"kv:{collection}"

    def _seal(self, key: str, val: dict, collection: str) -> dict:
        if not isinstance(val, dict):
            raise InvalidTypeError(f"values must be dicts, got {type(val).__name__}")
        return {SEALED_VALUE: self._records.seal_value(val, record_id=key, field=self._field(collection))}

    def _open(self, key: str, val: Any, collection: str) -> dict | None:
        """The opened value; errors never name ``key``: docstores key values by the user's node and document ids."""
        if val is None:
            return None
        if not isinstance(val, dict) or set(val) != {SEALED_VALUE}:
            raise SealError(f"a value in collection {collection!r} is not sealed")
        try:
            out = self._records.open_value(val[SEALED_VALUE], record_id=key, field=self._field(collection))
        except SealError:  # its message names the record id, the key here: replaced, and not chained
            raise SealError(
                f"a value in collection {collection!r} cannot be opened: wrong key or tenant, edited, or moved "
                "from another key or collection"
            ) from None
        if not isinstance(out, dict):
            raise SealError(f"a value in collection {collection!r} did not open to a dict")
        return out

    def put(self, key: str, val: dict, collection: str = DEFAULT_COLLECTION) -> None:
        """Seal ``val`` and store it under ``key``."""
        self._store.put(key, self._seal(key, val, collection), collection=collection)

    async def aput(self, key: str, val: dict, collection: str = DEFAULT_COLLECTION) -> None:
        """Async :meth:`put`."""
        await self._store.aput(key, self._seal(key, val, collection), collection=collection)

    def put_all(
        self,
        kv_pairs: list[tuple[str, dict]],
        collection: str = DEFAULT_COLLECTION,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> None:
        """Seal and store every pair (in the wrapped store's batches)."""
        sealed = [(k, self._seal(k, v, collection)) for k, v in kv_pairs]
        self._store.put_all(sealed, collection=collection, batch_size=batch_size)

    async def aput_all(
        self,
        kv_pairs: list[tuple[str, dict]],
        collection: str = DEFAULT_COLLECTION,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> None:
        """Async :meth:`put_all`."""
        sealed = [(k, self._seal(k, v, collection)) for k, v in kv_pairs]
        await self._store.aput_all(sealed, collection=collection, batch_size=batch_size)

    def get(self, key: str, collection: str = DEFAULT_COLLECTION) -> dict | None:
        """The opened value under ``key``, or ``None``."""
        return self._open(key, self._store.get(key, collection=collection), collection)

    async def aget(self, key: str, collection: str = DEFAULT_COLLECTION) -> dict | None:
        """Async :meth:`get`."""
        return self._open(key, await self._store.aget(key, collection=collection), collection)

    def get_all(self, collection: str = DEFAULT_COLLECTION) -> dict[str, dict]:
        """Every value of ``collection``, opened."""
        return {k: self._open(k, v, collection) for k, v in self._store.get_all(collection=collection).items()}

    async def aget_all(self, collection: str = DEFAULT_COLLECTION) -> dict[str, dict]:
        """Async :meth:`get_all`."""
        items = await self._store.aget_all(collection=collection)
        return {k: self._open(k, v, collection) for k, v in items.items()}

    def delete(self, key: str, collection: str = DEFAULT_COLLECTION) -> bool:
        """Delete ``key`` from the wrapped store."""
        return self._store.delete(key, collection=collection)

    async def adelete(self, key: str, collection: str = DEFAULT_COLLECTION) -> bool:
        """Async :meth:`delete`."""
        return await self._store.adelete(key, collection=collection)

    def persist(self, persist_path: str, fs: Any = None) -> None:
        """Persist the wrapped store if it is an in-memory one (it holds only sealed values)."""
        if isinstance(self._store, (BaseInMemoryKVStore, MutableMappingKVStore)):
            self._store.persist(persist_path, fs=fs)

    @classmethod
    def from_persist_path(
        cls,
        persist_path: str,
        *,
        key: bytes | str | SecretKey | None = None,
        tenant: str = "",
        fs: Any = None,
        context: Any = None,
    ) -> SealedKVStore:
        """Load a ``SimpleKVStore`` JSON file written by :meth:`persist` (``key`` is required)."""
        if key is None:
            raise InvalidTypeError("SealedKVStore.from_persist_path needs key=")
        old = "SealedKVStore.from_persist_path(context=)"
        tenant = renamed_keyword(tenant, context, new="tenant=", old=old, default="")
        return cls(SimpleKVStore.from_persist_path(persist_path, fs=fs), key=key, tenant=tenant)

    def __repr__(self) -> str:
        return f"SealedKVStore(store={type(self._store).__name__}, key=<redacted>)"


def sealed_storage_context(
    *,
    vector_store: BasePydanticVectorStore,
    key: bytes | str | SecretKey,
    sealed_metadata: Sequence[str] = (),
    tenant: str = "",
    persist_dir: str | os.PathLike[str] | None = None,
    fetch_k: int | TwoStageSearch | None = None,
    search: StoreIndexSearch | TwoStageSearch | AppIndexSearch | None = _DEFAULT,
    embed_model: Any = None,
    record_ids: str = "keyed",
    legacy_clear_ids: bool = False,
    context: str | None = None,
) -> StorageContext:
    """A ``StorageContext`` that writes no plaintext: sealed docstore and index store, sealed vector store.

    Args:
        vector_store: The vector store (wrapped in a :class:`SealedVectorStore` unless it is one).
        key: 32 bytes or their URL-safe base64 string (``textcrafter keygen``).
        sealed_metadata: Metadata fields kept out of the vector store (see :class:`SealedVectorStore`);
            the docstore seals every value whole.
        tenant: Tenant or collection name mixed into the key (``context=``: its deprecated name, warned).
        persist_dir: Load the docstore and index store that ``storage_context.persist(persist_dir)``
            wrote (the vector store is loaded by the caller, e.g. ``FaissVectorStore.from_persist_dir``).
        fetch_k: Deprecated (warned): ``search=TwoStageSearch(open_k=...)``.
        search: The sealed search mode's options (``StoreIndexSearch()``: the index held sealed in the
            vector store; ``AppIndexSearch(index_path=...)``: the app-side index file;
            ``TwoStageSearch(open_k=...)``: candidates; give ``embed_model=`` with each), or ``None``:
            single-stage, the store ranks the nodes' embeddings. Neither given: the store-held index where the
            vector store keeps payloads and reads by id, else single-stage with a ``StoreRanksWarning``; a
            store written before opens in its mode.
        embed_model: Sealed search: the model the index embeds with, also given to the store so it embeds
            queries itself (the retriever then never holds the clean query vector): a ``ProtectedEmbedding``,
            which the store reads through its base encoder (as LangChain's sealed store does), or a
            ``SealedEmbedding``.
        record_ids: ``"keyed"`` (default) or ``"clear"``: the ids the vector store holds (see
            :class:`SealedVectorStore`). The docstore's keys stay your node ids either way (its values are sealed).
        legacy_clear_ids: The vector store may hold shells under your clear ids (written before ids were keyed):
            look them up by id, sending those ids to the store (see :class:`SealedVectorStore`).

    Raises:
        FileNotFoundError: ``persist_dir`` holds no docstore or index store.
    """
    tenant = renamed_keyword(tenant, context, new="tenant=", old="sealed_storage_context(context=)", default="")
    if fetch_k is not None and search is _DEFAULT:
        warn_renamed("sealed_storage_context(fetch_k=...)", "search=TwoStageSearch(open_k=...)")
        search, fetch_k = TwoStageSearch.of(fetch_k), None
    if persist_dir is None:
        doc_kv, index_kv = SimpleKVStore(), SimpleKVStore()
    else:
        doc_kv = SimpleKVStore.from_persist_path(os.path.join(persist_dir, DOCSTORE_FILE))
        index_kv = SimpleKVStore.from_persist_path(os.path.join(persist_dir, INDEX_STORE_FILE))
    docstore = SimpleDocumentStore(simple_kvstore=SealedKVStore(doc_kv, key=key, tenant=tenant))  # type: ignore[arg-type]
    index_store = SimpleIndexStore(simple_kvstore=SealedKVStore(index_kv, key=key, tenant=tenant))  # type: ignore[arg-type]
    if not isinstance(vector_store, SealedVectorStore):
        if search is not _DEFAULT and fetch_k is not None:
            raise InvalidInputError("give either fetch_k= or search=, not both")
        mode = {"search": search} if search is not _DEFAULT else {"fetch_k": fetch_k}
        vector_store = SealedVectorStore(
            vector_store,
            key=key,
            sealed_metadata=sealed_metadata,
            tenant=tenant,
            embed_model=embed_model,
            record_ids=record_ids,
            legacy_clear_ids=legacy_clear_ids,
            **mode,
        )
    return StorageContext.from_defaults(
        docstore=docstore,
        index_store=index_store,
        vector_store=vector_store,
        persist_dir=None if persist_dir is None else str(persist_dir),
    )
