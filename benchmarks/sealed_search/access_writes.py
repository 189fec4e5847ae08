"""The write part of ``benchmarks.sealed_search.access_patterns``: what the store learns from the writes it takes.

The attacker is the store's operator, who had its own notes written through the app (an inserter: 9 notes per
disease, 180) and watches every write request: its **time of arrival** and its **size**, for each of the log
segment, the writer's head (and the delete of its previous head) and the data record, in the library's order
(segment, head, then the records). The victim adds notes one at a time through the same app, in the adapters'
way (the engine's ``add_records``): embed the text (the encoder runs in the app, so its time is part of the gap
before the write), seal the record, read the log, log the entry (segment, head), store the record, read the log
again (the confirm writes nothing unless a racing delete removed the entry). The log reads are requests the
operator sees too, but no write: their time is in the gaps. The attacker's notes and the victim's are written
interleaved in a random order, back to back, so the attacker's references see the same machine load.

Rows (per mode; the writes are the same with and without the replica, and both are measured):

* ``guess-note-from-write-sizes``: 1-nearest neighbour on the (segment, record) sizes among its 180 notes;
* ``guess-note-from-write-times``: the gap since the previous write (the encoder's time on the text is in it),
  the segment-to-head and head-to-record gaps (log seconds) and the three sizes; the classifier (1-NN, 5-NN or
  nearest class mean, on features standardised on its own notes) chosen by leave-one-out on its own notes;
* ``guess-note-from-within-write-times``: the same with only the gaps inside a write (for writes spaced by idle
  time, where the gap before a write says nothing);
* ``link-two-writes-same-topic``: every attacker, no reference needed: the distance between two victim writes'
  timing and size features as a score that they are about the same disease (AUC, chance 0.5);
* ``link-writes-to-writer``: two processes of the app (each its own writer of the log) write 40 notes in a
  random order; each head put is followed by the delete of that writer's previous head, which chains a
  writer's writes together (AUC over pairs of writes that one writer made; chance 0.5).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from .access_world import App, WatchedPort
from .battery import pick, wilson
from .notes import DISEASES

__all__ = ["write_rows"]

Encode = Callable[[list[str]], np.ndarray]
#: Classifiers the attacker chooses among (leave-one-out on its own notes).
CLASSIFIERS = ("1-nn", "5-nn", "class-mean")


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _features(port: WatchedPort, start: int, last: float) -> tuple[list[float], float, list[str], list[str]]:
    """One write's (gap before, segment-to-head, head-to-record, segment / head / record size), its last time,
    the head ids it put and the ids it deleted."""
    writes = port.writes[start:]
    seg = [(t, s) for t, op, batch in writes if op == "put" for _, s, log in batch if log not in (None, "head")]
    head = [(t, s) for t, op, batch in writes if op == "put" for _, s, log in batch if log == "head"]
    rec = [(t, s) for t, op, batch in writes if op == "put" for _, s, log in batch if log is None]
    assert seg and head and rec, "a write is a segment, a head and a record"
    t_seg, t_head, t_rec = seg[0][0], head[0][0], rec[-1][0]
    sizes = [sum(s for _, s in seg), sum(s for _, s in head), sum(s for _, s in rec)]
    gaps = [max(t_seg - last, 1e-7), max(t_head - t_seg, 1e-7), max(t_rec - t_head, 1e-7)]
    heads = [i for _, op, batch in writes if op == "put" for i, _, log in batch if log == "head"]
    deleted = [i for _, op, batch in writes if op == "delete" for i, _, _ in batch]
    return [*np.log(gaps).tolist(), *sizes], writes[-1][0], heads, deleted


def _timed_writes(
    port: WatchedPort, writers: Sequence[App], encode: Encode, jobs: Sequence[tuple[int, str, str]]
) -> tuple[np.ndarray, list[list[str]], list[list[str]]]:
    """Each job ``(writer, id, text)`` embedded and written one at a time; per write its features, heads, deletes."""
    feats, heads, deleted = [], [], []
    last = port.writes[-1][0] if port.writes else 0.0
    for w, rid, text in jobs:
        start = len(port.writes)
        writers[w].add([rid], [text], _unit(encode([text])))  # the encoder runs in the app, before the write
        f, last, h, d = _features(port, start, last)
        feats.append(f)
        heads.append(h)
        deleted.append(d)
    return np.asarray(feats, dtype=np.float64), heads, deleted


def _classify(ref: np.ndarray, ref_y: np.ndarray, x: np.ndarray, how: str, rng: np.random.Generator) -> np.ndarray:
    """Labels of ``x`` (rows) from the references; ``ref`` and ``x`` are standardised features."""
    n_c = len(DISEASES)
    dist = np.sqrt(((x[:, None, :] - ref[None, :, :]) ** 2).sum(axis=2))
    if how == "class-mean":
        means = np.stack([ref[ref_y == c].mean(axis=0) for c in range(n_c)])
        return pick(-np.sqrt(((x[:, None, :] - means[None]) ** 2).sum(axis=2)), rng)
    k = int(how.split("-")[0])
    votes = np.zeros((len(x), n_c))
    order = np.argsort(dist + 1e-12 * rng.random(dist.shape), axis=1)[:, :k]
    for j in range(k):
        votes[np.arange(len(x)), ref_y[order[:, j]]] += 1.0 + 1e-3 * (k - j)  # nearer votes break ties
    return pick(votes, rng)


def _loo(ref: np.ndarray, ref_y: np.ndarray, how: str, rng: np.random.Generator) -> float:
    hits = 0
    for i in range(len(ref)):
        keep = np.arange(len(ref)) != i
        hits += int(_classify(ref[keep], ref_y[keep], ref[i : i + 1], how, rng)[0] == ref_y[i])
    return hits / len(ref)


def _guess_row(
    attack: str,
    cols: Sequence[int],
    own: np.ndarray,
    own_y: np.ndarray,
    victim: np.ndarray,
    truth: np.ndarray,
    seed: int,
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    mu, sd = own[:, cols].mean(axis=0), own[:, cols].std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    ref, x = (own[:, cols] - mu) / sd, (victim[:, cols] - mu) / sd
    loo = {how: _loo(ref, own_y, how, rng) for how in CLASSIFIERS}
    how = max(CLASSIFIERS, key=lambda h: loo[h])
    acc = float(np.mean(_classify(ref, own_y, x, how, rng) == truth))
    lo, hi = wilson(acc * len(truth), len(truth))
    chance = 1.0 / len(DISEASES)
    return {"attacker": "inserter-200 (watches writes)", "attack": attack, "metric": "accuracy", "value": acc,
            "chance": chance, "x_chance": acc / chance, "ci_low": lo, "ci_high": hi, "n_writes": len(truth),
            "classifier": how, "own_loo_accuracy": loo,
            "strategy": f"{how} (chosen by leave-one-out on its own {len(own_y)} notes: "
                        + ", ".join(f"{h} {v:.2f}" for h, v in loo.items()) + ")"}  # fmt: skip


def _sizes_row(own: np.ndarray, own_y: np.ndarray, victim: np.ndarray, truth: np.ndarray, seed: int) -> dict[str, Any]:
    """1-nearest neighbour on the (segment, record) sizes (the columns 3 and 5 of the features)."""
    d = np.abs(victim[:, None, [3, 5]] - own[None, :, [3, 5]]).sum(axis=2)
    acc = float(np.mean(own_y[pick(-d, np.random.default_rng(seed + 17))] == truth))
    lo, hi = wilson(acc * len(truth), len(truth))
    return {"attacker": "inserter-200 (watches writes)", "attack": "guess-note-from-write-sizes", "metric": "accuracy",
            "value": acc, "chance": 1 / len(DISEASES), "x_chance": acc * len(DISEASES), "ci_low": lo, "ci_high": hi,
            "n_writes": len(truth), "distinct_record_sizes": len(np.unique(victim[:, 5])),
            "distinct_segment_sizes": len(np.unique(victim[:, 3])),
            "strategy": f"1-nearest neighbour on (segment, record size) among its {len(own_y)} own notes"}  # fmt: skip


def _auc(scores: list[float], same: list[int]) -> float:
    return float(roc_auc_score(same, scores)) if 0 < sum(same) < len(same) else 0.5


def write_rows(
    port: WatchedPort,
    app: App,
    replica: bool,
    encode: Encode,
    own: tuple[list[str], np.ndarray],
    victim: tuple[list[str], np.ndarray],
    seed: int,
) -> list[dict[str, Any]]:
    """The write rows of one mode (``app`` writes; ``replica``: the second process's mode too)."""
    rng = np.random.default_rng(seed + 17)
    (own_texts, own_y), (v_texts, v_y) = own, victim
    jobs = [(0, f"own-{i}", t, 0, i) for i, t in enumerate(own_texts)]
    jobs += [(0, f"victim-{i}", t, 1, i) for i, t in enumerate(v_texts)]
    jobs = [jobs[i] for i in rng.permutation(len(jobs))]
    _timed_writes(port, [app], encode, [(0, "warm-up", v_texts[0])])  # the first write's gap has no previous
    feats, _, _ = _timed_writes(port, [app], encode, [j[:3] for j in jobs])
    party = np.asarray([j[3] for j in jobs])
    order = np.asarray([j[4] for j in jobs])
    own_f = np.empty((len(own_texts), feats.shape[1]))
    own_f[order[party == 0]] = feats[party == 0]
    vic_f = np.empty((len(v_texts), feats.shape[1]))
    vic_f[order[party == 1]] = feats[party == 1]
    rows = [_sizes_row(own_f, own_y, vic_f, v_y, seed)]
    for attack, cols in (("guess-note-from-write-times", [0, 1, 2, 3, 4, 5]),
                         ("guess-note-from-within-write-times", [1, 2, 3, 4, 5])):  # fmt: skip
        rows.append(_guess_row(attack, cols, own_f, own_y, vic_f, v_y, seed + len(cols)))
    mu, sd = vic_f.mean(axis=0), vic_f.std(axis=0)
    z = (vic_f - mu) / np.where(sd > 0, sd, 1.0)
    pairs = [(i, j) for i in range(len(z)) for j in range(i + 1, len(z))]
    scores = [-float(np.linalg.norm(z[i] - z[j])) for i, j in pairs]
    same = [int(v_y[i] == v_y[j]) for i, j in pairs]
    auc = _auc(scores, same)
    rows.append({"attacker": "any (watches writes)", "attack": "link-two-writes-same-topic", "metric": "auc",
                 "value": auc, "chance": 0.5, "x_chance": auc / 0.5, "n_pairs": len(same), "n_same": int(sum(same)),
                 "strategy": "distance of the two writes' gaps and sizes (standardised)"})  # fmt: skip
    rows.append(_writer_row(port, app, replica, encode, v_texts, seed))
    return rows


def _writer_row(
    port: WatchedPort, app: App, replica: bool, encode: Encode, texts: Sequence[str], seed: int
) -> dict[str, Any]:
    """Two processes of the app write 40 notes in a random order; the store chains each writer's heads."""
    other = App(port, app.key, replica=replica)  # a second process: its own writer of the log
    rng = np.random.default_rng(seed + 23)
    who = rng.integers(2, size=40)
    jobs = [(int(w), f"linked-{i}", texts[i % len(texts)]) for i, w in enumerate(who)]
    _, heads, deleted = _timed_writes(port, [app, other], encode, jobs)
    parent = list(range(len(jobs)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    put_by = {h: i for i, hs in enumerate(heads) for h in hs}
    for j, ds in enumerate(deleted):  # the delete after a head names the writer's previous head
        for d in ds:
            if d in put_by:
                parent[root(j)] = root(put_by[d])
    pairs = [(i, j) for i in range(len(jobs)) for j in range(i + 1, len(jobs))]
    scores = [float(root(i) == root(j)) for i, j in pairs]
    same = [int(who[i] == who[j]) for i, j in pairs]
    auc = _auc(scores, same)
    return {"attacker": "any (watches writes)", "attack": "link-writes-to-writer", "metric": "auc", "value": auc,
            "chance": 0.5, "x_chance": auc / 0.5, "n_pairs": len(same), "n_same": int(sum(same)),
            "n_chains": len({root(i) for i in range(len(jobs))}),
            "strategy": "each head put is followed by the delete of its writer's previous head: chains"}  # fmt: skip
