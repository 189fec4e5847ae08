"""What every framework adapter does alike, in one place: pick the base, build the :class:`Protector`.

The LangChain and LlamaIndex adapters differ only in how they talk to their framework (output
types, instrumentation, how a model's query path is reached). Their construction -- the bundled
MiniLM when no base is given, the policy and the options handed to the core, a separate query
encoder for models that embed queries differently -- lives here, so the adapters cannot drift
apart. This module imports no framework: each adapter passes its framework knowledge in as
:data:`EncoderPaths`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .encoders import Encoder, bundled_minilm
from .keyed import KeyArg, TenantKey
from .protector import Protector
from .sealing import SecretKey
from .specs import DEFAULT_POLICY, PolicyArg

__all__ = ["AdapterOptions", "EncoderPaths", "ProtectedBase", "build_protector", "per_text_encoder"]

#: ``base -> (document base, query base or None)``: how an adapter reaches its framework model's
#: document and query paths. ``None`` for the query base means "queries go through the document path".
EncoderPaths = Callable[[Any], tuple[Any, Any]]


@dataclass(frozen=True, kw_only=True)
class AdapterOptions:
    """The protection options every adapter takes, passed to :class:`Protector` unchanged.

    Attributes:
        policy: See :func:`~textcrafter_rag.specs.resolve_policy`; the default is
            :data:`~textcrafter_rag.specs.DEFAULT_POLICY`, the same as the core's.
        protect_queries: Also protect query vectors (off: queries are not stored).
        secure_mode: Draw noise from the OS CSPRNG.
        seed: Reproducible noise, for experiments only.
        chunk_size: Rows protected per step.
        key: A secret from ``textcrafter keygen`` rotating documents and queries (see
            :class:`Protector`); left out of the repr and of comparisons.
        tenant: The tenant id mixed into the key.
    """

    policy: PolicyArg = DEFAULT_POLICY
    protect_queries: bool = False
    secure_mode: bool = False
    seed: int | None = None
    chunk_size: int = 4096
    key: KeyArg | None = field(default=None, repr=False, compare=False)
    tenant: str = ""

    def __post_init__(self) -> None:
        # held as a SecretKey (redacted repr, no pickling) so asdict()/vars() never expose the raw key
        if self.key is not None and not isinstance(self.key, (SecretKey, TenantKey)):
            object.__setattr__(self, "key", SecretKey(self.key))


@dataclass(frozen=True)
class ProtectedBase:
    """The base model an adapter ended up with and the :class:`Protector` built around it."""

    base: Any
    protector: Protector


def _same_path(base: Any) -> tuple[Any, Any]:
    return base, None


def build_protector(
    base: Any = None, *, options: AdapterOptions | None = None, paths: EncoderPaths | None = None
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
    options = options or AdapterOptions()
    if base is None:
        base = bundled_minilm()
    document_base, query_base = (paths or _same_path)(base)
    protector = Protector(
        base=document_base,
        query_base=query_base,
        policy=options.policy,
        protect_queries=options.protect_queries,
        chunk_size=options.chunk_size,
        secure_mode=options.secure_mode,
        seed=options.seed,
        key=options.key,
        tenant=options.tenant,
    )
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
