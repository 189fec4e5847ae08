"""One entry point for the benchmarks: every attack against one defense, as one flat dict."""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InvalidInputError
from ..metrics import embedding_cosine, text_privacy_metrics
from .adaptive import adapt_inverter, query_defense
from .cache import attacker_embeddings, load_or_train_inverter
from .config import MODES, QUICK_ADAPT, QUICK_TRAIN, AttackConfig
from .correction import rerank as rerank_candidates
from .floor import flat_floor, floor_metrics
from .inverter import Inverter, InverterConfig, InverterTrainingConfig
from .keyword import KeywordAttack
from .pii_probe import PIIProbe, pii_dataset

__all__ = ["MODES", "QUICK_ADAPT", "QUICK_TRAIN", "clean_inverter", "evaluate_attacks"]

#: Test texts of ``quick`` runs, and the cap on clean-inverter training texts.
QUICK_TEST, QUICK_TRAIN_TEXTS = 64, 2000


def _fits(texts: Sequence[str], tok: Any, max_len: int) -> list[str]:
    """The texts of at most ``max_len`` WordPieces."""
    texts = tuple(texts)
    return [t for t, n in zip(texts, _token_lengths(texts, tok)) if n <= max_len]


@functools.lru_cache(maxsize=4)
def _token_lengths(texts: tuple[str, ...], tok: Any) -> np.ndarray:
    """``Inverter.token_lengths``, remembered: a benchmark attacks many cells with one training corpus, and
    tokenizing its ~40,000 sentences again for each cell cost seconds every time (the tokenizer is part of
    the key by identity, the texts by value)."""
    lengths = Inverter.token_lengths(list(texts), tok)
    lengths.setflags(write=False)
    return lengths


def _train_setup(
    encoder: Any, train_texts: Sequence[str], attack: AttackConfig, *, inverter: Inverter | None = None
) -> tuple[InverterConfig, InverterTrainingConfig, list[str]]:
    """The clean inverter's ``(config, train_config, usable attacker texts)``: one place for the cache key."""
    cfg = inverter.config if inverter is not None else attack.architecture()
    tok = inverter.tokenizer if inverter is not None else encoder.model.tokenizer
    train = _fits(train_texts, tok, cfg.max_len)
    return cfg, attack.clean_training(), train[:QUICK_TRAIN_TEXTS] if attack.quick else train


def clean_inverter(
    encoder: Any, train_texts: Sequence[str], *, attack: AttackConfig | None = None, progress: bool = True
) -> tuple[Inverter, dict[str, Any]]:
    """The clean inverter :func:`evaluate_attacks` would use (trained, or loaded from the cache).

    Only ``attack``'s ``quick``, ``seed``, ``cache_dir``, ``inverter_config`` and ``train_config`` matter.

    Returns:
        ``(inverter, info)`` with ``path`` (cache folder), ``from_cache`` and ``n_train``.
    """
    attack = attack or AttackConfig()
    cfg, tc, train = _train_setup(encoder, train_texts, attack)
    if not train:
        raise InvalidInputError("need non-empty train texts of at most max_len WordPieces")
    inv, path, loaded = load_or_train_inverter(
        encoder, train, config=cfg, train_config=tc, cache_dir=attack.cache_dir, progress=progress
    )
    return inv, {"path": str(path), "from_cache": loaded, "n_train": len(train)}


def evaluate_attacks(
    defense: Any,
    *,
    encoder: Any,
    train_texts: Sequence[str],
    test_texts: Sequence[str] | None,
    attack: AttackConfig | None = None,
    inverter: Inverter | None = None,
    victim_vectors: np.ndarray | None = None,
    victim_pii_labels: Sequence[int] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the inversion, keyword and PII attacks (plus floors) against ``defense``.

    Args:
        defense: A :class:`~textcrafter_rag.mechanisms.Mechanism` (anything with ``protect``).
        encoder: The base :class:`~textcrafter_rag.encoders.Encoder` the defense protects.
        train_texts: The attacker's own texts (inverter, keyword and floor training; adaptive queries).
        test_texts: The victim texts whose protected embeddings are attacked. Texts longer than the
            inverter's ``max_len`` WordPieces are dropped from both lists.
        attack: The attacker (mode, budget, beam, which attacks, seed, cache); default ``AttackConfig()``.
        inverter: A pretrained clean inverter; trained (and cached by config hash) when ``None``.
        victim_vectors: The attacked vectors themselves (row ``i`` belongs to ``test_texts[i]``), used
            instead of ``defense.protect(encoder.encode(test_texts))``; the defense then only answers the
            attacker's own queries (adaptive fine-tuning and reranking, PII-probe training). No victim is
            dropped or truncated, and ``test_texts`` may be ``None``: the metrics that need the true
            texts (text overlap, keyword, floor) are then left out.
        victim_pii_labels: 0/1 per victim: score the PII probe on the victims with these labels instead
            of on a synthetic PII test set (``pii_auc_on`` says which).
        progress: tqdm bars.

    Returns:
        Flat metrics ``bleu, token_f1, exact_match, rouge_l, content_f1, cosine, target_cosine,
        keyword_f1, keyword_precision, keyword_recall, pii_auc`` plus ``attacker, mode, defense,
        n_pairs, pairs_seen, train_minutes, attack_minutes, n_train, n_test, floor_*``, the nested
        ``floor`` and ``examples`` (the first ``attack.n_examples`` ``[reference, reconstruction]``
        pairs; the reference is ``None`` without test texts). ``target_cosine`` is the cosine between
        the re-embedded reconstruction and the attacked vector.
    """
    attack = attack or AttackConfig()
    mode, quick, seed, beam, cache_dir = attack.mode, attack.quick, attack.seed, attack.beam, attack.cache_dir
    t_start = time.time()
    cfg, tc, train = _train_setup(encoder, train_texts, attack, inverter=inverter)
    test: list[str] | None
    if victim_vectors is None:
        if test_texts is None:
            raise InvalidInputError("test_texts are needed unless victim_vectors are given")
        tok = inverter.tokenizer if inverter is not None else encoder.model.tokenizer
        test = _fits(test_texts, tok, cfg.max_len)
        test = test[:QUICK_TEST] if quick else test
    else:
        test = None if test_texts is None else list(test_texts)
        victims = np.asarray(victim_vectors, dtype=np.float32)
        if victims.ndim != 2 or not len(victims) or (test is not None and len(test) != len(victims)):
            raise InvalidInputError(f"victim_vectors must be (n, D) with one row per test text, got {victims.shape}")
    if not train or (victim_vectors is None and not test):
        raise InvalidInputError("need non-empty train and test texts of at most max_len WordPieces")

    # clean inverter
    train_minutes = 0.0
    if inverter is None:
        inverter, _, _ = load_or_train_inverter(
            encoder, train, config=cfg, train_config=tc, cache_dir=cache_dir, progress=progress
        )
    train_minutes += sum(s["train_minutes"] for s in inverter.meta.get("training", []))

    test_clean = encoder.encode(test) if test is not None else None
    test_prot = victims if victim_vectors is not None else query_defense(defense, test_clean)
    out: dict[str, Any] = {
        "mode": mode,
        "defense": getattr(defense, "spec", lambda: repr(defense))(),
        "n_train": len(train),
        "n_test": len(test_prot),
        "n_pairs": 0,
        "pairs_seen": 0,
    }

    attacker = inverter
    if mode == "adaptive":
        attacker, info = adapt_inverter(
            inverter,
            defense,
            encoder=encoder,
            texts=train,
            n_pairs=attack.pairs_budget,
            train_config=attack.adapt_training(),
            cache_dir=cache_dir,
            seed=seed,
            progress=progress,
        )
        out.update(n_pairs=info["n_pairs"], pairs_seen=info["pairs_seen"], adapt_minutes=info["adapt_minutes"])
        train_minutes += info["adapt_train_minutes"]

        def embed_fn(texts: list[str]) -> np.ndarray:
            return query_defense(defense, encoder.encode(texts))
    else:
        embed_fn = encoder.encode

    cands = attacker.generate(test_prot, beam=beam, num_return=max(beam, 1), progress=progress)
    rerank = attack.rerank and beam > 1
    preds = rerank_candidates(cands, test_prot, embed_fn)[0] if rerank else [c[0] for c in cands]
    if test is not None:
        out.update(text_privacy_metrics(test, preds, encoder=encoder, clean_embeddings=test_clean))
    out["target_cosine"] = embedding_cosine(encoder.encode([p if p.strip() else "." for p in preds]), test_prot)
    out["attacker"] = (
        ("adaptive-" if mode == "adaptive" else "")
        + "inverter"
        + (f"-beam{beam}" if beam > 1 else "-greedy")
        + ("-rerank" if rerank else "")
    )

    if attack.keyword and test is not None:
        n_kw = attack.keyword_size
        kw_train = train[:n_kw]
        kw_emb = attacker_embeddings(encoder, train, cache_dir=cache_dir, progress=progress)[:n_kw]
        if mode == "adaptive":
            kw_emb = query_defense(defense, kw_emb)
        ka = KeywordAttack(epochs=5 if quick else 20, seed=seed).fit(kw_emb, kw_train)
        out.update(ka.evaluate(test_prot, test))
    if attack.pii:
        p_texts, p_labels = pii_dataset(attack.pii_size, train, seed=seed)
        probe = PIIProbe(seed=seed).fit(query_defense(defense, encoder.encode(p_texts)), p_labels)
        if victim_pii_labels is not None:
            if len(victim_pii_labels) != len(test_prot):
                raise InvalidInputError(f"{len(victim_pii_labels)} PII labels for {len(test_prot)} victims")
            out.update(probe.evaluate(test_prot, victim_pii_labels), pii_auc_on="victims")
        else:
            q_texts, q_labels = pii_dataset(attack.pii_size, test or (), seed=seed + 1)
            out.update(
                probe.evaluate(query_defense(defense, encoder.encode(q_texts)), q_labels), pii_auc_on="synthetic"
            )

    if test is not None:
        floor = floor_metrics(train, test, encoder=encoder, clean_embeddings=test_clean, seed=seed)
        out["floor"] = floor
        out.update(flat_floor(floor))
    out["train_minutes"] = train_minutes
    out["attack_minutes"] = (time.time() - t_start) / 60
    refs: Sequence[str | None] = test if test is not None else [None] * len(preds)
    k = attack.n_examples
    out["examples"] = [[r, p] for r, p in zip(refs[:k], preds[:k])]
    return out
