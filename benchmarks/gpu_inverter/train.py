"""The device step: train the clean inverter from a bundle, measure its strength, write compact weights.

Reads only the bundle (:mod:`.bundle`) and imports only torch, transformers, sentence-transformers,
sacrebleu, scikit-learn and the package's inverter modules (through :func:`.lean.lean_import`), which
is what the GPU machine has. Writes to ``out`` (flat, at most 8 files of at most 16 MiB: what comes
back from the device):

* ``inverter-0000K-of-0000N.safetensors``: the network in float16 (the strength rows are measured
  with exactly these rounded weights) and its vocabulary, in shards of at most 15 MiB;
* ``inverter.json``: architecture, training summary and the shards' SHA-256;
* ``strength.json`` / ``strength.md``: BLEU / token-F1 / content-F1 (and exact match, cosine) of
  greedy, beam and beam + rerank decoding on the bundle's held-out WikiText-2 test sentences, beside
  the floor attackers, all with no defense;
* ``adaptive.json`` (with ``adaptive``): the defended rows, non-adaptive and adaptive (:mod:`.adaptive`).

:func:`unpack` turns these into a verified inverter artifact (``Inverter.load`` reads it) with the
strength rows beside it, which ``textcrafter audit --attacker DIR`` reports.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from .adaptive import AdaptiveRun, run_jobs
from .bundle import QUERIES, QUERY_VECTORS, check_bundle, encoder_folder, read_lines
from .lean import lean_import

__all__ = ["SHARD_BYTES", "DeviceRun", "train_and_measure", "unpack"]

#: Largest weight shard (the device returns files of at most 16 MiB).
SHARD_BYTES = 15 * 2**20
METRICS = ("bleu", "token_f1", "content_f1", "exact_match", "cosine")
STRENGTH_JSON, STRENGTH_MD, INVERTER_JSON = "strength.json", "strength.md", "inverter.json"


def _metrics(refs: list[str], preds: list[str], *, embed: Any, ref_vectors: np.ndarray) -> dict[str, float]:
    """The strength metrics (ROUGE-L is left out: rouge-score is not on the GPU machine)."""
    m = lean_import("textcrafter_rag.metrics")
    emb = embed([p if p.strip() else "." for p in preds])
    out = {
        "bleu": m.corpus_bleu(refs, preds),
        "token_f1": m.token_f1(refs, preds),
        "content_f1": m.content_f1(refs, preds),
        "exact_match": m.exact_match(refs, preds),
        "cosine": m.embedding_cosine(emb, ref_vectors),
    }
    return {k: round(float(v), 2) for k, v in out.items()}


def _shards(tensors: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name in sorted(tensors):
        t = tensors[name]
        n = t.numel() * t.element_size()
        if n > SHARD_BYTES:
            raise ValueError(f"tensor {name} alone is over {SHARD_BYTES} bytes")
        if size + n > SHARD_BYTES:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += n
    return shards


def _round_to_half(model: torch.nn.Module) -> None:
    """Round the weights to float16 in place, so the measured attacker is the one that is written."""
    with torch.no_grad():
        for t in model.state_dict().values():
            if t.is_floating_point():
                half = t.half()
                if not bool(torch.isfinite(half).all()):
                    raise ValueError("a weight overflows float16")
                t.copy_(half.float())


def _write_weights(inv: Any, out: Path, info: dict[str, Any]) -> list[str]:
    tensors = {k: v.detach().cpu().half().contiguous() for k, v in inv.model.state_dict().items()}
    tensors["vocab_ids"] = torch.as_tensor(inv.vocab_ids)
    shards = _shards(tensors)
    names = []
    for i, shard in enumerate(shards, 1):
        name = f"inverter-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(out / name))
        names.append(name)
    meta = json.loads(json.dumps(inv.meta, default=str))
    doc = {
        "architecture": asdict(inv.config),
        "meta": meta,
        "shards": {n: hashlib.sha256((out / n).read_bytes()).hexdigest() for n in names},
        **info,
    }
    (out / INVERTER_JSON).write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return names


def _markdown(rows: list[dict[str, Any]], base: dict[str, Any], examples: dict[str, list[str]], refs: list[str]) -> str:
    part = "" if base["n_train"] == base["bundle_n_train"] else f"the first of the bundle's {base['bundle_n_train']}: "
    lines = [
        "# Inversion-attack strength of the GPU-trained inverter (no defense)",
        "",
        f"Encoder `{base['encoder']}`; inverter {base['inverter']}, trained {base['train_minutes']} min "
        f"({base['train_steps']} steps, batch {base['batch_size']}, {base['epochs']} epochs, {base['samples_seen']} "
        f"samples) on {base['n_train']} public sentences ({part}{', '.join(base['sources'])}; deduplicated against "
        f"every test split); {base['n_test']} held-out WikiText-2 test sentences. Device: {base['device_name']}. "
        f"Seed {base['seed']}. Weights rounded to float16 before measuring. Total wall time {base['total_minutes']} "
        "min.",
        "",
        "| attack | defense | BLEU | token-F1 | content-F1 | exact | cosine |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['attack']} | {r['defense']} | " + " | ".join(f"{r[k]:.2f}" for k in METRICS) + " |")
    lines += ["", "Examples (first 3 test sentences):", ""]
    for i in range(min(3, len(refs))):
        lines.append(f"* reference: {refs[i]}")
        lines += [f"  * {a}: {preds[i]}" for a, preds in examples.items()]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class DeviceRun:
    """Settings of the device step (defaults: the one-H100 run, about 5.5 minutes in all).

    Attributes:
        device: ``auto`` (CUDA when present), ``cuda`` or ``cpu``.
        train_minutes: Training time budget (``0``: none, stop at ``max_steps``).
        layers: Decoder layers (6 reuses every MiniLM layer).
        dropout: The decoder's dropout (0.0 is the package default; 4 minutes on one GPU are 40 passes over the
            corpus, and without it the training loss falls to about 0.0006: it memorises its sentences).
        batch_size, lr, warmup_steps, max_steps: Optimisation (bf16 autocast and fused AdamW on CUDA).
        max_train, n_test: Use only the first sentences of the bundle (smoke runs); ``None`` for all.
        beam: Beam width (rows for greedy, beam and beam + rerank are written).
        seed: Seed of training, decoding and the floors.
    """

    device: str = "auto"
    train_minutes: float = 4.0
    layers: int = 6
    dropout: float = 0.0
    batch_size: int = 512
    lr: float = 1e-3
    warmup_steps: int = 200
    max_steps: int | None = None
    max_train: int | None = None
    n_test: int | None = None
    beam: int = 8
    seed: int = 0


def _victims(bundle: Path, test: list[str], test_vec: np.ndarray) -> dict[str, tuple[list[str], np.ndarray]]:
    """The victim corpora of the attack jobs: the test sentences, and the SciFact queries when bundled."""
    corpora = {"wikitext": (test, test_vec)}
    if (bundle / QUERIES).is_file():
        corpora["scifact-queries"] = (
            read_lines(bundle / QUERIES),
            load_file(str(bundle / QUERY_VECTORS))["vectors"].numpy(),
        )
    return corpora


def train_and_measure(
    bundle: Path,
    out: Path,
    run: DeviceRun,
    *,
    adaptive: AdaptiveRun | None = None,
    cache_dir: Path | None = None,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Train, round to float16, measure and write the weights and strength rows to ``out``; returns the rows.

    With ``adaptive``, the attack jobs of :mod:`.adaptive` follow in the same process. ``cache_dir`` holds
    the embeddings of the training sentences and the adaptive attackers (default: a temporary folder).
    """
    t_all = time.time()
    manifest = check_bundle(bundle)
    inverter_mod = lean_import("textcrafter_rag.attacks.inverter")
    attack_cache = lean_import("textcrafter_rag.attacks.cache")
    encoders = lean_import("textcrafter_rag.encoders")
    floor = lean_import("textcrafter_rag.attacks.floor")
    rerank = lean_import("textcrafter_rag.attacks.correction").rerank
    dev = inverter_mod.resolve_device(run.device)
    out.mkdir(parents=True, exist_ok=True)
    train = read_lines(bundle / "train.jsonl.gz")[: run.max_train]
    test = read_lines(bundle / "test.jsonl.gz")[: run.n_test]
    test_vec = load_file(str(bundle / "test_vectors.safetensors"))["vectors"].numpy()[: len(test)]
    on_gpu = dev.type == "cuda"
    from sentence_transformers import SentenceTransformer

    with encoder_folder(bundle) as folder:
        st = SentenceTransformer(str(folder), device=str(dev))
        enc = encoders.as_encoder(st, batch_size=1024 if on_gpu else 64, model_id=encoders.BUNDLED_MODEL_ID)
        t = time.time()
        tmp = tempfile.TemporaryDirectory(prefix="gpu_inverter_cache_") if cache_dir is None else None
        cache = Path(tmp.name) if tmp is not None else cache_dir
        emb = attack_cache.attacker_embeddings(enc, train, cache_dir=cache, progress=progress)
        embed_minutes = (time.time() - t) / 60
        print(f"embedded {len(train)} training sentences in {embed_minutes:.2f} min on {dev}", flush=True)
        cfg = inverter_mod.InverterConfig(
            n_layers=run.layers, dropout=run.dropout, max_len=int(manifest["settings"]["max_len"])
        )
        tc = inverter_mod.InverterTrainingConfig(
            batch_size=run.batch_size,
            lr=run.lr,
            warmup_steps=run.warmup_steps,
            epochs=1000.0,
            max_steps=run.max_steps,
            time_budget_min=run.train_minutes or None,
            seed=run.seed,
        )
        inv = inverter_mod.Inverter.train(
            emb, train, config=cfg, train_config=tc, encoder=enc, device=dev, progress=progress
        )
        _round_to_half(inv.model)
        summary = inv.meta["training"][-1]
        print(f"trained {summary['steps']} steps in {summary['train_minutes']:.2f} min", flush=True)

        t = time.time()
        gen_batch = 512 if on_gpu else 64
        cands = inv.generate(test_vec, beam=run.beam, num_return=run.beam, batch_size=gen_batch)
        greedy = inv.invert(test_vec, batch_size=gen_batch)
        best, _ = rerank(cands, test_vec, enc.encode)
        preds = {
            "inverter-greedy": greedy,
            f"inverter-beam{run.beam}": [c[0] for c in cands],
            f"inverter-beam{run.beam}-rerank": best,
        }
        const = floor.best_constant(train, seed=run.seed)
        preds["floor-constant"] = [const] * len(test)
        preds["floor-random_sentence"] = floor.random_sentences(train, len(test), seed=run.seed)
        eval_minutes = (time.time() - t) / 60
        base = {
            "encoder": encoders.BUNDLED_MODEL_ID,
            "defense": "none",
            "seed": run.seed,
            "n_train": len(train),
            "bundle_n_train": manifest["n_train"],
            "sources": [s for s, c in manifest["corpus"]["sources"].items() if c.get("kept")],
            "n_test": len(test),
            "test_set": manifest["settings"].get("test_set"),
            "train_minutes": round(summary["train_minutes"], 2),
            "train_steps": summary["steps"],
            "batch_size": run.batch_size,
            "lr": run.lr,
            "epochs": round(summary["epochs_done"], 3),
            "samples_seen": summary["steps"] * run.batch_size,
            "final_loss": None if summary["final_loss"] is None else round(summary["final_loss"], 4),
            "inverter": f"{cfg.n_layers}L-d{cfg.d_model}-prefix{cfg.n_prefix}-vocab{len(inv.vocab_ids)}"
            + (f"-dropout{cfg.dropout:g}" if cfg.dropout else ""),
            "beam": run.beam,
            "weights": "float16",
            "embed_minutes": round(embed_minutes, 2),
            "eval_minutes": round(eval_minutes, 2),
            "device": str(dev),
            "device_name": torch.cuda.get_device_name(dev) if on_gpu else f"cpu ({platform.machine()})",
            "torch": torch.__version__,
            "encoder_storage": manifest["encoder"],
        }
        rows = []
        for attack, p in preds.items():
            rows.append(
                {
                    **base,
                    "attack": attack,
                    "kind": "floor" if attack.startswith("floor") else "inverter",
                    **_metrics(test, p, embed=enc.encode, ref_vectors=test_vec),
                }
            )
            print(attack, {k: rows[-1][k] for k in METRICS}, flush=True)
        base["total_minutes"] = round((time.time() - t_all) / 60, 2)
        for r in rows:
            r["total_minutes"] = base["total_minutes"]
        _write_weights(inv, out, {"encoder": encoders.BUNDLED_MODEL_ID, "strength": STRENGTH_JSON})
        examples = {a: p[:3] for a, p in preds.items()}
        (out / STRENGTH_JSON).write_text(json.dumps(rows, indent=2), encoding="utf-8")
        (out / STRENGTH_MD).write_text(_markdown(rows, base, examples, test), encoding="utf-8")
        if adaptive is not None:
            meta = {
                k: base[k] for k in ("encoder", "inverter", "train_minutes", "train_steps", "n_train", "device_name")
            }
            run_jobs(
                inverter=inv,
                encoder=enc,
                texts=train,
                corpora=_victims(bundle, test, test_vec),
                run=adaptive,
                out=out,
                cache_dir=cache,
                started=t_all,
                batch_size=gen_batch,
                score=_metrics,
                meta={**meta, "torch": torch.__version__, "seed": run.seed},
            )
        if tmp is not None:
            tmp.cleanup()
    return rows


def unpack(source: Path, bundle: Path, dest: Path) -> Path:
    """A verified inverter artifact in ``dest`` (float32) from ``train``'s output, with ``strength.json`` beside it."""
    inverter_mod = lean_import("textcrafter_rag.attacks.inverter")
    model_mod = lean_import("textcrafter_rag.attacks.inverter_model")
    io = lean_import("textcrafter_rag.attacks.inverter_io")
    doc = json.loads((source / INVERTER_JSON).read_text(encoding="utf-8"))
    tensors: dict[str, torch.Tensor] = {}
    for name, digest in doc["shards"].items():
        data = (source / name).read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"{source / name} differs from {INVERTER_JSON}: truncated or modified")
        tensors.update(load_file(str(source / name)))
    vocab = tensors.pop("vocab_ids").numpy()
    model = model_mod.InverterModel(model_mod.InverterConfig(**doc["architecture"]), len(vocab))
    model.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=True)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(bundle / "encoder"), local_files_only=True)
    inv = inverter_mod.Inverter(model, tok, vocab, meta=doc["meta"], device="cpu")
    inv.save(dest)
    shutil.copyfile(source / STRENGTH_JSON, dest / io.STRENGTH_NAME)
    if (source / STRENGTH_MD).is_file():
        shutil.copyfile(source / STRENGTH_MD, dest / STRENGTH_MD)
    return dest
