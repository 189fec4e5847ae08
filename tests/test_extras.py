"""The lean install: protection runs without the research extras, and their absence is named clearly."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from textcrafter_rag import TextcrafterError
from textcrafter_rag.errors import MissingDependencyError
from textcrafter_rag.metrics import corpus_bleu, rouge_l

#: The packages of the ``audit`` extra (pyproject.toml), as imported.
AUDIT_EXTRA = ("sacrebleu", "rouge_score", "matplotlib")


def test_protection_and_the_cli_run_without_the_audit_extra() -> None:
    code = textwrap.dedent(
        f"""
        import importlib.abc, sys

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {AUDIT_EXTRA!r}:
                    raise ModuleNotFoundError(name)

        sys.meta_path.insert(0, Block())
        import numpy as np
        from textcrafter_rag import Protector
        from textcrafter_rag.adapters import build_protector
        from textcrafter_rag.options import ProtectionOptions
        from textcrafter_rag.cli import build_parser

        build_parser()
        Protector(mechanism="gaussian:s=0.1").protect(np.ones((2, 4)))
        options = ProtectionOptions(mechanism="none")
        build_protector(lambda t: np.ones((len(t), 4)), options=options).protector.embed_documents(["a"])
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize(("module", "call"), [("sacrebleu", corpus_bleu), ("rouge_score", rouge_l)])
def test_a_missing_extra_is_named(monkeypatch, module, call) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ImportError
    with pytest.raises(MissingDependencyError, match=r"pip install 'textcrafter-rag\[audit\]'") as raised:
        call(["a b"], ["a b"])
    assert isinstance(raised.value, TextcrafterError) and isinstance(raised.value, ImportError)


def test_require_extra_names_the_extra_and_its_purpose(monkeypatch) -> None:
    from textcrafter_rag.extras import EXTRAS, Extra, missing_packages, require_extra

    monkeypatch.setitem(EXTRAS, "probe", Extra(("textcrafter_no_such_module", "numpy"), "probing the extras"))
    assert missing_packages("probe") == ["textcrafter_no_such_module"]  # found without importing anything
    with pytest.raises(MissingDependencyError, match=r"probing the extras.*pip install 'textcrafter-rag\[probe\]'"):
        require_extra("probe")
    assert missing_packages("fit") == [] and missing_packages("local") == []  # README command 1 installs them


def test_only_a_missing_package_of_the_extra_counts_as_the_extra_missing() -> None:
    from textcrafter_rag.extras import is_missing

    assert is_missing(ModuleNotFoundError("No module named 'torch'", name="torch"), extra="fit")
    assert is_missing(ModuleNotFoundError("No module named 'faiss.x'", name="faiss.x"), extra="fit")
    # torch installed but broken (one of its own dependencies missing): a real error, not "install [fit]"
    assert not is_missing(ModuleNotFoundError("No module named 'sympy'", name="sympy"), extra="fit")
