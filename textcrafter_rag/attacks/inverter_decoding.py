"""Decoding for :class:`~textcrafter_rag.attacks.inverter.Inverter`: greedy and beam search with a key/value cache.

The functions read the inverter's network, special-token ids and conditioning hook
(:meth:`~textcrafter_rag.attacks.inverter.Inverter.cond_prefix`, which a corrector overrides to
add its hypothesis tokens), so one decoder serves both the inverter and the corrector.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

if TYPE_CHECKING:  # typing only: inverter.py imports this module
    from .inverter import Inverter

__all__ = ["beam_decode", "greedy_decode"]


@torch.no_grad()
def _start(inv: Inverter, cond: torch.Tensor, extra: Any) -> tuple[torch.Tensor, list, torch.Tensor | None, int]:
    """Run the prefix and ``[CLS]``: first-step logits, caches, key mask (correctors) and next position."""
    prefix, pmask = inv.cond_prefix(cond, extra)
    b = cond.shape[0]
    bos = torch.full((b, 1), inv.bos, dtype=torch.long, device=inv.device)
    x = inv.model.embed(prefix, bos, inv.config.n_prefix)
    mask = None
    keymask = None
    if pmask is not None:
        total = x.shape[1]
        keymask = torch.cat([pmask, torch.ones(b, 1, dtype=torch.bool, device=inv.device)], dim=1)
        causal = torch.ones(total, total, dtype=torch.bool, device=inv.device).tril()
        mask = (causal[None] & keymask[:, None, :])[:, None]
    h, caches = inv.model.run(x, mask)
    return inv.model.logits(h[:, -1]).float(), caches, keymask, inv.config.n_prefix + 1


@torch.no_grad()
def _step(
    inv: Inverter, tokens: torch.Tensor, caches: list, keymask: torch.Tensor | None, pos: int
) -> tuple[torch.Tensor, list, torch.Tensor | None]:
    """Feed one token per row at position ``pos``; returns its logits and the grown caches and key mask."""
    x = inv.model.embed(None, tokens[:, None], start=pos)
    mask = None
    if keymask is not None:
        keymask = torch.cat([keymask, torch.ones(tokens.shape[0], 1, dtype=torch.bool, device=inv.device)], 1)
        mask = keymask[:, None, None, :]
    h, caches = inv.model.run(x, mask, caches)
    return inv.model.logits(h[:, -1]).float(), caches, keymask


@torch.no_grad()
def greedy_decode(inv: Inverter, cond: torch.Tensor, extra: Any = None) -> list[list[int]]:
    """The most likely next token at every step: one local-id sequence per row of ``cond`` (no specials)."""
    logits, caches, keymask, pos = _start(inv, cond, extra)
    b = cond.shape[0]
    out = torch.zeros(b, 0, dtype=torch.long, device=inv.device)
    finished = torch.zeros(b, dtype=torch.bool, device=inv.device)
    for t in range(inv.config.max_len + 1):
        logits[:, inv.unk] = -1e9
        logits[:, inv.pad] = -1e9
        logits[:, inv.bos] = -1e9
        nxt = logits.argmax(-1)
        nxt = torch.where(finished, torch.full_like(nxt, inv.eos), nxt)
        out = torch.cat([out, nxt[:, None]], 1)
        finished |= nxt == inv.eos
        if bool(finished.all()) or t == inv.config.max_len:
            break
        logits, caches, keymask = _step(inv, nxt, caches, keymask, pos)
        pos += 1
    rows = []
    for r in out.tolist():
        rows.append(r[: r.index(inv.eos)] if inv.eos in r else r)
    return rows


@torch.no_grad()
def beam_decode(
    inv: Inverter, cond: torch.Tensor, extra: Any = None, *, beam: int, length_penalty: float = 1.0
) -> list[list[tuple[float, list[int]]]]:
    """Beam search: per row of ``cond``, ``(length-normalised log-prob, local ids)`` candidates, best first.

    Empty outputs are banned; a row stops once ``beam`` hypotheses have ended and none of the live
    ones can beat the best ended one.
    """
    logits, caches, keymask, pos = _start(inv, cond, extra)
    b = cond.shape[0]
    ban = [inv.unk, inv.pad, inv.bos]
    logp = F.log_softmax(logits, -1)
    logp[:, ban] = -1e9
    logp[:, inv.eos] = -1e9  # no empty outputs
    scores, toks = logp.topk(beam, -1)  # (b, beam)
    seqs = [[[int(toks[i, j])] for j in range(beam)] for i in range(b)]
    rep = lambda c: c.repeat_interleave(beam, 0)
    caches = [(rep(k), rep(v)) for k, v in caches]
    keymask = rep(keymask) if keymask is not None else None
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(b)]
    cur = toks.reshape(-1)
    alive = torch.ones(b, dtype=torch.bool)
    for t in range(1, inv.config.max_len + 1):
        logits, caches, keymask = _step(inv, cur, caches, keymask, pos)
        pos += 1
        logp = F.log_softmax(logits, -1)
        logp[:, ban] = -1e9
        cand = (scores.reshape(-1, 1) + logp).view(b, beam * logp.shape[-1])
        top_s, top_i = cand.topk(2 * beam, -1)
        top_s, top_i = top_s.cpu(), top_i.cpu()
        vsz = logp.shape[-1]
        new_scores = torch.full((b, beam), -1e9)
        new_toks = torch.full((b, beam), inv.eos, dtype=torch.long)
        src = torch.arange(b * beam).view(b, beam).clone()
        new_seqs = []
        for i in range(b):
            kept: list[list[int]] = []
            if alive[i]:
                for s, ix in zip(top_s[i].tolist(), top_i[i].tolist()):
                    j, tk = divmod(ix, vsz)
                    if s < -1e8:
                        break
                    if tk == inv.eos:
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
                kept.append(kept[0] if kept else [inv.eos])
            new_seqs.append(kept)
        if not bool(alive.any()):
            break
        seqs = new_seqs
        scores = new_scores.to(inv.device)
        sel = src.reshape(-1).to(inv.device)
        caches = [(k[sel], v[sel]) for k, v in caches]
        keymask = keymask[sel] if keymask is not None else None
        cur = new_toks.reshape(-1).to(inv.device)
    for i in range(b):
        if alive[i] or not finished[i]:
            for j in range(beam):
                if scores[i, j] > -1e8:
                    finished[i].append((float(scores[i, j]) / (len(seqs[i][j]) + 1) ** length_penalty, seqs[i][j]))
        finished[i].sort(key=lambda f: -f[0])
    return finished
