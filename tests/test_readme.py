"""Every ```python snippet of README.md and docs/*.md runs, offline, as a user would paste it.

Each snippet is executed in a fresh namespace with ``TEXTCRAFTER_KEY`` set and a fake
``langchain_openai`` module whose ``OpenAIEmbeddings`` delegates to the bundled MiniLM. "auto" cannot
find the shipped policy for a LangChain model (shipped policies are looked up by the encoder's model
id, and a LangChain model is ``langchain:<name>``), so the fixture puts a copy of the shipped MiniLM policy
where "auto" looks for a policy fitted earlier for this encoder (``cached_policy_dir``, found by the
encoder's fingerprint) and sets ``TEXTCRAFTER_AUTO_FIT=0``: a snippet that would fit fails instead.

A snippet that needs a server, a cluster or minutes of CPU is marked on the line before its fence:
``<!-- readme-test: skip (reason) -->``; it is reported as skipped with that reason. README's two-line
usage and the core ``Protector`` snippet may not be skipped.
"""

from __future__ import annotations

import re
import shutil
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from textcrafter_rag import MissingPolicyError, bundled_minilm, generate_key
from textcrafter_rag.autofit import cached_policy_dir
from textcrafter_rag.encoders import BUNDLED_MODEL_ID, as_encoder
from textcrafter_rag.policies import shipped_policy_path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SKIP = re.compile(r"<!--\s*readme-test:\s*skip\s*\((?P<reason>[^)]*)\)\s*-->")
#: Snippets that must run (README's two-line usage and the framework-free core).
MUST_RUN = ("embeddings = ProtectedEmbeddings(base=OpenAIEmbeddings())", "Protector(base=bundled_minilm())")


@dataclass(frozen=True)
class Snippet:
    page: str
    line: int
    code: str
    skip: str | None


def snippets(path: Path) -> list[Snippet]:
    """The ```python blocks of a Markdown page, with the skip reason written on the line before each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            marker = SKIP.search(lines[i - 1]) if i > 0 else None
            code = "\n".join(lines[i + 1 : end]) + "\n"
            found.append(Snippet(path.relative_to(ROOT).as_posix(), i + 1, code, marker and marker["reason"]))
            i = end
        i += 1
    return found


ALL = [s for page in PAGES for s in snippets(page)]


class OpenAIEmbeddings(Embeddings):
    """Stands in for ``langchain_openai.OpenAIEmbeddings``: the bundled MiniLM behind LangChain's interface."""

    def __init__(self, **_: object) -> None:
        self._encoder = bundled_minilm()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._encoder.encode(list(texts)).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self._encoder.encode([text])[0].tolist()


# Fixtures for names the snippets leave to the reader (a user has their own):
#   docs                 a few LangChain Documents with the metadata fields the snippets name
#                        (author and headline sealed, category plain and filtered on);
#   precomputed_vectors  MiniLM vectors computed before the snippet (the core snippet protects them).
TEXTS = [
    ("Jane Doe, card 4111 1111 1111 1111, moved to Leeds.", "Jane Doe", "Moving house", "life"),
    ("United won the cup final 2-1 after extra time.", "John Roe", "Cup final", "sports"),
    ("The central bank left interest rates unchanged.", "Ann Poe", "Rates on hold", "business"),
]


def _docs() -> list[Document]:
    return [Document(page_content=t, metadata={"author": a, "headline": h, "category": c}) for t, a, h, c in TEXTS]


@pytest.fixture
def fake_openai(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The fake ``langchain_openai``, a key, and the MiniLM policy where "auto" finds it for that encoder."""
    module = types.ModuleType("langchain_openai")
    module.OpenAIEmbeddings = OpenAIEmbeddings  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "langchain_openai", module)
    monkeypatch.setenv("TEXTCRAFTER_KEY", generate_key())
    monkeypatch.setenv("TEXTCRAFTER_AUTO_FIT", "0")
    monkeypatch.setenv("TEXTCRAFTER_HOME", str(tmp_path / "home"))
    shipped = shipped_policy_path(BUNDLED_MODEL_ID)
    assert shipped is not None
    shutil.copytree(shipped, cached_policy_dir(as_encoder(OpenAIEmbeddings())))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # snippets write files (./qdrant-data, store.json) here
    return work


@pytest.mark.parametrize("snippet", ALL, ids=[f"{s.page}:{s.line}" for s in ALL])
def test_snippet_runs(snippet: Snippet, fake_openai: Path) -> None:
    if snippet.skip:
        pytest.skip(snippet.skip)
    namespace = {"__name__": "__readme__", "docs": _docs(), "precomputed_vectors": _precomputed()}
    try:
        exec(compile(snippet.code, f"{snippet.page}:{snippet.line}", "exec"), namespace)
    finally:
        client = namespace.get("client")
        if hasattr(client, "close"):
            client.close()  # Qdrant local mode holds a lock on its folder


def _precomputed() -> np.ndarray:
    return bundled_minilm().encode([t for t, *_ in TEXTS])


def test_readme_usage_stores_ciphertext_and_returns_plaintext(fake_openai: Path) -> None:
    """The two-line usage does what its comments say: ciphertext in the store, decrypted documents out."""
    (usage,) = [s for s in snippets(ROOT / "README.md") if MUST_RUN[0] in s.code]
    namespace = {"__name__": "__readme__", "docs": _docs()}
    exec(compile(usage.code, f"{usage.page}:{usage.line}", "exec"), namespace)
    store = namespace["store"]
    stored = store.store.similarity_search("who moved to Leeds?", k=len(TEXTS))
    assert {d.page_content for d in stored}.isdisjoint(t for t, *_ in TEXTS)
    assert all("author" not in d.metadata or d.metadata["author"] not in {a for _, a, *_ in TEXTS} for d in stored)
    hits = store.as_retriever().invoke("who moved to Leeds?")
    assert hits[0].page_content == TEXTS[0][0]
    assert hits[0].metadata["author"] == "Jane Doe"


def test_must_run_snippets_are_not_skipped() -> None:
    readme = snippets(ROOT / "README.md")
    for needle in MUST_RUN:
        matching = [s for s in readme if needle in s.code]
        assert matching, f"README.md has no snippet containing {needle!r}"
        assert all(s.skip is None for s in matching), f"README.md skips the snippet containing {needle!r}"


def test_fake_encoder_needs_the_seeded_policy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without the seeded cache "auto" would have to fit for the fake encoder: it refuses (so no snippet fits)."""
    from langchain_textcrafter import ProtectedEmbeddings

    monkeypatch.setenv("TEXTCRAFTER_AUTO_FIT", "0")
    monkeypatch.setenv("TEXTCRAFTER_HOME", str(tmp_path / "empty-home"))
    with pytest.raises(MissingPolicyError):
        ProtectedEmbeddings(base=OpenAIEmbeddings())
