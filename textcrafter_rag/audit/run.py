"""The audit itself: attack a sample of stored vectors before and after protection (no CLI, no files).

"before" is the store as it is: the clean-trained inverter (and the keyword and PII attacks) applied
to the sampled stored vectors. "after" is the same sample protected with a policy or defense and
attacked the same way (non-adaptive, plus adaptive on request). Both stages go through
:func:`textcrafter_rag.attacks.evaluate_attacks` with ``victim_vectors=``, so the audit runs the one
attack pipeline the benchmarks use. With the sample's texts the floor (best trivial attacker that
ignores the vector) is measured in the same run and the text-overlap metrics are computed; without
them only reference-free measures are reported.

A store that keeps natural-language text beside the vectors (a ``text`` or payload column) is
flagged in ``meta["store_holds_plaintext"]`` and ``meta["inputs"]["plaintext_columns"]``: there the
documents are readable without any inversion, and the reports say so before any attack number.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..attacks.adaptive import query_defense
from ..attacks.config import AttackConfig
from ..attacks.evaluate import clean_inverter, evaluate_attacks
from ..attacks.inverter import Inverter
from ..attacks.inverter_io import read_strength
from ..attacks.texts import attack_texts as default_attack_texts
from ..autofit import AUTO
from ..embedding import embed_in_batches
from ..encoders import Encoder, as_encoder, encoder_from_name
from ..mechanisms import Mechanism, NoDefense
from ..options import RENAMED_OPTIONS, ProtectionOptions
from ..specs import names_a_spec, resolve_mechanism
from ..validation import check_vectors
from .attacker import strength_summary
from .measures import METRICS, MIN_PII_CLASS, RAW_COSINE, diagnose, presidio_detector, reference_row, say, stage_row
from .store import AuditInputError, StoreSample, load_sample, read_texts, sample_indices

__all__ = ["METRICS", "MIN_PII_CLASS", "RAW_COSINE", "AuditResult", "run_audit"]

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


def _plaintext_columns(sample: Any) -> tuple[str, ...]:
    """The store's text or payload columns of natural-language strings, as :func:`load_sample` found them.

    Read with ``getattr`` so a sample-like object without the field counts as having none.
    """
    return tuple(str(c) for c in (getattr(sample, "plaintext_columns", ()) or ()))


def _resolve_encoder(encoder: Any) -> Encoder:
    if isinstance(encoder, Encoder):
        return encoder
    if isinstance(encoder, str):
        return encoder_from_name(encoder)
    return as_encoder(encoder)


#: ``run_audit``'s old keywords: a spec (``defense=``) and a policy (``policy=``) are both a ``mechanism=`` now.
_RENAMED = {**RENAMED_OPTIONS, "defense": "mechanism", "defense_seed": "seed"}


def _audit_options(options: ProtectionOptions | None, overrides: dict[str, Any]) -> ProtectionOptions:
    """The protection options of "after", checked once; a key is refused (the audit measures the mechanism)."""
    settings = ProtectionOptions.build(options, overrides, stacklevel=5, renamed=_RENAMED)
    if settings.key is not None:
        raise AuditInputError("the audit protects with the mechanism only: leave key= and tenant= out")
    return settings


def _resolve_mechanism(settings: ProtectionOptions, *, encoder: Encoder) -> Mechanism:
    """The mechanism of "after": a spec string, a policy directory, a Mechanism or "auto" (``resolve_mechanism``)."""
    m = settings.mechanism
    a_path = isinstance(m, (str, os.PathLike)) and m != AUTO and not (isinstance(m, str) and names_a_spec(m))
    if a_path and not Path(m).is_dir():
        raise AuditInputError(f"policy directory {m} does not exist (and it is not a mechanism spec)")
    mech = resolve_mechanism(m, encoder=encoder, secure_mode=settings.secure_mode, seed=settings.seed)
    if mech.dim is not None and mech.dim != encoder.dimension:
        raise AuditInputError(
            f"the defense protects {mech.dim}-d vectors but the encoder "
            f"{encoder.model_id!r} produces {encoder.dimension}-d ones"
        )
    return mech


def _in_memory_sample(vectors: np.ndarray, texts: Sequence[str] | None, n: int, seed: int) -> StoreSample:
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
    return StoreSample(
        vectors=sample,
        indices=idx,
        texts=[texts[i] for i in idx] if texts is not None else None,
        n_store=len(x),
        n_texts=len(texts) if texts is not None else 0,
    )


def _machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
    }


def _load(
    vectors: Any, texts: Any, *, column: str, n: int, seed: int, progress: bool
) -> tuple[StoreSample, dict[str, Any]]:
    """The sample and a description of the inputs (for the report)."""
    if isinstance(vectors, np.ndarray):
        text_list = (
            read_texts(texts) if isinstance(texts, (str, os.PathLike)) else (list(texts) if texts is not None else None)
        )
        sample = _in_memory_sample(vectors, text_list, n, seed)
        desc: dict[str, Any] = {"vectors": "<in-memory array>"}
    else:
        if texts is not None and not isinstance(texts, (str, os.PathLike)):
            raise AuditInputError("with a store file, pass texts as a .jsonl path")
        sample = load_sample(vectors, texts=texts, column=column, n=n, seed=seed, progress=progress)
        desc = {"vectors": str(vectors), "format": Path(vectors).suffix.lstrip("."), "column": column}
    desc.update(
        texts=None if texts is None else str(texts) if isinstance(texts, (str, os.PathLike)) else "<in-memory list>",
        n_store=sample.n_store,
        n_texts=sample.n_texts,
        dim=int(sample.vectors.shape[1]),
        plaintext_columns=list(_plaintext_columns(sample)),
    )
    return sample, desc


def _attacker(
    enc: Encoder, *, inverter: Any, attack_texts: Sequence[str] | None, attack: AttackConfig, progress: bool
) -> tuple[Inverter, dict[str, Any], list[str], str]:
    """``(inverter, inverter_info, attacker_texts, attacker_data_source)``."""
    if attack_texts is None:
        train, _, source = default_attack_texts(attack.data_dir, seed=attack.seed)
    else:
        train, source = list(attack_texts), "given"
    if inverter is None:
        say("loading (or training) the clean inverter", progress)
        inv, info = clean_inverter(enc, train, attack=attack, progress=progress)
        info["source"] = "cached clean inverter"
    else:
        inv = inverter if isinstance(inverter, Inverter) else Inverter.load(inverter)
        info = {"path": None if isinstance(inverter, Inverter) else str(inverter), "from_cache": False}
        info["source"] = "given inverter"
    quoted = f"inverter-beam{attack.beam}-rerank" if attack.beam > 1 and attack.rerank else None
    info["strength"] = strength_summary(read_strength(info["path"]), prefer=quoted) if info.get("path") else None
    if inv.config.emb_dim != enc.dimension:
        raise AuditInputError(
            f"the inverter reads {inv.config.emb_dim}-d vectors but the store holds {enc.dimension}-d ones"
        )
    return inv, info, train, source


def run_audit(
    vectors: str | os.PathLike[str] | np.ndarray,
    *,
    texts: str | os.PathLike[str] | Sequence[str] | None = None,
    column: str = "embedding",
    encoder: Any = "bundled",
    options: ProtectionOptions | None = None,
    n: int = 200,
    attack_texts: Sequence[str] | None = None,
    inverter: Inverter | str | os.PathLike[str] | None = None,
    attack: AttackConfig | None = None,
    progress: bool = True,
    **overrides: Any,
) -> AuditResult:
    """Attack a sample of stored vectors before and after protection.

    Args:
        vectors: The store: a ``.npy`` / ``.parquet`` / ``.jsonl`` path, or an ``(n, D)`` array.
        texts: The texts of the store's first rows (a ``.jsonl`` path with a ``text`` field, or a list):
            enables the text-overlap metrics, the floor and the store-is-raw diagnostic.
        column: The embedding column of a ``.parquet`` / ``.jsonl`` store.
        encoder: The encoder that produced the store: ``"bundled"``, a sentence-transformers name or an
            :class:`~textcrafter_rag.encoders.Encoder`.
        options: How "after" is protected (:class:`~textcrafter_rag.options.ProtectionOptions`, without a
            key): ``mechanism`` (a spec such as ``"gaussian:s=0.05"``, a policy directory or a
            :class:`~textcrafter_rag.mechanisms.Mechanism`; default ``"auto"``, the policy shipped for the
            encoder), ``seed`` (of its noise; default unseeded, as in production) and ``secure_mode``.
        n: Rows sampled (all rows with texts when there are fewer; at most 64 when ``attack.quick``).
        attack_texts: The attacker's own texts (default: from ``attack.data_dir``, see
            :func:`~textcrafter_rag.attacks.texts.attack_texts`).
        inverter: A trained :class:`~textcrafter_rag.attacks.Inverter` or its directory (default: the
            cached clean inverter for this encoder and attacker data, trained if missing).
        attack: The attacker (default ``AttackConfig()``). ``mode="adaptive"`` also attacks "after" with an
            inverter fine-tuned on ``n_pairs`` protected pairs; ``n_examples`` reconstructions are kept for
            the report (0 keeps none); ``seed`` also seeds the sampling; ``cache_dir`` holds inverters and the
            attacker's embeddings, never the store's texts.
        progress: Progress bars and step messages on stderr.
        **overrides: Those options by keyword, over ``options`` (``mechanism="ldp:eps=4", seed=0``). The
            old ``policy=`` and ``defense=`` (now both ``mechanism=``) and ``defense_seed=`` (now ``seed=``)
            still work, with a :class:`DeprecationWarning`.

    Raises:
        InvalidTypeError: An unknown option, or one given under two names (``policy=`` and ``defense=``).
        AuditInputError: Bad input (missing file, dimension mismatch, texts longer than the store, ...).
        ArtifactError: ``inverter`` names a corrupted or edited inverter directory.
    """
    settings = _audit_options(options, overrides)
    attack = attack or AttackConfig()
    seed, t_start = attack.seed, time.time()
    if attack.quick:
        n = min(n, QUICK_N)
    sample, store_desc = _load(vectors, texts, column=column, n=n, seed=seed, progress=progress)
    stored, has_texts = sample.vectors, sample.texts is not None
    say(
        f"sampled {len(stored)} of {sample.n_store} stored vectors ({stored.shape[1]}-d)"
        + (" with their texts" if has_texts else " without texts"),
        progress,
    )
    enc = _resolve_encoder(encoder)
    if stored.shape[1] != enc.dimension:
        raise AuditInputError(
            f"the store holds {stored.shape[1]}-d vectors but the encoder {enc.model_id!r} "
            f"produces {enc.dimension}-d ones; pass the encoder that built the store (--encoder)"
        )
    mech = _resolve_mechanism(settings, encoder=enc)
    inv, inv_info, train, source = _attacker(
        enc, inverter=inverter, attack_texts=attack_texts, attack=attack, progress=progress
    )
    notes: list[str] = []
    if inv.meta.get("encoder") not in (None, "unknown", enc.model_id):
        notes.append(f"The inverter was trained for encoder {inv.meta.get('encoder')!r}, not {enc.model_id!r}.")
    if has_texts:
        n_long = int(np.sum(inv.token_lengths(sample.texts, inv.tokenizer) > inv.config.max_len))
        if n_long:
            notes.append(
                f"{n_long} of {len(stored)} sample texts are longer than the inverter's "
                f"{inv.config.max_len} WordPieces; their reconstructions stop there (leakage on long texts "
                "is understated)."
            )
    detector = presidio_detector(progress)
    # never cached: these are the store owner's texts
    clean = (
        embed_in_batches(enc.encode, sample.texts, progress=progress, desc="encode sample texts") if has_texts else None
    )
    diag, labels, pii_source = diagnose(sample, clean, detector, model_id=enc.model_id, progress=progress, notes=notes)

    # before: the store as it is; after: the same rows protected (non-adaptive, and adaptive on request)
    spec = getattr(mech, "spec", lambda: repr(mech))()
    say(f"protecting the sample with {spec}", progress)
    protected = query_defense(mech, stored)
    runs: list[tuple[str, np.ndarray, Any, str]] = [
        ("before", stored, NoDefense(), "non-adaptive"),
        ("after", protected, mech, "non-adaptive"),
    ]
    if attack.adaptive:
        runs.append(("after", protected, mech, "adaptive"))
    rows: list[dict[str, Any]] = []
    preds: dict[tuple[str, str], list[str]] = {}
    results = []
    for stage, victims, dfn, mode in runs:
        say(f"attacking '{stage}' ({mode})", progress)
        res = evaluate_attacks(
            dfn,
            encoder=enc,
            train_texts=train,
            test_texts=sample.texts,
            inverter=inv,
            attack=replace(attack, mode=mode, n_examples=len(stored)),
            victim_vectors=victims,
            victim_pii_labels=labels,
            progress=progress,
        )
        results.append(res)
        preds[(stage, mode)] = [p for _, p in res["examples"]]
        rows.append(
            stage_row(
                stage,
                mode,
                res,
                victims,
                texts=sample.texts,
                clean=clean,
                detector=detector,
                seed=seed,
                progress=progress,
            )
        )
    if results[0].get("floor") is not None:
        rows.append(reference_row(results[0]["floor"], len(stored)))

    examples = []
    for i in range(min(attack.n_examples, len(stored))):
        ex = {
            "row": int(sample.indices[i]),
            "text": sample.texts[i] if has_texts else None,
            "before": preds[("before", "non-adaptive")][i],
            "after": preds[("after", "non-adaptive")][i],
        }
        if attack.adaptive:
            ex["after_adaptive"] = preds[("after", "adaptive")][i]
        examples.append(ex)

    meta: dict[str, Any] = {
        "tool": "textcrafter audit",
        "store_holds_plaintext": bool(_plaintext_columns(sample)),
        "inputs": store_desc,
        "encoder": {"model_id": enc.model_id, "dimension": int(enc.dimension)},
        "sample": {
            "n": len(stored),
            "requested": n,
            "seed": seed,
            "rows": "all rows with texts" if has_texts and len(stored) == sample.n_texts else "random sample",
            "first_rows": [int(i) for i in sample.indices[:10]],
        },
        "defense": {
            "spec": spec,
            "name": getattr(mech, "name", "?"),
            "params": _clean(mech.params()),
            "expected_norm": mech.expected_norm(enc.dimension),
            "seed": settings.seed,
        },
        "diagnostics": diag,
        "attacker": _attacker_meta(
            inv,
            inv_info,
            attack,
            source=source,
            n_usable=results[0]["n_train"],
            pii_source=pii_source,
            adapt=results[2] if attack.adaptive else None,
        ),
        "notes": notes,
        "minutes": (time.time() - t_start) / 60,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": _machine(),
    }
    return AuditResult(meta=_clean(meta), rows=_clean(rows), examples=examples)


def _attacker_meta(
    inv: Inverter,
    inv_info: dict[str, Any],
    attack: AttackConfig,
    *,
    source: str,
    n_usable: int,
    pii_source: str,
    adapt: dict[str, Any] | None,
) -> dict[str, Any]:
    """The report's description of the attacker: inverter, data, beam, keyword and PII attacks, adaptation."""
    training = inv.meta.get("training", [])
    return {
        "inverter": {
            **inv_info,
            "config": asdict(inv.config),
            "encoder": inv.meta.get("encoder"),
            "train_minutes": float(sum(t.get("train_minutes", 0.0) for t in training)),
            "train_steps": int(sum(t.get("steps", 0) for t in training)),
            "train_pairs": training[0].get("n_train") if training else None,
        },
        "data": source,
        "n_attack_texts": n_usable,
        "beam": attack.beam,
        "rerank": attack.rerank and attack.beam > 1,
        "keyword": f"MLP on the attacker's clean embeddings of {min(n_usable, attack.keyword_size)} texts",
        "pii_probe": {
            "n_pii": attack.pii_size,
            "scored_on": pii_source,
            "trained_on": "synthetic PII sentences through each stage's transform",
        },
        "adaptive": None if adapt is None else {k: adapt.get(k) for k in ("n_pairs", "pairs_seen", "adapt_minutes")},
        "mode": attack.mode,
        "quick": attack.quick,
        "seed": attack.seed,
    }
