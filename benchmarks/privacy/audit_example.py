"""The example audit in ``results/audit_example/``: build a raw store, then run ``textcrafter audit`` on it.

The store is the first ``--n`` held-out WikiText-2 test sentences of at most 24 words (the selection
of ``benchmarks.privacy``, so the audit's "before" row is comparable with its ``none`` row), embedded with the
bundled MiniLM: ``STORE/store.npy`` (raw, unprotected ``(n, 384)`` vectors) and ``STORE/texts.jsonl``
(row i's text). The audit then attacks it before and after the shipped eps 1.0 policy::

    python -m benchmarks.privacy.audit_example            # writes benchmarks/results/audit_example/
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from benchmarks.common.options import script_parser
from benchmarks.common.reporting import RESULTS_DIR, Script
from textcrafter_rag.cli import main as textcrafter_main
from textcrafter_rag.data import find_data_dir, wikitext_sentences
from textcrafter_rag.encoders import bundled_minilm

NAME = "audit_example"
SCRIPT = Script(NAME, "benchmarks.privacy.audit_example")
RESULTS = RESULTS_DIR / NAME


def main(argv: list[str] | None = None) -> int:
    ap = script_parser(SCRIPT, __doc__)
    ap.add_argument(
        "--data-dir", default=None, help="benchmark datasets (default: $TEXTCRAFTER_DATA or ../shared/datasets)"
    )
    ap.add_argument("--n", type=int, default=200, help="sentences in the store")
    ap.add_argument("--store", default="build/audit_store", help="folder for store.npy and texts.jsonl")
    ap.add_argument("--out", default=str(RESULTS), help="folder for the audit report")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads of the audit")
    args = ap.parse_args(argv)
    data_dir = find_data_dir(args.data_dir)
    if data_dir is None:
        print("error: benchmark datasets not found (set TEXTCRAFTER_DATA or pass --data-dir)", file=sys.stderr)
        return 2
    texts = [t for t in wikitext_sentences("test", data_dir=data_dir) if len(t.split()) <= 24][: args.n]
    store = Path(args.store)
    store.mkdir(parents=True, exist_ok=True)
    np.save(store / "store.npy", bundled_minilm().encode(texts), allow_pickle=False)
    (store / "texts.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    print(f"wrote {len(texts)} vectors and texts to {store}")
    return textcrafter_main(
        [
            "audit",
            "--vectors",
            str(store / "store.npy"),
            "--texts",
            str(store / "texts.jsonl"),
            "--data-dir",
            str(data_dir),
            "--mechanism-seed",
            "0",
            "--threads",
            str(args.threads),
            "--out",
            args.out,
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
