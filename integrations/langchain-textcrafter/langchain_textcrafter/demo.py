"""The quickstart: the recommended setup on 500 BBC News articles, and what each party gets from it.

The README's two lines, run for real: ``ProtectedEmbeddings`` over the bundled all-MiniLM-L6-v2 and the
default ``SealedVectorStore`` (the store-held index: the store ranks nothing) over LangChain's
``InMemoryVectorStore``.
It prints what the store holds for one record, retrieval (headline -> its article) against a plain store of
the clean vectors, the top results of a few queries side by side, and what an attacker who reads the store
and guesses texts gets from it. Offline: the bundled encoder, the shipped policy, the BBC News corpus.

``textcrafter demo`` runs this module as a program (the core imports no integration): ``python -m
langchain_textcrafter.demo``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from textwrap import shorten

import numpy as np
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from textcrafter_rag.autofit import policy_home
from textcrafter_rag.data import bbc_news
from textcrafter_rag.demo import DEFAULT_QUERIES
from textcrafter_rag.encoders import BUNDLED_MODEL_ID, Encoder, bundled_minilm
from textcrafter_rag.numerics import row_cosines, unit_rows
from textcrafter_rag.policies import shipped_policy_path
from textcrafter_rag.sealing import generate_key
from textcrafter_rag.textcrafter import TextCrafter, fit_textcrafter

from .embeddings import ProtectedEmbeddings
from .sealed import SealedVectorStore

__all__ = ["main", "run_demo"]

#: Headline queries of the retrieval check (each a search through the sealed store: fetch, open, rank).
_CHECKED_QUERIES = 200


def _bbc_docs(n_docs: int) -> tuple[list[str], list[str], list[str]]:
    """(headlines, bodies, labels): the first ``n_docs/5`` articles of each class."""
    texts, labels = bbc_news()
    per_class = max(1, n_docs // len(set(labels)))
    heads, bodies, labs = [], [], []
    counts: dict[str, int] = {}
    for text, label in zip(texts, labels):
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if counts.get(label, 0) >= per_class or len(lines) < 2:
            continue
        counts[label] = counts.get(label, 0) + 1
        heads.append(lines[0])
        bodies.append(" ".join(lines[1:3]))
        labs.append(label)
    return heads, bodies, labs


def _policy(refit: bool, eps: float) -> tuple[TextCrafter, str]:
    shipped = shipped_policy_path(BUNDLED_MODEL_ID, eps=eps)
    if shipped is not None and not refit:
        return TextCrafter.load(shipped), f"shipped policy {shipped.name}"
    cache = policy_home() / f"demo-quick-eps{eps:g}"
    if (cache / "config.json").is_file() and not refit:
        return TextCrafter.load(cache), f"cached quick policy {cache}"
    print(f"Fitting a quick policy for the bundled MiniLM at eps={eps:g} (about a minute)...")
    tc = fit_textcrafter(eps=eps, quick=True, progress=False)
    tc.save(cache)
    return tc, f"quick policy fitted now, cached at {cache}"


def _clip(value: object, width: int = 64) -> str:
    """``value`` as text, cut to ``width`` characters (a token has no spaces for ``textwrap.shorten`` to cut at)."""
    text = str(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _held(store: SealedVectorStore, record_id: str) -> dict:
    """What ``InMemoryVectorStore`` keeps for one record (under its keyed id): id, vector, text and metadata."""
    return store.store.store[store.store_ids([record_id])[0]]  # type: ignore[attr-defined]


def _show_record(store: SealedVectorStore, clean: np.ndarray, bodies: Sequence[str]) -> None:
    held = _held(store, "0")
    vec = np.asarray(held["vector"], dtype=np.float64)
    print("\nWhat the store holds for article 0 (InMemoryVectorStore's own record, as a thief reads it):")
    print(f"  id       {held['id']!r} (keyed: the app's id '0' is sealed inside, in _tc_uid)")
    print(f"  text     {_clip(held['text'])}")
    for name, value in sorted(held["metadata"].items()):
        print(f"  {name:8s} {_clip(value)}")
    print(
        f"  vector   [{', '.join(f'{v:+.3f}' for v in vec[:4])}, ...] (norm {np.linalg.norm(vec):.3f}; cosine with the "
        f"article's clean vector {row_cosines(vec[None], clean[:1])[0]:+.3f})"
    )
    everything = " ".join(str(r) for r in store.store.store.values())  # type: ignore[attr-defined]
    leaked = sum(body[:40] in everything for body in bodies)
    print(
        f"  Plaintext in the whole store: {leaked} of {len(bodies)} articles. Texts and the named metadata are "
        "AES-256-GCM ciphertext bound to the record id; _tc_vec is the clean vector, sealed the same way; the "
        "vector is a keyed random unit vector of the record id, unrelated to the text (the store ranks nothing)."
    )


def _retrieval(store: SealedVectorStore, encoder: Encoder, clean: np.ndarray, heads: Sequence[str]) -> None:
    n = min(_CHECKED_QUERIES, len(heads))
    q = encoder.encode(list(heads[:n]))
    plain_top = np.argsort(-(unit_rows(q) @ unit_rows(clean).T), axis=1)[:, :10]  # a plain store of clean vectors
    t0 = time.perf_counter()  # the headlines embedded in one batch above; each searched by its clean vector
    sealed_top = [[int(d.id) for d in store.similarity_search_by_vector(v.tolist(), k=10)] for v in q]
    per_query = (time.perf_counter() - t0) / n
    print(f"\nRetrieval (query = one of {n} headlines, answer = its article; queries stay clean):")
    for name, tops in (("plain store, clean vectors", plain_top.tolist()), ("sealed store (default)", sealed_top)):
        r1 = np.mean([t[0] == i for i, t in enumerate(tops)])
        r10 = np.mean([i in t for i, t in enumerate(tops)])
        print(f"  {name:28s} Recall@1 {r1:.3f}   Recall@10 {r10:.3f}")
    print(
        f"  (sealed search: {per_query * 1000:.1f} ms a query to read the index log, scan the index, fetch the best "
        "records by id (k and 8 more while the index is exact), open them and rank them)"
    )


def _side_by_side(store, encoder, clean, heads, labels, queries, k) -> None:
    print(f"\nTop-{k}: a plain store of clean vectors | the sealed store (documents opened with the key):")
    for query in queries:
        plain = np.argsort(-(unit_rows(encoder.encode([query])) @ unit_rows(clean).T)[0])[:k]
        sealed = store.similarity_search(query, k=k)
        print(f"\n  Query: {query!r}")
        for i in range(k):
            left = shorten(f"[{labels[plain[i]]}] {heads[plain[i]]}", 48, placeholder="...")
            doc = sealed[i]
            right = shorten(f"[{doc.metadata['category']}] {doc.metadata['headline']}", 48, placeholder="...")
            print(f"    {i + 1}. {left:48s} | {right}")


def _guessing_attacker(store: SealedVectorStore, clean: np.ndarray, protected: np.ndarray, n: int) -> None:
    """The thief reads the store, knows the encoder, has no key, and guesses texts: here the true ones."""
    stored = np.asarray([_held(store, str(i))["vector"] for i in range(n)], dtype=np.float64)
    guesses = clean  # the best guesses there are, every article's own text, embedded with the public encoder
    print(
        "\nA guessing attacker: reads the store, knows the encoder, has no key, and guesses every article's exact "
        "text (the best guess there is). Does a guess find its own record, and how close is it?"
    )
    rows = (
        ("plain store (clean vectors)", clean),
        ("ProtectedEmbeddings, single-stage", protected),
        ("sealed store (default)", stored),
    )
    for name, vectors in rows:
        sims = unit_rows(guesses) @ unit_rows(vectors).T
        found = float(np.mean(sims.argmax(axis=1) == np.arange(n)))
        own = float(np.mean(np.diag(sims)))
        print(f"  {name:36s} its record ranked first {found:6.1%}   cosine with its record {own:+.3f}")
    print(
        f"  (chance: {1 / n:.1%}.) The texts give a guess nothing to check against: AES-GCM with a fresh "
        "nonce per value. Protection alone still lets a right guess find its record; the sealed store does not."
    )


def run_demo(
    *, n_docs: int = 500, queries: Sequence[str] | None = None, refit: bool = False, eps: float = 1.0, k: int = 3
) -> int:
    """Run the quickstart and print what happened. Returns an exit code."""
    t0 = time.perf_counter()
    print("== textcrafter-rag quickstart: ProtectedEmbeddings + the default SealedVectorStore ==")
    encoder = bundled_minilm()
    policy, where = _policy(refit, eps)
    heads, bodies, labels = _bbc_docs(n_docs)
    print(f"Encoder: {encoder.model_id} ({encoder.dimension}-d). Policy: {where}, eps={policy.eps}.")
    print(f"Corpus: {len(bodies)} BBC News articles ({', '.join(sorted(set(labels)))}), first paragraphs.")
    print(
        "\n  embeddings = ProtectedEmbeddings(base=bundled_minilm())\n"
        "  store = SealedVectorStore(InMemoryVectorStore, embedding=embeddings, key=KEY,\n"
        '                            sealed_metadata=("category", "headline"))\n'
        "  store.add_documents(docs, ids=ids)"
    )
    key = os.environ.get("TEXTCRAFTER_KEY") or generate_key()
    made: dict[str, np.ndarray] = {}  # the clean vectors the encoder makes for the store: the plain store's

    def encode(texts: list[str]) -> np.ndarray:
        out = encoder.encode(texts)
        made.update(zip(texts, out))
        return out

    base = Encoder(encode, dimension=encoder.dimension, model_id=encoder.model_id, normalize=True)
    embeddings = ProtectedEmbeddings(base=base, mechanism=policy)
    store = SealedVectorStore(
        InMemoryVectorStore, embedding=embeddings, key=key, sealed_metadata=("category", "headline")
    )
    docs = [
        Document(page_content=body, metadata={"category": label, "headline": head})
        for head, body, label in zip(heads, bodies, labels)
    ]
    t_add = time.perf_counter()
    store.add_documents(docs, ids=[str(i) for i in range(len(docs))])
    print(f"  Indexed {len(docs)} documents in {time.perf_counter() - t_add:.1f}s.")

    clean = np.stack([made[body] for body in bodies])  # each article embedded once, by the store's encoder
    _show_record(store, clean, bodies)
    _retrieval(store, encoder, clean, heads)
    _side_by_side(store, encoder, clean, heads, labels, list(queries or DEFAULT_QUERIES), k)
    protected = policy.protect(clean)  # what ProtectedEmbeddings alone would store (search=None: single-stage)
    moved, cos = np.linalg.norm(protected - clean, axis=1), row_cosines(protected, clean)
    print(
        "\nProtectedEmbeddings alone (search=None, the store ranks its vectors) would store each vector moved by "
        f"exactly eps: Perturbation norm ||f_adv - f0|| min {moved.min():.6f}, mean {moved.mean():.6f}, max "
        f"{moved.max():.6f}; cosine with the clean vector: mean {cos.mean():.3f}."
    )
    _guessing_attacker(store, clean, protected, len(bodies))
    print(
        "\nWhat happened: the store received ciphertext, keyed random vectors and the sealed index log only; every "
        "search read the log, scanned the index in this process, fetched its best records by keyed id and "
        "ranked them by their sealed clean vectors. "
        "The key stays with the app (TEXTCRAFTER_KEY, or `textcrafter keygen`). "
        f"Done in {time.perf_counter() - t0:.1f}s."
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m langchain_textcrafter.demo [--docs N] [--query Q ...] [--eps E] [--refit]``."""
    ap = argparse.ArgumentParser(prog="python -m langchain_textcrafter.demo", description=__doc__)
    ap.add_argument("--docs", type=int, default=500, help="number of BBC News articles to index")
    ap.add_argument("--query", action="append", help="a query to run (repeatable)")
    ap.add_argument("--eps", type=float, default=1.0, help="the shipped policy's eps (1.0 or 2.5)")
    ap.add_argument("--refit", action="store_true", help="fit a fresh quick policy instead of the shipped one")
    args = ap.parse_args(argv)
    return run_demo(n_docs=args.docs, queries=args.query, refit=args.refit, eps=args.eps)


if __name__ == "__main__":
    sys.exit(main())
