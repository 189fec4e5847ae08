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
