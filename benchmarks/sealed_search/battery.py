"""The attack battery: every store-side attacker against every mode, on templated patient notes.

Attackers (``ATTACKERS``):

* ``thief``: holds what the store holds, no key and no known pairs; compares its own embeddings of guesses
  with the stored vectors as they are;
* ``pairs-N``: also knows the texts of ``N`` stored background records (SciFact abstracts and other notes); it
  embeds them, fits the rotation by orthogonal Procrustes (``R = U V^T`` of ``X^T Y``) and compares its
  guesses mapped by ``R``;
* ``inserter-B``: had ``B`` texts of its choice stored through the app and sees what the store holds for them.
  Per attacked question it inserts the candidate texts themselves (20: one per value, every other field
  known) and, with 200, nine more notes per value with other fields drawn at random; it picks the value whose
  records' stored vectors come closest to the victim's (``compare-max``). Its Procrustes fit from ``B`` pairs is
  no stronger than ``pairs-N`` with ``N >= B`` (those rows bound it), so it is not run as a separate strategy;
  no strategy is picked after looking at the answers (a best-of would bias noisy rows upward);
* ``key-holder``: holds the key (not the sealed payloads): it recomputes what the store would hold for each
  guess (the same noise, the same rotation) and compares. The bound on what the stored vectors hold.

Attacks: attribute guessing on stored notes (disease, city, name: 20 values each, chance 1/20), the same on
stored queries (disease), membership (members vs non-members of the same family, score = best cosine to any
stored vector, AUC), and the access pattern (which records a query opens: the inserter's own records, or the
pair holder's known notes, vote for the value). Every function takes plain arrays, so the smoke test drives it
with a toy encoder.

The store-held modes' store is a real one (:mod:`.battery_store`): the attackers there also hold the library's
own records (membership compares with every vector the store holds), the vector the store is searched with per
query, and the reads it receives: the pair holder votes with the records a victim query had the store read,
and the inserter stores its records per victim query through the app and sees which of them the query reads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from textcrafter_rag.numerics import unit_rows

from .battery_store import BatteryStore
from .modes import Mode
from .notes import ATTRIBUTES, DISEASES, NoteSet

__all__ = [
    "ATTACKERS",
    "BatteryInputs",
    "auc_interval",
    "battery_rows",
    "embed_battery",
    "pick",
    "procrustes",
    "wilson",
]

Encode = Callable[[list[str]], np.ndarray]


def attackers(pair_counts: Sequence[int], insert_budgets: Sequence[int]) -> list[str]:
    """Attacker names in table order."""
    return ["thief", *(f"pairs-{n}" for n in pair_counts), *(f"inserter-{b}" for b in insert_budgets), "key-holder"]


ATTACKERS = attackers((400, 2000, 5000), (20, 200))


def _u(x: np.ndarray) -> np.ndarray:
    return unit_rows(np.asarray(x, dtype=np.float64)).astype(np.float32)


def procrustes(clean: np.ndarray, stored: np.ndarray) -> np.ndarray:
    """The orthogonal ``R`` minimising ``||clean R - stored||`` (SVD of ``clean^T stored``): the attacker's estimate."""
    u, _, vt = np.linalg.svd(np.asarray(clean, dtype=np.float64).T @ np.asarray(stored, dtype=np.float64))
    return (u @ vt).astype(np.float32)


def pick(scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Row-wise argmax, ties broken at random (a mode whose scores are all equal then gives chance, not value 0)."""
    s = np.asarray(scores, dtype=np.float64)
    best = s.max(axis=-1, keepdims=True)
    tied = s >= best - 1e-7 * np.maximum(1.0, np.abs(best))
    noise = rng.random(s.shape)
    return np.argmax(np.where(tied, noise, -1.0), axis=-1)


def wilson(hits: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson interval of a proportion ``hits / n``."""
    if n <= 0:
        return (math.nan, math.nan)
    p = hits / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def auc_interval(auc: float, n_pos: int, n_neg: int, z: float = 1.96) -> tuple[float, float]:
    """95% interval of an AUC (Hanley and McNeil's standard error)."""
    if n_pos <= 0 or n_neg <= 0:
        return (math.nan, math.nan)
    q1, q2 = auc / (2 - auc), 2 * auc * auc / (1 + auc)
    var = (auc * (1 - auc) + (n_pos - 1) * (q1 - auc * auc) + (n_neg - 1) * (q2 - auc * auc)) / (n_pos * n_neg)
    h = z * math.sqrt(max(var, 0.0))
    return (max(0.0, auc - h), min(1.0, auc + h))


@dataclass
class BatteryInputs:
    """Every embedding the battery uses (the app's and the attacker's come from separate encoder calls).

    Attributes:
        background: Clean vectors of the stored background records (the app's).
        bg_labels: Per background record, the index of its disease (``-1``: no disease, e.g. a SciFact abstract).
        members: Clean vectors of the stored victim notes (the app's).
        truth: Per attribute, the true value index of each victim note.
        queries: Clean vectors of the victim queries (the app's).
        query_truth: The true disease index of each query.
        guesses: Per attribute, the attacker's embeddings of each victim's 20 candidate notes ``(n, 20, D)``.
        query_guesses: The attacker's embeddings of each query's 20 candidate queries ``(n, 20, D)``.
        variants: Per attribute, the attacker's embeddings of its extra notes per value ``(20, v, D)``.
        query_variants: The same for queries ``(20, v, D)`` (inserted as documents).
        member_probe: The attacker's own embeddings of the member texts (membership positives).
        non_member_probe: Its embeddings of the non-member texts (negatives).
    """

    background: np.ndarray
    bg_labels: np.ndarray
    members: np.ndarray
    truth: dict[str, np.ndarray]
    queries: np.ndarray
    query_truth: np.ndarray
    guesses: dict[str, np.ndarray]
    query_guesses: np.ndarray
    variants: dict[str, np.ndarray]
    query_variants: np.ndarray
    member_probe: np.ndarray
    non_member_probe: np.ndarray


def embed_battery(
    notes: NoteSet, background: np.ndarray, *, bg_labels: np.ndarray, app: Encode, attacker: Encode
) -> BatteryInputs:
    """Embed the note set: the app embeds what it stores and queries, the attacker what it guesses and inserts.

    ``background`` are the stored records other than the notes (e.g. SciFact abstracts, already embedded);
    ``notes.others`` are appended to them.
    """
    app_texts = [n.text for n in notes.others] + [n.text for n in notes.members] + [n.text for n in notes.queries]
    app_vecs = np.asarray(app(app_texts), dtype=np.float32)
    n_o, n_m = len(notes.others), len(notes.members)
    others, members, queries = app_vecs[:n_o], app_vecs[n_o : n_o + n_m], app_vecs[n_o + n_m :]
    att: list[str] = []
    spans: dict[str, tuple[int, tuple[int, ...]]] = {}

    def add(key: str, texts: list[str], shape: tuple[int, ...]) -> None:
        spans[key] = (len(att), shape)
        att.extend(texts)

    for a in ATTRIBUTES:
        add(f"g:{a}", [c.text for m in notes.members for c in m.candidates(a)], (n_m, len(ATTRIBUTES[a])))
        variants = notes.variants[a]
        add(f"v:{a}", [v.text for per in variants for v in per], (len(variants), len(variants[0]) if variants else 0))
    add("gq", [c.text for q in notes.queries for c in q.candidates("disease")], (len(notes.queries), len(DISEASES)))
    qv = notes.query_variants
    add("vq", [v.text for per in qv for v in per], (len(qv), len(qv[0]) if qv else 0))
    add("mp", [m.text for m in notes.members], (n_m,))
    add("np", [m.text for m in notes.non_members], (len(notes.non_members),))
    vecs = np.asarray(attacker(att), dtype=np.float32) if att else np.empty((0, background.shape[1]), np.float32)
    dim = app_vecs.shape[1]

    def get(key: str) -> np.ndarray:
        start, shape = spans[key]
        n = int(np.prod(shape))
        return vecs[start : start + n].reshape(*shape, dim)

    other_labels = np.asarray([DISEASES.index(n.disease) for n in notes.others], dtype=np.int64)
    return BatteryInputs(
        background=np.concatenate([np.asarray(background, dtype=np.float32), others]),
        bg_labels=np.concatenate([np.asarray(bg_labels, dtype=np.int64), other_labels]),
        members=members,
        truth={a: np.asarray([ATTRIBUTES[a].index(m.value(a)) for m in notes.members]) for a in ATTRIBUTES},
        queries=queries,
        query_truth=np.asarray([DISEASES.index(q.disease) for q in notes.queries]),
        guesses={a: get(f"g:{a}") for a in ATTRIBUTES},
        query_guesses=get("gq"),
        variants={a: get(f"v:{a}") for a in ATTRIBUTES},
        query_variants=get("vq"),
        member_probe=get("mp"),
        non_member_probe=get("np"),
    )


def _guess_scores_transform(guesses: np.ndarray, targets: np.ndarray, r: np.ndarray | None) -> np.ndarray:
    g = guesses if r is None else guesses @ r
    g = _u(g.reshape(-1, g.shape[-1])).reshape(g.shape)
    return np.einsum("nkd,nd->nk", g, targets)


def _compare_scores(targets: np.ndarray, exact: np.ndarray, extra: np.ndarray | None, how: str) -> np.ndarray:
    """Per victim and value: the cosine of the victim's stored vector with the inserter's own stored records.

    ``exact`` ``(n, values, D)``: its stored copy of each candidate; ``extra`` ``(values, v, D)``: its other
    records per value; ``how``: the best of a value's records (``max``) or their mean (``mean``).
    """
    s = np.einsum("nkd,nd->nk", exact, targets)[..., None]
    if extra is not None and extra.size:
        s = np.concatenate([s, np.einsum("kvd,nd->nkv", extra, targets)], axis=-1)
    return s.max(axis=-1) if how == "max" else s.mean(axis=-1)


def _attacker_maps(store: BatteryStore, inp: BatteryInputs, pair_counts: Sequence[int], seed: int) -> dict[str, Any]:
    """Each transform-based attacker's ``R`` (``None``: compares its embeddings as they are)."""
    maps: dict[str, np.ndarray | None] = {"thief": None}
    for n in pair_counts:
        idx = pair_indices(len(inp.background), n, seed)
        maps[f"pairs-{n}"] = procrustes(inp.background[idx], store.bg[idx])
    return maps


def pair_indices(n_background: int, n: int, seed: int) -> np.ndarray:
    """The background records whose texts ``pairs-n`` knows (the same draw as its rotation fit)."""
    return np.random.default_rng(seed + 101).permutation(n_background)[: min(n, n_background)]


def battery_rows(
    modes: Sequence[Mode],
    inp: BatteryInputs,
    *,
    pair_counts: Sequence[int],
    insert_budgets: Sequence[int],
    seed: int,
    progress: Callable[[str], Any] = lambda s: None,
) -> list[dict[str, Any]]:
    """Every (mode, attacker, attack) row: guessing accuracy (with its Wilson interval), membership AUC, access."""
    rows: list[dict[str, Any]] = []
    for mode in modes:
        progress(f"battery: {mode.name}")
        rows += _mode_rows(mode, inp, pair_counts=pair_counts, insert_budgets=insert_budgets, seed=seed)
    return rows


def _mode_rows(
    mode: Mode,
    inp: BatteryInputs,
    *,
    pair_counts: Sequence[int],
    insert_budgets: Sequence[int],
    seed: int,
) -> list[dict[str, Any]]:
    """The battery's rows for one mode."""
    rows: list[dict[str, Any]] = []
    n_values = len(DISEASES)
    chance = 1.0 / n_values
    rng = np.random.default_rng(seed + 7)
    store = BatteryStore(mode, inp.background, inp.members, inp.queries)
    maps = _attacker_maps(store, inp, pair_counts, seed)
    base = {"part": "battery", "mode": mode.name, "mechanism": mode.name, "mode_label": mode.label}

    def row(attacker: str, attack: str, metric: str, value: float, n: int, strategy: str, **extra: Any) -> None:
        r = {**base, "attacker": attacker, "attack": attack, "metric": metric, "value": float(value), "n": n}
        r["strategy"] = strategy
        if metric == "accuracy":
            lo, hi = wilson(value * n, n)
            r.update(chance=chance, x_chance=value / chance, ci_low=lo, ci_high=hi)
        else:
            n_pos = n_neg = n // 2
            lo, hi = auc_interval(value, n_pos, n_neg)
            r.update(chance=0.5, ci_low=lo, ci_high=hi)
        rows.append({**r, **extra})

    # -- guessing: stored notes (per attribute) and stored queries ---------------------------------------
    targets: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {
        f"guess-{a}": (store.mem, inp.guesses[a], inp.truth[a]) for a in ATTRIBUTES
    }
    targets["query-guess-disease"] = (store.q, inp.query_guesses, inp.query_truth)
    for attack, (tv, guesses, truth) in targets.items():
        is_query = attack.startswith("query")
        n = len(truth)
        attribute = "disease" if is_query else attack.removeprefix("guess-")
        for name, r in maps.items():
            acc = float(np.mean(pick(_guess_scores_transform(guesses, tv, r), rng) == truth))
            row(name, attack, "accuracy", acc, n, "identity" if r is None else "procrustes")
        # the inserter: its own stored copies of the candidates (documents, even for query texts)
        exact = store.insert(guesses)
        extra_clean = inp.query_variants if is_query else inp.variants[attribute]
        extra = store.insert(extra_clean)
        for b in insert_budgets:
            use_extra = extra[:, : max(0, b // n_values - 1)] if b > n_values else None
            acc = float(np.mean(pick(_compare_scores(tv, exact, use_extra, "max"), rng) == truth))
            row(f"inserter-{b}", attack, "accuracy", acc, n, "compare-max")
        # the key holder: recompute the release of each guess
        if is_query:
            rep = store.replicate_queries(guesses)
        else:
            ids = [rid for rid in store.member_ids for _ in range(guesses.shape[1])]
            rep = store.replicate_docs(guesses, ids)
        acc = float(np.mean(pick(np.einsum("nkd,nd->nk", rep, tv), rng) == truth))
        row("key-holder", attack, "accuracy", acc, n, "recompute the release")
    # the three note attributes pooled per attacker (three times the targets: a tighter interval)
    for attacker in dict.fromkeys(r["attacker"] for r in rows):
        per = [r for r in rows if r["attacker"] == attacker and r["attack"] in {f"guess-{a}" for a in ATTRIBUTES}]
        n_all = sum(r["n"] for r in per)
        acc = sum(r["value"] * r["n"] for r in per) / n_all
        row(attacker, "guess-notes", "accuracy", acc, n_all, per[0]["strategy"] + " (disease, city, name pooled)")

    # -- membership ---------------------------------------------------------------------------------------
    probes = np.concatenate([inp.member_probe, inp.non_member_probe])
    labels = np.r_[np.ones(len(inp.member_probe)), np.zeros(len(inp.non_member_probe))]
    n_probe = len(labels)
    held = np.concatenate([store.all, store.library])  # every vector the store holds (and the library's records)

    def auc(scores: np.ndarray) -> float:
        return float(roc_auc_score(labels, scores))

    for name, r in maps.items():
        p = _u(probes if r is None else probes @ r)
        row(
            name,
            "membership",
            "auc",
            auc((p @ held.T).max(axis=1)),
            n_probe,
            "best cosine to any stored vector",
        )
    inserted = store.insert(probes)  # the inserter stores each probed text and looks for its twin
    twin = auc((inserted @ held.T).max(axis=1))
    for b in insert_budgets:  # one insertion per probed text: the same for every budget >= 1
        row(f"inserter-{b}", "membership", "auc", twin, n_probe, "insert the text, best cosine of its stored vector")
    fresh = [f"probe-{i}" for i in range(n_probe)]
    row(
        "key-holder",
        "membership",
        "auc",
        auc((store.replicate_docs(probes, fresh) @ held.T).max(axis=1)),
        n_probe,
        "recompute the release",
    )

    # -- access pattern: which records the victim's query opens ---------------------------------------
    clean_all = np.concatenate([inp.background, inp.members])
    first = mode.first_stage(clean_all, store.all, inp.queries, store.q)  # (queries, records)
    k = mode.opened
    qexact_clean, qextra_clean = inp.query_guesses, inp.query_variants
    if store.world is None:  # the store-held modes' inserter stores its records per query (opened_own)
        qexact, qextra = store.insert(qexact_clean), store.insert(qextra_clean)
    n_q = len(inp.query_truth)
    for b in insert_budgets:
        hits = 0.0
        opened_own = 0
        v_use = max(0, b // n_values - 1) if b > n_values else 0
        for i in range(n_q):
            own_clean = qexact_clean[i]
            own_vals = list(range(n_values))
            if v_use:
                own_clean = np.concatenate([own_clean, qextra_clean[:, :v_use].reshape(-1, own_clean.shape[-1])])
                own_vals += [v for v in range(n_values) for _ in range(v_use)]
            if store.world is not None:  # inserted in a random order: the order of its records says nothing
                order = rng.permutation(len(own_clean))
                mine = [int(order[j]) for j in store.opened_own(own_clean[order], inp.queries[i])]
            else:
                own_stored = qexact[i]
                if v_use:
                    own_stored = np.concatenate([own_stored, qextra[:, :v_use].reshape(-1, own_stored.shape[-1])])
                own_scores = mode.first_stage(own_clean, own_stored, inp.queries[i : i + 1], store.q[i : i + 1])[0]
                scores = np.concatenate([first[i], own_scores])
                top = np.argpartition(-scores, min(k, len(scores)) - 1)[:k]
                top = top[np.argsort(-scores[top], kind="stable")]
                mine = [int(t) - len(first[i]) for t in top if t >= len(first[i])]
            if mine:
                opened_own += 1
                guess = own_vals[mine[0]]
            else:
                guess = int(rng.integers(n_values))
            hits += guess == inp.query_truth[i]
        row(
            f"inserter-{b}",
            "access-pattern",
            "accuracy",
            hits / n_q,
            n_q,
            "value of its best-ranked opened record",
            own_opened_share=opened_own / n_q,
        )
    for n in pair_counts:
        known = np.zeros(len(clean_all), dtype=np.int64) - 1
        idx = pair_indices(len(inp.background), n, seed)
        known[idx] = inp.bg_labels[idx]
        hits = 0.0
        for i in range(n_q):
            if store.reads is not None:  # the store-held modes: the records the store was asked for, in order
                top = np.asarray(store.reads[i], dtype=np.int64)
            else:
                top = np.argpartition(-first[i], min(k, len(first[i])) - 1)[:k]
                top = top[np.argsort(-first[i][top], kind="stable")]
            votes = np.zeros(n_values)
            for rank, t in enumerate(top):
                if known[t] >= 0:
                    votes[known[t]] += 1.0 / (1 + rank)
            guess = int(pick(votes[None], rng)[0]) if votes.any() else int(rng.integers(n_values))
            hits += guess == inp.query_truth[i]
        row(
            f"pairs-{n}",
            "access-pattern",
            "accuracy",
            hits / n_q,
            n_q,
            "rank-weighted vote of its known notes opened",
            **({} if store.reads is None else {"store_reads_per_query": float(np.mean([len(r) for r in store.reads]))}),
        )
    return rows
