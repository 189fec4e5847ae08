"""Runs examples/protected_rag.py with its smallest settings (in-process, to reuse the loaded MiniLM)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from langchain_textcrafter import ProtectedEmbeddings, SealedVectorStore, SealError
from textcrafter_rag.policies import shipped_policy_path
from textcrafter_rag.sealing import generate_key

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "protected_rag.py"

FAISS = pytest.importorskip("langchain_community.vectorstores").FAISS
pytest.importorskip("faiss")


@pytest.mark.skipif(not EXAMPLE.is_file(), reason="examples/ is not in this checkout")
def test_protected_rag_example_quick(tmp_path, minilm, monkeypatch) -> None:
    key = generate_key()
    monkeypatch.setenv("TEXTCRAFTER_KEY", key)
    spec = importlib.util.spec_from_file_location("textcrafter_protected_rag_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    assert shipped_policy_path("sentence-transformers/all-MiniLM-L6-v2") is not None, "the shipped policy is missing"
    policy = "shipped"
    store = tmp_path / "store"
    summary = module.main(
        [
            "--quick",
            "--n-docs",
            "15",
            "--k",
            "2",
            "--policy",
            policy,
            "--store-dir",
            str(store),
            "--json",
            str(tmp_path / "summary.json"),
        ]
    )
    assert (store / "index.faiss").is_file() and (tmp_path / "summary.json").is_file()
    assert summary["n_docs"] == 15 and summary["dim"] == 384
    assert summary["rows_identical_to_raw"] == 0
    assert summary["diff_norm_mean"] > 0.1 and summary["cosine_stored_raw"]["max"] < 0.999
    assert len(summary["queries"]) == 5 and all(len(q["titles"]) == 2 for q in summary["queries"])
    assert summary["inversion"] is None  # no --inverter given: the hook says how to enable it
    # sealed by default: texts and titles are ciphertext on disk, and open with the key from the env
    assert summary["plaintext_hits_on_disk"] == 0 and summary["sealed_metadata"] == ["title"]
    assert all(
        q["titles"] and all(isinstance(t, str) and not t.startswith("tcsealed:") for t in q["titles"])
        for q in summary["queries"]
    )
    loaded = SealedVectorStore(
        lambda e: FAISS.load_local(str(store), e, allow_dangerous_deserialization=True),
        embedding=ProtectedEmbeddings(base=minilm),
        key=key,
        fetch_k=None,
        sealed_metadata=("title",),
    )
    assert len(loaded.similarity_search("football", k=2)) == 2
    with pytest.raises(SealError):
        SealedVectorStore(loaded.store, key=generate_key(), fetch_k=None).similarity_search("football", k=1)


def test_missing_policy_exits_with_the_fit_hint(tmp_path, capsys, monkeypatch) -> None:
    if not EXAMPLE.is_file():
        pytest.skip("examples/ is not in this checkout")
    import textcrafter_rag.autofit as autofit

    # As if no policy shipped; the conftest forbids fitting one ("auto" would fit for minutes).
    monkeypatch.setattr(autofit, "shipped_policy_path", lambda *a, **k: None)
    spec = importlib.util.spec_from_file_location("textcrafter_protected_rag_example2", EXAMPLE)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    with pytest.raises(SystemExit) as info:
        module.main(["--quick", "--n-docs", "5", "--store-dir", str(tmp_path)])
    assert info.value.code == 2
    assert "textcrafter fit" in capsys.readouterr().err
