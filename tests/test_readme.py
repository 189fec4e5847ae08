"""Every ```python snippet of README.md, docs/*.md and the integration READMEs runs, offline, as pasted.

Each snippet is executed in a fresh namespace with ``TEXTCRAFTER_KEY`` set, a fake ``langchain_openai``
module whose ``OpenAIEmbeddings`` delegates to the bundled MiniLM, and a fake
``llama_index.embeddings.openai`` whose ``OpenAIEmbedding`` does the same behind LlamaIndex's interface.
"auto" cannot find the shipped policy for these models (shipped policies are looked up by the encoder's
model id, and a LangChain model is ``langchain:<name>``), so the fixture puts a copy of the shipped MiniLM
policy where "auto" looks for a policy fitted earlier for each encoder (``cached_policy_dir``, found by the
encoder's fingerprint) and sets ``TEXTCRAFTER_AUTO_FIT=0``: a snippet that would fit fails instead.

A snippet that needs a server, a cluster or minutes of CPU is marked on the line before its fence:
``<!-- readme-test: skip (reason) -->``; it is reported as skipped with that reason. README's LangChain
and LlamaIndex examples and the core ``Protector`` snippet (docs/usage.md) may not be skipped.

README is what a newcomer reads in five minutes: at most 120 lines, the two commands CI runs labelled
command 1 and command 2, a three-row table of the sealed-search modes whose numbers all come from the
results files it cites; the integration READMEs have the same short shape. No user-facing document cites an
internal issue number.
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
from llama_index.core import Document as LlamaDocument
from llama_index.core.embeddings import BaseEmbedding

from llama_index.embeddings.textcrafter.encoders import document_encoder
from textcrafter_rag import MissingPolicyError, bundled_minilm, generate_key
from textcrafter_rag.autofit import cached_policy_dir
from textcrafter_rag.encoders import BUNDLED_MODEL_ID, as_encoder
from textcrafter_rag.policies import shipped_policy_path

ROOT = Path(__file__).resolve().parent.parent
INTEGRATION_READMES = sorted((ROOT / "integrations").glob("*/README.md"))
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *INTEGRATION_READMES]
SKIP = re.compile(r"<!--\s*readme-test:\s*skip\s*\((?P<reason>[^)]*)\)\s*-->")
#: Snippets that must run, by the page that holds them (README's two examples, the framework-free core).
MUST_RUN = {
    "README.md": (
        "embeddings = ProtectedEmbeddings(base=OpenAIEmbeddings())",
        "embed_model = ProtectedEmbedding(base=OpenAIEmbedding())",
    ),
    "docs/usage.md": ("Protector(base=bundled_minilm())",),
}
#: Pages a user reads: none may cite an internal issue number ("issue 21", "issue #29", "Issue 21's aim").
USER_FACING = [
    ROOT / "README.md",
    ROOT / "SECURITY.md",
    ROOT / "benchmarks" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *INTEGRATION_READMES,
]
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
#: The two commands CI greps README for (.ci/run), verbatim.
CI_COMMANDS = {
    "Command 1": (
        "python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -r requirements.txt && "
        ".venv/bin/pip install --no-deps -r requirements-nodeps.txt && .venv/bin/textcrafter demo"
    ),
    "Command 2": ".venv/bin/python -m pytest",
}


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


class OpenAIEmbedding(BaseEmbedding):
    """Stands in for ``llama_index.embeddings.openai.OpenAIEmbedding``: the bundled MiniLM behind LlamaIndex's."""

    def __init__(self, **_: object) -> None:
        super().__init__(model_name="fake-openai")

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return bundled_minilm().encode(list(texts)).tolist()

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embeddings([text])[0]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._get_text_embeddings([query])[0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


# Fixtures for names the snippets leave to the reader (a user has their own):
#   docs                 a few LangChain Documents with the metadata fields the snippets name
#                        (author and headline sealed, category plain and filtered on);
#   documents            the same texts as LlamaIndex Documents;
#   precomputed_vectors  MiniLM vectors computed before the snippet (the core snippet protects them).
TEXTS = [
    ("Jane Doe, card 4111 1111 1111 1111, moved to Leeds.", "Jane Doe", "Moving house", "life"),
    ("United won the cup final 2-1 after extra time.", "John Roe", "Cup final", "sports"),
    ("The central bank left interest rates unchanged.", "Ann Poe", "Rates on hold", "business"),
]


def _docs() -> list[Document]:
    return [Document(page_content=t, metadata={"author": a, "headline": h, "category": c}) for t, a, h, c in TEXTS]


def _documents() -> list[LlamaDocument]:
    return [LlamaDocument(text=t, metadata={"author": a, "headline": h, "category": c}) for t, a, h, c in TEXTS]


def _namespace() -> dict[str, object]:
    return {"__name__": "__readme__", "docs": _docs(), "documents": _documents(), "precomputed_vectors": _precomputed()}


@pytest.fixture
def fake_openai(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The fake OpenAI modules, a key, and the MiniLM policy where "auto" finds it for those encoders."""
    module = types.ModuleType("langchain_openai")
    module.OpenAIEmbeddings = OpenAIEmbeddings  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "langchain_openai", module)
    llama_module = types.ModuleType("llama_index.embeddings.openai")
    llama_module.OpenAIEmbedding = OpenAIEmbedding  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "llama_index.embeddings.openai", llama_module)
    monkeypatch.setenv("TEXTCRAFTER_KEY", generate_key())
    monkeypatch.setenv("TEXTCRAFTER_AUTO_FIT", "0")
    monkeypatch.setenv("TEXTCRAFTER_HOME", str(tmp_path / "home"))
    shipped = shipped_policy_path(BUNDLED_MODEL_ID)
    assert shipped is not None
    shutil.copytree(shipped, cached_policy_dir(as_encoder(OpenAIEmbeddings())))
    shutil.copytree(shipped, cached_policy_dir(document_encoder(OpenAIEmbedding())))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # snippets write files (./qdrant-data, store.json) here
    return work


@pytest.mark.parametrize("snippet", ALL, ids=[f"{s.page}:{s.line}" for s in ALL])
def test_snippet_runs(snippet: Snippet, fake_openai: Path) -> None:
    if snippet.skip:
        pytest.skip(snippet.skip)
    namespace = _namespace()
    try:
        exec(compile(snippet.code, f"{snippet.page}:{snippet.line}", "exec"), namespace)
    finally:
        client = namespace.get("client")
        if hasattr(client, "close"):
            client.close()  # Qdrant local mode holds a lock on its folder


def _precomputed() -> np.ndarray:
    return bundled_minilm().encode([t for t, *_ in TEXTS])


def test_readme_usage_stores_ciphertext_and_returns_plaintext(fake_openai: Path) -> None:
    """The LangChain example does what its comments say: ciphertext in the store, decrypted documents out."""
    (usage,) = [s for s in snippets(ROOT / "README.md") if MUST_RUN["README.md"][0] in s.code]
    namespace = _namespace()
    exec(compile(usage.code, f"{usage.page}:{usage.line}", "exec"), namespace)
    store = namespace["store"]
    stored = store.store.similarity_search("who moved to Leeds?", k=len(TEXTS))
    assert {d.page_content for d in stored}.isdisjoint(t for t, *_ in TEXTS)
    assert all("author" not in d.metadata or d.metadata["author"] not in {a for _, a, *_ in TEXTS} for d in stored)
    hits = store.as_retriever().invoke("who moved to Leeds?")
    assert hits[0].page_content == TEXTS[0][0]
    assert hits[0].metadata["author"] == "Jane Doe"


def test_readme_llama_index_example_persists_ciphertext_and_returns_plaintext(fake_openai: Path) -> None:
    """The LlamaIndex example: no text or sealed author in any file it persists, decrypted nodes out."""
    (example,) = [s for s in snippets(ROOT / "README.md") if MUST_RUN["README.md"][1] in s.code]
    namespace = _namespace()
    exec(compile(example.code, f"{example.page}:{example.line}", "exec"), namespace)
    namespace["ctx"].persist(str(fake_openai / "storage"))
    written = b"".join(f.read_bytes() for f in sorted((fake_openai / "storage").rglob("*")) if f.is_file())
    assert written, "the storage context persisted nothing"
    for text, author, *_ in TEXTS:
        assert text.encode() not in written and author.encode() not in written
    (hit,) = namespace["index"].as_retriever(similarity_top_k=1).retrieve("who moved to Leeds?")
    assert hit.node.get_content() == TEXTS[0][0]
    assert hit.node.metadata["author"] == "Jane Doe"


@pytest.mark.parametrize("page", sorted(MUST_RUN))
def test_must_run_snippets_are_not_skipped(page: str) -> None:
    found = snippets(ROOT / page)
    for needle in MUST_RUN[page]:
        matching = [s for s in found if needle in s.code]
        assert matching, f"{page} has no snippet containing {needle!r}"
        assert all(s.skip is None for s in matching), f"{page} skips the snippet containing {needle!r}"


def test_readme_is_read_in_five_minutes() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines; keep it to 120 (details go to docs/)"


def test_readme_labels_the_commands_ci_runs() -> None:
    """CI (.ci/run) greps README for its two commands: both are there verbatim, each under its label."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for label, command in CI_COMMANDS.items():
        assert command in ci, f".ci/run no longer runs {command!r}: update this test with it"
        assert re.search(rf"^{label}\b[^\n]*(\n[^\n`]+)*\n\n```bash\n{re.escape(command)}\n```", readme, re.M), (
            f"README.md does not show {command!r} as {label}"
        )
    assert "`constraints.txt` pins `torch==2.13.0` (a CPU build" in readme


@pytest.mark.parametrize("page", INTEGRATION_READMES, ids=[p.parent.name for p in INTEGRATION_READMES])
def test_integration_readmes_have_the_readme_s_short_shape(page: Path) -> None:
    """What, install, one example, the modes, the limits, links; the reference lives in docs/."""
    text = page.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 80, f"{page.relative_to(ROOT)} is long: move the reference to docs/"
    assert re.findall(r"^## (.+)$", text, re.M) == ["Install", "Example", "Modes", "Limits", "Links"]
    assert len(snippets(page)) == 1 and snippets(page)[0].skip is None
    modes = text[text.index("## Modes") : text.index("## Limits")]
    assert all(f"**{mode}**" in modes for mode in ("single-stage", "candidates", "index"))
    assert "(../../docs/" in text and "(../../SECURITY.md)" in text


#: The results files README's modes table cites, and the rows it must have.
MODES_SOURCES = (
    "sealed_search.md",
    "store_index_scale_10m_scan4x_open200.md",
    "store_index_scale_10m_train_scan.md",
    "privacy.md",
    "threat_models.md",
)
MODES = ("single-stage", "candidates", "index")


def _modes_table(readme: str) -> list[str]:
    start = readme.index("## Sealed-search modes")
    section = readme[start : readme.index("\n## ", start + 1)]
    return [line for line in section.splitlines() if line.startswith("| **")]


def test_readme_modes_table_has_three_rows_and_only_numbers_from_the_files_it_cites() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = _modes_table(readme)
    assert [re.match(r"\| \*\*([^*]+)\*\*", row)[1] for row in rows] == list(MODES)
    section = readme[readme.index("## Sealed-search modes") :]
    for name in MODES_SOURCES:
        assert name in section.split("## ", 2)[1], f"the modes section does not cite {name}"
    sources = "".join((ROOT / "benchmarks" / "results" / name).read_text(encoding="utf-8") for name in MODES_SOURCES)
    for row in rows:
        for number in re.findall(r"(?<![\w@.])\d[\d,]*(?:\.\d+)?", row):
            assert number in sources, f"README's modes table cites {number}, which no cited results file holds"


def test_readme_says_what_sealed_scores_mean() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "exact cosine similarity of the clean vectors" in readme and "higher is closer" in readme
    assert "Plain Chroma returns distances, where lower is closer" in readme


def test_the_sealed_search_page_says_what_scores_mean_and_where_the_logs_and_counters_are() -> None:
    page = " ".join((ROOT / "docs" / "sealed_search.md").read_text(encoding="utf-8").split())
    assert "is the exact cosine similarity of the clean query and record vectors" in page
    assert "Plain Chroma returns distances, where lower is closer" in page
    assert '`logging.getLogger("textcrafter_rag")`' in page and "`store.stats`" in page
    for counter in ("searches", "capped_searches", "dead_entries_skipped", "records_skipped"):
        assert f"`{counter}`" in page


def test_readme_results_tables_moved_to_docs_results() -> None:
    """The tables README used to carry live in docs/results.md, each beside the file it comes from."""
    results = " ".join((ROOT / "docs" / "results.md").read_text(encoding="utf-8").split())
    moved = {
        "benchmarks/results/privacy.md": "| TextCrafter eps 1.0 (default) | 51.90 | 8.57 | 12.98 | 2.44 | 1.00 |",
        "benchmarks/results/threat_models.md": "| key + TextCrafter eps 1 | 0.67 (0.03) | 0.16 (≈0) | 0.30 (0.15) |",
        "benchmarks/results/two_stage.md": "(norm 2.0, query 0.5, `fetch_k=200`) | 62.0 (0.954) | **8.16 (25%)** |",
        "benchmarks/results/sealed_search.md": "0.79 with 400 known pairs",
        "benchmarks/results/attack_strength_gpu.md": "40.74 with beam 8 +",
    }
    for source, content in moved.items():
        assert content in results, f"docs/results.md lost {content!r}"
        assert source in results, f"docs/results.md does not cite {source}"


@pytest.mark.parametrize("page", USER_FACING, ids=[p.relative_to(ROOT).as_posix() for p in USER_FACING])
def test_no_user_facing_doc_cites_an_internal_issue_number(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    cited = [m.group(0).replace("\n", " ") for m in ISSUE_NUMBER.finditer(text)]
    assert not cited, f"{page.relative_to(ROOT)} cites internal issue numbers {cited}: say what is meant instead"


def test_the_issue_number_check_catches_every_spelling() -> None:
    for cited in ("issue 21's aim", "Issue #29", "issues 28 and 29", "past issue\n30's target", "ISSUE 4"):
        assert ISSUE_NUMBER.search(cited), cited
    for fine in ("a public issue.", "the issue's pairs", "tissue 3"):
        assert not ISSUE_NUMBER.search(fine), fine


@pytest.mark.parametrize("page", USER_FACING, ids=[p.relative_to(ROOT).as_posix() for p in USER_FACING])
def test_docs_that_use_a_chroma_client_or_faiss_store_show_how_to_make_one(page: Path) -> None:
    """A page that hands Chroma a `client` shows how to start the server and build the client; a page that
    reopens a FAISS store shows how to create an empty one and says the sealed index is saved apart."""
    text = page.read_text(encoding="utf-8")
    if "Chroma(client=client" in text:
        assert "chroma run --path" in text and "chromadb.HttpClient(host=" in text, page.name
    if "FAISS.load_local(" in text:
        assert "index_to_docstore_id={}" in text and "InMemoryDocstore()" in text, page.name
        assert "save_local" in text and "index_path" in text, page.name


def test_fake_encoder_needs_the_seeded_policy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without the seeded cache "auto" would have to fit for the fake encoder: it refuses (so no snippet fits)."""
    from langchain_textcrafter import ProtectedEmbeddings

    monkeypatch.setenv("TEXTCRAFTER_AUTO_FIT", "0")
    monkeypatch.setenv("TEXTCRAFTER_HOME", str(tmp_path / "empty-home"))
    with pytest.raises(MissingPolicyError):
        ProtectedEmbeddings(base=OpenAIEmbeddings())
