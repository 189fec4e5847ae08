"""Cluster priors: the anchor ``f_mu`` of the reward's last term.

k-means (faiss) on calibration embeddings gives ``k`` centroids. Each cluster's mean PII
probability is measured on its members; clusters at or below the median are "safe". The
target ``f_mu`` for an embedding is the nearest safe centroid (cosine), so the reward pulls
releases toward a nearby region of plain, PII-free text.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["ClusterPrior"]


@dataclass
class ClusterPrior:
    """Centroids ``(k, D)`` and a boolean mask of safe clusters ``(k,)``."""

    centroids: torch.Tensor
    safe: torch.Tensor

    @classmethod
    def fit(
        cls, embeddings: np.ndarray, pii_prob: np.ndarray, *, k: int = 16, seed: int = 0, niter: int = 25
    ) -> ClusterPrior:
        """Cluster ``embeddings`` and mark clusters whose mean ``pii_prob`` is at most the median as safe."""
        import faiss

        x = np.ascontiguousarray(embeddings, dtype=np.float32)
        k = max(2, min(k, x.shape[0] // 4))
        km = faiss.Kmeans(x.shape[1], k, niter=niter, seed=seed, spherical=True, verbose=False)
        km.train(x)
        _, assign = km.index.search(x, 1)
        assign = assign[:, 0]
        means = np.array([pii_prob[assign == c].mean() if np.any(assign == c) else 1.0 for c in range(k)])
        safe = means <= np.median(means)
        return cls(centroids=torch.tensor(km.centroids, dtype=torch.float32), safe=torch.tensor(safe))

    def target(self, f0: torch.Tensor) -> torch.Tensor:
        """``f_mu`` per row: the safe centroid with the highest cosine similarity to ``f0``."""
        c = self.centroids.to(f0.dtype)
        sims = torch.nn.functional.normalize(f0, dim=-1) @ torch.nn.functional.normalize(c, dim=-1).T
        sims = sims.masked_fill(~self.safe.to(f0.device), float("-inf"))
        return c[sims.argmax(dim=-1)]

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"prior.centroids": self.centroids.contiguous(), "prior.safe": self.safe.to(torch.uint8).contiguous()}

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor]) -> ClusterPrior:
        return cls(centroids=tensors["prior.centroids"], safe=tensors["prior.safe"].to(torch.bool))
