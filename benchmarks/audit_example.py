"""Build the example store audited in ``results/audit_example/``: WikiText-2 test sentences + the bundled MiniLM.

Writes ``OUT/store.npy`` (raw, unprotected ``(n, 384)`` vectors) and ``OUT/texts.jsonl`` (row i's text).
The sentences are the first ``--n`` held-out WikiText-2 test sentences of at most 24 words, the
selection of ``privacy.py``, so the audit's "before" row is comparable with its ``none`` row::

    python benchmarks/audit_store.py --out build/audit_store
    textcrafter audit --vectors build/audit_store/store.npy --texts build/audit_store/texts.jsonl \\
        --data-dir ../shared/datasets --out benchmarks/results/audit_example
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None, help="benchmark datasets (default: ../shared/datasets if present)")
    ap.add_argument("--n", type=int, default=200, help="sentences in the store")
    ap.add_argument("--out", default="build/audit_store", help="folder for store.npy and texts.jsonl")
    args = ap.parse_args(argv)
    from textcrafter_rag.data import wikitext_sentences
    from textcrafter_rag.encoders import bundled_minilm

    texts = [t for t in wikitext_sentences("test", data_dir=args.data_dir) if len(t.split()) <= 24][: args.n]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "store.npy", bundled_minilm().encode(texts), allow_pickle=False)
    (out / "texts.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    print(f"wrote {len(texts)} vectors and texts to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
