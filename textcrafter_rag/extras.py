"""Optional dependencies: research code (attacks, audit, plots) needs packages a RAG app does not install.

``pip install textcrafter-rag`` installs what protection needs (encoders, mechanisms, policies and their
fitting, sealing, keys, vector files). The attack metrics and the audit's plot need the ``audit`` extra;
when one of its packages is missing, :func:`missing_extra` names the extra to install instead of a bare
``ModuleNotFoundError``.
"""

from __future__ import annotations

from .errors import MissingDependencyError

__all__ = ["missing_extra"]


def missing_extra(package: str, *, extra: str, purpose: str) -> MissingDependencyError:
    """The error to raise (``from`` the ``ImportError``) when ``package`` of the extra ``extra`` is missing."""
    return MissingDependencyError(
        f"{purpose} needs the package {package}, which textcrafter-rag installs only with an extra: "
        f"pip install 'textcrafter-rag[{extra}]'"
    )
