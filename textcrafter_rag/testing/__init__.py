"""Helpers for testing pipelines and framework adapters that use textcrafter-rag.

* :class:`RecordingMechanism` records every batch a mechanism saw and released, so a test can
  check that what reached a store is exactly the protected output.
* :class:`KnownVectors` is the raw side: the vectors a fake base model serves, and which of its
  paths served which text.
* :mod:`textcrafter_rag.testing.contract` holds ``ProtectedEmbeddingsContract``, the behaviour
  every framework adapter must show; it needs pytest, so it is not imported here.
"""

from __future__ import annotations

from .known import KnownVectors
from .recording import RecordingMechanism

__all__ = ["KnownVectors", "RecordingMechanism"]
