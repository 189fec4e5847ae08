"""What the audit measures beyond the attacks: the store-is-raw diagnostic, PII labels and the report rows.

:func:`~textcrafter_rag.audit.run.run_audit` calls these on each stage's
:func:`~textcrafter_rag.attacks.evaluate_attacks` result; they never train or attack anything.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ..attacks.floor import flat_floor
from ..metrics import content_f1
from ..numerics import row_cosines
from ..textcrafter.pii import PresidioDetector
from .store import StoreSample

__all__ = [
    "METRICS",
    "MIN_PII_CLASS",
    "RAW_COSINE",
    "bootstrap_ci",
    "diagnose",
    "reference_row",
    "pii_flags",
    "presidio_detector",
    "say",
    "stage_row",
]

#: Metric keys of every attack row (``None`` where not measured).
METRICS = (
    "content_f1",
    "bleu",
    "token_f1",
    "rouge_l",
    "exact_match",
    "keyword_f1",
    "pii_auc",
    "cosine",
    "target_cosine",
    "recon_pii_rate",
    "vector_cosine",
    "vector_norm",
)
#: Mean cosine(stored vector, encoder(text)) at or above which the store counts as raw encoder output.
RAW_COSINE = 0.99
#: Presidio-labelled sample texts needed in each class to score the PII probe on the sample itself.
MIN_PII_CLASS = 10


def say(msg: str, progress: bool) -> None:
    """A step message on stderr (stdout stays free for the command's summary)."""
    if progress:
        print(f"[audit] {msg}", file=sys.stderr, flush=True)


def bootstrap_ci(values: np.ndarray, *, seed: int, n_boot: int = 2000) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the mean."""
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(n_boot, len(values)))].mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def presidio_detector(progress: bool) -> PresidioDetector | None:
    """Presidio, or ``None`` (with a message) where it or its spaCy model is missing: PII counts are then skipped."""
    # presidio warns about every unmapped spaCy label (CARDINAL, ORDINAL, ...) it meets
    logging.getLogger("presidio-analyzer").setLevel(logging.ERROR)
    try:
        return PresidioDetector()
    except (ImportError, RuntimeError, OSError) as exc:
        say(f"Presidio unavailable ({exc}); PII counts are skipped", progress)
        return None


def pii_flags(detector: Any, texts: Sequence[str], *, progress: bool, desc: str) -> list[int] | None:
    """1 where Presidio finds PII in a text, else 0 (``None`` without a detector)."""
    if detector is None:
        return None
    return [int(detector.has_pii(t)) if t.strip() else 0 for t in tqdm(texts, desc=desc, disable=not progress)]


def diagnose(
    sample: StoreSample, clean: np.ndarray | None, detector: Any, *, model_id: str, progress: bool, notes: list[str]
) -> tuple[dict[str, Any], list[int] | None, str]:
    """Store-is-raw diagnostic and the PII labels of the sample texts: ``(diagnostics, labels, pii_source)``."""
    stored = sample.vectors
    diag: dict[str, Any] = {"stored_norm_mean": float(np.linalg.norm(stored, axis=1).mean())}
    if sample.sealed_vector_fields:
        diag["two_stage_candidates"] = True
        notes.append(
            f"The store is a two-stage store (sealed clean vectors in {', '.join(sample.sealed_vector_fields)}): its "
            "vectors are candidate vectors, heavily noised on purpose; retrieval quality comes from the sealed clean "
            "vectors, which this audit cannot open (they are encrypted). 'before' is what the store holds and what "
            "a thief of the store can attack; 'after' adds a second layer that the deployment does not use."
        )
    if "index" in sample.search_modes:
        diag["app_index"] = True
        notes.append(
            "The store was written with the app-side index: its vectors are keyed random vectors of the record ids, "
            "unrelated to the texts, so an inversion of them reads nothing; what such a store leaks is its access "
            "pattern, which a file audit cannot see."
        )
    if sample.clear_fields:
        diag["clear_fields"] = list(sample.clear_fields)
        notes.append(
            f"Fields left in clear beside the vectors (a thief reads them without a key): "
            f"{', '.join(sample.clear_fields)}. Seal any that can hold personal data (sealed_metadata=)."
        )
    if sample.record_ids is not None:
        diag["record_ids"] = sample.record_ids
        notes.append(
            "Record ids are keyed (UUIDs under the key that name nothing): they link no stored record to a known text."
            if sample.record_ids == "keyed"
            else f"Record ids are {'partly ' if sample.record_ids == 'mixed' else ''}in clear (the caller's own ids): "
            "meaningful ids link stored records to known texts, giving a thief known (text, stored vector) pairs "
            "(400 undo the candidate rotation). Write with the default record_ids='keyed' (copy_to moves records)."
        )
    labels: list[int] | None = None
    source = "synthetic"
    if sample.texts is not None and clean is not None:
        cos = row_cosines(stored, clean)
        diag.update(
            store_cosine_mean=float(cos.mean()),
            store_cosine_min=float(cos.min()),
            store_cosine_median=float(np.median(cos)),
            store_is_raw=bool(cos.mean() >= RAW_COSINE),
        )
        flags = pii_flags(detector, sample.texts, progress=progress, desc="Presidio on sample texts")
        if flags is not None:
            diag["text_pii_rate"] = float(np.mean(flags))
            n_pos = int(sum(flags))
            if min(n_pos, len(flags) - n_pos) >= MIN_PII_CLASS:
                labels, source = flags, "sample texts (Presidio labels)"
            else:
                notes.append(
                    f"Presidio finds PII in {n_pos} of {len(flags)} sample texts (< {MIN_PII_CLASS} per "
                    "class): the PII probe is scored on synthetic PII sentences instead."
                )
        if not diag["store_is_raw"]:
            notes.append(
                f"The stored vectors are not raw {model_id} output of the texts (mean cosine "
                f"{cos.mean():.3f} < {RAW_COSINE}): the store is already perturbed or protected, was built "
                "by another encoder, or the texts are misaligned. 'after' adds a second layer on top."
            )
    else:
        notes.append(
            "No --texts: text-overlap metrics (BLEU, token-F1, content-F1, ROUGE-L, exact match), keyword "
            "F1, the floor and the store-is-raw diagnostic need the texts of the sampled rows."
        )
    if source == "synthetic":
        notes.append(
            "PII-probe AUC is measured on synthetic PII sentences passed through each stage's transform "
            "(identity before, the defense after), not on the store."
        )
    return diag, labels, source


def stage_row(
    stage: str,
    mode: str,
    res: dict[str, Any],
    victims: np.ndarray,
    *,
    texts: list[str] | None,
    clean: np.ndarray | None,
    detector: Any,
    seed: int,
    progress: bool,
) -> dict[str, Any]:
    """One flat result row from an :func:`evaluate_attacks` result on ``victims``."""
    preds = [p for _, p in res["examples"]]
    row: dict[str, Any] = {
        "stage": stage,
        "attacker": res["attacker"],
        "mode": mode,
        "defense": "none (the store as it is)" if stage == "before" else res["defense"],
        "n": len(victims),
        **{k: res.get(k) for k in METRICS},
        "pii_auc_on": res.get("pii_auc_on"),
    }
    flags = pii_flags(detector, preds, progress=progress, desc=f"Presidio on '{stage}' reconstructions")
    row["recon_pii_rate"] = float(np.mean(flags)) if flags is not None else None
    row["vector_norm"] = float(np.linalg.norm(victims, axis=1).mean())
    if texts is not None and clean is not None:
        row["vector_cosine"] = float(row_cosines(victims, clean).mean())
        per = np.asarray([content_f1([r], [p]) for r, p in zip(texts, preds)])
        row["content_f1_ci_low"], row["content_f1_ci_high"] = bootstrap_ci(per, seed=seed)
    row.update(n_pairs=res.get("n_pairs", 0), pairs_seen=res.get("pairs_seen", 0), minutes=res.get("attack_minutes"))
    return row


def reference_row(floor: dict[str, Any], n: int) -> dict[str, Any]:
    """The ``reference`` row: the best trivial attacker per metric (it ignores the vector)."""
    flat = flat_floor(floor)
    keys = ("content_f1", "bleu", "token_f1", "rouge_l", "exact_match", "cosine")
    return {
        "stage": "reference",
        "attacker": "floor (ignores the vector)",
        "mode": "–",
        "defense": "–",
        "n": n,
        **dict.fromkeys(METRICS),
        **{k: flat[f"floor_{k}"] for k in keys},
        "pii_auc": 0.5,
        "pii_auc_on": "chance",
        "constant": floor["constant"].get("text"),
    }
