"""``textcrafter audit``: the inversion risk of a vector store, before and after protection.

:func:`run_audit` attacks a sample of stored vectors with the attack suite
(:func:`textcrafter_rag.attacks.evaluate_attacks`) and returns an :class:`AuditResult`;
:func:`write_report` writes it as ``audit.json``, ``audit.md``, ``audit.html`` and ``audit.png``. The
attacker is described by :class:`~textcrafter_rag.attacks.AttackConfig` (re-exported here), the one
``evaluate_attacks`` and ``textcrafter attack`` take. A store that keeps its texts beside the vectors
is reported first: :func:`plaintext_finding`.
"""

from __future__ import annotations

from ..attacks.config import AttackConfig
from .report import plaintext_finding, summary, verdict, write_report
from .run import AuditResult, run_audit
from .store import AuditInputError, load_sample

__all__ = [
    "AttackConfig",
    "AuditInputError",
    "AuditResult",
    "load_sample",
    "plaintext_finding",
    "run_audit",
    "summary",
    "verdict",
    "write_report",
]
