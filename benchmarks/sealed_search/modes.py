"""What the store holds in each mode, built with the core (``textcrafter_rag.sealed.core``).

* ``none``: the clean unit vectors (a plain store: the reference);
* ``candidates-norot``: the shipped candidate noise without the secret rotation (the previous release): the
  core's candidates un-rotated with the key (:meth:`KeyedRotation.invert`), exactly ``unit(unit(x) + r u)``;
* ``candidates``: :meth:`SealedSearch.store_vectors` / :meth:`SealedSearch.store_query` in candidate mode
  (``Q unit(unit(x) + r u)``, doc strength 2.0, query 0.5, fetch_k 200);
* ``index``: the same calls in app-side index mode (a keyed random unit vector per record id; every query
  sends one keyed vector), the app keeping PQ codes of the clean vectors;
* ``store-index``: the store-held index with the shipped defaults (:class:`StoreIndexSearch`, the adapters'
  default): the same keyed random vectors per record, and the index's sealed log in the store beside them; the
  battery writes and searches it through a real store (:mod:`.battery_store`);
* ``store-index-replica``: the same with ``replica=True`` (queries read their records from a local replica).
* ``store-index-compacted``: the default, compacting its log into sealed snapshots every 64 entries (the store
  then holds snapshot chunks too, and the attackers see them).

``first_stage`` gives the scores that decide which records a query opens, as the store (candidates) or the
app (index) ranks them; the access-pattern attack watches that list (the store-held modes: the reads the store
receives, recorded).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from textcrafter_rag.numerics import unit_rows
from textcrafter_rag.sealed import StoreIndexSearch
from textcrafter_rag.sealed.app_index import AppIndexSearch
from textcrafter_rag.sealed.candidates import TwoStage, TwoStageSearch
from textcrafter_rag.sealed.core import SealedSearch
from textcrafter_rag.sealing import SecretKey

__all__ = ["BATTERY_MODES", "BENCH_KEY", "Mode", "make_mode"]

#: A fixed, public benchmark key (what matters is that the attacker does not use it, except the key holder).
BENCH_KEY = bytes(range(32))
#: The tenant the benchmark's stores write under.
CONTEXT = "sealed-search-benchmark"
#: Records a store-held query opens in the battery's access-pattern attack: 100, as the committed battery ran it
#: (the option's fixed default then). The size rule (:mod:`textcrafter_rag.sealed.sizing`) opens 25 at the battery's
#: size once trained, and an exact index reads k and a few more; the battery was not run again with those.
_BATTERY_OPENED = 100
#: The modes of the attack battery, in table order: ``(name, label)``.
BATTERY_MODES = (
    ("none", "none (clean vectors)"),
    ("candidates-norot", "candidates, no rotation (previous release)"),
    ("candidates", "candidates (rotation + noise 2.0/0.5, fetch_k 200)"),
    ("index", "app-side index (PQ 48 B, open_k 100)"),
    ("index-open1000", "app-side index (open_k 1000)"),
    ("store-index", "store-held index (the default)"),
    ("store-index-replica", "store-held index, replica=True"),
    ("store-index-compacted", "store-held index, log compacted every 64 entries"),
)
#: The compacted store-held mode compacts this often, so the store holds snapshots (and fewer segments) as well.
_COMPACT_EVERY = 64


def _unit32(x: np.ndarray) -> np.ndarray:
    return unit_rows(np.asarray(x, dtype=np.float64)).astype(np.float32)


@dataclass
class Mode:
    """One mode of the store: what it receives for documents and queries, and how many records a query opens.

    Attributes:
        name: One of :data:`BATTERY_MODES`.
        label: For tables.
        opened: Records a query opens: ``k`` = 10 for a plain store, ``fetch_k``, or ``open_k``.
        search: The core object (``None`` for ``none``).
        two_stage: The candidate release's rotation holder (``candidates-norot`` un-rotates with it).
        held: The store-held modes' options (their store is a real one, written through the core).
        key, context: The key and tenant (the store-held modes build their store's writer with them).
    """

    name: str
    label: str
    opened: int
    search: SealedSearch | None = None
    two_stage: TwoStage | None = None
    held: StoreIndexSearch | None = None
    key: bytes = BENCH_KEY
    context: str = CONTEXT

    @property
    def family(self) -> str:
        """``none``, ``candidates``, ``index`` or ``store`` (the store-held index)."""
        return self.name.split("-")[0]

    def store_docs(self, clean: np.ndarray, ids: Sequence[str]) -> np.ndarray:
        """The vectors the store receives for these records (unit rows, float32)."""
        if self.search is None:
            return _unit32(clean)
        x = self.search.check_vectors(np.asarray(clean, dtype=np.float32))
        out = self.search.store_vectors(x, list(ids))
        if self.name == "candidates-norot":
            assert self.two_stage is not None
            out = self.two_stage.rotation(x.shape[1]).invert(out)
        return _unit32(out)

    def store_queries(self, clean: np.ndarray) -> np.ndarray:
        """The query vectors the store receives (one per row of ``clean``)."""
        if self.search is None:
            return _unit32(clean)
        out = np.concatenate([self.search.store_query(q) for q in np.asarray(clean, dtype=np.float32)])
        if self.name == "candidates-norot":
            assert self.two_stage is not None
            out = self.two_stage.rotation(out.shape[1]).invert(out)
        return _unit32(out)

    def first_stage(
        self, clean_docs: np.ndarray, stored_docs: np.ndarray, clean_q: np.ndarray, stored_q: np.ndarray
    ) -> np.ndarray:
        """Scores ``(queries, records)`` that pick the opened records.

        The store ranks by what it holds (``none``, candidates); the app-side and store-held indexes rank by the
        clean vectors (below ``train_at`` they scan them exactly as float16, the same scores as here).
        """
        if self.family in ("index", "store"):
            docs = np.asarray(_unit32(clean_docs), dtype=np.float16).astype(np.float32)
            return _unit32(clean_q) @ docs.T
        return stored_q @ stored_docs.T


def make_mode(name: str, label: str, *, key: bytes = BENCH_KEY, context: str = CONTEXT) -> Mode:
    """The mode ``name`` (see :data:`BATTERY_MODES`) under ``key``, with the shipped defaults."""
    if name == "none":
        return Mode(name, label, opened=10)
    secret = SecretKey(key)
    if name.startswith("store-index"):
        every = _COMPACT_EVERY if name.endswith("-compacted") else StoreIndexSearch().compact_every
        # compaction inline, as the committed battery ran it: the attackers read the same snapshots every run
        held = StoreIndexSearch(replica=name.endswith("-replica"), compact_every=every, background_compaction=False)
        search = SealedSearch(secret, tenant=context, options=held)
        return Mode(name, label, opened=_BATTERY_OPENED, search=search, held=held, key=key, context=context)
    if name.startswith("candidates"):
        options: Any = TwoStageSearch()
        two = TwoStage(secret, context=context, search=options)
        return Mode(
            name,
            label,
            opened=options.open_k,
            search=SealedSearch(secret, tenant=context, options=options),
            two_stage=two,
        )
    open_k = 1000 if name == "index-open1000" else AppIndexSearch().open_k
    options = AppIndexSearch(open_k=open_k)
    return Mode(name, label, opened=open_k, search=SealedSearch(secret, tenant=context, options=options))
