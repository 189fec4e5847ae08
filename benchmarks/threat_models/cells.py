"""The cells of :mod:`benchmarks.threat_models`: one attacker (a column) against one release (a row).

Each cell recovers the key where there is one (from public text, known pairs, or the attacker's own
pairs), un-keys the stored victims, and runs the attacks package's inverter on them, or fine-tunes
the inverter on the releases (query access). Cells are cached one JSON file each, so an interrupted
run resumes where it stopped.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.attack_rows import AttackRun, privacy_fields
from benchmarks.common.caches import cache_key, embed_cached
from benchmarks.common.options import quiet_seed_warnings
from benchmarks.common.reporting import clean_json
from textcrafter_rag.attacks import Inverter, evaluate_attacks
from textcrafter_rag.attacks.key_recovery import recovery_report
from textcrafter_rag.attacks.keys import (
    align_permutation,
    align_rotation,
    permutation_from_pairs,
    procrustes_from_pairs,
    unkey,
)
from textcrafter_rag.mechanisms import NoDefense
from textcrafter_rag.numerics import row_cosines, row_norms

from .releases import Release

__all__ = ["ATTACK_FIELDS", "KEY_PAIRS", "Column", "Setting", "UnkeyedView", "attack_rows", "columns", "compute_cell"]

#: Own (text, release) pairs the query-access attacker spends on estimating the key (at most its budget).
KEY_PAIRS = 4000
ATTACK_FIELDS = ("content_f1", "bleu", "token_f1", "rouge_l", "exact_match", "cosine", "n_test", "n_pairs")


@dataclass(frozen=True)
class Column:
    """One attacker: ``store`` (zero pairs, public text of ``domain``), ``pairs`` (``k`` known), ``query``
    (adaptive) or ``unkey`` (query access: un-key with its own pairs, then adaptive)."""

    kind: str
    k: int = 0
    domain: str = ""

    @property
    def label(self) -> str:
        if self.kind == "store":
            return f"store only ({self.domain} domain)"
        if self.kind == "pairs":
            return f"store + {self.k} pairs"
        return "query access (adaptive)" if self.kind == "query" else "query access (un-key, then adapt)"


@dataclass
class Setting:
    """Everything the cells share: victims, the clean store, public texts, the attacker, the cache."""

    victims: list[str]
    store_clean: np.ndarray
    public: dict[str, np.ndarray]
    run: AttackRun
    cache: Path
    ident: str
    inverter: Inverter
    ica_max_iter: int  # FastICA's cap in the store-only un-keying of whitened rows (the smoke size lowers it)


def columns(ks: tuple[int, ...]) -> list[Column]:
    """The matrix's columns in table order."""
    return (
        [Column("store", domain="same"), Column("store", domain="other")]
        + [Column("pairs", k=k) for k in ks]
        + [Column("query"), Column("unkey")]
    )


def estimate_key(rel: Release, col: Column, stored: np.ndarray, st: Setting) -> tuple[Any, str]:
    """The attacker's estimate of the secret transform and the method's name."""
    if col.kind == "store":
        public = rel.attacker_pre(st.public[col.domain])
        if rel.family == "permutation":
            return align_permutation(stored, public), "align_permutation"
        init = "ica" if rel.whitening is not None else "eigen"
        q = align_rotation(stored, public, init=init, ica_max_iter=st.ica_max_iter, seed=st.run.seed)
        return q, f"align_rotation(init={init})"
    n_v = len(st.victims)
    if n_v + col.k > len(st.store_clean):
        raise ValueError(f"a store of {len(st.store_clean)} has no {col.k} known pairs besides {n_v} victims")
    known = slice(n_v, n_v + col.k)  # store entries the attacker knows (never the victims)
    return _key_from_pairs(rel, st.store_clean[known], stored[known])


def _key_from_pairs(rel: Release, clean: np.ndarray, released: np.ndarray) -> tuple[Any, str]:
    """The key from (clean embedding, release) pairs: coordinate matching or orthogonal Procrustes."""
    if rel.family == "permutation":
        return permutation_from_pairs(rel.attacker_pre(clean), released), "permutation_from_pairs"
    return procrustes_from_pairs(rel.attacker_pre(clean), released), "procrustes_from_pairs"


class UnkeyedView:
    """The query-access attacker's view of a keyed release: each release un-keyed with its estimate.

    It has the defense surface (``protect``/``spec``/``policy``), so the adaptive attacker fine-tunes
    on un-keyed releases of its own texts exactly as it would on a keyless mechanism's.
    """

    def __init__(self, rel: Release, t_hat: Any, *, scale: float, tag: str) -> None:
        self.rel, self.t_hat, self.scale, self._tag = rel, t_hat, float(scale), tag

    @property
    def policy(self) -> Any:
        return self.rel.policy

    def unkey(self, released: np.ndarray) -> np.ndarray:
        return (self.scale * self.rel.attacker_post(unkey(released, self.t_hat))).astype(np.float32)

    def protect(self, x: Any) -> np.ndarray:
        return self.unkey(self.rel.protect(x))

    def spec(self) -> str:
        return f"{self.rel.spec()}|unkeyed-by-attacker:{self._tag}"


def unkey_with_own_pairs(rel: Release, st: Setting) -> tuple[UnkeyedView, dict[str, Any]]:
    """Estimate the key from the attacker's own (text, release) pairs; the view that undoes it."""
    n = min(KEY_PAIRS, st.run.attack.pairs_budget, len(st.run.train_texts))
    texts = st.run.train_texts[:n]  # its own texts: the adaptive attacker's pairs start with them
    clean = embed_cached(st.run.encoder, texts, cache=st.cache, desc="Embedding the attacker's texts", progress=False)
    released = rel.protect(clean)
    t0 = time.perf_counter()
    t_hat, method = _key_from_pairs(rel, clean, released)
    out: dict[str, Any] = {"key_attack_s": time.perf_counter() - t0, "key_pairs": n}
    scale = 1.0
    if rel.family == "permutation":  # DCPE also scales by a secret s: match its own clean vectors' norms
        est = rel.attacker_post(unkey(released, t_hat))
        scale = float(np.median(row_norms(clean)) / max(np.median(row_norms(est)), 1e-12))
    rec = recovery_report(rel.true_transform(), t_hat, rel.attacker_pre(st.store_clean))
    out.update({f"key_{k}": v for k, v in rec.as_dict().items()})
    view = UnkeyedView(rel, t_hat, scale=scale, tag=cache_key(method, n, texts))
    return view, {"method": f"{method} on {n} own pairs, then adapt_inverter", **out}


def _attack(defense: Any, mode: str, victims: np.ndarray, st: Setting) -> dict[str, Any]:
    """The attacks package on ``victims`` (row ``i`` belongs to ``st.victims[i]``): the scalar fields kept."""
    attack = replace(st.run.attack, mode=mode)
    with quiet_seed_warnings():
        res = evaluate_attacks(
            defense,
            encoder=st.run.encoder,
            train_texts=st.run.train_texts,
            test_texts=list(st.victims),
            attack=attack,
            inverter=st.inverter,  # loaded once, not per cell
            victim_vectors=victims,
            progress=st.run.progress,
        )
    keep = set(ATTACK_FIELDS) | {"adapt_minutes", "attack_minutes"}
    out = {k: v for k, v in privacy_fields(res).items() if k in keep or k.startswith("floor_")}
    return {**out, "inverter": res.get("attacker")}  # "attacker" is the column in the rows


def _cell_path(rel: Release, col: Column, st: Setting) -> Path:
    # Without a key every store column is the same attack (the inverter on the store): one cache entry.
    which = col.label if rel.keyed or col.kind in ("query", "unkey") else "store"
    return st.cache / f"cell-{cache_key(st.ident, rel.spec(), which)}.json"


def compute_cell(rel: Release, col: Column, stored: np.ndarray, st: Setting) -> dict[str, Any]:
    """One cell: recover the key (keyed rows), un-key, invert; or the adaptive attacker on the releases."""
    n_v = len(st.victims)
    clean_victims = st.store_clean[:n_v]
    if col.kind == "query":
        return {"method": "adapt_inverter on the releases", **_attack(rel, "adaptive", stored[:n_v], st)}
    if col.kind == "unkey":
        view, out = unkey_with_own_pairs(rel, st)
        est = view.unkey(stored[:n_v])
        out["unkeyed_cosine"] = float(np.mean(row_cosines(est, clean_victims)))
        return {**out, **_attack(view, "adaptive", est, st)}
    out: dict[str, Any] = {}
    est = stored[:n_v]
    method = "none (no key)"
    if rel.keyed:
        t0 = time.perf_counter()
        t_hat, method = estimate_key(rel, col, stored, st)
        out["key_attack_s"] = time.perf_counter() - t0
        est = rel.attacker_post(unkey(est, t_hat))
        if rel.family == "permutation":  # DCPE scales by a secret s: match the public text's norms
            est = est * float(np.median(row_norms(st.public["same"])) / max(np.median(row_norms(est)), 1e-12))
        rec = recovery_report(rel.true_transform(), t_hat, rel.attacker_pre(st.store_clean))
        out.update({f"key_{k}": v for k, v in rec.as_dict().items()})
    out["unkeyed_cosine"] = float(np.mean(row_cosines(est, clean_victims)))
    return {"method": method, **out, **_attack(NoDefense(), "non-adaptive", est.astype(np.float32), st)}


def attack_rows(
    releases: list[Release],
    cols: list[Column],
    st: Setting,
    *,
    budget_s: float,
    fresh: Callable[[str], Release] | None = None,
) -> list[dict[str, Any]]:
    """Every cell, cached; cells not started within ``budget_s`` are ``pending`` (the next run does them).

    ``fresh(label)`` rebuilds a release with its noise generators at their seeds, so every cell
    attacks the same protected store and draws the same attacker queries whichever cells ran
    before it or came from the cache (IronCore's SDK draws its own, unseeded noise).
    """
    t_start = time.perf_counter()
    rows = []
    # cheap store and pair cells first; then the composite query-access attacker (the strongest), then the plain one
    order = [(r, c) for c in cols if c.kind in ("store", "pairs") for r in releases]
    order += [(r, c) for kind in ("unkey", "query") for r in releases for c in cols if c.kind == kind]
    for rel, col in order:
        row: dict[str, Any] = {"protection": rel.label, "family": rel.family, "attacker": col.label, "column": col.kind}
        spec = rel.spec() if rel.unavailable is None else rel.label
        row.update({"k": col.k, "domain": col.domain or None, "mechanism_spec": spec})
        path = _cell_path(rel, col, st) if rel.unavailable is None else None
        if rel.unavailable is not None:
            row["status"] = f"unavailable: {rel.unavailable}"
        elif col.kind == "query" and rel.family == "none":
            row["status"] = "n/a (nothing to adapt to)"
        elif col.kind == "unkey" and not rel.keyed:
            row["status"] = "n/a (no key: the adaptive column)"
        elif path is not None and path.is_file():
            row.update(json.loads(path.read_text(encoding="utf-8")), status="done")
        elif time.perf_counter() - t_start > budget_s:
            row["status"] = "pending"
        else:
            cell_rel = fresh(rel.label) if fresh is not None else rel
            print(f"[threat_models] {rel.label} / {col.label}", flush=True)
            res = compute_cell(cell_rel, col, cell_rel.protect(st.store_clean), st)
            path.write_text(json.dumps(clean_json(res)), encoding="utf-8")
            row.update(res, status="done")
        rows.append(row)
    return rows
