"""The attacks of the frontier benchmark: three victim corpora, their attackers, and one cached row per attack.

Corpora (each with the attacker's own texts):

* ``wikitext``: held-out WikiText-2 test sentences (<= 24 words, as ``benchmarks.privacy``); the attacker's
  texts are WikiText-2 train sentences (the clean inverter's training set, so its cache is reused);
* ``scifact``: sentences of SciFact abstracts, the retrieval corpus itself (one random sentence of a
  random abstract, 5-40 words, <= the inverter's ``max_len`` WordPieces, not truncated); same attacker;
* ``pii``: synthetic support tickets, clinical, HR and bank notes (:mod:`.pii_sentences`); the attacker
  is the clean inverter, with the WordPieces of its own in-domain sentences (other templates and values)
  added to its output vocabulary, fine-tuned on those sentences, and it adapts on them; rows add
  ``pii_entity_recovery``.

:class:`AttackPlan` runs one attack (mechanism x attacker x corpus) through
:func:`~.attack_rows.run_attack` and caches its row as JSON; adaptive attackers are cached by
:func:`textcrafter_rag.attacks.adapt_inverter` itself, so the wikitext and scifact rows of one
mechanism share one adaptive attacker.
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from benchmarks.common.attack_rows import AttackRun, fixed_adapt_config, privacy_fields, run_attack
from benchmarks.common.caches import cache_key
from benchmarks.common.reporting import clean_json
from benchmarks.common.scifact import abstract_sentences
from textcrafter_rag.artifacts import CONFIG_NAME
from textcrafter_rag.attacks import AttackConfig, Inverter, InverterTrainingConfig, adapt_inverter, clean_inverter
from textcrafter_rag.attacks.cache import defense_key
from textcrafter_rag.attacks.floor import random_sentences
from textcrafter_rag.data import wikitext_sentences
from textcrafter_rag.embedding import texts_hash
from textcrafter_rag.mechanisms import Mechanism, NoDefense

from .pii_sentences import (
    PIISentence,
    attacker_pii_sentences,
    entity_recovery,
    entity_tokens,
    victim_pii_sentences,
)

__all__ = ["CORPORA", "AttackPlan", "AttackSizes", "scifact_sentences"]

CORPORA = ("wikitext", "scifact", "pii")


def scifact_sentences(docs: list[str], *, n: int, fits: Any, seed: int) -> list[str]:
    """``n`` SciFact sentences: one random sentence (5-40 words, accepted by ``fits``) per random abstract."""
    rng = random.Random(seed + 2)
    out: list[str] = []
    for i in rng.sample(range(len(docs)), len(docs)):
        sents = [s for s in abstract_sentences(docs[i]) if fits(s)]
        if sents:
            out.append(rng.choice(sents))
            if len(out) == n:
                break
    return out


def with_vocabulary(inverter: Inverter, texts: Sequence[str], *, encoder: Any) -> Inverter:
    """A copy of ``inverter`` whose output vocabulary also holds every WordPiece of ``texts``.

    The attacker who fine-tunes on its own PII notes would give its decoder their WordPieces (digits,
    names, e-mail parts): the new rows of the (tied) token embedding start from the encoder's word
    embeddings, as the clean inverter's did, and their output bias at the lowest existing bias.
    """
    have = {int(i) for i in inverter.vocab_ids}
    ids = inverter.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    new = sorted({int(i) for row in ids for i in row} - have)
    if not new:
        return inverter
    model = copy.deepcopy(inverter.model)
    old = model.tok.weight.detach()
    words = encoder.model[0].auto_model.embeddings.word_embeddings.weight.detach()
    rows = (
        words[torch.as_tensor(new)]
        if words.shape[1] == old.shape[1]
        else old.std() * torch.randn(len(new), old.shape[1])
    )
    with torch.no_grad():
        model.tok = nn.Embedding.from_pretrained(torch.cat([old, rows.to(old.dtype)]), freeze=False)
        model.out_bias = nn.Parameter(
            torch.cat([model.out_bias.detach(), model.out_bias.detach().min().repeat(len(new))])
        )
    meta = {**copy.deepcopy(inverter.meta), "vocabulary_added": {"pieces": len(new), "texts": texts_hash(texts)}}
    vocab = np.concatenate([inverter.vocab_ids, np.asarray(new, dtype=np.int64)])
    return Inverter(model, inverter.tokenizer, vocab, meta=meta, device=inverter.device)


@dataclass(frozen=True)
class AttackSizes:
    """How many texts each corpus and attacker gets, and the attacker's budget.

    Attributes:
        n_test: Victim texts per corpus.
        n_train: WikiText-2 train sentences of the attacker (``None``: all, as the cached clean inverter).
        n_pii_train: The PII attacker's own in-domain sentences (fine-tuning and adaptive queries).
        pairs: Adaptive query budget (``(text, protected vector)`` pairs, one pass).
    """

    n_test: int
    n_train: int | None
    n_pii_train: int
    pairs: int


@dataclass
class AttackPlan:
    """Every attack of one run: texts, attackers (built lazily), and the row cache.

    Attributes:
        encoder: The base encoder.
        data_dir: The benchmark datasets.
        scifact_docs: The SciFact abstracts (the retrieval corpus).
        sizes: Text counts and the adaptive budget.
        attack: The attacker's base settings (mode and inverter set per row).
        cache: The benchmark cache folder (rows under ``frontier/rows``).
        pii_tuning: The PII attacker's fine-tuning on its own sentences (one pass; two steps when smoke).
        inverter: A pretrained clean inverter folder to use instead of the package's default one.
        progress: Show progress bars.
    """

    encoder: Any
    data_dir: Path
    scifact_docs: list[str]
    sizes: AttackSizes
    attack: AttackConfig
    cache: Path
    pii_tuning: InverterTrainingConfig = field(default_factory=fixed_adapt_config)
    inverter: Path | None = None
    progress: bool = True
    seconds: dict[str, float] = field(default_factory=dict)
    _texts: dict[str, list[str]] = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------------ texts
    def _fits(self, text: str) -> bool:
        tok = self.encoder.model.tokenizer
        return len(tok(text, add_special_tokens=False)["input_ids"]) <= self.attack.architecture().max_len

    @cached_property
    def wikitext_train(self) -> list[str]:
        train = wikitext_sentences("train", data_dir=self.data_dir)
        return train[: self.sizes.n_train] if self.sizes.n_train else train

    @cached_property
    def victims(self) -> list[PIISentence]:
        return victim_pii_sentences(self.sizes.n_test, fits=self._fits)

    @cached_property
    def pii_train(self) -> list[str]:
        return [s.text for s in attacker_pii_sentences(self.sizes.n_pii_train, victims=self.victims, fits=self._fits)]

    def test_texts(self, corpus: str) -> list[str]:
        """The victim texts of ``corpus`` (computed once)."""
        if corpus not in self._texts:
            self._texts[corpus] = self._make_texts(corpus)
        return self._texts[corpus]

    def _make_texts(self, corpus: str) -> list[str]:
        n = self.sizes.n_test
        if corpus == "wikitext":
            return [t for t in wikitext_sentences("test", data_dir=self.data_dir) if len(t.split()) <= 24][:n]
        if corpus == "scifact":
            return scifact_sentences(self.scifact_docs, n=n, fits=self._fits, seed=self.attack.seed)
        if corpus == "pii":
            return [s.text for s in self.victims]
        raise ValueError(f"unknown corpus {corpus!r}; choose from {CORPORA}")

    # ------------------------------------------------------------------ attackers
    @cached_property
    def clean(self) -> Inverter:
        """The clean inverter: ``--inverter`` if given, else the package's default (trained once, cached)."""
        if self.inverter is not None:
            return Inverter.load(self.inverter)
        t0 = time.perf_counter()
        inv, _ = clean_inverter(self.encoder, self.wikitext_train, attack=self.attack, progress=self.progress)
        self.seconds["clean_inverter"] = time.perf_counter() - t0
        return inv

    @cached_property
    def pii_base(self) -> Inverter:
        """The clean inverter with the WordPieces of the attacker's PII sentences added to its vocabulary."""
        return with_vocabulary(self.clean, self.pii_train, encoder=self.encoder)

    @cached_property
    def pii_inverter(self) -> Inverter:
        """:attr:`pii_base` fine-tuned on clean embeddings of the attacker's own PII sentences (cached)."""
        t0 = time.perf_counter()
        inv, _ = adapt_inverter(
            self.pii_base,
            NoDefense(),
            encoder=self.encoder,
            texts=self.pii_train,
            n_pairs=len(self.pii_train),
            train_config=self.pii_tuning,
            cache_dir=self.attack.cache_dir,
            seed=self.attack.seed,
            progress=self.progress,
        )
        self.seconds["pii_inverter"] = time.perf_counter() - t0
        return inv

    def _run(self, corpus: str, test: list[str]) -> AttackRun:
        pii = corpus == "pii"
        return AttackRun(
            encoder=self.encoder,
            train_texts=self.pii_train if pii else self.wikitext_train,
            test_texts=test,
            attack=replace(self.attack, n_examples=len(test) if pii else 3),
            inverter=self.pii_inverter if pii else self.clean,
            progress=self.progress,
        )

    def pii_vocab_coverage(self) -> tuple[float, float]:
        """Percent of the victims' entity tokens whose WordPieces the clean / the PII attacker can write.

        An inverter only writes pieces of its output vocabulary: the clean one's comes from WikiText-2,
        the PII attacker's adds the pieces of its own PII sentences. This bounds the entity recovery.
        """
        toks = [t for s in self.victims for k, v in s.entities for t in entity_tokens(k, v)]
        ids = self.clean.tokenizer(toks, add_special_tokens=False)["input_ids"]

        def share(inv: Inverter) -> float:
            vocab = {int(i) for i in inv.vocab_ids}
            return 100.0 * sum(all(int(i) in vocab for i in row) for row in ids) / max(len(toks), 1)

        return share(self.clean), share(self.pii_base)

    # ------------------------------------------------------------------ rows
    def row_key(self, mechanism: Mechanism, mode: str, corpus: str, test: list[str]) -> str:
        """Cache key of one row: the mechanism's identity, attacker, budget, corpus texts and attacker settings."""
        train = self.pii_train if corpus == "pii" else self.wikitext_train
        return cache_key(
            "frontier-row-v1",
            defense_key(mechanism),
            mode,
            corpus,
            self.sizes.pairs if mode == "adaptive" else 0,
            texts_hash(test),
            texts_hash(train),
            repr(replace(self.attack, cache_dir=None)),
            repr(self.pii_tuning) if corpus == "pii" else "",
            self.inverter_id,
        )

    @cached_property
    def inverter_id(self) -> str:
        """Identity of ``--inverter`` in row keys: its weights' SHA-256 (from its verified config), not its path."""
        if self.inverter is None:
            return "None"
        return str(json.loads((self.inverter / CONFIG_NAME).read_text(encoding="utf-8"))["weights_sha256"])

    def cached_row(self, mechanism: Mechanism, mode: str, corpus: str) -> tuple[Path, dict[str, Any] | None]:
        """The row's cache file and the cached row (``None`` when not measured yet)."""
        path = (
            self.cache / "frontier" / "rows" / f"{self.row_key(mechanism, mode, corpus, self.test_texts(corpus))}.json"
        )
        return path, json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None

    def measure(self, mechanism: Mechanism, mode: str, corpus: str) -> dict[str, Any]:
        """Attack ``mechanism`` with ``mode`` on ``corpus`` (from the cache when measured before)."""
        path, row = self.cached_row(mechanism, mode, corpus)
        if row is not None:
            return row
        t0 = time.perf_counter()
        test = self.test_texts(corpus)
        run = self._run(corpus, test)
        result = run_attack(mechanism, mode, run=run)
        row = privacy_fields(result)
        row["attacker_model"] = row.pop("attacker", None)
        row["pii_entity_recovery"] = None
        if corpus == "pii":
            row.update(self._pii_fields(result, run))
        row.update(
            pairs=result.get("n_pairs", 0) if mode == "adaptive" else 0,
            examples=[list(e) for e in result.get("examples", [])[:3]],
            floor_text=result.get("floor", {}).get("constant", {}).get("text"),
            minutes=(time.perf_counter() - t0) / 60,
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(clean_json(row)), encoding="utf-8")
        return row

    def _pii_fields(self, result: dict[str, Any], run: AttackRun) -> dict[str, Any]:
        """Entity recovery of the reconstructions, and of the floor attackers (constant / random own sentence)."""
        by_text = {s.text: s for s in self.victims}
        pairs = [(by_text[ref], pred) for ref, pred in result["examples"] if ref in by_text]
        victims = [v for v, _ in pairs]
        out = entity_recovery(victims, [p for _, p in pairs])
        const = result.get("floor", {}).get("constant", {}).get("text", "")
        randoms = random_sentences(run.train_texts, len(victims), seed=self.attack.seed)
        floors = [entity_recovery(victims, [const] * len(victims)), entity_recovery(victims, randoms)]
        out["floor_pii_entity_recovery"] = max(f["pii_entity_recovery"] for f in floors)
        out["floor_pii_entity_exact"] = max(f["pii_entity_exact"] for f in floors)
        return out
