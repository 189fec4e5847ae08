"""Helpers for testing pipelines and framework adapters that use textcrafter-rag.

* :class:`RecordingMechanism` records every batch a mechanism saw and released, so a test can
  check that what reached a store is exactly the protected output.
* :class:`KnownVectors` is the raw side: the vectors a fake base model serves, and which of its
  paths served which text.
* :func:`scan_for_plaintext` reads every byte a store wrote and reports each text, or 3-word
  fragment of it, found there: the check behind the sealed stores' "no plaintext on disk".
* :func:`pii_records` makes seeded synthetic documents full of personal data for those tests.
* :func:`assert_no_key` fails when a key shows in a repr, a dump, a file or an error, in any spelling.
* :mod:`textcrafter_rag.testing.contract` holds ``ProtectedEmbeddingsContract``, the behaviour
  every framework adapter must show, and :mod:`textcrafter_rag.testing.sealed_store_contract` holds
  ``SealedStoreContract``, what every adapter's sealed store must do in every search mode; both need
  pytest, so they are not imported here.
"""

from __future__ import annotations

from .known import KnownVectors
from .pii_records import PiiRecord, pii_records
from .plaintext_scan import PlaintextHit, scan_for_plaintext, scanned_files
from .recording import RecordingMechanism
from .secrets import assert_no_key, key_forms

__all__ = [
    "KnownVectors",
    "PiiRecord",
    "PlaintextHit",
    "RecordingMechanism",
    "assert_no_key",
    "key_forms",
    "pii_records",
    "scan_for_plaintext",
    "scanned_files",
]
