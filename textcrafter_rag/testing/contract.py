"""The adapter contract: what every textcrafter-rag framework adapter must do, tested the same way.

Each integration package subclasses :class:`ProtectedEmbeddingsContract` in one test module
(the subclass's name starts with ``Test``) and provides the factory, a fake base model of its
framework and the four calls; pytest then runs every ``test_*`` method below against it::

    class TestContract(ProtectedEmbeddingsContract):
        def make_embeddings(self, **options): return ProtectedEmbeddings(**options)
        def make_base(self, known): return FakeLangChainBase(known)
        def embed_documents(self, embeddings, texts): return embeddings.embed_documents(texts)
        ...

Core behaviour (validation details, norm guarantees, the mechanisms) is tested once, in the
core's own tests; this kit checks what an adapter adds or could break: that the vectors it hands
its framework are the mechanism's output, that queries take the base's query path, the async
paths, the options reaching the core, errors surfacing as the core's own, and that nothing raw
reaches the framework's hooks.
"""

from __future__ import annotations

import asyncio
import base64
import pickle
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from ..autofit import AUTO, AUTO_FIT_ENV, HOME_ENV
from ..encoders import bundled_minilm
from ..errors import FingerprintMismatch, MissingPolicyError, NotPicklableError
from ..keyed import KeyedRotation
from ..mechanisms import GaussianNoise, Mechanism, NoDefense
from ..options import ProtectionOptions
from ..randomness import SeedWarning
from ..sealing import InvalidKeyError, generate_key, load_key
from ..specs import DEFAULT_MECHANISM
from .known import KnownVectors
from .recording import RecordingMechanism
from .secrets import assert_no_key

__all__ = ["ProtectedEmbeddingsContract"]


class _Bound16(Mechanism):
    """A mechanism for 16-d vectors (the fake bases are 8-d)."""

    name = "bound16"

    @property
    def dim(self) -> int:
        return 16

    def _protect(self, x: np.ndarray) -> np.ndarray:
        return x


def _f32(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def _rows(vectors: Any) -> set[bytes]:
    return {row.tobytes() for row in _f32(vectors).reshape(-1, _f32(vectors).shape[-1])}


def _is_one_of(vector: Any, rows: np.ndarray) -> bool:
    return bool(rows.size) and bool(np.isclose(rows, _f32(vector), atol=1e-6).all(axis=1).any())


#: A fixed test key (never a real one) and every form it could leak in.
_KEY = bytes(range(7, 39))


def _serialisations(embeddings: Any) -> list[str]:
    """Every text form of an adapter a framework or a user may log or store."""
    out = [repr(embeddings), str(embeddings), repr(vars(embeddings)) if hasattr(embeddings, "__dict__") else ""]
    for name in ("model_dump_json", "to_json", "to_payload", "model_dump", "to_dict"):
        if callable(getattr(embeddings, name, None)):
            out.append(str(getattr(embeddings, name)()))
    return out


def _assert_python_floats(vectors: Sequence[Sequence[float]]) -> None:
    assert isinstance(vectors, list) and all(isinstance(v, list) for v in vectors)
    assert all(type(x) is float for v in vectors for x in v), "frameworks expect list[float], not NumPy scalars"


class ProtectedEmbeddingsContract(ABC):
    """Behaviour both framework adapters must show; subclass it and provide the abstract methods.

    The fake base built by :meth:`make_base` serves :class:`KnownVectors`, so every raw vector is
    known; the tests protect with a :class:`RecordingMechanism`, so every released one is too.
    """

    #: Documents and a query embedded by the tests (the query's vector differs from any document's).
    TEXTS: ClassVar[tuple[str, ...]] = ("alpha doc", "beta doc", "gamma doc")
    QUERY: ClassVar[str] = "which doc is alpha?"

    @abstractmethod
    def make_embeddings(self, **options: Any) -> Any:
        """The adapter under test, built with these keyword arguments (``base``, ``mechanism``, ...).

        Every adapter exposes the core's :class:`~textcrafter_rag.protector.Protector` as ``.protector``.
        """

    @abstractmethod
    def make_base(self, known: KnownVectors) -> Any:
        """A base model of the adapter's framework serving ``known``'s vectors.

        Its sync and async document methods return ``known.serve_documents(texts, path=...)``
        with ``path="embed_documents"`` / ``"aembed_documents"``, its query methods
        ``known.serve_query(text, path="embed_query" / "aembed_query")``.
        """

    @abstractmethod
    def embed_documents(self, embeddings: Any, texts: list[str]) -> list[list[float]]:
        """Embed documents through the framework's public sync API (what a vector store calls)."""

    @abstractmethod
    async def aembed_documents(self, embeddings: Any, texts: list[str]) -> list[list[float]]:
        """Embed documents through the framework's public async API."""

    @abstractmethod
    def embed_query(self, embeddings: Any, text: str) -> list[float]:
        """Embed a query through the framework's public sync API."""

    @abstractmethod
    async def aembed_query(self, embeddings: Any, text: str) -> list[float]:
        """Embed a query through the framework's public async API."""

    def observe_hooks(self, embeddings: Any) -> AbstractContextManager[list[Sequence[float]]] | None:
        """Collect every vector the framework's own hooks (events, callbacks, traces) receive.

        The list the context manager yields must hold those vectors once it exits. ``None`` (the
        default) means the framework has no such hooks for embeddings; the hook test then skips.
        """
        return None

    @pytest.fixture
    def known(self) -> KnownVectors:
        return KnownVectors(dim=8)

    @pytest.fixture
    def recording(self) -> RecordingMechanism:
        return RecordingMechanism(GaussianNoise(s=0.05))

    def _raw(self, known: KnownVectors) -> np.ndarray:
        return _f32([*known.document_vectors(self.TEXTS), known.query_vector(self.QUERY)])

    def test_documents_are_the_mechanisms_output(self, known: KnownVectors, recording: RecordingMechanism) -> None:
        emb = self.make_embeddings(base=self.make_base(known), mechanism=recording)
        out = self.embed_documents(emb, list(self.TEXTS))
        _assert_python_floats(out)
        # What a store receives is exactly what the mechanism released, from the base's own document vectors.
        np.testing.assert_array_equal(_f32(out), recording.all_outputs())
        np.testing.assert_array_equal(np.concatenate(recording.inputs), _f32(known.document_vectors(self.TEXTS)))
        assert not any(_is_one_of(v, self._raw(known)) for v in out)

    def test_queries_take_the_query_path_and_stay_clean_by_default(
        self, known: KnownVectors, recording: RecordingMechanism
    ) -> None:
        emb = self.make_embeddings(base=self.make_base(known), mechanism=recording)
        assert emb.protector.protect_queries is False
        q = self.embed_query(emb, self.QUERY)
        _assert_python_floats([q])
        np.testing.assert_array_equal(_f32(q), _f32(known.query_vector(self.QUERY)))
        assert known.served["embed_query"] == [self.QUERY]  # the base's query method, not its document one
        assert self.QUERY not in known.served["embed_documents"]
        assert not recording.outputs

    def test_protect_queries(self, known: KnownVectors, recording: RecordingMechanism) -> None:
        emb = self.make_embeddings(base=self.make_base(known), mechanism=recording, protect_queries=True)
        q = self.embed_query(emb, self.QUERY)
        assert len(recording.outputs) == 1
        np.testing.assert_array_equal(_f32(q), recording.outputs[0][0])
        np.testing.assert_array_equal(recording.inputs[0][0], _f32(known.query_vector(self.QUERY)))

    def test_async_paths_are_native_and_protected(self, known: KnownVectors, recording: RecordingMechanism) -> None:
        emb = self.make_embeddings(base=self.make_base(known), mechanism=recording, protect_queries=True)

        async def run() -> tuple[list[list[float]], list[float]]:
            return await self.aembed_documents(emb, list(self.TEXTS)), await self.aembed_query(emb, self.QUERY)

        docs, q = asyncio.run(run())
        _assert_python_floats([*docs, q])
        assert _rows(docs) | _rows([q]) == _rows(recording.all_outputs()) and len(recording.all_outputs()) == 4
        np.testing.assert_array_equal(_f32(q), recording.outputs[-1][0])
        # The texts went through the base's async methods (a sync dimension probe, if any, embeds other text).
        assert sorted(known.served["aembed_documents"]) == sorted(self.TEXTS)
        assert known.served["aembed_query"] == [self.QUERY] and not known.served["embed_query"]
        assert not set(self.TEXTS) & set(known.served["embed_documents"])

    def test_empty_batch(self, known: KnownVectors, recording: RecordingMechanism) -> None:
        emb = self.make_embeddings(base=self.make_base(known), mechanism=recording)
        assert self.embed_documents(emb, []) == []
        assert asyncio.run(self.aembed_documents(emb, [])) == []
        assert not recording.outputs

    def test_a_callable_base_serves_documents_and_queries(
        self, known: KnownVectors, recording: RecordingMechanism
    ) -> None:
        emb = self.make_embeddings(base=known.serve_documents, mechanism=recording)
        out = self.embed_documents(emb, list(self.TEXTS))
        np.testing.assert_array_equal(_f32(out), recording.all_outputs())
        q = self.embed_query(emb, self.QUERY)  # one function for both: the query goes through it, clean
        np.testing.assert_array_equal(_f32(q), _f32(known.document_vector(self.QUERY)))

    def test_options_reach_the_protector(self, known: KnownVectors, recording: RecordingMechanism) -> None:
        emb = self.make_embeddings(base=self.make_base(known), mechanism=recording, protect_queries=True, chunk_size=2)
        assert emb.protector.mechanism is recording and emb.protector.protect_queries is True
        self.embed_documents(emb, list(self.TEXTS))
        assert [len(batch) for batch in recording.outputs] == [2, 1]  # chunk_size=2 on three rows
        with pytest.raises(ValueError, match="secure_mode"):  # a non-secure mechanism is refused
            self.make_embeddings(base=self.make_base(known), mechanism=GaussianNoise(s=0.05), secure_mode=True)

    def test_options_come_as_one_object_or_as_keywords_and_policy_is_a_warning_alias(self, known: KnownVectors) -> None:
        options = ProtectionOptions(mechanism="gaussian:s=0.05", protect_queries=True, chunk_size=2)
        by_object = self.make_embeddings(base=self.make_base(known), options=options)
        assert by_object.protector.options == options and isinstance(by_object.protector.mechanism, GaussianNoise)
        with pytest.warns(DeprecationWarning, match="policy= is deprecated"):
            old = self.make_embeddings(base=self.make_base(known), policy=NoDefense())
        assert isinstance(old.protector.mechanism, NoDefense)

    def test_default_base_is_the_bundled_minilm_with_its_policy(self) -> None:
        with pytest.warns(SeedWarning):  # seed= reaches the policy loaded for the bundled encoder
            emb, again = self.make_embeddings(seed=0), self.make_embeddings(seed=0)
        texts = list(self.TEXTS)
        raw = bundled_minilm().encode(texts)
        out = _f32(self.embed_documents(emb, texts))
        assert out.shape == raw.shape and not np.isclose(out, raw, atol=1e-3).all(axis=1).any()
        np.testing.assert_array_equal(out, _f32(self.embed_documents(again, texts)))  # same seed, same release
        np.testing.assert_allclose(_f32(self.embed_query(emb, texts[0])), raw[0], atol=1e-5)

    def test_policy_errors_are_the_cores(
        self, known: KnownVectors, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        monkeypatch.setenv(AUTO_FIT_ENV, "0")  # "auto" may not fit, and finds no cached policy in tmp_path
        monkeypatch.setenv(HOME_ENV, str(tmp_path))
        assert DEFAULT_MECHANISM in (AUTO, None), "update this test for the core's new default policy"
        for options in ({}, {"mechanism": AUTO}, {"mechanism": None}):  # {}: the adapter's default is the core's
            with pytest.raises(MissingPolicyError) as info:  # no policy ships for the fake encoder
                self.make_embeddings(base=self.make_base(known), **options)
            assert type(info.value) is MissingPolicyError
        with pytest.raises(FingerprintMismatch) as mismatch:
            self.make_embeddings(base=self.make_base(known), mechanism=_Bound16())
        assert type(mismatch.value) is FingerprintMismatch

    def test_invalid_input_raises_the_cores_errors_and_releases_nothing(
        self, known: KnownVectors, recording: RecordingMechanism
    ) -> None:
        emb = self.make_embeddings(base=self.make_base(known), mechanism=recording)
        secret = "Jane Secret 4111"
        for bad in ([secret, "   "], [secret, 3]):
            with pytest.raises((TypeError, ValueError)) as adapter_error:
                self.embed_documents(emb, bad)  # type: ignore[arg-type]
            with pytest.raises((TypeError, ValueError)) as core_error:
                emb.protector.embed_documents(bad)
            assert type(adapter_error.value) is type(core_error.value)  # not wrapped in a framework error
            assert str(adapter_error.value) == str(core_error.value) and "Secret" not in str(adapter_error.value)
            with pytest.raises(type(core_error.value)):
                asyncio.run(self.aembed_documents(emb, bad))  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            self.embed_query(emb, "")
        assert not recording.outputs

    def test_concurrent_callers_get_their_own_rows_and_fresh_noise(self, known: KnownVectors) -> None:
        emb = self.make_embeddings(
            base=self.make_base(known), mechanism=GaussianNoise(s=1e-3, secure_mode=True), secure_mode=True
        )
        texts = [f"document {i}" for i in range(12)]
        raw = _f32(known.document_vectors(texts))
        with ThreadPoolExecutor(max_workers=8) as pool:
            threaded = list(pool.map(lambda _: self.embed_documents(emb, texts), range(8)))

        async def tasks() -> list[list[list[float]]]:
            return list(await asyncio.gather(*(self.aembed_documents(emb, texts) for _ in range(8))))

        outs = threaded + asyncio.run(tasks())
        for out in outs:
            arr = _f32(out)
            # each row is its own text's vector plus small noise (no rows swapped between callers), never raw
            nearest = np.argmin(((arr[:, None] - raw[None]) ** 2).sum(-1), axis=1)
            np.testing.assert_array_equal(nearest, np.arange(len(texts)))
            assert not np.any(np.all(arr == raw, axis=1))
        assert len({_f32(o[0]).tobytes() for o in outs}) == len(outs)  # every call drew fresh noise

    def test_framework_hooks_see_only_protected_vectors(
        self, known: KnownVectors, recording: RecordingMechanism
    ) -> None:
        emb = self.make_embeddings(base=self.make_base(known), mechanism=recording, protect_queries=True)
        observer = self.observe_hooks(emb)
        if observer is None:
            pytest.skip("this framework has no hooks that receive embedding vectors")

        async def run_async() -> None:
            await self.aembed_documents(emb, list(self.TEXTS))
            await self.aembed_query(emb, self.QUERY)

        with observer as seen:
            self.embed_documents(emb, list(self.TEXTS))
            self.embed_query(emb, self.QUERY)
            asyncio.run(run_async())
        assert seen, "observe_hooks collected nothing: it does not observe the framework's hooks"
        released, raw = recording.all_outputs(), self._raw(known)
        for vector in seen:
            assert _is_one_of(vector, released) and not _is_one_of(vector, raw)

    def test_a_key_rotates_documents_and_queries_and_never_leaks(self, known: KnownVectors) -> None:
        keyed = self.make_embeddings(base=self.make_base(known), mechanism=NoDefense(), key=_KEY, tenant="acme")
        plain = self.make_embeddings(base=self.make_base(known), mechanism=NoDefense())
        docs, q = _f32(self.embed_documents(keyed, list(self.TEXTS))), _f32(self.embed_query(keyed, self.QUERY))
        clean_docs, clean_q = (
            _f32(self.embed_documents(plain, list(self.TEXTS))),
            _f32(self.embed_query(plain, self.QUERY)),
        )
        rotation = KeyedRotation(_KEY, tenant="acme", dim=known.dim)
        np.testing.assert_allclose(docs, rotation.apply(clean_docs), atol=1e-6)  # the core's rotation, nothing else
        np.testing.assert_allclose(q, rotation.apply(clean_q[None])[0], atol=1e-6)  # clean queries rotated too
        np.testing.assert_allclose(docs @ q, clean_docs @ clean_q, atol=1e-5)  # retrieval unchanged
        assert not np.isclose(docs, clean_docs, atol=1e-3).all(axis=1).any()

        async def run() -> tuple[list[list[float]], list[float]]:
            return await self.aembed_documents(keyed, list(self.TEXTS)), await self.aembed_query(keyed, self.QUERY)

        adocs, aq = asyncio.run(run())
        np.testing.assert_allclose(_f32(adocs), docs, atol=1e-6)
        np.testing.assert_allclose(_f32(aq), q, atol=1e-6)
        assert_no_key(_KEY, *_serialisations(keyed), repr(keyed.protector))
        with pytest.raises(ValueError) as bad_text:
            self.embed_documents(keyed, ["fine", "   "])
        with pytest.raises(ValueError) as bad_key:
            self.make_embeddings(base=self.make_base(known), mechanism=NoDefense(), key=_KEY[:-1])
        assert_no_key(_KEY, str(bad_text.value))
        assert_no_key(_KEY[:-1], str(bad_key.value), repr(bad_key.value))

    def test_pickling_never_carries_a_key_and_rebuilds_the_same_adapter(
        self, tmp_path: Path, recording: RecordingMechanism
    ) -> None:
        """Process pools pickle adapters: a key by value refuses, a key read by load_key travels as its reference.

        Built on the bundled base (picklable); a framework's default pickling may drop what it cannot
        pickle and rebuild a default adapter, so the round trip must keep every option.
        """
        keyed = self.make_embeddings(mechanism=NoDefense(), key=_KEY)
        with pytest.raises(NotPicklableError, match="load_key") as refused:
            pickle.dumps(keyed)
        assert isinstance(refused.value, TypeError)
        assert_no_key(_KEY, str(refused.value))

        key_file = tmp_path / "textcrafter.key"
        key_file.write_text(base64.urlsafe_b64encode(_KEY).decode())
        by_reference = self.make_embeddings(mechanism=NoDefense(), key=load_key(key_file), tenant="acme")
        blob = pickle.dumps(by_reference)
        assert_no_key(_KEY, blob.decode("latin-1"))
        copy = pickle.loads(blob)
        assert (
            type(copy) is type(by_reference)
            and copy.protector.key_fingerprint == by_reference.protector.key_fingerprint
        )
        np.testing.assert_array_equal(
            _f32(self.embed_documents(copy, list(self.TEXTS))),
            _f32(self.embed_documents(by_reference, list(self.TEXTS))),
        )
        np.testing.assert_array_equal(
            _f32(self.embed_query(copy, self.QUERY)), _f32(self.embed_query(by_reference, self.QUERY))
        )
        key_file.write_text(generate_key())  # another key under the same name where the copy is unpickled
        with pytest.raises(InvalidKeyError, match="differs"):
            pickle.loads(blob)

        plain = self.make_embeddings(mechanism=GaussianNoise(s=0.05), protect_queries=True, chunk_size=7)
        copy = pickle.loads(pickle.dumps(plain))
        assert isinstance(copy.protector.mechanism, GaussianNoise) and copy.protector.mechanism.s == 0.05
        assert copy.protector.protect_queries and copy.protector.chunk_size == 7 and not copy.protector.keyed
