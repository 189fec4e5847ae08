"""A protected, sealed RAG store: BBC News through ``ProtectedEmbeddings`` into a FAISS index on disk.

What it does (offline, retrieval only, no LLM):

1. takes a few hundred BBC News articles (``textcrafter_rag.data.bbc_news()``),
2. embeds them with the bundled all-MiniLM-L6-v2 through ``ProtectedEmbeddings`` and writes a
   LangChain FAISS store to disk (``save_local``) through a ``SealedVectorStore``: the texts and
   the ``title`` metadata are encrypted (AES-GCM) before FAISS sees them; the key comes from
   ``$TEXTCRAFTER_KEY`` (``textcrafter keygen``) or is generated for the run,
3. reopens it through a new sealed store (``load_local`` in its store function) and answers a few
   queries (decrypted hits),
4. reads the FAISS index file back and shows the vectors on disk are the protected ones, not
   the raw MiniLM embeddings (cosine and norm of the difference), and how much retrieval moved,
   and scans every file of the store for the articles' text (3-word fragments included): 0 hits,
5. optionally inverts a few stored vectors with a trained attacker (``--inverter DIR``).

Run::

    python examples/protected_rag.py --quick                          # shipped TextCrafter policy
    python examples/protected_rag.py --quick --policy path/to/policy  # a policy you fitted
    python examples/protected_rag.py --quick --policy gaussian:s=0.02 # a baseline, for comparison

Needs ``pip install -e ./integrations/langchain-textcrafter[test]`` (langchain-community, faiss-cpu).
Reopening a kept store (``--store-dir``) needs the same ``TEXTCRAFTER_KEY``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: Metadata fields sealed with the text: the title repeats the article's opening.
SEALED_METADATA = ("title",)

QUERIES: list[tuple[str, str]] = [
    ("Which company reported a rise in quarterly profits?", "business"),
    ("Who won the championship final?", "sports"),
    ("What did the prime minister say about the election campaign?", "politics"),
    ("New mobile phone and broadband technology", "tech"),
    ("Which film won at the awards ceremony?", "entertainment"),
]


def load_articles(n: int, *, max_chars: int = 1200) -> tuple[list[str], list[dict[str, Any]]]:
    """``n`` BBC News articles spread evenly over the five classes (headline + opening, truncated)."""
    from textcrafter_rag.data import bbc_news

    texts, labels = bbc_news()
    idx = np.unique(np.linspace(0, len(texts) - 1, num=min(n, len(texts))).round().astype(int))
    docs, metas = [], []
    for i in idx:
        title, _, body = texts[i].partition("\n")
        body = " ".join(body.split())
        if len(body) > max_chars:
            body = body[:max_chars].rsplit(" ", 1)[0]
        docs.append(f"{title.strip()}. {body}")
        metas.append({"article": int(i), "label": labels[i], "title": title.strip()})
    return docs, metas


def resolve_policy(spec: str) -> Any:
    """``shipped`` -> None (the policy shipped for MiniLM); a directory -> itself; else a baseline spec."""
    if spec == "shipped":
        return None
    if Path(spec).is_dir():
        return spec
    from textcrafter_rag import from_spec

    return from_spec(spec)


def example_key(*, keep: bool) -> str:
    """``$TEXTCRAFTER_KEY``, else a new key for this run (printed once if the store is kept on disk)."""
    from textcrafter_rag.sealing import generate_key

    key = os.environ.get("TEXTCRAFTER_KEY")
    if key:
        return key
    key = generate_key()
    if keep:
        print(
            f"TEXTCRAFTER_KEY is not set: generated a key. Keep it to reopen the store:\n  export TEXTCRAFTER_KEY={key}"
        )
    else:
        print("TEXTCRAFTER_KEY is not set: generated a key for this run (the store is temporary)")
    return key


def _cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def _token_f1(a: str, b: str) -> float:
    ta, tb = re.findall(r"\w+", a.lower()), re.findall(r"\w+", b.lower())
    common = sum(min(ta.count(t), tb.count(t)) for t in set(ta))
    return 0.0 if not common else 2 * common / (len(ta) + len(tb))


def invert_stored_vectors(
    stored: np.ndarray, raw: np.ndarray, texts: list[str], *, inverter_dir: str | None
) -> list[dict[str, Any]] | None:
    """HOOK: reconstruct text from a few stored (protected) vectors and from the raw ones.

    Uses ``textcrafter_rag.attacks`` (``Inverter.load(DIR).invert(vectors)``) when it is installed
    and ``--inverter DIR`` points to a trained attacker (e.g. one saved by the attack benchmark).
    Returns ``None`` (and says why) otherwise; adapt this function if the attack API changes.
    """
    if inverter_dir is None:
        print("  [hook] pass --inverter DIR (a trained textcrafter_rag.attacks Inverter) to invert stored vectors")
        return None
    try:
        from textcrafter_rag.attacks.inverter import Inverter
    except ImportError as exc:
        print(f"  [hook] textcrafter_rag.attacks is not available ({exc}); skipping the inversion demo")
        return None
    inverter = Inverter.load(inverter_dir, device="cpu")
    from_protected = inverter.invert(stored)
    from_raw = inverter.invert(raw)
    rows = []
    for text, p, r in zip(texts, from_protected, from_raw, strict=True):
        rows.append(
            {
                "original": text,
                "from_raw": r,
                "from_protected": p,
                "f1_raw": _token_f1(text, r),
                "f1_protected": _token_f1(text, p),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the demo; returns a summary (also printed, and written with ``--json``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="at most 100 articles, openings cut to 700 characters")
    ap.add_argument("--n-docs", type=int, default=300, help="articles to ingest (default 300)")
    ap.add_argument(
        "--policy",
        default="shipped",
        help="'shipped' (the MiniLM policy), a policy directory, or a baseline spec like gaussian:s=0.02",
    )
    ap.add_argument("--protect-queries", action="store_true", help="also protect query vectors")
    ap.add_argument("--store-dir", default=None, help="where to write the FAISS store (default: a temp dir)")
    ap.add_argument("--k", type=int, default=3, help="results per query")
    ap.add_argument("--inverter", default=None, help="directory of a trained attacker to invert stored vectors")
    ap.add_argument("--n-invert", type=int, default=3, help="stored vectors to invert")
    ap.add_argument("--json", default=None, help="write the summary to this file")
    args = ap.parse_args(argv)

    import faiss
    from langchain_community.docstore.in_memory import InMemoryDocstore
    from langchain_community.vectorstores import FAISS

    from langchain_textcrafter import ProtectedEmbeddings, SealedVectorStore
    from textcrafter_rag import MissingPolicyError, bundled_minilm
    from textcrafter_rag.testing import scan_for_plaintext

    n_docs = min(args.n_docs, 100) if args.quick else args.n_docs
    t0 = time.perf_counter()
    texts, metas = load_articles(n_docs, max_chars=700 if args.quick else 1200)
    encoder = bundled_minilm()
    try:
        embeddings = ProtectedEmbeddings(
            base=encoder, mechanism=resolve_policy(args.policy), protect_queries=args.protect_queries
        )
    except MissingPolicyError as exc:
        print(
            f"error: {exc}\n(for a quick look without a TextCrafter policy, try --policy gaussian:s=0.02)",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    print(f"policy: {embeddings.mechanism!r}  protect_queries={embeddings.protect_queries}")

    # 1-2. ingest through the protected embeddings and the sealed store, and persist
    key = example_key(keep=args.store_dir is not None)
    tmp = None if args.store_dir else tempfile.TemporaryDirectory(prefix="protected-rag-")
    store_dir = Path(args.store_dir or tmp.name)  # type: ignore[union-attr]
    # The sealed store builds the FAISS store itself, from the embeddings it hands the function.
    written = SealedVectorStore(
        lambda e: FAISS(
            embedding_function=e,
            index=faiss.IndexFlatL2(encoder.dimension),
            docstore=InMemoryDocstore(),
            index_to_docstore_id={},
        ),
        embedding=embeddings,
        key=key,
        sealed_metadata=SEALED_METADATA,
        search=None,  # single-stage: the store ranks the protected vectors (sealed modes: docs/sealed_search.md)
    )
    ids = [f"article-{m['article']}" for m in metas]
    written.add_texts(texts, metas, ids=ids)
    written.store.save_local(str(store_dir))  # FAISS's own files: protected vectors, sealed texts and titles
    t_ingest = time.perf_counter() - t0
    print(f"ingested {len(texts)} articles into {store_dir} in {t_ingest:.1f}s")

    # 3. reload (the docstore pickle was written by us above) and answer queries through the sealed store
    loaded = SealedVectorStore(
        lambda e: FAISS.load_local(str(store_dir), e, allow_dangerous_deserialization=True),
        embedding=embeddings,
        key=key,
        sealed_metadata=SEALED_METADATA,
        search=None,  # single-stage: the store ranks the protected vectors (sealed modes: docs/sealed_search.md)
    )
    raw = encoder.encode(texts)  # the raw MiniLM embeddings, for comparison only (never stored)
    raw_store = FAISS.from_embeddings(list(zip(texts, raw.tolist(), strict=True)), embeddings, metadatas=metas)
    results, overlaps, label_hits = [], [], []
    for query, label in QUERIES:
        hits = loaded.similarity_search(query, k=args.k)
        raw_hits = raw_store.similarity_search(query, k=args.k)
        articles = [h.metadata["article"] for h in hits]
        overlap = len(set(articles) & {h.metadata["article"] for h in raw_hits}) / args.k
        overlaps.append(overlap)
        label_hits.append(np.mean([h.metadata["label"] == label for h in hits]))
        results.append({"query": query, "titles": [h.metadata["title"] for h in hits], "overlap_with_raw": overlap})
        print(f"\nQ: {query}")
        for h in hits:
            print(f"   [{h.metadata['label']:>13}] {h.metadata['title']}")

    # 4. what is on disk: read the FAISS file itself and compare with the raw embeddings
    on_disk = faiss.read_index(str(store_dir / "index.faiss"))
    row_of = {sid: i for i, sid in enumerate(loaded.store_ids(ids))}  # FAISS holds keyed ids, not ours
    # the articles' rows (the store also holds the sealed store's marker record, under its own keyed id)
    pairs = [(i, row_of[sid]) for i, sid in sorted(loaded.store.index_to_docstore_id.items()) if sid in row_of]
    stored = on_disk.reconstruct_n(0, on_disk.ntotal)[[i for i, _ in pairs]]
    rows = [r for _, r in pairs]
    order = [texts[r] for r in rows]
    raw_in_order = raw[rows]
    cos = _cosine_rows(stored, raw_in_order)
    diff = np.linalg.norm(stored - raw_in_order, axis=1)
    identical = int(np.isclose(stored, raw_in_order, atol=1e-6).all(axis=1).sum())
    print(f"\nvectors on disk ({store_dir / 'index.faiss'}): {stored.shape[0]} x {stored.shape[1]}")
    print(f"  cosine(stored, raw MiniLM): mean {cos.mean():.3f}  min {cos.min():.3f}  max {cos.max():.3f}")
    print(f"  ||stored - raw||:           mean {diff.mean():.3f}  min {diff.min():.3f}")
    print(f"  rows identical to raw:      {identical} / {stored.shape[0]}")
    print(
        f"  retrieval overlap@{args.k} with an unprotected store: {np.mean(overlaps):.2f}; "
        f"label precision@{args.k}: {np.mean(label_hits):.2f}"
    )
    files = sorted(p.name for p in store_dir.iterdir())
    plaintext_hits = scan_for_plaintext([store_dir], texts + [m["title"] for m in metas])
    print(
        f"  plaintext in the store's files ({', '.join(files)}): {len(plaintext_hits)} hits "
        "(every article and title, and every 3-word fragment of them, looked for)"
    )

    # 5. the inversion hook
    print("\ninversion of stored vectors:")
    n_inv = min(args.n_invert, len(order))
    inverted = invert_stored_vectors(stored[:n_inv], raw_in_order[:n_inv], order[:n_inv], inverter_dir=args.inverter)
    for row in inverted or []:
        print(f"  original:       {row['original'][:100]}")
        print(f"  from raw:       {row['from_raw'][:100]}  (token F1 {row['f1_raw']:.2f})")
        print(f"  from protected: {row['from_protected'][:100]}  (token F1 {row['f1_protected']:.2f})")

    summary = {
        "n_docs": len(texts),
        "dim": int(stored.shape[1]),
        "policy": repr(embeddings.mechanism),
        "store_dir": str(store_dir),
        "cosine_stored_raw": {"mean": float(cos.mean()), "min": float(cos.min()), "max": float(cos.max())},
        "diff_norm_mean": float(diff.mean()),
        "rows_identical_to_raw": identical,
        "retrieval_overlap_with_raw": float(np.mean(overlaps)),
        "label_precision": float(np.mean(label_hits)),
        "sealed_metadata": list(SEALED_METADATA),
        "plaintext_hits_on_disk": len(plaintext_hits),
        "queries": results,
        "inversion": inverted,
        "seconds": time.perf_counter() - t0,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    print(f"\ndone in {summary['seconds']:.1f}s")
    if tmp is not None:
        tmp.cleanup()
    return summary


if __name__ == "__main__":
    main()
