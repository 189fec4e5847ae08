"""Keyword inference (Song & Raghunathan, CCS 2020): which words occur in the embedded text?

A multi-label MLP maps an embedding to the presence of each of the ``vocab_size`` most frequent
content words (no stop words, no punctuation) of the attacker's training text. The decision
threshold is tuned for F1 on a held-out tenth of the training pairs. Scores are word-level
micro precision / recall / F1 over the vocabulary, on a 0-100 scale.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from ..errors import NotFittedError
from ..metrics import content_tokens
from .inverter_model import default_device, set_seed

__all__ = ["KeywordAttack"]


class KeywordAttack:
    """Multi-label keyword classifier on (possibly protected) embeddings.

    Args:
        vocab_size: Number of candidate keywords.
        hidden: Hidden width of the MLP.
        epochs: Training epochs.
        seed: Random seed.
    """

    def __init__(
        self,
        *,
        vocab_size: int = 500,
        hidden: int = 512,
        epochs: int = 20,
        batch_size: int = 256,
        lr: float = 2e-3,
        seed: int = 0,
    ) -> None:
        self.vocab_size = vocab_size
        self.hidden = hidden
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.seed = seed
        self.vocab: list[str] = []
        self.threshold = 0.5
        self.net: nn.Module | None = None

    def _labels(self, texts: Sequence[str]) -> np.ndarray:
        index = {w: i for i, w in enumerate(self.vocab)}
        y = np.zeros((len(texts), len(self.vocab)), dtype=np.float32)
        for r, t in enumerate(texts):
            for w in set(content_tokens(t)):
                if w in index:
                    y[r, index[w]] = 1.0
        return y

    def fit(self, embeddings: np.ndarray, texts: Sequence[str]) -> KeywordAttack:
        """Train on ``(embedding, text)`` pairs of the attacker's own data."""
        set_seed(self.seed)
        counts = Counter(w for t in texts for w in set(content_tokens(t)))
        self.vocab = [w for w, _ in counts.most_common(self.vocab_size)]
        x = torch.as_tensor(np.asarray(embeddings, dtype=np.float32))
        y = torch.as_tensor(self._labels(texts))
        n = x.shape[0]
        perm = torch.randperm(n)
        n_val = max(1, n // 10) if n >= 20 else 0
        val, tr = perm[:n_val], perm[n_val:]
        dev = default_device()
        self.net = nn.Sequential(
            nn.Linear(x.shape[1], self.hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(self.hidden, len(self.vocab))
        ).to(dev)
        opt = torch.optim.AdamW(self.net.parameters(), lr=self.lr, weight_decay=1e-4)
        loss_fn = nn.BCEWithLogitsLoss()
        self.net.train()
        for _ in range(self.epochs):
            order = tr[torch.randperm(len(tr))]
            for s in range(0, len(tr), self.batch_size):
                b = order[s : s + self.batch_size]
                loss = loss_fn(self.net(x[b].to(dev)), y[b].to(dev))
                opt.zero_grad()
                loss.backward()
                opt.step()
        self.net.eval()
        if n_val:
            probs = self._proba(x[val])
            truth = y[val].numpy() > 0.5
            best = max(np.arange(0.05, 0.95, 0.05), key=lambda th: self._prf(probs >= th, truth)[2])
            self.threshold = float(best)
        return self

    @torch.no_grad()
    def _proba(self, x: torch.Tensor) -> np.ndarray:
        assert self.net is not None
        return torch.sigmoid(self.net(x.to(next(self.net.parameters()).device))).cpu().numpy()

    @staticmethod
    def _prf(pred: np.ndarray, truth: np.ndarray) -> tuple[float, float, float]:
        tp = float(np.sum(pred & truth))
        p = tp / max(float(pred.sum()), 1.0)
        r = tp / max(float(truth.sum()), 1.0)
        return 100 * p, 100 * r, (200 * p * r / (p + r) if p + r > 0 else 0.0)

    def predict(self, embeddings: np.ndarray) -> list[set[str]]:
        """The predicted keyword set per embedding."""
        if self.net is None:
            raise NotFittedError("call fit() first")
        probs = self._proba(torch.as_tensor(np.asarray(embeddings, dtype=np.float32)))
        return [{self.vocab[j] for j in np.flatnonzero(row >= self.threshold)} for row in probs]

    def evaluate(self, embeddings: np.ndarray, texts: Sequence[str]) -> dict[str, float]:
        """``keyword_precision``, ``keyword_recall``, ``keyword_f1`` (micro, over the vocabulary, 0-100)."""
        if self.net is None:
            raise NotFittedError("call fit() first")
        probs = self._proba(torch.as_tensor(np.asarray(embeddings, dtype=np.float32)))
        p, r, f = self._prf(probs >= self.threshold, self._labels(texts) > 0.5)
        return {"keyword_precision": p, "keyword_recall": r, "keyword_f1": f}
