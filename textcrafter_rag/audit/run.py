"""The audit itself: attack a sample of stored vectors before and after protection (no CLI, no files).

"before" is the store as it is: the clean-trained inverter (and the keyword and PII attacks) applied
to the sampled stored vectors. "after" is the same sample protected with a policy or defense and
attacked the same way (non-adaptive, plus adaptive on request). Both stages go through
:func:`textcrafter_rag.attacks.evaluate_attacks` with ``victim_vectors=``, so the audit runs the one
attack pipeline the benchmarks use. With the sample's texts the floor (best trivial attacker that
ignores the vector) is measured in the same run and the text-overlap metrics are computed; without
them only reference-free measures are reported.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .store import AuditInputError, StoreSample, load_sample, sample_indices

__all__ = ["AuditResult", "run_audit", "METRICS", "RAW_COSINE", "MIN_PII_CLASS"]

#: Metric keys of every attack row (``None`` where not measured).
METRICS = ("content_f1", "bleu", "token_f1", "rouge_l", "exact_match", "keyword_f1", "pii_auc", "cosine",
           "target_cosine", "recon_pii_rate", "vector_cosine", "vector_norm")
#: Mean cosine(stored vector, encoder(text)) at or above which the store counts as raw encoder output.
RAW_COSINE = 0.99
#: Presidio-labelled sample texts needed in each class to score the PII probe on the sample itself.
MIN_PII_CLASS = 10
#: Sample cap of ``quick`` runs.
QUICK_N = 64


@dataclass
class AuditResult:
    """What :func:`run_audit` measured.

    Attributes:
        meta: Inputs, encoder, sample, attacker configuration, seeds, diagnostics, notes, date, machine.
        rows: Flat dicts, one per (stage, attacker), ``stage`` in ``before``/``after``/``reference``.
        examples: ``{"row", "text", "before", "after"[, "after_adaptive"]}`` per shown reconstruction.
    """

    meta: dict[str, Any]
    rows: list[dict[str, Any]]
    examples: list[dict[str, Any]] = field(default_factory=list)

    def row(self, stage: str, *, adaptive: bool = False) -> dict[str, Any] | None:
        """The row of ``stage`` (``before``, ``after`` or ``floor``) and attacker kind, if measured."""
        for r in self.rows:
            if stage == "floor" and r["stage"] == "reference":
                return r
            if r["stage"] == stage and r.get("mode", "") == ("adaptive" if adaptive else "non-adaptive"):
                return r
        return None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (non-finite numbers become ``None``)."""
        return _clean({"meta": self.meta, "rows": self.rows, "examples": self.examples})


def _clean(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return f if np.isfinite(f) else None
    if isinstance(v, Path):
        return str(v)
    return v


def _say(msg: str, progress: bool) -> None:
    if progress:
        print(f"[audit] {msg}", file=sys.stderr, flush=True)


def _row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return np.sum(a * b, 1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)


def _encode(encoder: Any, texts: Sequence[str], *, progress: bool, desc: str, batch: int = 256) -> np.ndarray:
    """Embed in batches with a progress bar (never cached: these may be the store owner's texts)."""
    from tqdm.auto import tqdm

    starts = range(0, len(texts), batch)
    parts = [encoder.encode(list(texts[s : s + batch])) for s in tqdm(starts, desc=desc, disable=not progress)]
    return np.concatenate(parts, 0).astype(np.float32)


def _bootstrap_ci(values: np.ndarray, *, seed: int, n_boot: int = 2000) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the mean."""
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(n_boot, len(values)))].mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def _resolve_encoder(encoder: Any) -> Any:
    from ..encoders import Encoder, as_encoder, encoder_from_name

    if isinstance(encoder, Encoder):
        return encoder
    if isinstance(encoder, str):
        return encoder_from_name(encoder)
    return as_encoder(encoder)


def _resolve_defense(policy: Any, defense: str | None, *, encoder: Any, seed: int | None) -> Any:
    from ..mechanisms import from_spec
    from ..protector import resolve_policy

    if policy is not None and defense is not None:
        raise AuditInputError("give either a policy or a defense spec, not both")
    if policy is not None and not isinstance(policy, (str, os.PathLike)):
        mech = resolve_policy(policy, encoder=encoder)
    elif policy is not None:
        if not Path(policy).is_dir():
            raise AuditInputError(f"policy directory {policy} does not exist")
        mech = resolve_policy(policy, encoder=encoder, seed=seed)
    elif defense is not None:
        mech = from_spec(defense, seed=seed, encoder=encoder)
    else:
        mech = resolve_policy(None, encoder=encoder, seed=seed)
    if mech.dim is not None and mech.dim != encoder.dimension:
        raise AuditInputError(f"the defense protects {mech.dim}-d vectors but the encoder "
                              f"{encoder.model_id!r} produces {encoder.dimension}-d ones")
    return mech


def _in_memory_sample(vectors: np.ndarray, texts: Sequence[str] | None, n: int, seed: int) -> StoreSample:
    from ..validation import check_vectors

    x = np.asarray(vectors)
    if x.ndim != 2:
        raise AuditInputError(f"the store must be a 2-D (n, D) array, got shape {x.shape}")
    if texts is not None and len(texts) > len(x):
        raise AuditInputError(f"{len(texts)} texts but the store only has {len(x)} rows")
    idx = sample_indices(len(texts) if texts is not None else len(x), n, seed=seed)
    try:
        sample = check_vectors(x[idx], name="store vectors")
    except (TypeError, ValueError) as exc:
        raise AuditInputError(str(exc)) from None
    return StoreSample(vectors=sample, indices=idx, texts=[texts[i] for i in idx] if texts is not None else None,
                       n_store=len(x), n_texts=len(texts) if texts is not None else 0)


def _presidio(progress: bool) -> Any:
    import logging

    # presidio warns about every unmapped spaCy label (CARDINAL, ORDINAL, ...) it meets
    logging.getLogger("presidio-analyzer").setLevel(logging.ERROR)
    try:
        from ..pii import PresidioDetector

        return PresidioDetector()
    except (ImportError, RuntimeError, OSError) as exc:
        _say(f"Presidio unavailable ({exc}); PII counts are skipped", progress)
        return None


def _pii_flags(detector: Any, texts: Sequence[str], *, progress: bool, desc: str) -> list[int] | None:
    from tqdm.auto import tqdm

    if detector is None:
        return None
    return [int(detector.has_pii(t)) if t.strip() else 0 for t in tqdm(texts, desc=desc, disable=not progress)]


def _machine() -> dict[str, Any]:
    import torch

    return {"platform": platform.platform(), "python": platform.python_version(), "cpu_count": os.cpu_count(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "cuda": torch.cuda.is_available()}


def _load(vectors: Any, texts: Any, *, column: str, n: int, seed: int,
          progress: bool) -> tuple[StoreSample, dict[str, Any]]:
    """The sample and a description of the inputs (for the report)."""
    from .store import read_texts

    if isinstance(vectors, np.ndarray):
        text_list = read_texts(texts) if isinstance(texts, (str, os.PathLike)) else (
            list(texts) if texts is not None else None)
        sample = _in_memory_sample(vectors, text_list, n, seed)
        desc: dict[str, Any] = {"vectors": "<in-memory array>"}
    else:
        if texts is not None and not isinstance(texts, (str, os.PathLike)):
            raise AuditInputError("with a store file, pass texts as a .jsonl path")
        sample = load_sample(vectors, texts=texts, column=column, n=n, seed=seed, progress=progress)
        desc = {"vectors": str(vectors), "format": Path(vectors).suffix.lstrip("."), "column": column}
    desc.update(texts=None if texts is None else str(texts) if isinstance(texts, (str, os.PathLike))
                else "<in-memory list>", n_store=sample.n_store, n_texts=sample.n_texts,
                dim=int(sample.vectors.shape[1]))
    return sample, desc


def _attacker(enc: Any, *, inverter: Any, attack_texts: Sequence[str] | None, data_dir: Any, quick: bool,
              seed: int, cache_dir: Any, progress: bool) -> tuple[Any, dict[str, Any], list[str], str]:
    """``(inverter, inverter_info, attacker_texts, attacker_data_source)``."""
    from ..attacks.cli import attack_texts as default_attack_texts
    from ..attacks.evaluate import clean_inverter
    from ..attacks.inverter import Inverter

    if attack_texts is None:
        train, _, source = default_attack_texts(None if data_dir is None else str(data_dir), seed=seed)
    else:
        train, source = list(attack_texts), "given"
    if inverter is None:
        _say("loading (or training) the clean inverter", progress)
        inv, info = clean_inverter(enc, train, quick=quick, seed=seed, cache_dir=cache_dir, progress=progress)
    else:
        inv = inverter if isinstance(inverter, Inverter) else Inverter.load(inverter)
        info = {"path": None if isinstance(inverter, Inverter) else str(inverter), "from_cache": False}
    if inv.config.emb_dim != enc.dimension:
        raise AuditInputError(f"the inverter reads {inv.config.emb_dim}-d vectors but the store holds "
                              f"{enc.dimension}-d ones")
    return inv, info, train, source


def _diagnose(sample: StoreSample, clean: np.ndarray | None, detector: Any, *, model_id: str, progress: bool,
              notes: list[str]) -> tuple[dict[str, Any], list[int] | None, str]:
    """Store-is-raw diagnostic and the PII labels of the sample texts: ``(diagnostics, labels, pii_source)``."""
    stored = sample.vectors
    diag: dict[str, Any] = {"stored_norm_mean": float(np.linalg.norm(stored, axis=1).mean())}
    labels: list[int] | None = None
    source = "synthetic"
    if sample.texts is not None and clean is not None:
        cos = _row_cosines(stored, clean)
        diag.update(store_cosine_mean=float(cos.mean()), store_cosine_min=float(cos.min()),
                    store_cosine_median=float(np.median(cos)), store_is_raw=bool(cos.mean() >= RAW_COSINE))
        flags = _pii_flags(detector, sample.texts, progress=progress, desc="Presidio on sample texts")
        if flags is not None:
            diag["text_pii_rate"] = float(np.mean(flags))
            n_pos = int(sum(flags))
            if min(n_pos, len(flags) - n_pos) >= MIN_PII_CLASS:
                labels, source = flags, "sample texts (Presidio labels)"
            else:
                notes.append(f"Presidio finds PII in {n_pos} of {len(flags)} sample texts (< {MIN_PII_CLASS} per "
                             "class): the PII probe is scored on synthetic PII sentences instead.")
        if not diag["store_is_raw"]:
            notes.append(f"The stored vectors are not raw {model_id} output of the texts (mean cosine "
                         f"{cos.mean():.3f} < {RAW_COSINE}): the store is already perturbed or protected, was built "
                         "by another encoder, or the texts are misaligned. 'after' adds a second layer on top.")
    else:
        notes.append("No --texts: text-overlap metrics (BLEU, token-F1, content-F1, ROUGE-L, exact match), keyword "
                     "F1, the floor and the store-is-raw diagnostic need the texts of the sampled rows.")
    if source == "synthetic":
        notes.append("PII-probe AUC is measured on synthetic PII sentences passed through each stage's transform "
                     "(identity before, the defense after), not on the store.")
    return diag, labels, source


def _stage_row(stage: str, mode: str, res: dict[str, Any], victims: np.ndarray, *, texts: list[str] | None,
               clean: np.ndarray | None, detector: Any, seed: int, progress: bool) -> dict[str, Any]:
    """One flat result row from an :func:`evaluate_attacks` result on ``victims``."""
    from ..metrics import content_f1

    preds = [p for _, p in res["examples"]]
    row: dict[str, Any] = {"stage": stage, "attacker": res["attacker"], "mode": mode,
                           "defense": "none (the store as it is)" if stage == "before" else res["defense"],
                           "n": len(victims), **{k: res.get(k) for k in METRICS}, "pii_auc_on": res.get("pii_auc_on")}
    flags = _pii_flags(detector, preds, progress=progress, desc=f"Presidio on '{stage}' reconstructions")
    row["recon_pii_rate"] = float(np.mean(flags)) if flags is not None else None
    row["vector_norm"] = float(np.linalg.norm(victims, axis=1).mean())
    if texts is not None and clean is not None:
        row["vector_cosine"] = float(_row_cosines(victims, clean).mean())
        per = np.asarray([content_f1([r], [p]) for r, p in zip(texts, preds)])
        row["content_f1_ci_low"], row["content_f1_ci_high"] = _bootstrap_ci(per, seed=seed)
    row.update(n_pairs=res.get("n_pairs", 0), pairs_seen=res.get("pairs_seen", 0), minutes=res.get("attack_minutes"))
    return row


def _floor_row(floor: dict[str, Any], n: int) -> dict[str, Any]:
    """The ``reference`` row: the best trivial attacker per metric (it ignores the vector)."""
    from ..attacks.floor import flat_floor

    flat = flat_floor(floor)
    keys = ("content_f1", "bleu", "token_f1", "rouge_l", "exact_match", "cosine")
    return {"stage": "reference", "attacker": "floor (ignores the vector)", "mode": "–", "defense": "–", "n": n,
            **{k: None for k in METRICS}, **{k: flat[f"floor_{k}"] for k in keys},
            "pii_auc": 0.5, "pii_auc_on": "chance", "constant": floor["constant"].get("text")}


def run_audit(
    vectors: str | os.PathLike[str] | np.ndarray,
    *,
    texts: str | os.PathLike[str] | Sequence[str] | None = None,
    column: str = "embedding",
    encoder: Any = "bundled",
    policy: Any = None,
    defense: str | None = None,
    defense_seed: int | None = None,
    n: int = 200,
    adaptive: bool = False,
    n_pairs: int = 30_000,
    quick: bool = False,
    data_dir: str | os.PathLike[str] | None = None,
    attack_texts: Sequence[str] | None = None,
    inverter: Any = None,
    beam: int = 4,
    n_pii: int = 4000,
    n_examples: int = 5,
    cache_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
    progress: bool = True,
) -> AuditResult:
    """Attack a sample of stored vectors before and after protection.

    Args:
        vectors: The store: a ``.npy`` / ``.parquet`` / ``.jsonl`` path, or an ``(n, D)`` array.
        texts: The texts of the store's first rows (a ``.jsonl`` path with a ``text`` field, or a list):
            enables the text-overlap metrics, the floor and the store-is-raw diagnostic.
        column: The embedding column of a ``.parquet`` / ``.jsonl`` store.
        encoder: The encoder that produced the store: ``"bundled"``, a sentence-transformers name or an
            :class:`~textcrafter_rag.encoders.Encoder`.
        policy: A policy directory or mechanism for "after" (default: the policy shipped for the encoder).
        defense: A defense spec (``from_spec``) for "after", instead of ``policy``.
        defense_seed: Seed of the defense's noise (default unseeded, as in production).
        n: Rows sampled (all rows with texts when there are fewer).
        adaptive: Also attack "after" with an inverter fine-tuned on ``n_pairs`` protected pairs.
        n_pairs: The adaptive attacker's query budget.
        quick: Small, fast smoke run (numbers are not meaningful): quick attacker, ``n <= 64``.
        data_dir: Benchmark datasets; the attacker's own texts are WikiText-2 train when present.
        attack_texts: The attacker's own texts (overrides ``data_dir``).
        inverter: A trained :class:`~textcrafter_rag.attacks.Inverter` or its directory (default: the
            cached clean inverter for this encoder and attacker data, trained if missing).
        beam: Beam width of the inverter.
        n_pii: Size of the synthetic PII sets of the PII probe.
        n_examples: Reconstructions kept for the report (0 keeps none).
        cache_dir: Attack cache (inverters and the attacker's embeddings; never the store's texts).
        seed: Seed of the sampling and of the attacker.
        progress: Progress bars and step messages on stderr.

    Raises:
        AuditInputError: Bad input (missing file, dimension mismatch, texts longer than the store, ...).
    """
    from ..attacks.evaluate import evaluate_attacks
    from ..mechanisms import NoDefense

    t_start = time.time()
    if quick:
        n = min(n, QUICK_N)
    sample, store_desc = _load(vectors, texts, column=column, n=n, seed=seed, progress=progress)
    stored, has_texts = sample.vectors, sample.texts is not None
    _say(f"sampled {len(stored)} of {sample.n_store} stored vectors ({stored.shape[1]}-d)"
         + (" with their texts" if has_texts else " without texts"), progress)
    enc = _resolve_encoder(encoder)
    if stored.shape[1] != enc.dimension:
        raise AuditInputError(f"the store holds {stored.shape[1]}-d vectors but the encoder {enc.model_id!r} "
                              f"produces {enc.dimension}-d ones; pass the encoder that built the store (--encoder)")
    mech = _resolve_defense(policy, defense, encoder=enc, seed=defense_seed)
    inv, inv_info, train, source = _attacker(enc, inverter=inverter, attack_texts=attack_texts, data_dir=data_dir,
                                             quick=quick, seed=seed, cache_dir=cache_dir, progress=progress)
    notes: list[str] = []
    if inv.meta.get("encoder") not in (None, "unknown", enc.model_id):
        notes.append(f"The inverter was trained for encoder {inv.meta.get('encoder')!r}, not {enc.model_id!r}.")
    if has_texts:
        n_long = int(np.sum(inv.token_lengths(sample.texts, inv.tokenizer) > inv.config.max_len))
        if n_long:
            notes.append(f"{n_long} of {len(stored)} sample texts are longer than the inverter's "
                         f"{inv.config.max_len} WordPieces; their reconstructions stop there (leakage on long texts "
                         "is understated).")
    detector = _presidio(progress)
    clean = _encode(enc, sample.texts, progress=progress, desc="encode sample texts") if has_texts else None
    diag, labels, pii_source = _diagnose(sample, clean, detector, model_id=enc.model_id, progress=progress,
                                         notes=notes)

    # before: the store as it is; after: the same rows protected (non-adaptive, and adaptive on request)
    spec = getattr(mech, "spec", lambda: repr(mech))()
    _say(f"protecting the sample with {spec}", progress)
    protected = np.concatenate([mech.protect(stored[s : s + 4096]) for s in range(0, len(stored), 4096)], 0)
    runs: list[tuple[str, np.ndarray, Any, str]] = [("before", stored, NoDefense(), "non-adaptive"),
                                                    ("after", protected, mech, "non-adaptive")]
    if adaptive:
        runs.append(("after", protected, mech, "adaptive"))
    common = {"encoder": enc, "train_texts": train, "test_texts": sample.texts, "inverter": inv, "quick": quick,
              "beam": beam, "n_pii": n_pii, "cache_dir": cache_dir, "seed": seed, "progress": progress,
              "victim_pii_labels": labels, "n_examples": len(stored), "n_pairs": n_pairs}
    rows: list[dict[str, Any]] = []
    preds: dict[tuple[str, str], list[str]] = {}
    results = []
    for stage, victims, dfn, mode in runs:
        _say(f"attacking '{stage}' ({mode})", progress)
        res = evaluate_attacks(dfn, mode=mode, victim_vectors=victims, **common)
        results.append(res)
        preds[(stage, mode)] = [p for _, p in res["examples"]]
        rows.append(_stage_row(stage, mode, res, victims, texts=sample.texts, clean=clean, detector=detector,
                               seed=seed, progress=progress))
    if results[0].get("floor") is not None:
        rows.append(_floor_row(results[0]["floor"], len(stored)))

    examples = []
    for i in range(min(max(n_examples, 0), len(stored))):
        ex = {"row": int(sample.indices[i]), "text": sample.texts[i] if has_texts else None,
              "before": preds[("before", "non-adaptive")][i], "after": preds[("after", "non-adaptive")][i]}
        if adaptive:
            ex["after_adaptive"] = preds[("after", "adaptive")][i]
        examples.append(ex)

    training = inv.meta.get("training", [])
    adapt = results[2] if adaptive else None
    n_usable = results[0]["n_train"]
    meta: dict[str, Any] = {
        "tool": "textcrafter audit",
        "inputs": store_desc,
        "encoder": {"model_id": enc.model_id, "dimension": int(enc.dimension)},
        "sample": {"n": len(stored), "requested": n, "seed": seed,
                   "rows": "all rows with texts" if has_texts and len(stored) == sample.n_texts else "random sample",
                   "first_rows": [int(i) for i in sample.indices[:10]]},
        "defense": {"spec": spec, "name": getattr(mech, "name", "?"), "params": _clean(mech.params()),
                    "expected_norm": mech.expected_norm(enc.dimension), "seed": defense_seed},
        "diagnostics": diag,
        "attacker": {
            "inverter": {**inv_info, "config": asdict(inv.config), "encoder": inv.meta.get("encoder"),
                         "train_minutes": float(sum(t.get("train_minutes", 0.0) for t in training)),
                         "train_steps": int(sum(t.get("steps", 0) for t in training)),
                         "train_pairs": training[0].get("n_train") if training else None},
            "data": source, "n_attack_texts": n_usable, "beam": beam, "rerank": beam > 1,
            "keyword": f"MLP on the attacker's clean embeddings of {min(n_usable, 2000 if quick else 20000)} texts",
            "pii_probe": {"n_pii": min(n_pii, 600) if quick else n_pii, "scored_on": pii_source,
                          "trained_on": "synthetic PII sentences through each stage's transform"},
            "adaptive": None if adapt is None else {k: adapt.get(k) for k in ("n_pairs", "pairs_seen",
                                                                              "adapt_minutes")},
            "quick": quick, "seed": seed,
        },
        "notes": notes,
        "minutes": (time.time() - t_start) / 60,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": _machine(),
    }
    return AuditResult(meta=_clean(meta), rows=_clean(rows), examples=examples)
