"""What the store learns from a query's reads and from writes, with and without the replica: attacks and costs.

``python -m benchmarks.sealed_search.access_patterns [--size smoke|full] [--parts attacks costs server]`` writes
``benchmarks/results/access_patterns.{json,md}``; a run of some parts keeps the other parts' rows of the saved
results (and ``--cost-ns`` / ``--server-ns`` replace only those sizes), and the report names each command.

Modes (the store-held index, the default of both adapters, run through the real core over a store that logs
every request, :mod:`.access_world`):

* ``store-index``: each query reads its best records by id (while the index is exact, below ``train_at``, the
  ten it keeps and ``EXACT_EXTRA`` more; once trained, ``open_k``: 100); the store also sees the heads search
  and the log's probes;
* ``store-index-replica`` (``StoreIndexSearch(replica=True)``): records come from the local replica; the store
  sees the heads search and the probes only.

Attackers of the reads see the store's request log, nothing else: which ids each query reads, in the order asked.

* ``thief``: knows no record's content: it can only link queries;
* ``pairs-N``: knows the topic (disease) of ``N`` stored background notes and their store ids; a rank-weighted
  vote of the known notes a query reads;
* ``inserter-B``: had ``B`` texts stored through the app and knows their store ids: per attacked query, its
  20 candidate texts (one per disease), and with 200 nine more query-like texts per disease; it guesses the
  disease of its first record a query reads.

Attacks (part ``attacks``): guessing a query's disease (20 values, chance 0.05); **linking** two queries about
the same disease from the overlap of their read sets (Jaccard; AUC, chance 0.5; every attacker sees the read
sets); and **writes**: the victim adds notes one at a time, and the store's operator, who had 180 notes of its
own written the same way, guesses each new note's disease from the sizes and the times of its writes, links
writes about one disease, and links writes to the process that made them (:mod:`.access_writes`). Both modes
are measured in the same run.

Costs: part ``costs`` in process over a dict store (:mod:`.access_costs`); part ``server`` on a ``chroma run``
server started here: latency beside a plain Chroma store, and the replica's sync after another OS process
writes 1,000 records (:mod:`.access_server`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from benchmarks.common.options import script_parser
from benchmarks.common.reporting import Script
from textcrafter_rag.encoders import bundled_minilm

from .access_costs import cost_rows
from .access_report import TARGET_X_CHANCE, render_markdown, verdict
from .access_server import server_rows, writer_child
from .access_world import App, WatchedPort
from .access_writes import write_rows
from .battery import pick, wilson
from .notes import DISEASES, make_note_set

__all__ = ["MODES", "PARTS", "SIZES", "TARGET_X_CHANCE", "attack_rows", "main", "render_markdown", "verdict"]

NAME = "access_patterns"
SCRIPT = Script(NAME, "benchmarks.sealed_search.access_patterns")
MODES = (("store-index", False), ("store-index-replica", True))
#: background notes, victim queries, victim notes written one by one, pair counts; the costs' and the server's
#: sizes, writer processes and queries
SIZES: dict[str, dict[str, Any]] = {
    "smoke": {"n_background": 300, "n_queries": 24, "n_writes": 20, "pairs": (40, 100), "cost_ns": (2_000,),
              "server_ns": (1_000,), "sync_rounds": 1, "server_queries": 20},
    "full": {"n_background": 6_000, "n_queries": 200, "n_writes": 200, "pairs": (400, 2_000, 5_000),
             "cost_ns": (20_000, 100_000, 200_000), "server_ns": (20_000,), "sync_rounds": 3, "server_queries": 200},
}  # fmt: skip
ABOUT = (
    "Templated patient notes and queries (20 diseases) embedded with {encoder} (the written notes one at a time, "
    "in the app, as the writes are timed); costs on clustered random 384-d vectors, in an "
    "in-process dict store (`access_world.WatchedPort`) and on a `chroma run` server on this machine."
)
BUDGETS = (20, 200)
PARTS = ("attacks", "costs", "server")
KEY = bytes(range(32))

Encode = Callable[[list[str]], np.ndarray]


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _reads(port: WatchedPort, data: set[str]) -> list[str]:
    """The data ids a query's requests read, in the order asked."""
    return [i for kind, ids in port.requests if kind == "get" for i in ids if i in data]


def attack_rows(encode: Encode, *, size: str, seed: int) -> list[dict[str, Any]]:
    """Every (mode, attacker, attack) row of the reads and the writes."""
    cfg = SIZES[size]
    notes = make_note_set(n_members=cfg["n_writes"], n_others=cfg["n_background"], n_queries=cfg["n_queries"],
                          n_variants=9, seed=seed)  # fmt: skip
    own_notes = [n for per in notes.variants["disease"] for n in per]  # the attacker's own: 9 per disease
    bg_texts = [n.text for n in notes.others]
    bg_labels = np.asarray([DISEASES.index(n.disease) for n in notes.others])
    q_texts = [q.text for q in notes.queries]
    q_truth = np.asarray([DISEASES.index(q.disease) for q in notes.queries])
    cand = [[c.text for c in q.candidates("disease")] for q in notes.queries]  # per query, one per disease
    variants = [[v.text for v in per] for per in notes.query_variants]  # per disease, 9 query-like texts
    writes = [n.text for n in notes.members]
    w_truth = np.asarray([DISEASES.index(n.disease) for n in notes.members])
    own = ([n.text for n in own_notes], np.asarray([DISEASES.index(n.disease) for n in own_notes]))
    texts = [*bg_texts, *q_texts, *(t for c in cand for t in c), *(t for v in variants for t in v)]
    vecs = _unit(encode(texts))  # the written notes are embedded one at a time, in the timed writes
    off = np.cumsum([0, len(bg_texts), len(q_texts), sum(map(len, cand))])
    bg_v, q_v, cand_v, var_v = vecs[: off[1]], vecs[off[1] : off[2]], vecs[off[2] : off[3]], vecs[off[3] :]
    rows: list[dict[str, Any]] = []
    for mode, replica in MODES:
        port = WatchedPort()
        writer = App(port, KEY, replica=False)
        bg_ids = writer.add([f"bg-{i}" for i in range(len(bg_texts))], bg_texts, bg_v)
        n_c = len(DISEASES)
        cand_ids = writer.add([f"cand-{i}" for i in range(len(cand_v))], [t for c in cand for t in c], cand_v)
        var_ids = writer.add([f"var-{i}" for i in range(len(var_v))], [t for v in variants for t in v], var_v)
        app = App(port, KEY, replica=replica)
        app.search(q_v[0])  # the open (the replica reads every record once here)
        data = port.data_ids()
        reads: list[list[str]] = []
        requests: list[str] = []
        for q in q_v:
            port.requests.clear()
            app.search(q)
            reads.append(_reads(port, data))
            requests.append(json.dumps(port.requests, default=str))
        base = {"mode": mode, "n_records": len(data), "n_queries": len(q_v)}
        out = _guess_rows(reads, q_truth, bg_ids, bg_labels, cand_ids, var_ids, n_c, cfg["pairs"], seed)
        out.append(_link_row(reads, q_truth, cfg["pairs"]))
        for r in out:
            r.update(base, distinct_request_logs=len(set(requests)),
                     mean_data_reads=float(np.mean([len(r_) for r_ in reads])))  # fmt: skip
        rows += out
        for r in write_rows(port, app, replica, encode, own, (writes, w_truth), seed):
            rows.append({**base, **r})
    return rows


def _guess_rows(
    reads: list[list[str]],
    truth: np.ndarray,
    bg_ids: list[str],
    bg_labels: np.ndarray,
    cand_ids: list[str],
    var_ids: list[str],
    n_c: int,
    pairs: Sequence[int],
    seed: int,
) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed + 11)
    n = len(truth)
    rows = []

    def row(attacker: str, acc: float, strategy: str) -> dict[str, Any]:
        lo, hi = wilson(acc * n, n)
        chance = 1.0 / n_c
        return {"attacker": attacker, "attack": "guess-query-topic", "metric": "accuracy", "value": acc,
                "chance": chance, "x_chance": acc / chance, "ci_low": lo, "ci_high": hi,
                "strategy": strategy + "; nothing read: a blind guess, counted at its expectation 1/20"}  # fmt: skip

    rows.append(row("thief", 1.0 / n_c, "knows no record"))
    for p in pairs:
        known = {bg_ids[i]: int(bg_labels[i]) for i in np.random.default_rng(seed + p).permutation(len(bg_ids))[:p]}
        hits = 0
        for i, read in enumerate(reads):
            votes = np.zeros(n_c)
            for rank, rid in enumerate(read):
                if rid in known:
                    votes[known[rid]] += 1.0 / (1 + rank)
            hits += float(int(pick(votes[None], rng)[0]) == truth[i]) if votes.any() else 1.0 / n_c
        rows.append(row(f"pairs-{p}", hits / n, "rank-weighted vote of its known notes read"))
    for b in BUDGETS:
        hits = 0
        for i, read in enumerate(reads):
            mine = {cid: d for d, cid in enumerate(cand_ids[i * n_c : (i + 1) * n_c])}
            if b > n_c:
                per = len(var_ids) // n_c
                mine.update({vid: j // per for j, vid in enumerate(var_ids)})
            first = next((mine[r] for r in read if r in mine), None)
            hits += float(first == truth[i]) if first is not None else 1.0 / n_c
        rows.append(row(f"inserter-{b}", hits / n, "disease of its first record read"))
    return rows


def _link_row(reads: list[list[str]], truth: np.ndarray, pairs: Sequence[int]) -> dict[str, Any]:
    sets = [set(r) for r in reads]
    scores, same = [], []
    for i in range(len(sets)):
        for j in range(i + 1, len(sets)):
            union = sets[i] | sets[j]
            scores.append(len(sets[i] & sets[j]) / len(union) if union else 1.0)
            same.append(int(truth[i] == truth[j]))
    auc = float(roc_auc_score(same, scores)) if 0 < sum(same) < len(same) else 0.5
    attackers = ["thief", *(f"pairs-{p}" for p in pairs), *(f"inserter-{b}" for b in BUDGETS)]
    return {"attacker": " / ".join(attackers), "attack": "link-two-queries", "metric": "auc", "value": auc,
            "chance": 0.5, "x_chance": auc / 0.5, "n_pairs": len(same), "n_same": int(sum(same)),
            "strategy": "Jaccard overlap of the two queries' read sets (every attacker sees them)"}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    p = script_parser(SCRIPT, __doc__)
    p.add_argument("--size", choices=sorted(SIZES), default="full")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="parts to measure (the others kept)")
    p.add_argument("--cost-ns", type=int, nargs="*", default=None, help="store sizes of the cost part")
    p.add_argument("--server-ns", type=int, nargs="*", default=None, help="store sizes of the Chroma-server part")
    p.add_argument("--sync-rounds", type=int, default=None, help="writer processes per size (server part)")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    p.add_argument("--toy-encoder", action="store_true", help="hash vectors instead of the bundled MiniLM")
    p.add_argument("--costs-only", action="store_true", help="the same as --parts costs")
    p.add_argument("--writer-child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.writer_child is not None:  # the other process of the server part's sync
        print(json.dumps(writer_child(json.loads(args.writer_child))), flush=True)
        return 0
    cfg = SIZES[args.size]
    parts = ["costs"] if args.costs_only else args.parts
    path = args.out / (f"{NAME}.json" if args.size == "full" else f"{NAME}_{args.size}.json")
    doc = json.loads(path.read_text()) if path.is_file() else {"attacks": [], "costs": [], "command": "-"}
    command = SCRIPT.command(argv)
    doc.update(size=args.size, seed=args.seed)
    if "attacks" in parts or "about" not in doc:  # the encoder is the attacks'
        doc["about"] = ABOUT.format(
            encoder="hash vectors (toy)" if args.toy_encoder else "the bundled all-MiniLM-L6-v2"
        )
    if "attacks" in parts:
        t0 = time.perf_counter()
        _cover_costs(doc)
        doc["attacks"] = attack_rows(toy_encoder() if args.toy_encoder else minilm(), size=args.size, seed=args.seed)
        doc["command"], doc["seconds"] = command, round(time.perf_counter() - t0, 1)
    for part, commands, ns, measure in (
        ("costs", "cost_commands", args.cost_ns or cfg["cost_ns"],
         lambda ns: cost_rows(ns, seed=args.seed, progress=print)),
        ("server", "server_commands", args.server_ns or cfg["server_ns"],
         lambda ns: server_rows(ns, seed=args.seed, sync_rounds=args.sync_rounds or cfg["sync_rounds"],
                                n_queries=cfg["server_queries"], progress=print)),
    ):  # fmt: skip
        if part in parts:
            t0 = time.perf_counter()
            new = measure(ns)
            doc[part] = sorted([r for r in doc.get(part, []) if r["n_records"] not in set(ns)] + new,
                               key=lambda r: (r["n_records"], r["mode"]))  # fmt: skip
            doc.setdefault(commands, []).append(
                {"command": command, "ns": list(ns), "seconds": round(time.perf_counter() - t0, 1)}
            )
    doc["verdict"] = verdict(doc["attacks"], doc["costs"], doc.get("server", []))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=float) + "\n")
    path.with_suffix(".md").write_text(render_markdown(doc))
    print("\n".join(doc["verdict"]))
    return 0


def _cover_costs(doc: dict[str, Any]) -> None:
    """Before the attacks' command is replaced: the cost rows it measured keep it as theirs."""
    covered = {n for c in doc.get("cost_commands", ()) for n in c["ns"]}
    left = sorted({r["n_records"] for r in doc["costs"]} - covered)
    if left:
        doc.setdefault("cost_commands", []).insert(0, {"command": doc["command"], "ns": left,
                                                       "seconds": doc.get("seconds", 0.0)})  # fmt: skip


def toy_encoder(dim: int = 64) -> Encode:
    """Hash vectors that keep a text's words (texts sharing words are close): no model, for smoke runs."""

    def encode(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                seed = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little")
                out[i] += np.random.default_rng(seed).standard_normal(dim)
        return out

    return encode


def minilm() -> Encode:
    """The bundled all-MiniLM-L6-v2 (offline)."""
    encoder = bundled_minilm()
    return lambda texts: np.asarray(encoder.encode(texts), dtype=np.float32)


if __name__ == "__main__":
    sys.exit(main())
