"""Embedding-inversion attacker: a small prefix-conditioned transformer decoder (GEIA / Vec2Text style).

The embedding is mapped by an MLP to ``n_prefix`` vectors that precede the text in a causal
decoder. The decoder reuses the encoder's (MiniLM's) WordPiece tokenizer, its word and position
embeddings, and, by default, its first transformer layers (run with a causal mask), so training
starts from pretrained lexical knowledge. The output vocabulary is restricted to the WordPieces
seen in the attacker's training text (the rest map to ``[UNK]``), which keeps the softmax cheap.

Artifacts are ``config.json`` + ``model.safetensors`` + the tokenizer files (no pickle).
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

__all__ = ["InverterConfig", "TrainConfig", "Inverter", "default_device", "set_seed"]


def default_device() -> torch.device:
    """CUDA when present, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def set_seed(seed: int) -> None:
    """Seed python, numpy and torch."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


@dataclass
class InverterConfig:
    """Architecture of the inverter.

    Attributes:
        emb_dim: Dimension of the attacked embeddings.
        d_model: Decoder width (384 = MiniLM's, needed to reuse its weights).
        n_layers: Decoder layers.
        n_heads: Attention heads.
        d_ff: Feed-forward width.
        n_prefix: Number of prefix vectors the embedding is projected into.
        max_len: Maximum WordPieces per text (longer training texts are truncated).
        max_vocab: Size cap of the output vocabulary (most frequent training WordPieces).
        init_from_encoder: Initialise the layers from the encoder's first transformer layers.
        cond_inputs: 1 for an inverter (target embedding); 3 for a corrector (target, hypothesis, difference).
        hyp_len: Hypothesis tokens fed to a corrector (0 for an inverter).
        dropout: Dropout rate.
    """

    emb_dim: int = 384
    d_model: int = 384
    n_layers: int = 3
    n_heads: int = 12
    d_ff: int = 1536
    n_prefix: int = 8
    max_len: int = 32
    max_vocab: int = 12000
    init_from_encoder: bool = True
    cond_inputs: int = 1
    hyp_len: int = 0
    dropout: float = 0.0


@dataclass
class TrainConfig:
    """Optimisation settings.

    Training stops at whichever comes first: ``epochs`` passes, ``max_steps`` or ``time_budget_min``
    minutes; the cosine learning-rate schedule follows the same progress measure.
    """

    batch_size: int = 64
    lr: float = 5e-4
    weight_decay: float = 0.01
    warmup_steps: int = 30
    epochs: float = 20.0
    max_steps: int | None = None
    time_budget_min: float | None = 20.0
    grad_clip: float = 1.0
    bf16: bool = True
    seed: int = 0
    threads: int | None = None


# ----------------------------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------------------------


class _Layer(nn.Module):
    """A post-LN BERT layer with an optional key/value cache."""

    def __init__(self, d: int, h: int, ff: int, dropout: float) -> None:
        super().__init__()
        self.h = h
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ln1 = nn.LayerNorm(d, eps=1e-12)
        self.ff1 = nn.Linear(d, ff)
        self.ff2 = nn.Linear(ff, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-12)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, cache: tuple | None) -> tuple[torch.Tensor, tuple]:
        b, t, d = x.shape
        hd = d // self.h
        q = self.q(x).view(b, t, self.h, hd).transpose(1, 2)
        k = self.k(x).view(b, t, self.h, hd).transpose(1, 2)
        v = self.v(x).view(b, t, self.h, hd).transpose(1, 2)
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        if mask is None and cache is None:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        a = a.transpose(1, 2).reshape(b, t, d)
        x = self.ln1(x + self.drop(self.o(a)))
        x = self.ln2(x + self.drop(self.ff2(F.gelu(self.ff1(x)))))
        return x, (k, v)


class InverterModel(nn.Module):
    """Prefix-conditioned causal decoder over a restricted WordPiece vocabulary."""

    def __init__(self, cfg: InverterConfig, vocab_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.tok = nn.Embedding(vocab_size, d)
        self.pos = nn.Embedding(cfg.n_prefix + cfg.hyp_len + cfg.max_len + 2, d)
        self.ln_emb = nn.LayerNorm(d, eps=1e-12)
        cin = cfg.emb_dim * cfg.cond_inputs
        self.prefix = nn.Sequential(nn.Linear(cin, 4 * d), nn.GELU(), nn.Linear(4 * d, cfg.n_prefix * d))
        self.layers = nn.ModuleList(_Layer(d, cfg.n_heads, cfg.d_ff, cfg.dropout) for _ in range(cfg.n_layers))
        self.head = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d, eps=1e-12))
        self.out_bias = nn.Parameter(torch.zeros(vocab_size))

    def init_from_encoder(self, st_model: Any, vocab_ids: np.ndarray) -> None:
        """Copy word/position embeddings (and layers, if configured) from a BERT-style encoder."""
        bert = st_model[0].auto_model
        emb = bert.embeddings
        ids = torch.as_tensor(vocab_ids, dtype=torch.long)
        if emb.word_embeddings.weight.shape[1] != self.cfg.d_model:
            return  # a different width: keep the random initialisation
        with torch.no_grad():
            self.tok.weight.copy_(emb.word_embeddings.weight[ids])
            n = min(self.pos.weight.shape[0], emb.position_embeddings.weight.shape[0])
            self.pos.weight[:n].copy_(emb.position_embeddings.weight[:n] + emb.token_type_embeddings.weight[0])
            self.ln_emb.load_state_dict(emb.LayerNorm.state_dict())
            src_layers = bert.encoder.layer
            same = src_layers[0].intermediate.dense.weight.shape[0] == self.cfg.d_ff
            if self.cfg.init_from_encoder and same:
                for mine, src in zip(self.layers, src_layers):
                    at = src.attention
                    mine.q.load_state_dict(at.self.query.state_dict())
                    mine.k.load_state_dict(at.self.key.state_dict())
                    mine.v.load_state_dict(at.self.value.state_dict())
                    mine.o.load_state_dict(at.output.dense.state_dict())
                    mine.ln1.load_state_dict(at.output.LayerNorm.state_dict())
                    mine.ff1.load_state_dict(src.intermediate.dense.state_dict())
                    mine.ff2.load_state_dict(src.output.dense.state_dict())
                    mine.ln2.load_state_dict(src.output.LayerNorm.state_dict())

    def prefix_embeds(self, cond: torch.Tensor) -> torch.Tensor:
        """The ``n_prefix`` conditioning vectors (with their position embeddings) for ``cond``."""
        b, k = cond.shape[0], self.cfg.n_prefix
        return self.prefix(cond).view(b, k, self.cfg.d_model) + self.pos.weight[:k]

    def embed(self, prefix: torch.Tensor | None, tokens: torch.Tensor, start: int) -> torch.Tensor:
        """Token embeddings with positions from ``start``, after the (position-embedded) ``prefix``; normalised."""
        pos = torch.arange(start, start + tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(pos)[None]
        if prefix is not None:
            x = torch.cat([prefix.to(x.dtype), x], dim=1)
        return self.ln_emb(x)

    def run(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, caches: list | None = None
    ) -> tuple[torch.Tensor, list]:
        new = []
        for i, layer in enumerate(self.layers):
            x, c = layer(x, mask, None if caches is None else caches[i])
            new.append(c)
        return x, new

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.head(h) @ self.tok.weight.t() + self.out_bias


# ----------------------------------------------------------------------------------------------
# public wrapper
# ----------------------------------------------------------------------------------------------


def _tokenizer_from(encoder: Any) -> Any:
    model = getattr(encoder, "model", encoder)
    return model.tokenizer


class Inverter:
    """A trained inversion attacker (see the module docstring).

    Create with :meth:`train` or :meth:`load`; reconstruct text with :meth:`invert`.
    """

    def __init__(
        self, model: InverterModel, tokenizer: Any, vocab_ids: np.ndarray, *, meta: dict[str, Any] | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.vocab_ids = np.asarray(vocab_ids, dtype=np.int64)
        self.meta: dict[str, Any] = dict(meta or {})
        self.device = torch.device(device) if device is not None else default_device()
        self.model.to(self.device)
        self._to_local = {int(t): i for i, t in enumerate(self.vocab_ids)}
        self.unk = self._to_local[int(tokenizer.unk_token_id)]
        self.bos = self._to_local[int(tokenizer.cls_token_id)]
        self.eos = self._to_local[int(tokenizer.sep_token_id)]
        self.pad = self._to_local[int(tokenizer.pad_token_id)]

    @property
    def config(self) -> InverterConfig:
        return self.model.cfg

    # ---------------------------------------------------------------- data helpers

    @staticmethod
    def build_vocab(texts: Sequence[str], tokenizer: Any, *, max_vocab: int) -> np.ndarray:
        """Special tokens plus the ``max_vocab`` most frequent WordPieces of ``texts`` (BERT ids)."""
        counts: Counter[int] = Counter()
        enc = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        for ids in enc:
            counts.update(ids)
        special = [tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id]
        keep = [t for t, _ in counts.most_common() if t not in special][: max(0, max_vocab - len(special))]
        return np.asarray(special + sorted(keep), dtype=np.int64)

    def encode_texts(self, texts: Sequence[str]) -> list[list[int]]:
        """Local token ids (no specials), truncated to ``max_len`` WordPieces."""
        ids = self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        cap = self.config.max_len
        return [[self._to_local.get(t, self.unk) for t in row[:cap]] for row in ids]

    def decode_ids(self, rows: Sequence[Sequence[int]]) -> list[str]:
        """Local ids -> text (specials and ``[UNK]`` dropped)."""
        drop = {self.unk, self.bos, self.eos, self.pad}
        out = []
        for row in rows:
            bert = [int(self.vocab_ids[i]) for i in row if i not in drop]
            text = self.tokenizer.decode(bert, skip_special_tokens=True, clean_up_tokenization_spaces=True)
            out.append(_detokenize(text))
        return out

    @staticmethod
    def token_lengths(texts: Sequence[str], tokenizer: Any) -> np.ndarray:
        """Number of WordPieces per text (no specials)."""
        return np.asarray([len(r) for r in tokenizer(list(texts), add_special_tokens=False)["input_ids"]])

    # ---------------------------------------------------------------- training

    @classmethod
    def create(
        cls, texts: Sequence[str], *, config: InverterConfig | None = None, encoder: Any = None,
        device: torch.device | str | None = None, seed: int = 0,
    ) -> Inverter:
        """An untrained inverter whose vocabulary and initial weights come from ``texts`` and ``encoder``."""
        if encoder is None:
            from ..encoders import bundled_minilm

            encoder = bundled_minilm()
        cfg = config or InverterConfig()
        set_seed(seed)
        tok = _tokenizer_from(encoder)
        vocab = cls.build_vocab(texts, tok, max_vocab=cfg.max_vocab)
        model = InverterModel(cfg, len(vocab))
        st_model = getattr(encoder, "model", None)
        if st_model is not None and hasattr(st_model, "__getitem__"):
            model.init_from_encoder(st_model, vocab)
        return cls(model, tok, vocab, device=device, meta={"encoder": getattr(encoder, "model_id", "unknown")})

    @classmethod
    def train(
        cls, embeddings: np.ndarray, texts: Sequence[str], *, config: InverterConfig | None = None,
        train_config: TrainConfig | None = None, encoder: Any = None, device: torch.device | str | None = None,
        progress: bool = True,
    ) -> Inverter:
        """Train a fresh inverter on ``(embedding, text)`` pairs (teacher forcing).

        Args:
            embeddings: ``(n, D)`` embeddings of ``texts`` (clean, or protected for an adaptive attacker).
            texts: The ``n`` texts.
            config: Architecture (``emb_dim`` is set from ``embeddings``).
            train_config: Optimisation settings.
            encoder: The attacked encoder, for its tokenizer and initial weights (bundled MiniLM if ``None``).
            device: Torch device (CUDA automatically when present).
            progress: Show a tqdm bar.
        """
        cfg = config or InverterConfig()
        cfg = InverterConfig(**{**asdict(cfg), "emb_dim": int(np.asarray(embeddings).shape[1])})
        tc = train_config or TrainConfig()
        inv = cls.create(texts, config=cfg, encoder=encoder, device=device, seed=tc.seed)
        inv.fit(embeddings, texts, train_config=tc, progress=progress)
        return inv

    def _batches(self, n: int, lengths: np.ndarray, bs: int, rng: np.random.Generator) -> list[np.ndarray]:
        order = rng.permutation(n)
        chunk = bs * 50
        batches = []
        for s in range(0, n, chunk):
            part = order[s : s + chunk]
            part = part[np.argsort(lengths[part], kind="stable")]
            batches.extend(part[i : i + bs] for i in range(0, len(part), bs))
        rng.shuffle(batches)
        return batches

    def _collate(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        t = max(len(r) for r in rows) + 1
        inp = torch.full((len(rows), t), self.pad, dtype=torch.long)
        tgt = torch.full((len(rows), t), -100, dtype=torch.long)
        for i, r in enumerate(rows):
            inp[i, : len(r) + 1] = torch.tensor([self.bos] + r)
            tgt[i, : len(r) + 1] = torch.tensor(r + [self.eos])
        return inp, tgt

    def _cond_prefix(self, cond: torch.Tensor, extra: Any = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Prefix vectors (and an optional key mask) for a batch; correctors override this."""
        return self.model.prefix_embeds(cond), None

    def loss(self, cond: torch.Tensor, rows: list[list[int]], extra: Any = None) -> torch.Tensor:
        """Teacher-forced cross-entropy of ``rows`` given conditioning vectors ``cond``."""
        inp, tgt = self._collate(rows)
        inp, tgt = inp.to(self.device), tgt.to(self.device)
        prefix, pmask = self._cond_prefix(cond, extra)
        p = prefix.shape[1]
        x = self.model.embed(prefix, inp, self.config.n_prefix)
        mask = None
        if pmask is not None:
            total = x.shape[1]
            causal = torch.ones(total, total, dtype=torch.bool, device=self.device).tril()
            keys = torch.cat([pmask, torch.ones(inp.shape, dtype=torch.bool, device=self.device)], dim=1)
            mask = (causal[None] & keys[:, None, :])[:, None]
        h, _ = self.model.run(x, mask)
        logits = self.model.logits(h[:, p:])
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100)

    def _extra_batch(self, extra: Any, idx: np.ndarray) -> Any:
        return None

    def fit(
        self, embeddings: np.ndarray, texts: Sequence[str], *, train_config: TrainConfig | None = None,
        extra: Any = None, progress: bool = True, desc: str = "train inverter",
    ) -> dict[str, Any]:
        """(Continue to) train on ``(embedding, text)`` pairs; returns a training summary (also in ``meta``)."""
        tc = train_config or TrainConfig()
        if tc.threads:
            torch.set_num_threads(tc.threads)
        set_seed(tc.seed)
        emb = torch.as_tensor(np.asarray(embeddings, dtype=np.float32))
        if emb.shape[0] != len(texts):
            raise ValueError(f"{emb.shape[0]} embeddings for {len(texts)} texts")
        rows = self.encode_texts(texts)
        lengths = np.asarray([len(r) for r in rows])
        rng = np.random.default_rng(tc.seed)
        steps_per_epoch = math.ceil(len(rows) / tc.batch_size)
        total = int(tc.epochs * steps_per_epoch)
        if tc.max_steps is not None:
            total = min(total, tc.max_steps)
        budget = tc.time_budget_min * 60 if tc.time_budget_min else None
        self.model.train()
        decay = [p for n, p in self.model.named_parameters() if p.ndim >= 2]
        no_decay = [p for n, p in self.model.named_parameters() if p.ndim < 2]
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": tc.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=tc.lr, betas=(0.9, 0.98),
        )
        use_bf16 = tc.bf16 and (self.device.type == "cuda" or _cpu_bf16())
        start = time.time()
        step, ema = 0, None
        bar = tqdm(total=total, desc=desc, disable=not progress, mininterval=5)
        done = False
        while not done:
            for idx in self._batches(len(rows), lengths, tc.batch_size, rng):
                prog = step / max(total, 1)
                if budget:
                    prog = max(prog, (time.time() - start) / budget)
                if prog >= 1.0:
                    done = True
                    break
                lr = tc.lr * min(1.0, (step + 1) / max(tc.warmup_steps, 1)) * 0.5 * (1 + math.cos(math.pi * prog))
                for g in opt.param_groups:
                    g["lr"] = lr
                with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=use_bf16):
                    loss = self.loss(emb[idx].to(self.device), [rows[i] for i in idx], self._extra_batch(extra, idx))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if tc.grad_clip:
                    nn.utils.clip_grad_norm_(self.model.parameters(), tc.grad_clip)
                opt.step()
                step += 1
                ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
                bar.update(1)
                if step % 20 == 0:
                    bar.set_postfix(loss=f"{ema:.3f}", lr=f"{lr:.2e}")
        bar.close()
        self.model.eval()
        summary = {
            "steps": step, "train_minutes": (time.time() - start) / 60, "final_loss": ema,
            "n_train": len(rows), "epochs_done": step / max(steps_per_epoch, 1),
            "train_config": asdict(tc),
        }
        self.meta.setdefault("training", []).append(summary)
        return summary

    # ---------------------------------------------------------------- decoding

    @torch.no_grad()
    def _start(self, cond: torch.Tensor, extra: Any) -> tuple[torch.Tensor, list, torch.Tensor | None, int]:
        prefix, pmask = self._cond_prefix(cond, extra)
        b = cond.shape[0]
        bos = torch.full((b, 1), self.bos, dtype=torch.long, device=self.device)
        x = self.model.embed(prefix, bos, self.config.n_prefix)
        mask = None
        keymask = None
        if pmask is not None:
            total = x.shape[1]
            keymask = torch.cat([pmask, torch.ones(b, 1, dtype=torch.bool, device=self.device)], dim=1)
            causal = torch.ones(total, total, dtype=torch.bool, device=self.device).tril()
            mask = (causal[None] & keymask[:, None, :])[:, None]
        h, caches = self.model.run(x, mask)
        return self.model.logits(h[:, -1]).float(), caches, keymask, self.config.n_prefix + 1

    @torch.no_grad()
    def _step(self, tokens: torch.Tensor, caches: list, keymask: torch.Tensor | None, pos: int):
        x = self.model.embed(None, tokens[:, None], start=pos)
        mask = None
        if keymask is not None:
            keymask = torch.cat([keymask, torch.ones(tokens.shape[0], 1, dtype=torch.bool, device=self.device)], 1)
            mask = keymask[:, None, None, :]
        h, caches = self.model.run(x, mask, caches)
        return self.model.logits(h[:, -1]).float(), caches, keymask

    @torch.no_grad()
    def _greedy(self, cond: torch.Tensor, extra: Any) -> list[list[int]]:
        logits, caches, keymask, pos = self._start(cond, extra)
        b = cond.shape[0]
        out = torch.zeros(b, 0, dtype=torch.long, device=self.device)
        finished = torch.zeros(b, dtype=torch.bool, device=self.device)
        for t in range(self.config.max_len + 1):
            logits[:, self.unk] = -1e9
            logits[:, self.pad] = -1e9
            logits[:, self.bos] = -1e9
            nxt = logits.argmax(-1)
            nxt = torch.where(finished, torch.full_like(nxt, self.eos), nxt)
            out = torch.cat([out, nxt[:, None]], 1)
            finished |= nxt == self.eos
            if bool(finished.all()) or t == self.config.max_len:
                break
            logits, caches, keymask = self._step(nxt, caches, keymask, pos)
            pos += 1
        rows = []
        for r in out.tolist():
            rows.append(r[: r.index(self.eos)] if self.eos in r else r)
        return rows

    @torch.no_grad()
    def _beam(
        self, cond: torch.Tensor, extra: Any, beam: int, length_penalty: float
    ) -> list[list[tuple[float, list[int]]]]:
        logits, caches, keymask, pos = self._start(cond, extra)
        b = cond.shape[0]
        ban = [self.unk, self.pad, self.bos]
        logp = F.log_softmax(logits, -1)
        logp[:, ban] = -1e9
        logp[:, self.eos] = -1e9  # no empty outputs
        scores, toks = logp.topk(beam, -1)  # (b, beam)
        seqs = [[[int(toks[i, j])] for j in range(beam)] for i in range(b)]
        rep = lambda c: c.repeat_interleave(beam, 0)  # noqa: E731
        caches = [(rep(k), rep(v)) for k, v in caches]
        keymask = rep(keymask) if keymask is not None else None
        finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(b)]
        cur = toks.reshape(-1)
        alive = torch.ones(b, dtype=torch.bool)
        for t in range(1, self.config.max_len + 1):
            logits, caches, keymask = self._step(cur, caches, keymask, pos)
            pos += 1
            logp = F.log_softmax(logits, -1)
            logp[:, ban] = -1e9
            cand = (scores.reshape(-1, 1) + logp).view(b, beam * logp.shape[-1])
            top_s, top_i = cand.topk(2 * beam, -1)
            top_s, top_i = top_s.cpu(), top_i.cpu()
            vsz = logp.shape[-1]
            new_scores = torch.full((b, beam), -1e9)
            new_toks = torch.full((b, beam), self.eos, dtype=torch.long)
            src = torch.arange(b * beam).view(b, beam).clone()
            new_seqs = []
            for i in range(b):
                kept: list[list[int]] = []
                if alive[i]:
                    for s, ix in zip(top_s[i].tolist(), top_i[i].tolist()):
                        j, tk = divmod(ix, vsz)
                        if s < -1e8:
                            break
                        if tk == self.eos:
                            finished[i].append((s / (len(seqs[i][j]) + 1) ** length_penalty, seqs[i][j]))
                        else:
                            new_scores[i, len(kept)] = s
                            new_toks[i, len(kept)] = tk
                            src[i, len(kept)] = i * beam + j
                            kept.append(seqs[i][j] + [tk])
                        if len(kept) == beam:
                            break
                    if len(finished[i]) >= beam:
                        best_fin = max(f[0] for f in finished[i])
                        best_alive = new_scores[i, 0].item() / (t + 2) ** length_penalty if kept else -1e9
                        if best_fin >= best_alive:
                            alive[i] = False
                while len(kept) < beam:
                    kept.append(kept[0] if kept else [self.eos])
                new_seqs.append(kept)
            if not bool(alive.any()):
                break
            seqs = new_seqs
            scores = new_scores.to(self.device)
            sel = src.reshape(-1).to(self.device)
            caches = [(k[sel], v[sel]) for k, v in caches]
            keymask = keymask[sel] if keymask is not None else None
            cur = new_toks.reshape(-1).to(self.device)
        for i in range(b):
            if alive[i] or not finished[i]:
                for j in range(beam):
                    if scores[i, j] > -1e8:
                        finished[i].append((float(scores[i, j]) / (len(seqs[i][j]) + 1) ** length_penalty, seqs[i][j]))
            finished[i].sort(key=lambda f: -f[0])
        return finished

    def _prep_cond(self, embeddings: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.asarray(embeddings, dtype=np.float32))

    def generate(
        self, embeddings: np.ndarray, *, beam: int = 1, num_return: int = 1, batch_size: int = 64,
        length_penalty: float = 1.0, extra: Any = None, progress: bool = False,
    ) -> list[list[str]]:
        """Decode candidates for each embedding: ``num_return`` texts per row, best first."""
        self.model.eval()
        cond = self._prep_cond(embeddings)
        out: list[list[str]] = []
        for s in tqdm(range(0, cond.shape[0], batch_size), desc="invert", disable=not progress):
            c = cond[s : s + batch_size].to(self.device)
            ex = self._extra_batch(extra, np.arange(s, min(s + batch_size, cond.shape[0])))
            if beam <= 1:
                out.extend([t] for t in self.decode_ids(self._greedy(c, ex)))
            else:
                for fin in self._beam(c, ex, beam, length_penalty):
                    texts = self.decode_ids([seq for _, seq in fin])
                    uniq = list(dict.fromkeys(texts))
                    out.append(uniq[:num_return])
        return out

    def invert(
        self, embeddings: np.ndarray, *, beam: int = 1, batch_size: int = 64, progress: bool = False
    ) -> list[str]:
        """Reconstruct one text per embedding (greedy when ``beam == 1``, else beam search)."""
        return [c[0] for c in self.generate(embeddings, beam=beam, batch_size=batch_size, progress=progress)]

    # ---------------------------------------------------------------- persistence

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write ``config.json``, ``model.safetensors`` and the tokenizer files to ``directory``."""
        from safetensors.torch import save_file

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in self.model.state_dict().items()}
        state["vocab_ids"] = torch.as_tensor(self.vocab_ids)
        save_file(state, str(d / "model.safetensors"))
        cfg = {"kind": type(self).__name__, "config": asdict(self.config), "meta": self.meta}
        (d / "config.json").write_text(json.dumps(cfg, indent=2, default=str), encoding="utf-8")
        self.tokenizer.save_pretrained(str(d / "tokenizer"))
        return d

    @classmethod
    def load(cls, directory: str | os.PathLike[str], *, device: torch.device | str | None = None) -> Inverter:
        """Load an inverter written by :meth:`save`."""
        from safetensors.torch import load_file
        from transformers import AutoTokenizer

        d = Path(directory)
        cfg = json.loads((d / "config.json").read_text(encoding="utf-8"))
        state = load_file(str(d / "model.safetensors"))
        vocab = state.pop("vocab_ids").numpy()
        model = InverterModel(InverterConfig(**cfg["config"]), len(vocab))
        model.load_state_dict(state)
        tok = AutoTokenizer.from_pretrained(str(d / "tokenizer"))
        obj = cls(model, tok, vocab, meta=cfg.get("meta"), device=device)
        obj.model.eval()
        return obj


_DETOK = [(re.compile(r"(?<=\w) ([-/@]) (?=\w)"), r"\1"), (re.compile(r"([(\[$]) "), r"\1"),
          (re.compile(r" ([)\]%])"), r"\1")]


def _detokenize(text: str) -> str:
    """Undo WordPiece spacing around intra-word hyphens, slashes and brackets ("west - ward" -> "west-ward")."""
    for pat, rep in _DETOK:
        text = pat.sub(rep, text)
    return text.strip()


def _cpu_bf16() -> bool:
    try:
        return bool(torch.backends.mkldnn.is_available()) and "bf16" in _cpu_flags()
    except Exception:  # pragma: no cover
        return False


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return line
    except OSError:  # pragma: no cover
        pass
    return ""
