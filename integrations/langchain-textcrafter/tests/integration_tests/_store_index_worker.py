"""One worker process of the store-held index's real-process tests: a sealed store over a real engine.

Run as ``python _store_index_worker.py ENGINE ADDRESS COLLECTION KEY [replica]``. It reads one JSON command a line on
stdin and answers one JSON line on stdout, so the test decides the interleaving of several workers. The
``pause`` of an add blocks the worker at a chosen point of the write (before or after the store takes the
data records), that of a delete once the store deleted the records (before the tombstones), and that of a
compaction before its snapshot's head or before its deletes: the worker says where it stopped and reads its
next line, so it goes on when the test sends one (``continue``) or dies when the test kills it with SIGKILL,
never after a sleep. ``unchecked`` runs an add without :meth:`StoreIndex.confirm` or a delete without its
read-back (``IndexModes._index_again``), to show what each protects against.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_textcrafter import SealedVectorStore
from langchain_textcrafter._port import LangChainPort
from textcrafter_rag.sealed import StoreIndexSearch
from textcrafter_rag.sealed.index_modes import IndexModes
from textcrafter_rag.sealed.log import LOG_FIELD
from textcrafter_rag.sealed.records import canonical_record_id
from textcrafter_rag.sealed.store_index import StoreIndex

DIM = 64
#: The check each write runs after its store call, switched off by a command's ``unchecked``.
CHECKS = {"add": (StoreIndex, "confirm"), "delete": (IndexModes, "_index_again")}


class HashEmbeddings(Embeddings):
    """A fixed unit vector per text (the same in every process): each text is its own nearest record."""

    def _one(self, text: str) -> list[float]:
        seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
        v = np.random.default_rng(seed).standard_normal(DIM)
        return (v / np.linalg.norm(v)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


def say(**message: Any) -> None:
    print(json.dumps(message), flush=True)


@contextmanager
def unchecked(op: str, off: bool) -> Iterator[None]:
    """Run ``op`` without its check (``off``): the add's confirm, or the delete's read-back, made a no-op."""
    if not off:
        yield
        return
    cls, name = CHECKS[op]
    with mock.patch.object(cls, name, return_value=0):
        yield


def pausing(cls: type) -> type:
    """The engine's LangChain store, stopping where the test asked (data records only; the log passes)."""

    class Pausing(cls):  # type: ignore[misc, valid-type]
        pause: str | None = None
        #: What this process's reads by id asked the store for, one list a call (the store's view of them).
        asked: list[list[str]] | None = None
        #: Data records (neither the index log nor the marker) the store returned to reads by id.
        data_read = 0

        def get_by_ids(self, ids: Any) -> list[Document]:
            docs = super().get_by_ids(ids)
            if self.asked is not None:
                self.asked.append(sorted(map(str, ids)))
            self.data_read += sum(not {LOG_FIELD, "_tc_marker"} & set(d.metadata or {}) for d in docs)
            return docs

        #: Whether this process has written snapshot chunks (a compaction is under way).
        snapshot_written = False

        def delete(self, ids: Any = None, **kwargs: Any) -> Any:
            if self.snapshot_written and self.pause == "before-deletes":
                say(paused="before-deletes")  # the snapshot and its head are in the store; nothing deleted yet
                sys.stdin.readline()
            out = super().delete(ids, **kwargs)
            if self.pause == "after-delete":  # a delete's first call to the store: its records (the log's follow)
                self.pause = None
                say(paused="after-delete")  # the records are gone from the store; no tombstone logged yet
                sys.stdin.readline()
            return out

        def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
            kinds = {(d.metadata or {}).get(LOG_FIELD) for d in documents}
            if "seg" in kinds and self.snapshot_written and self.pause == "before-pointer":
                say(paused="before-pointer")  # the snapshot is in the store; no head names it yet
                sys.stdin.readline()
            self.snapshot_written = self.snapshot_written or "snap" in kinds
            data = not any({LOG_FIELD, "_tc_marker"} & set(d.metadata or {}) for d in documents)
            if data and self.pause == "before-store":
                say(paused="before-store")
                sys.stdin.readline()  # the test kills this process here
            out = super().add_documents(documents, **kwargs)
            if data and self.pause == "after-store":
                say(paused="after-store")
                sys.stdin.readline()
            return out

    return Pausing


def build(engine: str, address: str, collection: str) -> Any:
    if engine == "chroma":
        import chromadb
        from chromadb.config import Settings
        from langchain_chroma import Chroma

        host, port = address.rsplit(":", 1)
        client = chromadb.HttpClient(host=host, port=int(port), settings=Settings(anonymized_telemetry=False))
        cls = pausing(Chroma)
        return lambda e: cls(client=client, collection_name=collection, embedding_function=e)
    if engine == "qdrant":
        from langchain_qdrant import QdrantVectorStore
        from qdrant_client import QdrantClient, models

        client = QdrantClient(path=address)
        if not client.collection_exists(collection):
            client.create_collection(
                collection, vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE)
            )
        cls = pausing(QdrantVectorStore)
        return lambda e: cls(client=client, collection_name=collection, embedding=e)
    raise SystemExit(f"unknown engine {engine}")


def audit(store: SealedVectorStore, ids: list[str]) -> dict[str, Any]:
    """The data records the store holds (how many), those the index does not hold (stored but found by no
    search) and the entries whose record the store does not hold (dead: read and skipped by searches); as the
    user's ``ids`` where the test names them, else as the store's."""
    store._marker(write=False)  # a fresh process learns the index's dimension from the store's marker
    held = store._search.store_index()
    held.refresh()
    indexed = {canonical_record_id(i) for i in held.index.ids()}
    port = LangChainPort(store.store, store._shim, id_field=store._id_field)
    stored = {
        canonical_record_id(r.id)
        for batch in port.enumerate(500)
        for r in batch
        if LOG_FIELD not in r.fields and "_tc_marker" not in r.fields
    }
    names = {canonical_record_id(s): i for s, i in zip(store.store_ids(ids), ids, strict=True)}
    return {
        "stored": len(stored),
        "unindexed": sorted(names.get(i, i) for i in stored - indexed),
        "dead": sorted(names.get(i, i) for i in indexed - stored),
    }


def main() -> None:
    engine, address, collection, key = sys.argv[1:5]
    options = StoreIndexSearch(replica=sys.argv[5:] == ["replica"])
    store = SealedVectorStore(build(engine, address, collection), embedding=HashEmbeddings(), key=key, search=options)
    say(ready=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if op == "add":
                store.store.pause = cmd.get("pause")
                with unchecked(op, cmd.get("unchecked", False)):
                    ids = store.add_texts(cmd["texts"], ids=cmd["ids"])
                say(acked=ids)
            elif op == "find":  # each text's best hit: its own record, if the index finds it
                store.store.data_read, asked = 0, []
                found = []
                for t in cmd["texts"]:  # what each search read by id, beside what it found
                    store.store.asked = []
                    found.append([d.id for d in store.similarity_search(t, k=1)])
                    asked.append(store.store.asked)
                found_ids = [f[0] if f else None for f in found]
                loaded = store._search.store_index().snapshots.loaded
                say(
                    found=found_ids,
                    dead=store._search.dead,
                    data_read=store.store.data_read,
                    asked=asked,
                    loaded=loaded,
                )
            elif op == "compact":  # the pause stops it at a chosen point, for the test to kill it there
                store.store.pause = cmd.get("pause")
                say(compacted=store.compact_index())
            elif op == "delete":
                store.store.pause = cmd.get("pause")
                with unchecked(op, cmd.get("unchecked", False)):
                    store.delete(cmd["ids"])
                say(deleted=cmd["ids"])
            elif op == "audit":  # every data record the store holds, against every entry the index holds
                say(**audit(store, cmd.get("ids", [])))
            elif op == "exit":
                say(bye=True)
                return
        except Exception as exc:  # the test reads the error's class
            say(error=type(exc).__name__, message=str(exc))


if __name__ == "__main__":
    main()
