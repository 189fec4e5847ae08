"""What every framework adapter does alike, in one place: pick the base, build the :class:`Protector`.

The LangChain and LlamaIndex adapters differ only in how they talk to their framework (output
types, instrumentation, how a model's query path is reached). Their construction -- the bundled
MiniLM when no base is given, the options handed to the core, a separate query
encoder for models that embed queries differently -- lives here, so the adapters cannot drift
apart. This module imports no framework: each adapter passes its framework knowledge in as
:data:`EncoderPaths`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .deprecation import warn_renamed
from .encoders import Encoder, bundled_minilm
from .errors import InvalidInputError
from .keyed import TenantKey
from .options import ProtectionOptions
from .protector import Protector
from .sealing import SecretKey

__all__ = [
    "ProtectionOptions",
    "EncoderPaths",
    "ProtectedBase",
    "build_protector",
    "check_sealed_key",
    "per_text_encoder",
]

#: ``base -> (document base, query base or None)``: how an adapter reaches its framework model's
#: document and query paths. ``None`` for the query base means "queries go through the document path".
EncoderPaths = Callable[[Any], tuple[Any, Any]]


@dataclass(frozen=True)
class ProtectedBase:
    """The base model an adapter ended up with and the :class:`Protector` built around it."""

    base: Any
    protector: Protector


def _same_path(base: Any) -> tuple[Any, Any]:
    return base, None


def build_protector(
    base: Any = None, *, options: ProtectionOptions | None = None, paths: EncoderPaths | None = None
) -> ProtectedBase:
    """Build the core an adapter wraps: the same defaults and the same checks for every framework.

    Args:
        base: The user's base model; ``None`` uses the bundled offline all-MiniLM-L6-v2 (which has a
            shipped policy, so ``ProtectedEmbeddings()`` works offline with no argument).
        options: The protection options; ``None`` for all defaults.
        paths: The adapter's framework knowledge: the document and query bases of ``base``
            (e.g. a LangChain model's ``embed_query``); default, both through ``base`` itself.

    Raises:
        textcrafter_rag.MissingPolicyError: No policy ships or is cached for the encoder and
            ``TEXTCRAFTER_AUTO_FIT=0`` forbids fitting one.
        textcrafter_rag.FingerprintMismatch: The policy was fitted for another encoder.
    """
    if base is None:
        base = bundled_minilm()
    document_base, query_base = (paths or _same_path)(base)
    protector = Protector(base=document_base, query_base=query_base, options=options)
    return ProtectedBase(base=base, protector=protector)


def per_text_encoder(
    embed_one: Callable[[str], Any], aembed_one: Callable[[str], Awaitable[Any]], *, model_id: str
) -> Encoder:
    """An :class:`Encoder` over a model's one-text-at-a-time method, such as a query method.

    Frameworks expose a model's query path one text at a time (``embed_query``,
    ``_get_query_embedding``); asymmetric models (instruction prefixes,
    ``input_type="search_query"``) embed queries differently, so the adapters keep that path
    instead of sending queries through the document one.
    """

    def encode(texts: Sequence[str]) -> list[Any]:
        return [embed_one(t) for t in texts]

    async def aencode(texts: Sequence[str]) -> list[Any]:
        return [await aembed_one(t) for t in texts]

    return Encoder(encode, async_fn=aencode, model_id=model_id)


def check_sealed_key(protector: Protector, key: SecretKey) -> None:
    """A keyed protector read by a sealed store (both adapters take its base encoder) must hold the store's key.

    In sealed search the store's key rotates (and noises) everything the store receives, and the protected
    embeddings are read through their base encoder. The same key is that rotation; another key would be a
    second secret the user believes protects the store and that does nothing: refused.
    """
    if not protector.keyed:
        return
    if TenantKey.of(key, tenant=protector.options.tenant).fingerprint != protector.key_fingerprint:
        raise InvalidInputError(
            "the protected embeddings were given another key than this sealed store: in sealed search the store's "
            "key rotates and noises everything the store receives; give both the same key (or the embeddings none)"
        )


def __getattr__(name: str) -> Any:
    if name == "AdapterOptions":  # its fields are ProtectionOptions' (policy= is now mechanism=)
        warn_renamed("textcrafter_rag.adapters.AdapterOptions", "textcrafter_rag.options.ProtectionOptions")
        return ProtectionOptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
