"""``textcrafter rebuild-index``: index every sealed record of a Chroma or Qdrant collection, from the store.

With ``--compact`` it then compacts the index's log into one sealed snapshot.

For a store written without the store-held index (an older release, the app-side index file) or whose log was
lost. It reads the records the engine lists, opens their sealed clean vectors with the key and logs them as
index entries in the store, with a progress bar; no text goes through an encoder, and nothing is deleted.
The key comes from a file or an environment variable, never from the command line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.embeddings import Embeddings

from textcrafter_rag.deprecation import add_renamed_flag
from textcrafter_rag.errors import InvalidInputError, TextcrafterError
from textcrafter_rag.sealed import StoreIndexSearch
from textcrafter_rag.sealing import load_key

from .sealed import SealedVectorStore

__all__ = ["main"]


class _NoEncoder(Embeddings):
    """A rebuild embeds nothing: the clean vectors are opened from the records. Some stores embed a probe text
    when built (``QdrantVectorStore`` checks the collection's dimension): that gets zeros of ``dim``."""

    def __init__(self, dim: int | None) -> None:
        self.dim = dim

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        if self.dim is None:
            raise InvalidInputError("rebuild-index embeds nothing")
        return [0.0] * self.dim


def _factory(args: argparse.Namespace) -> tuple[Callable[[Embeddings], Any], int | None]:
    if args.engine == "chroma":
        import chromadb
        from chromadb.config import Settings
        from langchain_chroma import Chroma

        client = chromadb.HttpClient(host=args.host, port=args.port, settings=Settings(anonymized_telemetry=False))
        return (lambda e: Chroma(client=client, collection_name=args.collection, embedding_function=e)), None
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    client = QdrantClient(path=args.path) if args.path else QdrantClient(url=args.url)
    vectors = client.get_collection(args.collection).config.params.vectors
    dim = getattr(vectors, "size", None)
    return (lambda e: QdrantVectorStore(client=client, collection_name=args.collection, embedding=e)), dim


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="textcrafter rebuild-index", description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", choices=("chroma", "qdrant"), required=True)
    ap.add_argument("--collection", required=True)
    ap.add_argument("--host", default="localhost", help="chroma: the server's host")
    ap.add_argument("--port", type=int, default=8000, help="chroma: the server's port")
    ap.add_argument("--path", default=None, help="qdrant: a local-mode directory")
    ap.add_argument("--url", default=None, help="qdrant: a server's URL")
    ap.add_argument("--key-file", default=None, help="file holding the key (what `textcrafter keygen` printed)")
    ap.add_argument("--key-env", default=None, help="environment variable holding the key, e.g. TEXTCRAFTER_KEY")
    ap.add_argument("--tenant", default="", help="the tenant the records were written under")
    add_renamed_flag(ap, "--context", "--tenant", dest="tenant")
    ap.add_argument("--batch-size", type=int, default=1_000)
    ap.add_argument(
        "--compact",
        action="store_true",
        help="then compact the index's log into one sealed snapshot (a new process opens from it)",
    )
    ap.add_argument("--no-progress", action="store_true")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Rebuild; ``0`` on success, ``2`` with the error's message (never a key) on a refusal."""
    args = parser().parse_args(argv)
    try:
        return _rebuild(args)
    except TextcrafterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _rebuild(args: argparse.Namespace) -> int:
    if args.engine == "qdrant" and not (args.path or args.url):
        raise InvalidInputError("qdrant needs --path (local mode) or --url")
    key = load_key(args.key_file, env=args.key_env)
    factory, dim = _factory(args)
    store = SealedVectorStore(
        factory, embedding=_NoEncoder(dim), key=key, tenant=args.tenant, search=StoreIndexSearch()
    )
    n = store.rebuild_index(batch_size=args.batch_size, progress=not args.no_progress)
    print(f"indexed {n} sealed records of {args.collection!r} ({store.skipped} skipped: another key or tenant)")
    if args.compact:
        done = store.compact_index()
        print("compacted the index into a snapshot" if done else "not compacted: the codebook is still training")
    return 0


if __name__ == "__main__":
    sys.exit(main())
