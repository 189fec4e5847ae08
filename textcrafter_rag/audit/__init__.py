"""``textcrafter audit``: the inversion risk of a vector store, before and after protection.

:func:`run_audit` attacks a sample of stored vectors with the attack suite
(:func:`textcrafter_rag.attacks.evaluate_attacks`) and returns an :class:`AuditResult`;
:func:`write_report` writes it as ``audit.json``, ``audit.md``, ``audit.html`` and ``audit.png``.
"""

from __future__ import annotations

from .report import verdict, write_report
from .run import AuditResult, run_audit
from .store import AuditInputError, load_sample

__all__ = ["run_audit", "AuditResult", "AuditInputError", "write_report", "verdict", "load_sample"]
