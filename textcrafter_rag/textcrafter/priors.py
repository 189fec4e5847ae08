"""Cluster priors: the anchor ``f_mu`` of the reward's last term.

k-means (faiss) on calibration embeddings gives ``k`` centroids. Each cluster's mean PII
probability is measured on its members; clusters at or below the median are "safe". The
target ``f_mu`` for an embedding is the nearest safe centroid (cosine), so the reward pulls
releases toward a nearby region of plain, PII-free text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .pii import as_float32

if TYPE_CHECKING:
    import torch

__all__ = ["ClusterPrior"]


@dataclass
class ClusterPrior:
    """Centroids ``(k, D)`` (float32) and a boolean mask of safe clusters ``(k,)``, as NumPy arrays.

    Torch tensors given are viewed as such: a policy loads without torch; :meth:`target` and training use torch.
    """

    centroids: np.ndarray
    safe: np.ndarray

    def __post_init__(self) -> None:
        self.centroids = as_float32(self.centroids)
        safe = self.safe.detach().cpu().numpy() if hasattr(self.safe, "detach") else self.safe
        self.safe = np.asarray(safe).astype(bool)

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
        return cls(centroids=km.centroids, safe=safe)

    def target(self, f0: torch.Tensor) -> torch.Tensor:
        """``f_mu`` per row of the torch tensor ``f0``: the safe centroid with the highest cosine similarity."""
        import torch

        c = torch.as_tensor(self.centroids).to(f0.dtype)
        sims = torch.nn.functional.normalize(f0, dim=-1) @ torch.nn.functional.normalize(c, dim=-1).T
        sims = sims.masked_fill(~torch.as_tensor(self.safe).to(f0.device), float("-inf"))
        return c[sims.argmax(dim=-1)]

    def tensors(self) -> dict[str, np.ndarray]:
        return {"prior.centroids": self.centroids, "prior.safe": self.safe.astype(np.uint8)}

    @classmethod
    def from_tensors(cls, tensors: dict[str, Any]) -> ClusterPrior:
        return cls(centroids=tensors["prior.centroids"], safe=tensors["prior.safe"])
