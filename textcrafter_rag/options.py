"""The protection options, defined once: :class:`~textcrafter_rag.protector.Protector`, both framework
adapters, :func:`~textcrafter_rag.protector.protector_for`, :func:`~textcrafter_rag.streaming.protect_file`,
:class:`~textcrafter_rag.ray_data.Protect`, :func:`~textcrafter_rag.audit.run_audit` and the CLI all take a
:class:`ProtectionOptions` (``options=``) and the same options as keywords (``mechanism=`` ...).

Each option is checked once, in the constructor, by a small helper below (the way diffprivlib checks its
parameters), so every entry point refuses the same values with the same message. Renamed keywords are
accepted for a while with a :class:`DeprecationWarning` (:func:`~textcrafter_rag.deprecation.warn_renamed`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .deprecation import warn_renamed
from .errors import InvalidInputError, InvalidTypeError
from .keyed import KeyArg, TenantKey
from .mechanisms import Mechanism
from .sealing import SecretKey
from .specs import DEFAULT_MECHANISM, MechanismArg

__all__ = ["ProtectionOptions", "RENAMED_OPTIONS", "check_tenant"]

#: Old keyword -> its name now. ``policy`` names only TextCrafter's trained policy network now.
RENAMED_OPTIONS: dict[str, str] = {"policy": "mechanism"}


def _check_mechanism(value: Any) -> MechanismArg:
    if value is None or isinstance(value, (Mechanism, str, os.PathLike)):
        return value
    raise InvalidTypeError(
        f"mechanism must be 'auto', a spec string such as 'gaussian:s=0.01', a policy directory or a Mechanism, "
        f"got {type(value).__name__}"
    )


def _check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidTypeError(f"{name} must be True or False, got {type(value).__name__}")
    return value


def _check_seed(value: Any) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise InvalidTypeError(f"seed must be an int or None, got {type(value).__name__}")
    return value


def _check_chunk_size(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"chunk_size must be an int, got {type(value).__name__}")
    if value < 1:
        raise InvalidInputError("chunk_size must be >= 1")
    return value


def check_tenant(value: Any, key: Any, *, name: str = "tenant=", needs: str = "key=") -> str:
    """The one check that a tenant comes with a key, for every entry point.

    ``name`` and ``needs`` say how the entry point spells the tenant and its key (Ray reads the key from
    ``key_file=`` / ``key_env=``, the CLI from ``--key-file`` / ``--key-env``); ``key`` is the key, or
    anything true when one will be read.

    Raises:
        InvalidTypeError: ``value`` is not a string.
        InvalidInputError: A tenant without a key: every tenant would share one unkeyed space.
    """
    if not isinstance(value, str):
        raise InvalidTypeError(f"tenant must be a string, got {type(value).__name__}")
    if value and (key is None or key is False):
        raise InvalidInputError(f"{name} needs {needs}: without a key every tenant would share one (unkeyed) space")
    return value


@dataclass(frozen=True, kw_only=True)
class ProtectionOptions:
    """How vectors are protected: the options every entry point takes, in one object.

    Attributes:
        mechanism: What turns a clean vector into a released one: ``"auto"`` (the default: the
            TextCrafter policy shipped, cached or fitted for the encoder), a spec string
            (``"gaussian:s=0.01"``, ``"ldp:eps=4"``, ``"textcrafter:eps=2.5"``; see
            :func:`~textcrafter_rag.specs.from_spec`), a saved policy directory, or a
            :class:`~textcrafter_rag.mechanisms.Mechanism`.
        protect_queries: Also protect query vectors (off: queries are not stored, and protecting both
            sides costs retrieval quality).
        secure_mode: Draw noise from the OS CSPRNG.
        seed: Reproducible noise, for experiments only (warns).
        chunk_size: Rows protected per step; bounds peak memory on huge batches.
        key: A secret from ``textcrafter keygen`` (its string, its 32 bytes, a
            :class:`~textcrafter_rag.sealing.SecretKey` or a :class:`~textcrafter_rag.keyed.TenantKey`)
            rotating documents and queries; held as a redacted ``SecretKey``, left out of the repr
            and of comparisons.
        tenant: The tenant (or collection) id mixed into the key.

    Raises:
        InvalidTypeError: An option of the wrong type.
        InvalidInputError: ``chunk_size < 1``, or ``tenant`` without a key.
    """

    mechanism: MechanismArg = DEFAULT_MECHANISM
    protect_queries: bool = False
    secure_mode: bool = False
    seed: int | None = None
    chunk_size: int = 4096
    key: KeyArg | TenantKey | None = field(default=None, repr=False, compare=False)
    tenant: str = ""

    def __post_init__(self) -> None:
        _check_mechanism(self.mechanism)
        _check_flag("protect_queries", self.protect_queries)
        _check_flag("secure_mode", self.secure_mode)
        _check_seed(self.seed)
        _check_chunk_size(self.chunk_size)
        check_tenant(self.tenant, self.key)
        # held as a SecretKey (redacted repr, no pickling) so asdict()/vars() never expose the raw key
        if self.key is not None and not isinstance(self.key, (SecretKey, TenantKey)):
            object.__setattr__(self, "key", SecretKey(self.key))

    @classmethod
    def build(
        cls,
        options: ProtectionOptions | None = None,
        overrides: dict[str, Any] | None = None,
        *,
        stacklevel: int = 4,
        renamed: Mapping[str, str] = RENAMED_OPTIONS,
    ) -> ProtectionOptions:
        """``options`` (default: all defaults) with the keyword ``overrides`` applied, checked once.

        Renamed keywords (``policy=``, and an entry point's own old names in ``renamed``, such as
        :func:`~textcrafter_rag.audit.run_audit`'s ``defense=``) are accepted with a
        :class:`DeprecationWarning`; ``stacklevel`` points that warning at the caller's line.

        Raises:
            InvalidTypeError: An unknown keyword, or one option given under two names (old and new).
        """
        overrides = dict(overrides or {})
        for old, new in renamed.items():
            if old in overrides:
                warn_renamed(f"{old}=", f"{new}=", stacklevel=stacklevel)
                if new in overrides:
                    raise InvalidTypeError(f"pass {new}= only ({old}= is its deprecated name)")
                overrides[new] = overrides.pop(old)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise InvalidTypeError(
                f"unknown protection option(s) {', '.join(unknown)}; the options are {', '.join(sorted(known))}"
            )
        base = options if options is not None else cls()
        if not isinstance(base, cls):
            raise InvalidTypeError(f"options must be a ProtectionOptions, got {type(base).__name__}")
        return replace(base, **overrides) if overrides else base

    @classmethod
    def split(cls, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(protection keywords, the rest)``: for an adapter whose framework takes keywords of its own."""
        names = {f.name for f in fields(cls)} | set(RENAMED_OPTIONS)
        ours = {k: v for k, v in kwargs.items() if k in names}
        return ours, {k: v for k, v in kwargs.items() if k not in names}
