"""One entry point for the benchmarks: every attack against one defense, as one flat dict."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..metrics import text_privacy_metrics
from .adaptive import DEFAULT_ADAPT_CONFIG, adapt_inverter
from .cache import cached_embeddings, load_or_train_inverter
from .correction import rerank as rerank_candidates
from .floor import flat_floor, floor_metrics
from .inverter import Inverter, InverterConfig, TrainConfig
from .keyword import KeywordAttack
from .pii_probe import PIIProbe, pii_dataset

__all__ = ["evaluate_attacks", "MODES", "QUICK_TRAIN", "QUICK_ADAPT"]

MODES = ("non-adaptive", "adaptive")
#: Training settings of ``quick=True`` (smoke runs: numbers are not meaningful).
QUICK_TRAIN = TrainConfig(time_budget_min=1.0)
QUICK_ADAPT = TrainConfig(epochs=1.0, time_budget_min=0.5, lr=3e-4, warmup_steps=5)


def _batched_protect(defense: Any, x: np.ndarray, batch: int = 4096) -> np.ndarray:
    return np.concatenate([defense.protect(x[s : s + batch]) for s in range(0, len(x), batch)], 0)


def evaluate_attacks(
    defense: Any,
    *,
    encoder: Any,
    train_texts: Sequence[str],
    test_texts: Sequence[str],
    mode: str = "non-adaptive",
    inverter: Inverter | None = None,
    n_pairs: int = 30_000,
    quick: bool = False,
    beam: int = 4,
    rerank: bool = True,
    inverter_config: InverterConfig | None = None,
    train_config: TrainConfig | None = None,
    adapt_config: TrainConfig | None = None,
    keyword: bool = True,
    pii: bool = True,
    n_pii: int = 4000,
    cache_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the inversion, keyword and PII attacks (plus floors) against ``defense``.

    Args:
        defense: A :class:`~textcrafter_rag.mechanisms.Mechanism` (anything with ``protect``).
        encoder: The base :class:`~textcrafter_rag.encoders.Encoder` the defense protects.
        train_texts: The attacker's own texts (inverter, keyword and floor training; adaptive queries).
        test_texts: The victim texts whose protected embeddings are attacked. Texts longer than the
            inverter's ``max_len`` WordPieces are dropped from both lists.
        mode: ``non-adaptive`` (clean inverter applied to protected embeddings) or ``adaptive``
            (inverter fine-tuned on ``n_pairs`` protected embeddings of the attacker's texts).
        inverter: A pretrained clean inverter; trained (and cached by config hash) when ``None``.
        n_pairs: Adaptive query budget: number of ``(text, protected embedding)`` pairs.
        quick: Small, fast smoke run (2,000 training texts, 64 test texts, minute-long training).
        beam: Beam width (1 = greedy).
        rerank: Rerank the beam by black-box re-embedding (through the defense in adaptive mode).
        inverter_config, train_config: Clean-inverter architecture and training (cache key).
        adapt_config: Fine-tuning settings of the adaptive attacker.
        keyword, pii: Run the keyword-inference and PII-probe attacks.
        n_pii: Size of each synthetic PII train / test set.
        cache_dir: Cache folder (default ``~/.cache/textcrafter_rag/attacks``).
        seed: Seed of the attacker's randomness (not of the defense).
        progress: tqdm bars.

    Returns:
        Flat metrics ``bleu, token_f1, exact_match, rouge_l, content_f1, cosine, keyword_f1,
        keyword_precision, keyword_recall, pii_auc`` plus ``attacker, mode, defense, n_pairs,
        pairs_seen, train_minutes, attack_minutes, n_train, n_test, floor_*``, the nested ``floor``
        and ``examples`` (first five ``[reference, reconstruction]`` pairs).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    t_start = time.time()
    cfg = inverter.config if inverter is not None else (inverter_config or InverterConfig())
    tc = train_config or (QUICK_TRAIN if quick else TrainConfig())
    tc = replace(tc, seed=tc.seed if train_config is not None else seed)
    tok = inverter.tokenizer if inverter is not None else encoder.model.tokenizer
    train = [t for t, n in zip(train_texts, Inverter.token_lengths(list(train_texts), tok)) if n <= cfg.max_len]
    test = [t for t, n in zip(test_texts, Inverter.token_lengths(list(test_texts), tok)) if n <= cfg.max_len]
    if quick:
        train, test = train[:2000], test[:64]
        n_pairs = min(n_pairs, 2000)
        n_pii = min(n_pii, 600)
    if not train or not test:
        raise ValueError("need non-empty train and test texts of at most max_len WordPieces")

    # clean inverter
    train_minutes = 0.0
    if inverter is None:
        inverter, _, _ = load_or_train_inverter(encoder, train, config=cfg, train_config=tc, cache_dir=cache_dir,
                                                progress=progress)
    train_minutes += sum(s["train_minutes"] for s in inverter.meta.get("training", []))

    test_clean = encoder.encode(test)
    test_prot = _batched_protect(defense, test_clean)
    out: dict[str, Any] = {"mode": mode, "defense": getattr(defense, "spec", lambda: repr(defense))(),
                           "n_train": len(train), "n_test": len(test), "n_pairs": 0, "pairs_seen": 0}

    attacker = inverter
    if mode == "adaptive":
        attacker, info = adapt_inverter(inverter, defense, encoder=encoder, texts=train, n_pairs=n_pairs,
                                        train_config=adapt_config or (QUICK_ADAPT if quick else DEFAULT_ADAPT_CONFIG),
                                        cache_dir=cache_dir, seed=seed, progress=progress)
        out.update(n_pairs=info["n_pairs"], pairs_seen=info["pairs_seen"], adapt_minutes=info["adapt_minutes"])
        train_minutes += info["adapt_train_minutes"]

        def embed_fn(texts: list[str]) -> np.ndarray:
            return _batched_protect(defense, encoder.encode(texts))
    else:
        embed_fn = encoder.encode

    cands = attacker.generate(test_prot, beam=beam, num_return=max(beam, 1), progress=progress)
    preds = rerank_candidates(cands, test_prot, embed_fn)[0] if (rerank and beam > 1) else [c[0] for c in cands]
    out.update(text_privacy_metrics(test, preds, encoder=encoder, clean_embeddings=test_clean))
    out["attacker"] = ("adaptive-" if mode == "adaptive" else "") + "inverter" + (
        f"-beam{beam}" if beam > 1 else "-greedy") + ("-rerank" if rerank and beam > 1 else "")

    if keyword:
        n_kw = 2000 if quick else 20000
        kw_train = train[:n_kw]
        kw_emb = cached_embeddings(encoder, train, cache_dir=cache_dir, progress=progress)[:n_kw]
        if mode == "adaptive":
            kw_emb = _batched_protect(defense, kw_emb)
        ka = KeywordAttack(epochs=5 if quick else 20, seed=seed).fit(kw_emb, kw_train)
        out.update(ka.evaluate(test_prot, test))
    if pii:
        p_texts, p_labels = pii_dataset(n_pii, train, seed=seed)
        q_texts, q_labels = pii_dataset(n_pii, test, seed=seed + 1)
        probe = PIIProbe(seed=seed).fit(_batched_protect(defense, encoder.encode(p_texts)), p_labels)
        out.update(probe.evaluate(_batched_protect(defense, encoder.encode(q_texts)), q_labels))

    floor = floor_metrics(train, test, encoder=encoder, clean_embeddings=test_clean, seed=seed)
    out["floor"] = floor
    out.update(flat_floor(floor))
    out["train_minutes"] = train_minutes
    out["attack_minutes"] = (time.time() - t_start) / 60
    out["examples"] = [[r, p] for r, p in zip(test[:5], preds[:5])]
    return out
