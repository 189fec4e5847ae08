"""LlamaIndex models are called without spans by this package; the core knows none of it and refuses them."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from llama_index.embeddings.textcrafter import ProtectedEmbedding
from llama_index.embeddings.textcrafter.encoders import document_encoder, undecorated
from textcrafter_rag import GaussianNoise, Protector, as_encoder
from textcrafter_rag.errors import InvalidTypeError

from ._llama_textcrafter_fakes import FakeBase, MinimalBase

DOCS = ["alpha doc", "beta doc", "gamma doc"]


def test_the_document_encoder_calls_a_llama_index_model_without_spans(instrumentation) -> None:
    # MinimalBase: LlamaIndex span-decorates every method, and its default batch method loops over them,
    # so calling the model's batch method as it is would hand each raw vector to span handlers.
    events, spans = instrumentation
    base = MinimalBase(model_name="minimal")
    raw = np.asarray([base.doc(t) for t in DOCS], dtype=np.float32)
    enc = document_encoder(base)
    assert enc.model_id == "llama_index:minimal"
    np.testing.assert_allclose(enc.encode(DOCS), raw, atol=1e-6)
    np.testing.assert_allclose(asyncio.run(enc.aencode(DOCS)), raw, atol=1e-6)
    protected = Protector(base=enc, mechanism=GaussianNoise(s=0.05)).embed_documents(DOCS)
    assert not np.isclose(protected, raw, atol=1e-6).all(axis=1).any()
    assert spans.results == [] and events.vectors == []  # no span, no event: nothing raw to see


def test_the_document_encoder_uses_a_llama_index_models_own_batch_methods(instrumentation) -> None:
    events, spans = instrumentation
    base = FakeBase(model_name="fake")
    enc = document_encoder(base)
    enc.encode(DOCS)
    asyncio.run(enc.aencode(DOCS))
    assert base.calls == {"_get_text_embeddings": 1, "_aget_text_embeddings": 1}
    assert spans.results == [] and events.vectors == []


def test_the_core_refuses_a_llama_index_model_and_names_this_package(instrumentation) -> None:
    """Issue 31.5: LlamaIndex's internals live here; the core would call a model's public (reporting) methods."""
    events, spans = instrumentation
    base = MinimalBase(model_name="minimal")
    for call in (lambda: as_encoder(base), lambda: Protector(base=base, mechanism="none")):
        with pytest.raises(InvalidTypeError, match=r"ProtectedEmbedding.*encoders\.document_encoder"):
            call()
    assert spans.results == [] and events.vectors == []
    assert isinstance(ProtectedEmbedding(base=base, mechanism="none"), ProtectedEmbedding)  # this package's route


class _SpanProxy:
    """Stands in for LlamaIndex's span decorator: a non-function proxy carrying the span marker."""

    __dispatcher_span_decorated__ = True

    def __init__(self, fn):
        self.__wrapped__ = fn

    def __get__(self, obj, owner):
        return lambda *a: ("span", self.__wrapped__(obj, *a))


def test_undecorated_peels_span_proxies_only() -> None:
    def retry(fn):
        @functools.wraps(fn)
        def wrapped(self, text):
            return ("retried", fn(self, text))

        return wrapped

    class Model:
        spanned = _SpanProxy(lambda self, text: text.upper())

        @retry
        def own(self, text):
            return text

    m = Model()
    assert m.spanned("a") == ("span", "A")
    assert undecorated(m, "spanned")("a") == "A"
    assert undecorated(m, "own")("a") == ("retried", "a")  # the author's own decorator stays


def test_wrapping_other_models_never_imports_llama_index() -> None:
    pytest.importorskip("langchain_core")
    code = textwrap.dedent(
        """
        import sys
        from langchain_core.embeddings import DeterministicFakeEmbedding
        from textcrafter_rag import GaussianNoise, Protector, as_encoder

        as_encoder(DeterministicFakeEmbedding(size=8))
        Protector(base=DeterministicFakeEmbedding(size=8), mechanism=GaussianNoise(s=0.1)).embed_documents(["a b"])
        loaded = sorted(m for m in sys.modules if m.startswith("llama_index"))
        assert not loaded, loaded
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
