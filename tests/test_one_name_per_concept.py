"""One name for each concept in the core, the old names kept working with a DeprecationWarning.

* the records one query reads: ``open_k`` in every mode's options (``TwoStageSearch(fetch_k=)`` is deprecated);
* the tenant: ``tenant=`` (``context=`` is deprecated on ``SealedSearch`` and ``RecordSealer``);
* the options ``search=`` takes are exported by the package;
* the auto-fit refusals tell users to pass ``mechanism=`` (``policy=`` is its deprecated name).
"""

from __future__ import annotations

import dataclasses
import types
import warnings
from pathlib import Path

import pytest

import textcrafter_rag
from textcrafter_rag import autofit
from textcrafter_rag.errors import InvalidInputError
from textcrafter_rag.sealed.app_index import AppIndexSearch
from textcrafter_rag.sealed.candidates import DEFAULT_SEARCH, TwoStageSearch
from textcrafter_rag.sealed.core import SealedSearch
from textcrafter_rag.sealed.records import RecordSealer
from textcrafter_rag.sealed.store_index import StoreIndexSearch
from textcrafter_rag.sealing import SealError, SecretKey, generate_key


def test_the_options_search_takes_are_exported_by_the_package() -> None:
    assert textcrafter_rag.TwoStageSearch is TwoStageSearch
    assert textcrafter_rag.StoreIndexSearch is StoreIndexSearch
    assert textcrafter_rag.AppIndexSearch is AppIndexSearch
    assert {"TwoStageSearch", "StoreIndexSearch", "AppIndexSearch"} <= set(textcrafter_rag.__all__)


def test_two_stage_search_names_the_records_a_query_reads_open_k() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        options = TwoStageSearch(open_k=300, recall=0.9)
        assert options.open_k == 300 and DEFAULT_SEARCH.open_k == 2000
        assert dataclasses.replace(options, open_k=20).open_k == 20
        assert "open_k=300" in repr(options)
    with pytest.raises(InvalidInputError, match="open_k must be between"):
        TwoStageSearch(open_k=0)


def test_fetch_k_is_the_deprecated_name_of_open_k_and_means_the_same() -> None:
    with pytest.warns(
        DeprecationWarning, match=r"TwoStageSearch\(fetch_k=...\).*use TwoStageSearch\(open_k=...\)"
    ) as w:
        old = TwoStageSearch(fetch_k=300)
    assert w[0].filename == __file__  # the warning points at the caller
    assert old == TwoStageSearch(open_k=300)
    with pytest.warns(DeprecationWarning, match=r"TwoStageSearch.fetch_k.*TwoStageSearch.open_k"):
        assert old.fetch_k == 300
    with pytest.raises(InvalidInputError, match="not both"), pytest.warns(DeprecationWarning, match="fetch_k="):
        TwoStageSearch(open_k=10, fetch_k=20)


def test_sealed_search_takes_tenant_and_context_is_its_deprecated_name() -> None:
    key = SecretKey(generate_key())
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        new = SealedSearch(key, tenant="acme", options=TwoStageSearch(open_k=50))
        assert new.open_k == 50
    with pytest.warns(DeprecationWarning, match=r"SealedSearch\(context=\).*use tenant="):
        old = SealedSearch(key, context="acme", options=TwoStageSearch(open_k=50))
    assert old.marker_id() == new.marker_id()  # the same tenant under either name
    assert SealedSearch(key, tenant="other", options=TwoStageSearch()).marker_id() != new.marker_id()
    with pytest.raises(InvalidInputError, match="exceeds this store's open_k=50: raise open_k"):
        new.check_k(51)


def test_record_sealer_takes_tenant_and_context_is_its_deprecated_name() -> None:
    key = generate_key()
    sealed = RecordSealer(key, tenant="acme").seal("a note", {}, record_id="r1")
    with pytest.warns(DeprecationWarning, match=r"RecordSealer\(context=\)"):
        old = RecordSealer(key, context="acme")
    assert old.open(sealed.text, sealed.metadata, store_id=sealed.store_id).text == "a note"
    with pytest.raises(SealError):
        RecordSealer(key, tenant="other").open(sealed.text, sealed.metadata, store_id=sealed.store_id)


def test_the_auto_fit_refusals_name_mechanism_not_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    encoder = types.SimpleNamespace(model_id="some-encoder")
    messages = [str(autofit._cannot_fit(encoder, tmp_path, "PermissionError"))]  # type: ignore[arg-type]
    monkeypatch.setenv(autofit.AUTO_FIT_ENV, "0")
    refusal = autofit._refuse_to_fit(encoder, None, tmp_path, tmp_path / "lock")  # type: ignore[arg-type]
    messages.append(str(refusal))
    for message in messages:
        assert "mechanism=DIR" in message and "policy=" not in message
