"""Vec2Text-style correction with black-box access to the encoder.

Two tools:

* :func:`rerank` re-embeds beam candidates and keeps, per target, the one whose embedding is
  closest (cosine) to the target embedding.
* :class:`Corrector` is a second decoder conditioned on the target embedding ``e``, the current
  hypothesis's embedding ``h``, their difference ``e - h`` and the hypothesis's tokens. It is
  initialised from a trained :class:`~.inverter.Inverter` and fine-tuned on the inverter's own
  hypotheses. :meth:`Corrector.correct` runs it iteratively; each step re-embeds the
  candidates and keeps the current hypothesis unless a candidate is closer to the target, so
  the cosine to the target never decreases.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np
import torch

from ..numerics import row_cosines
from .inverter import Inverter, InverterTrainingConfig
from .inverter_io import CORRECTOR_KIND
from .inverter_model import InverterModel

__all__ = ["Corrector", "EmbedFn", "rerank", "train_corrector"]

#: Maps texts to the embeddings they are compared with (the encoder, or defense after encoder).
EmbedFn = Callable[[list[str]], np.ndarray]


def rerank(candidates: Sequence[Sequence[str]], targets: np.ndarray, embed: EmbedFn) -> tuple[list[str], np.ndarray]:
    """Pick, per target, the candidate whose re-embedding is closest to the target.

    Returns:
        ``(best_texts, best_cosines)``.
    """
    flat = [c if c.strip() else "." for cands in candidates for c in cands]
    owner = np.repeat(np.arange(len(candidates)), [len(c) for c in candidates])
    emb = embed(flat)
    cos = row_cosines(emb, np.asarray(targets)[owner])
    best_cos = np.full(len(candidates), -np.inf)
    choice = [""] * len(candidates)
    for i, (o, c) in enumerate(zip(owner, cos)):
        if c > best_cos[o]:
            best_cos[o] = c
            choice[o] = flat[i]
    return choice, best_cos


class Corrector(Inverter):
    """A hypothesis-conditioned decoder (see the module docstring). Build with :meth:`from_inverter`."""

    artifact_kind: ClassVar[str] = CORRECTOR_KIND

    @classmethod
    def from_inverter(cls, inverter: Inverter) -> Corrector:
        """A corrector with the inverter's weights; the new inputs start with zero weight."""
        old = inverter.config
        cfg = replace(old, cond_inputs=3, hyp_len=old.max_len)
        model = InverterModel(cfg, len(inverter.vocab_ids))
        state = {k: v.detach().cpu().clone() for k, v in inverter.model.state_dict().items()}
        w = state["prefix.0.weight"]
        state["prefix.0.weight"] = torch.cat([w, torch.zeros(w.shape[0], 2 * w.shape[1])], 1)
        pos = state["pos.weight"]
        new_pos = model.pos.weight.detach().clone()
        new_pos[: pos.shape[0]] = pos
        k = old.n_prefix
        new_pos[pos.shape[0] : pos.shape[0] + cfg.hyp_len] = pos[k : k + cfg.hyp_len]
        state["pos.weight"] = new_pos
        model.load_state_dict(state)
        return cls(
            model,
            inverter.tokenizer,
            inverter.vocab_ids,
            meta={**inverter.meta, "kind": "corrector"},
            device=inverter.device,
        )

    # -------------------------------------------------------------- conditioning

    def hyp_array(self, hypotheses: Sequence[str]) -> np.ndarray:
        """Hypothesis texts -> padded local token ids ``(n, hyp_len)``."""
        rows = self.encode_texts(hypotheses)
        arr = np.full((len(rows), self.config.hyp_len), self.pad, dtype=np.int64)
        for i, r in enumerate(rows):
            arr[i, : len(r)] = r[: self.config.hyp_len]
        return arr

    @staticmethod
    def condition(target: np.ndarray, hyp_emb: np.ndarray) -> np.ndarray:
        """``[e, h, e - h]``: the corrector's conditioning vector."""
        t = np.asarray(target, dtype=np.float32)
        h = np.asarray(hyp_emb, dtype=np.float32)
        return np.concatenate([t, h, t - h], axis=1)

    def extra_batch(self, extra: Any, idx: np.ndarray) -> Any:
        """The hypothesis tokens of rows ``idx``."""
        return None if extra is None else torch.as_tensor(extra[idx])

    def cond_prefix(self, cond: torch.Tensor, extra: Any = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The embedding prefix followed by the hypothesis tokens; padding tokens are masked out."""
        m = self.model
        prefix = m.prefix_embeds(cond)
        hyp = extra.to(self.device)
        start = m.cfg.n_prefix + m.cfg.max_len + 2
        hpos = torch.arange(start, start + hyp.shape[1], device=self.device)
        hyp_vec = m.tok(hyp) + m.pos(hpos)[None]
        mask = torch.cat(
            [torch.ones(hyp.shape[0], prefix.shape[1], dtype=torch.bool, device=self.device), hyp != self.pad], 1
        )
        return torch.cat([prefix, hyp_vec.to(prefix.dtype)], 1), mask

    # -------------------------------------------------------------- training and use

    def fit_on_hypotheses(
        self,
        targets: np.ndarray,
        texts: Sequence[str],
        hypotheses: Sequence[str],
        hyp_embeddings: np.ndarray,
        *,
        train_config: InverterTrainingConfig | None = None,
        progress: bool = True,
    ) -> dict[str, Any]:
        """Fine-tune on ``(target, hypothesis) -> true text`` triples."""
        cond = self.condition(targets, hyp_embeddings)
        return self.fit(
            cond,
            texts,
            train_config=train_config,
            extra=self.hyp_array(hypotheses),
            progress=progress,
            desc="train corrector",
        )

    def correct(
        self,
        targets: np.ndarray,
        hypotheses: Sequence[str],
        embed: EmbedFn,
        *,
        steps: int = 3,
        beam: int = 4,
        progress: bool = False,
        on_step: Callable[[int, list[str], np.ndarray], None] | None = None,
    ) -> list[str]:
        """Iteratively correct ``hypotheses`` toward ``targets``.

        Args:
            targets: The attacked embeddings ``(n, D)``.
            hypotheses: Initial reconstructions (e.g. the inverter's output).
            embed: Black-box access: texts -> embeddings comparable with ``targets``.
            steps: Correction steps.
            beam: Beam width per step (all beams are reranked together with the current hypothesis).
            on_step: Called after each step with ``(step, texts, cosines)``.
        """
        cur = list(hypotheses)
        cur_emb = embed([c if c.strip() else "." for c in cur])
        for step in range(1, steps + 1):
            cond = self.condition(targets, cur_emb)
            cands = self.generate(cond, beam=beam, num_return=beam, extra=self.hyp_array(cur), progress=progress)
            pools = [[h] + [c for c in cs if c != h] for h, cs in zip(cur, cands)]
            cur, cos = rerank(pools, targets, embed)
            cur_emb = embed([c if c.strip() else "." for c in cur])
            if on_step is not None:
                on_step(step, list(cur), cos)
        return cur


def train_corrector(
    inverter: Inverter,
    targets: np.ndarray,
    texts: Sequence[str],
    embed: EmbedFn,
    *,
    train_config: InverterTrainingConfig | None = None,
    progress: bool = True,
) -> Corrector:
    """Build a :class:`Corrector` from ``inverter`` and fine-tune it on the inverter's greedy hypotheses."""
    hyps = inverter.invert(targets, progress=progress)
    hyp_emb = embed([h if h.strip() else "." for h in hyps])
    corr = Corrector.from_inverter(inverter)
    corr.fit_on_hypotheses(targets, texts, hyps, hyp_emb, train_config=train_config, progress=progress)
    return corr
