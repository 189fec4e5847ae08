"""Protect and seal before upsert: BBC News through ``ProtectedEmbeddings`` into Qdrant (local mode or a server).

What it does (offline, retrieval only, no LLM):

1. takes BBC News articles (``textcrafter_rag.data.bbc_news()``) with metadata (id, category, source),
2. embeds them with the bundled all-MiniLM-L6-v2 through ``ProtectedEmbeddings`` (shipped TextCrafter
   policy, eps 1.0) and upserts them with ``langchain_qdrant.QdrantVectorStore`` wrapped in a
   ``SealedVectorStore``: the article text and its ``headline`` are encrypted (AES-GCM, key from
   ``$TEXTCRAFTER_KEY`` or generated for the run) before Qdrant sees them; ``category`` and
   ``source`` stay plain so Qdrant can filter on them,
3. reads the stored points back (``with_vectors=True``) and compares the vectors with the clean MiniLM
   embeddings: each stored vector is the protected release, at distance eps from the clean one; the
   payload holds ciphertext, and in local mode no file under ``--path`` holds any article text,
4. answers a few queries (decrypted hits), one with a metadata filter.

The collection uses ``Distance.DOT``, not ``COSINE``: Qdrant normalises vectors on upsert into a
COSINE collection, so what it stored would no longer be the released vector.

Local mode (``QdrantClient(path=...)``) and a server (``QdrantClient(url=...)``) share one client API;
only the constructor differs, and the rest of this script is the same code path for both. Run::

    python examples/qdrant_protect_before_upsert.py                        # local mode, temp dir
    python examples/qdrant_protect_before_upsert.py --path ./qdrant-data   # local mode, kept on disk
    python examples/qdrant_protect_before_upsert.py --url http://localhost:6333  # a Qdrant server

Needs the ``qdrant`` extra (``qdrant-client``, ``langchain-qdrant``) and langchain-textcrafter. The
collection named by ``--collection`` is dropped and recreated. Reading it again later needs the same
``TEXTCRAFTER_KEY`` (``textcrafter keygen`` prints one).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from textwrap import shorten
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: Metadata fields sealed with the text (the headline is the article's first line); the rest stays filterable.
SEALED_METADATA = ("headline",)

QUERIES: list[tuple[str, str]] = [
    ("Which company reported a rise in quarterly profits?", "business"),
    ("Who won the championship final?", "sports"),
    ("What did the prime minister say about the election campaign?", "politics"),
    ("New mobile phone and broadband technology", "tech"),
    ("Which film won at the awards ceremony?", "entertainment"),
]


def load_articles(n_docs: int) -> tuple[list[str], list[dict[str, Any]]]:
    """``n_docs`` distinct BBC News articles spread evenly over the five classes, with metadata."""
    from textcrafter_rag.data import bbc_articles

    return bbc_articles(max(1, n_docs // 5))


def make_client(*, path: str | None, url: str | None, api_key: str | None = None) -> Any:
    """A ``QdrantClient``: a server at ``url`` if given, else local mode on disk at ``path``."""
    from qdrant_client import QdrantClient

    if url:
        return QdrantClient(url=url, api_key=api_key)
    return QdrantClient(path=path)


def example_key(*, keep: bool) -> str:
    """``$TEXTCRAFTER_KEY``, else a new key for this run (printed once if the collection is kept)."""
    from textcrafter_rag.sealing import generate_key

    key = os.environ.get("TEXTCRAFTER_KEY")
    if key:
        return key
    key = generate_key()
    if keep:
        print(
            f"TEXTCRAFTER_KEY is not set: generated a key. Keep it to read the collection again:\n"
            f"  export TEXTCRAFTER_KEY={key}"
        )
    else:
        print("TEXTCRAFTER_KEY is not set: generated a key for this run (the store is temporary)")
    return key


def category_filter(category: str) -> Any:
    """A Qdrant filter on the LangChain metadata field ``category``."""
    from qdrant_client import models

    return models.Filter(must=[models.FieldCondition(key="metadata.category", match=models.MatchValue(value=category))])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the example; returns a summary of what was stored and retrieved (also printed)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", default=None, help="local-mode storage directory (default: a temp dir)")
    ap.add_argument("--url", default=None, help="a Qdrant server, e.g. http://localhost:6333 (instead of --path)")
    ap.add_argument("--api-key", default=os.environ.get("QDRANT_API_KEY"), help="server API key (env QDRANT_API_KEY)")
    ap.add_argument("--collection", default="textcrafter-bbc", help="collection to (re)create")
    ap.add_argument("--n-docs", type=int, default=100, help="articles to ingest (default 100)")
    ap.add_argument("--k", type=int, default=3, help="results per query")
    args = ap.parse_args(argv)

    from langchain_core.documents import Document
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client import models

    from langchain_textcrafter import ProtectedEmbeddings, SealedVectorStore
    from textcrafter_rag import bundled_minilm
    from textcrafter_rag.testing import scan_for_plaintext

    tmp = None if (args.path or args.url) else tempfile.TemporaryDirectory(prefix="qdrant-protected-")
    path = args.path or (tmp.name if tmp is not None else None)
    bodies, metas = load_articles(args.n_docs)
    encoder = bundled_minilm()
    embeddings = ProtectedEmbeddings(base=encoder)  # shipped policy (eps 1.0); queries stay clean
    key = example_key(keep=tmp is None)

    # 1-2. protect, then upsert: the store only ever sees ProtectedEmbeddings' output
    client = make_client(path=path, url=args.url, api_key=args.api_key)
    if client.collection_exists(args.collection):
        client.delete_collection(args.collection)
    client.create_collection(
        args.collection,
        vectors_config=models.VectorParams(size=encoder.dimension, distance=models.Distance.DOT),
    )
    # The sealed store builds the Qdrant store itself, from the embeddings it hands the function.
    store = SealedVectorStore(
        lambda e: QdrantVectorStore(
            client=client, collection_name=args.collection, embedding=e, distance=models.Distance.DOT
        ),
        embedding=embeddings,
        key=key,
        sealed_metadata=SEALED_METADATA,
        search=None,  # single-stage: the store ranks the protected vectors (sealed modes: docs/sealed_search.md)
    )
    ids = list(range(len(bodies)))
    store.add_documents([Document(page_content=b, metadata=m) for b, m in zip(bodies, metas, strict=True)], ids=ids)
    where = args.url or f"local mode, {path}"
    print(f"upserted {client.count(args.collection).count} protected vectors into {args.collection!r} ({where})")

    # 3. what is stored: read it back and compare with the clean embeddings (computed here only)
    # Qdrant holds each point under a keyed id of ours (a UUID that names nothing); the sealed store maps them
    row = {str(sid): i for i, sid in enumerate(store.store_ids(ids))}
    points = client.retrieve(args.collection, ids=list(row), with_vectors=True, with_payload=True)
    points.sort(key=lambda p: row[str(p.id)])
    stored = np.asarray([p.vector for p in points], dtype=np.float32)
    clean = encoder.encode([bodies[row[str(p.id)]] for p in points])
    diff = np.linalg.norm(stored - clean, axis=1)
    cos = np.sum(stored * clean, axis=1) / (np.linalg.norm(stored, axis=1) * np.linalg.norm(clean, axis=1))
    p0 = points[0]
    print(f"point {p0.id}: stored text {p0.payload['page_content'][:56]}...")
    print(f"  stored metadata {p0.payload['metadata']}")
    opened = store.get_by_ids([ids[row[str(p0.id)]]])[0]
    print(
        f"  opened with the key: {shorten(opened.page_content, 60, placeholder='...')}  "
        f"headline {opened.metadata['headline']!r}"
    )
    head = " ".join(f"{v:+.3f}" for v in stored[0, :4])
    print(f"  stored vector[:4] {head}   clean: {' '.join(f'{v:+.3f}' for v in clean[0, :4])}")
    print(f"||stored - clean||: min {diff.min():.4f}  max {diff.max():.4f}  (policy eps {embeddings.mechanism.eps})")
    print(
        f"cosine(stored, clean): mean {cos.mean():.3f};  ||stored||: {np.linalg.norm(stored, axis=1).mean():.3f} "
        "(DOT keeps the release as is; COSINE would rescale it to 1)"
    )

    # 4. queries (clean query vectors against the protected store), the last one filtered on metadata
    results = []
    for n, (query, category) in enumerate(QUERIES):
        flt = category_filter(category) if n == len(QUERIES) - 1 else None
        hits = store.similarity_search(query, k=args.k, filter=flt)
        results.append(
            {
                "query": query,
                "category": category,
                "filtered": flt is not None,
                "hits": [h.metadata["category"] for h in hits],
            }
        )
        print(f"Q: {query}" + (f"  [filter category={category}]" if flt is not None else ""))
        for h in hits:
            print(f"   [{h.metadata['category']:>13}] {shorten(h.metadata['headline'], 60, placeholder='...')}")
    precision = float(np.mean([c == r["category"] for r in results for c in r["hits"]]))
    print(f"category precision@{args.k}: {precision:.2f}")

    summary = {
        "n_docs": len(points),
        "dim": int(stored.shape[1]),
        "eps": float(embeddings.mechanism.eps),
        "diff_norm": {"min": float(diff.min()), "max": float(diff.max())},
        "cosine_mean": float(cos.mean()),
        "rows_identical_to_clean": int(np.isclose(stored, clean, atol=1e-6).all(axis=1).sum()),
        "category_precision": precision,
        "queries": results,
        "where": where,
        "sealed_metadata": list(SEALED_METADATA),
        "opened_matches": opened.page_content == bodies[row[str(p0.id)]],
        "plaintext_hits_on_disk": None,
    }
    client.close()
    if path is not None and not args.url:  # local mode: every byte it wrote, read back
        hits = scan_for_plaintext([path], bodies + [m["headline"] for m in metas])
        summary["plaintext_hits_on_disk"] = len(hits)
        print(f"plaintext under {path}: {len(hits)} hits (every article and headline, and every 3-word fragment)")
    if tmp is not None:
        tmp.cleanup()
    return summary


if __name__ == "__main__":
    main()
