"""``ProtectedEmbeddings(base=OpenAIEmbeddings())`` exactly as written: any LangChain model, no policy argument.

The real ``OpenAIEmbeddings`` needs the network (and its tokenizer download), so a LangChain
``Embeddings`` of the same shape stands in: a model the package has never seen, backed by the
bundled MiniLM. The first construction fits a policy (a small recipe here; the default one is
measured by ``benchmarks/speed/autofit.py``), the second loads it from the cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings

from langchain_textcrafter import ProtectedEmbeddings
from textcrafter_rag import autofit
from textcrafter_rag.textcrafter import CalibrationConfig, PolicyTrainingConfig

TINY = autofit.AutoFitConfig(
    calibration=CalibrationConfig(n_pii=30, n_calibration=200, clusters=4),
    training=PolicyTrainingConfig(steps=10, batch_size=32, eval_every=5),
)


class OpenAIEmbeddings(Embeddings):
    """A stand-in with the real class's name and interface (``model`` names the remote model)."""

    model = "text-embedding-3-small"

    def __init__(self, minilm: Any) -> None:
        self._minilm = minilm

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._minilm.encode(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def test_any_langchain_model_works_with_no_policy_argument(
    minilm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(autofit.HOME_ENV, str(tmp_path))
    monkeypatch.delenv(autofit.AUTO_FIT_ENV)  # the conftest forbids fitting for every other test
    monkeypatch.setattr(autofit, "AutoFitConfig", lambda: TINY)

    embeddings = ProtectedEmbeddings(base=OpenAIEmbeddings(minilm))
    said = capsys.readouterr().err
    assert "fitting one now" in said and f"{TINY.texts_encoded} texts" in said and str(tmp_path) in said
    docs = ["Jane Doe moved to Leeds.", "The invoice is overdue."]
    protected = np.asarray(embeddings.embed_documents(docs))
    np.testing.assert_allclose(np.linalg.norm(protected - minilm.encode(docs), axis=1), 1.0, rtol=1e-5)

    again = ProtectedEmbeddings(base=OpenAIEmbeddings(minilm))  # the next process, the next day: from the cache
    assert "fitting" not in capsys.readouterr().err
    assert again.mechanism.path == embeddings.mechanism.path
    assert again.mechanism.path.parent == tmp_path / "policies"
