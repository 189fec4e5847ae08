"""The TextCrafter policy network: two identical attention branches.

Branch 1 outputs the mean ``mu`` of a Gaussian action (with a learned log standard deviation
``lambda``); branch 2 outputs a direction ``d`` normalised to ``v = d/||d||``. Each branch:
input ``x`` in R^{1xD} plus a learnable positional vector, one multi-head self-attention layer
(``H`` heads, ``d_k = d_v = D/H``), dropout, residual + LayerNorm, a two-layer GELU FFN,
dropout, residual + LayerNorm, and a linear head.

With a sequence of length one the attention softmax is identically 1, so self-attention
equals the value and output projections applied to the token. :meth:`PolicyBranch.forward`
uses that exact shortcut unless ``full_attention=True`` (the test suite proves equality).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .configs import PolicyConfig

__all__ = ["PolicyConfig", "PolicyBranch", "TextCrafterPolicy", "PolicyOutput"]


class PolicyBranch(nn.Module):
    """One branch: positional vector, self-attention, GELU FFN, residual LayerNorms, linear head."""

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__()
        d, ffn = config.dim, config.ffn_dim or config.dim
        self.position = nn.Parameter(torch.zeros(1, d))
        nn.init.normal_(self.position, std=0.02)
        # Dropout is applied to the sub-layer outputs (below), not inside the attention weights.
        self.attention = nn.MultiheadAttention(d, config.resolved_heads, dropout=0.0, batch_first=True)
        self.norm1 = nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, ffn), nn.GELU(), nn.Linear(ffn, d))
        self.norm2 = nn.LayerNorm(d)
        self.dropout = nn.Dropout(config.dropout)
        self.head = nn.Linear(d, d)

    def attend(self, h: torch.Tensor, *, full_attention: bool = False) -> torch.Tensor:
        """Self-attention over the length-1 sequence ``h`` of shape ``(n, D)``."""
        if full_attention:
            seq = h.unsqueeze(1)
            return self.attention(seq, seq, seq, need_weights=False)[0].squeeze(1)
        d = h.shape[-1]
        w_v = self.attention.in_proj_weight[2 * d :]
        b_v = self.attention.in_proj_bias[2 * d :]
        return self.attention.out_proj(F.linear(h, w_v, b_v))

    def forward(self, x: torch.Tensor, *, full_attention: bool = False) -> torch.Tensor:
        h = x + self.position
        h = self.norm1(h + self.dropout(self.attend(h, full_attention=full_attention)))
        h = self.norm2(h + self.dropout(self.ffn(h)))
        return self.head(h)


class PolicyOutput(NamedTuple):
    """Per-row Gaussian parameters and direction: ``mu``, ``sigma`` (broadcast to ``mu``), ``v`` (unit)."""

    mu: torch.Tensor
    sigma: torch.Tensor
    v: torch.Tensor


class TextCrafterPolicy(nn.Module):
    """The two-branch policy ``x -> (mu, sigma, v)``."""

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__()
        self.config = config
        self.mean_branch = PolicyBranch(config)
        self.direction_branch = PolicyBranch(config)
        self.log_sigma = nn.Parameter(torch.full((config.dim,), float(config.init_log_sigma)))
        # Small initial means: training starts close to an isotropic random direction.
        nn.init.normal_(self.mean_branch.head.weight, std=1e-3)
        nn.init.zeros_(self.mean_branch.head.bias)

    def sigma(self) -> torch.Tensor:
        """``sigma = exp(lambda)``, with ``lambda`` clamped below at ``min_log_sigma``."""
        return torch.exp(self.log_sigma.clamp(min=self.config.min_log_sigma))

    def forward(self, x: torch.Tensor, *, full_attention: bool = False) -> PolicyOutput:
        mu = self.mean_branch(x, full_attention=full_attention)
        sigma = self.sigma()
        cap = self.config.max_snr * sigma.pow(2).sum().sqrt()  # = max_snr * rms(sigma) * sqrt(D)
        norm = mu.norm(dim=-1, keepdim=True)
        mu = mu * torch.clamp(cap / norm.clamp_min(1e-12), max=1.0)
        d = self.direction_branch(x, full_attention=full_attention)
        dn = d.norm(dim=-1, keepdim=True)
        e0 = torch.zeros_like(d)
        e0[:, 0] = 1.0
        v = torch.where(dn > 1e-12, d / dn.clamp_min(1e-12), e0)
        return PolicyOutput(mu=mu, sigma=sigma.expand_as(mu), v=v)

    @staticmethod
    def log_prob(delta: torch.Tensor, out: PolicyOutput) -> torch.Tensor:
        """``log pi(delta) = sum_i log N(delta_i | mu_i, sigma_i^2)``, per row."""
        z = (delta - out.mu) / out.sigma
        return (-0.5 * z.pow(2) - out.sigma.log() - 0.5 * math.log(2.0 * math.pi)).sum(-1)
