"""The ``textcrafter_rag.encoder_adapters`` entry point: the core calls LlamaIndex models without spans."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points

import numpy as np
import pytest

from llama_index.embeddings.textcrafter.encoder_adapter import span_free_document_encoder
from textcrafter_rag import GaussianNoise, Protector, as_encoder
from textcrafter_rag.encoders import ADAPTER_ENTRY_POINT_GROUP

from ._llama_textcrafter_fakes import MinimalBase

DOCS = ["alpha doc", "beta doc", "gamma doc"]


def test_the_adapter_is_registered_through_the_entry_point() -> None:
    loaded = [ep.load() for ep in entry_points(group=ADAPTER_ENTRY_POINT_GROUP)]
    assert span_free_document_encoder in loaded, "reinstall the package: pip install --no-deps -e <this package>"


def test_the_core_calls_a_llama_index_model_without_spans(instrumentation) -> None:
    # MinimalBase: LlamaIndex span-decorates every method, and its default batch method loops over them,
    # so the core's duck-typed fallback (no adapter) would hand each raw vector to span handlers.
    events, spans = instrumentation
    base = MinimalBase(model_name="minimal")
    raw = np.asarray([base.doc(t) for t in DOCS], dtype=np.float32)
    enc = as_encoder(base)
    assert enc.model_id == "llama_index:minimal"
    np.testing.assert_allclose(enc.encode(DOCS), raw, atol=1e-6)
    np.testing.assert_allclose(asyncio.run(enc.aencode(DOCS)), raw, atol=1e-6)
    protected = Protector(base=base, policy=GaussianNoise(s=0.05)).embed_documents(DOCS)
    assert not np.isclose(protected, raw, atol=1e-6).all(axis=1).any()
    assert spans.results == [] and events.vectors == []  # no span, no event: nothing raw to see


def test_the_adapter_declines_other_models() -> None:
    assert span_free_document_encoder(lambda texts: np.ones((len(texts), 4))) is None
    assert span_free_document_encoder(object()) is None


def test_wrapping_other_models_never_imports_llama_index() -> None:
    pytest.importorskip("langchain_core")
    code = textwrap.dedent(
        f"""
        import sys
        from langchain_core.embeddings import DeterministicFakeEmbedding
        from textcrafter_rag import GaussianNoise, Protector, as_encoder

        as_encoder(DeterministicFakeEmbedding(size=8))
        Protector(base=DeterministicFakeEmbedding(size=8), policy=GaussianNoise(s=0.1)).embed_documents(["a b"])
        assert {span_free_document_encoder.__module__!r} in sys.modules, "the entry point was not loaded"
        core = sorted(m for m in sys.modules if m == "llama_index.core" or m.startswith("llama_index.core."))
        assert not core, core
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
