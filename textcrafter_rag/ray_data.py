"""Distributed batch protection on Ray Data.

:class:`Protect` is a callable class for ``Dataset.map_batches``: Ray builds one instance per
actor, so the policy is loaded once per worker, and calls it on every batch::

    import ray
    from textcrafter_rag.ray_data import Protect

    ds = ray.data.read_parquet("s3://bucket/embeddings/")          # an "embedding" column
    ds = ds.map_batches(Protect, fn_constructor_kwargs={"mechanism": "policies/minilm-eps1"},
                        batch_size=4096, concurrency=8)
    ds.write_parquet("s3://bucket/protected/")

Keyed protection: give each actor a way to *read* the key, ``key_file=`` (a secret mounted on
every worker) or ``key_env=`` (a variable set there by a secret manager), never the key itself.
Ray pickles ``fn_constructor_kwargs`` into its cluster metadata, so a key passed as an argument
would be stored there; a :class:`~textcrafter_rag.sealing.SecretKey` refuses to be pickled. So
:class:`Protect` takes the protection options (``options=``, ``mechanism=``, ``secure_mode=``, ``tenant=``
...) as every entry point does, except ``key=``, which it refuses::

    ds.map_batches(Protect, fn_constructor_kwargs={"key_file": "/run/secrets/textcrafter.key",
                   "tenant": "acme"}, batch_size=4096, concurrency=8)

The class itself does not import Ray: it is a plain callable over one batch (see
:func:`~textcrafter_rag.batches.protect_batch`), so it is tested without a cluster too.
"""

from __future__ import annotations

import os
from typing import Any

from .batches import protect_batch
from .errors import InvalidInputError
from .extras import is_installed
from .options import ProtectionOptions, check_tenant
from .protector import protector_for
from .sealing import load_key

__all__ = ["Protect"]

_KEY_BY_VALUE = (
    "Protect reads the key on each worker: pass key_file= or key_env=, never the key itself "
    "(Ray pickles fn_constructor_kwargs into its cluster metadata)"
)


class Protect:
    """Protect the embedding column of each batch (one instance per Ray actor).

    Args:
        options: The protection options (:class:`~textcrafter_rag.options.ProtectionOptions`) without a
            key, as :class:`~textcrafter_rag.protector.Protector` takes them. The mechanism is a spec
            string or a saved policy directory (default ``"auto"``: the shipped policy of the encoder;
            see :func:`~textcrafter_rag.specs.resolve_mechanism`): a name, not a loaded object, so every
            actor loads its own copy. The tenant goes as ``tenant=`` (an options object holds one only
            together with a key).
        column: The embedding column.
        output_column: Where protected vectors go (default: replace ``column``).
        text_column: Embed this text column when a batch has no ``column`` (needs ``encoder``).
        encoder: ``"bundled"`` or a sentence-transformers model name, for ``text_column``.
        threads: torch threads per actor (default 1: Ray runs one actor per CPU it schedules); ignored
            where torch is not installed (the runtime install protects in NumPy).
        key_file: A file on every worker holding the ``textcrafter keygen`` key: releases are
            rotated under it (see :class:`~textcrafter_rag.protector.Protector`).
        key_env: Instead of ``key_file``, the name of an environment variable holding the key on
            every worker.
        **overrides: Any protection option by keyword (``mechanism=``, ``secure_mode=``, ``tenant=``,
            ``chunk_size=``), applied over ``options``; ``policy=`` is the deprecated name of ``mechanism=``.

    Raises:
        ValueError: ``text_column`` without ``encoder``; both ``key_file`` and ``key_env``; the
            variable is unset; ``tenant`` without ``key_file``/``key_env``; a key or a seed given as an option.
        FileNotFoundError, InvalidKeyError: The key cannot be read (the message never contains it).
        MissingPolicyError, FingerprintMismatch, ArtifactError: The policy cannot be loaded
            (raised when an actor starts, before it protects any batch).

    There is deliberately no ``seed``: every actor would replay the same noise stream, so rows
    on different workers would get identical perturbations.
    """

    def __init__(
        self,
        *,
        options: ProtectionOptions | None = None,
        column: str = "embedding",
        output_column: str | None = None,
        text_column: str | None = None,
        encoder: str | None = None,
        threads: int | None = 1,
        key_file: str | os.PathLike[str] | None = None,
        key_env: str | None = None,
        **overrides: Any,
    ) -> None:
        if "key" in overrides or getattr(options, "key", None) is not None:
            raise InvalidInputError(_KEY_BY_VALUE)
        if text_column is not None and encoder is None:
            raise InvalidInputError(
                "text_column needs encoder= ('bundled' or a sentence-transformers model name) to embed it"
            )
        keyed = key_file is not None or key_env is not None
        check_tenant(overrides.get("tenant", getattr(options, "tenant", "")), keyed, needs="key_file= or key_env=")
        if keyed:
            overrides["key"] = load_key(key_file, env=key_env)  # before any model loads
        settings = ProtectionOptions.build(options, overrides)  # checked once, as for every entry point
        if settings.seed is not None:
            raise InvalidInputError("Protect takes no seed: every actor would replay the same noise stream")
        if threads is not None and is_installed("torch"):
            import torch

            torch.set_num_threads(int(threads))
        self.protector = protector_for(encoder=encoder, options=settings)
        self.column = column
        self.output_column = output_column
        self.text_column = text_column

    def __call__(self, batch: Any) -> Any:
        """Protect one batch (numpy dict, ``pyarrow.Table`` or pandas DataFrame)."""
        return protect_batch(
            self.protector, batch, column=self.column, output_column=self.output_column, text_column=self.text_column
        )
