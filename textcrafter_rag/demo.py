"""The quickstart: a sealed, protected BBC News store, and retrieval before and after.

Runs offline with what the package installs: the bundled all-MiniLM-L6-v2 encoder, the
shipped TextCrafter policy (or a quick fit of one), the BBC News corpus and FAISS. The store
holds what a real deployment should hold: protected vectors and sealed (AES-GCM) texts, so
neither a vector nor the text beside it gives the document away; the key stays with the app.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from textwrap import shorten

import faiss
import numpy as np

from .autofit import policy_home
from .data import bbc_news
from .encoders import BUNDLED_MODEL_ID, bundled_minilm
from .numerics import row_cosines
from .policies import shipped_policy_path
from .protector import Protector
from .sealing import Sealer, generate_key
from .textcrafter import TextCrafter, fit_textcrafter

__all__ = ["run_demo", "DEFAULT_QUERIES"]

DEFAULT_QUERIES: tuple[str, ...] = (
    "oil prices push the stock market down",
    "a new mobile phone with a better camera",
    "the prime minister's election campaign",
    "injury worries before the football match",
    "winners at the film awards ceremony",
)


def _bbc_docs(n_docs: int) -> tuple[list[str], list[str], list[str]]:
    """(headlines, bodies, labels): the first ``n_docs/5`` articles of each class."""
    texts, labels = bbc_news()
    per_class = max(1, n_docs // len(set(labels)))
    heads, bodies, labs = [], [], []
    counts: dict[str, int] = {}
    for text, label in zip(texts, labels):
        if counts.get(label, 0) >= per_class:
            continue
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if len(lines) < 2:
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


def run_demo(
    *, n_docs: int = 500, queries: Sequence[str] | None = None, refit: bool = False, eps: float = 1.0, k: int = 3
) -> int:
    """Run the quickstart and print what happened. Returns an exit code."""
    t0 = time.perf_counter()
    print("== textcrafter-rag quickstart ==")
    encoder = bundled_minilm()
    policy, where = _policy(refit, eps)
    protector = Protector(base=encoder, mechanism=policy)
    print(f"Encoder: {encoder.model_id} ({encoder.dimension}-d, unit norm). Policy: {where}, eps={policy.eps}.")

    heads, bodies, labels = _bbc_docs(n_docs)
    print(
        f"Corpus: {len(bodies)} BBC News articles ({', '.join(sorted(set(labels)))}); "
        "each document is the article's first paragraphs."
    )
    clean = encoder.encode(bodies)
    protected = protector.protect(clean)  # what embed_documents does after encoding
    dist = np.linalg.norm(protected - clean, axis=1)
    cos = row_cosines(protected, clean)
    print(
        f"Perturbation norm ||f_adv - f0||: min {dist.min():.6f}, mean {dist.mean():.6f}, max {dist.max():.6f} "
        f"(target eps {policy.eps}); cosine(protected, clean): mean {cos.mean():.3f}."
    )
    again = protector.protect(clean[:1])
    moved = np.linalg.norm(again[0] - protected[0])
    print(f"Fresh noise on every call: protecting document 0 twice differs by {moved:.3f}.")

    # The store: protected vectors beside sealed texts. The key never goes to the store.
    sealer = Sealer(os.environ.get("TEXTCRAFTER_KEY") or generate_key())
    sealed = [sealer.seal(f"[{labels[i]}] {heads[i]}", record_id=str(i)) for i in range(len(heads))]
    print(
        f"\nWhat the store holds for document 0: vector [{', '.join(f'{v:+.3f}' for v in protected[0, :4])}, ...] "
        f"and text {shorten(sealed[0], 56, placeholder='...')}"
    )
    print(
        "  (AES-256-GCM, a fresh nonce per record, the record id bound to it; the app opens hits with its key, "
        "from TEXTCRAFTER_KEY or `textcrafter keygen`.)"
    )

    idx_clean = faiss.IndexFlatIP(clean.shape[1])
    idx_clean.add(clean)
    idx_prot = faiss.IndexFlatIP(clean.shape[1])
    idx_prot.add(protected)

    # Headline -> its own article: a retrieval task with known answers.
    q = encoder.encode(heads)
    ranks = {}
    for name, index in (("clean index", idx_clean), ("protected index", idx_prot)):
        _, top = index.search(q, 10)
        hit = top == np.arange(len(heads))[:, None]
        ranks[name] = (hit[:, 0].mean(), hit.any(axis=1).mean())
    print("\nRetrieval check (query = headline, answer = its article, clean queries):")
    for name, (r1, r10) in ranks.items():
        print(f"  {name:16s} Recall@1 {r1:.3f}   Recall@10 {r10:.3f}")

    print(f"\nTop-{k} results, clean index vs protected, sealed store (texts opened with the key):")
    for query in queries or DEFAULT_QUERIES:
        qv = protector.embed_query(query)[None, :]
        _, a = idx_clean.search(qv, k)
        _, b = idx_prot.search(qv, k)
        print(f"\n  Query: {query!r}")
        for i in range(k):
            left = shorten(f"[{labels[a[0, i]]}] {heads[a[0, i]]}", 48, placeholder="...")
            j = int(b[0, i])
            right = shorten(sealer.open(sealed[j], record_id=str(j)), 48, placeholder="...")
            print(f"    {i + 1}. {left:48s} | {right}")
    print(
        f"\nWhat happened: every document vector was moved by exactly eps={policy.eps} in a fresh random "
        "direction chosen by the policy before indexing, and every text was sealed; queries stay clean "
        "(protect_queries=False). Whoever reads the store sees protected vectors and ciphertext only. "
        f"Done in {time.perf_counter() - t0:.1f}s."
    )
    return 0
