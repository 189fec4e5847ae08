"""The inverter's network: a small prefix-conditioned causal transformer decoder (GEIA / Vec2Text style).

The embedding is mapped by an MLP to ``n_prefix`` vectors that precede the text in a causal
decoder. The decoder can reuse a BERT-style encoder's (MiniLM's) word and position embeddings and
its first transformer layers (run with a causal mask), so training starts from pretrained lexical
knowledge. The output layer is tied to the (restricted) token embeddings.
:class:`~textcrafter_rag.attacks.inverter.Inverter` wraps it with a tokenizer, training and decoding.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import InvalidInputError

__all__ = ["DEVICES", "InverterConfig", "InverterModel", "default_device", "resolve_device", "set_seed"]

#: The ``--device`` choices of the commands that train an inverter.
DEVICES = ("auto", "cuda", "cpu")


def default_device() -> torch.device:
    """CUDA when present, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` (CUDA when present, else CPU), ``cuda`` (an error without a GPU) or ``cpu``."""
    if name not in DEVICES:
        raise InvalidInputError(f"device must be one of {DEVICES}, got {name!r}")
    if name == "cuda" and not torch.cuda.is_available():
        raise InvalidInputError("device 'cuda' was asked for, but torch sees no CUDA GPU")
    return default_device() if name == "auto" else torch.device(name)


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
        """Run every layer; returns the hidden states and the new per-layer key/value caches."""
        new = []
        for i, layer in enumerate(self.layers):
            x, c = layer(x, mask, None if caches is None else caches[i])
            new.append(c)
        return x, new

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Scores over the restricted vocabulary (output layer tied to the token embeddings)."""
        return self.head(h) @ self.tok.weight.t() + self.out_bias
