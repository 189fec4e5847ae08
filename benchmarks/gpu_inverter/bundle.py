"""The GPU bundle: everything the GPU step reads, written on the CPU by ``prepare`` (fits the device carry limit).

Layout of the bundle folder (``.cache/gpu_bundle/`` by default, ignored by git)::

    manifest.json              what is inside, the corpus report, SHA-256 of every other file
    encoder/                   MiniLM's sentence-transformers folder without its 90 MB weights ...
    encoder/weights.safetensors  ... which are here: matrices int8 (per-row absmax, float16 scales), rest float16
    train.jsonl.gz             the attacker's training sentences (one JSON string per line)
    test.jsonl.gz              the held-out WikiText-2 test sentences
    test_vectors.safetensors   their exact float32 MiniLM vectors (computed here with the full-precision encoder)
    queries.jsonl.gz           optional: SciFact test queries, victims of the two-stage query rows ...
    query_vectors.safetensors  ... and their exact vectors

The victims' vectors are exact; the GPU step embeds the training sentences (and rerank candidates) with
the dequantised encoder, whose cosine to the exact one on the test sentences is recorded in the manifest.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

__all__ = [
    "BUNDLE_FORMAT",
    "DEFAULT_BUNDLE",
    "QUERIES",
    "QUERY_VECTORS",
    "device_command",
    "ENCODER_FILES",
    "check_bundle",
    "dequantise",
    "encoder_folder",
    "quantise",
    "read_lines",
    "sample_test",
    "write_bundle",
    "write_lines",
]

BUNDLE_FORMAT = 1
#: Where ``prepare`` writes and ``train`` reads by default (ignored by git: ``.cache/``).
DEFAULT_BUNDLE = Path(".cache") / "gpu_bundle"
MANIFEST = "manifest.json"
QUERIES, QUERY_VECTORS = "queries.jsonl.gz", "query_vectors.safetensors"
#: The sentence-transformers files copied from the MiniLM folder (its model.safetensors is replaced).
ENCODER_FILES = (
    "config.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
)
_SCALE = ".absmax_scale"
#: Matrices with at least this many entries are stored int8.
_QUANTISE_MIN = 1 << 16


def quantise(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Matrices to int8 per row (absmax, with a float16 scale per row), everything else to float16."""
    out: dict[str, torch.Tensor] = {}
    for name, t in tensors.items():
        t = t.detach().float().cpu()
        if t.ndim == 2 and t.numel() >= _QUANTISE_MIN:
            scale = t.abs().amax(dim=1).clamp_min(1e-12) / 127.0
            out[name] = torch.round(t / scale[:, None]).clamp(-127, 127).to(torch.int8).contiguous()
            out[name + _SCALE] = scale.to(torch.float16).contiguous()
        else:
            out[name] = t.to(torch.float16).contiguous()
    return out


def dequantise(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Float32 tensors from :func:`quantise`'s output."""
    out = {}
    for name, t in tensors.items():
        if name.endswith(_SCALE):
            continue
        scale = tensors.get(name + _SCALE)
        out[name] = (t.float() * scale.float()[:, None]) if scale is not None else t.float()
    return out


def device_command(bundle: Path, *, timeout_s: int = 540) -> str:
    """The device tool call that trains and measures the inverter from ``bundle`` (printed by ``prepare``)."""
    cmd = f"PYTHONUNBUFFERED=1 python3 -m benchmarks.gpu_inverter train --bundle {bundle.as_posix()} --out $OUT"
    return f'run(command="{cmd}", carry=["{bundle.as_posix()}"], timeout_s={timeout_s})'


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_lines(path: Path, texts: Sequence[str]) -> None:
    """Gzip JSON Lines, one JSON string per line (mtime 0: the same texts give the same bytes)."""
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as fh:
        for t in texts:
            fh.write((json.dumps(t, ensure_ascii=False) + "\n").encode("utf-8"))


def read_lines(path: Path) -> list[str]:
    """The texts written by :func:`write_lines`."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def write_bundle(
    out: Path,
    *,
    st_folder: Path,
    encode: Any,
    train: Sequence[str],
    test: Sequence[str],
    corpus_report: dict[str, Any],
    settings: dict[str, Any],
    queries: Sequence[str] = (),
) -> dict[str, Any]:
    """Write the bundle to ``out`` (replaced); returns the manifest.

    Args:
        st_folder: MiniLM's sentence-transformers folder (its ``model.safetensors`` is quantised).
        encode: The exact encoder (``list[str] -> (n, D)`` float32): the test vectors and the check of the
            quantised encoder come from it.
        train: Training sentences; test: held-out test sentences (none of them in ``train``).
        corpus_report: How the training sentences were assembled (sources, deduplication counts).
        settings: Recorded as is (``max_len``, seed, ...).
        queries: Victim queries of the attack jobs (none in ``train``), written with their exact vectors.
    """
    if set(train) & (set(test) | set(queries)):
        raise ValueError("a test sentence or query is among the training sentences")
    shutil.rmtree(out, ignore_errors=True)
    enc_dir = out / "encoder"
    for name in ENCODER_FILES:
        (enc_dir / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(st_folder / name, enc_dir / name)
    save_file(quantise(load_file(str(st_folder / "model.safetensors"))), str(enc_dir / "weights.safetensors"))
    write_lines(out / "train.jsonl.gz", train)
    write_lines(out / "test.jsonl.gz", test)
    exact = np.asarray(encode(list(test)), dtype=np.float32)
    save_file({"vectors": torch.from_numpy(exact)}, str(out / "test_vectors.safetensors"))
    if queries:
        write_lines(out / QUERIES, queries)
        q_exact = np.asarray(encode(list(queries)), dtype=np.float32)
        save_file({"vectors": torch.from_numpy(q_exact)}, str(out / QUERY_VECTORS))
    with encoder_folder(out) as folder:
        from sentence_transformers import SentenceTransformer

        approx = SentenceTransformer(str(folder), device="cpu").encode(
            list(test), normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
    cos = np.sum(approx * exact, axis=1) / np.linalg.norm(approx, axis=1) / np.linalg.norm(exact, axis=1)
    files = sorted(p for p in out.rglob("*") if p.is_file())
    manifest = {
        "format": BUNDLE_FORMAT,
        "n_train": len(train),
        "n_test": len(test),
        "n_queries": len(queries),
        "corpus": corpus_report,
        "settings": settings,
        "encoder": {
            "storage": f"matrices of >= {_QUANTISE_MIN} entries int8 per row (absmax), the rest float16",
            "cosine_to_exact_on_test_mean": round(float(cos.mean()), 6),
            "cosine_to_exact_on_test_min": round(float(cos.min()), 6),
        },
        "bytes": sum(p.stat().st_size for p in files),
        "sha256": {p.relative_to(out).as_posix(): _sha256(p) for p in files},
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return manifest


def check_bundle(folder: Path) -> dict[str, Any]:
    """The manifest, once every file's SHA-256 matches it (a truncated copy is refused)."""
    path = folder / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{folder} has no {MANIFEST}: run `python -m benchmarks.gpu_inverter prepare` first")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if manifest.get("format") != BUNDLE_FORMAT:
        raise ValueError(f"{folder}: bundle format {manifest.get('format')!r}, expected {BUNDLE_FORMAT}")
    bad = [name for name, digest in manifest["sha256"].items() if _sha256(folder / name) != digest]
    if bad:
        raise ValueError(f"{folder}: files differ from the manifest: {', '.join(bad)}")
    return manifest


@contextmanager
def encoder_folder(bundle: Path) -> Iterator[Path]:
    """A temporary sentence-transformers folder with the bundle's dequantised float32 weights."""
    with tempfile.TemporaryDirectory(prefix="gpu_bundle_encoder_") as tmp:
        folder = Path(tmp)
        for name in ENCODER_FILES:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(bundle / "encoder" / name, folder / name)
        weights = dequantise(load_file(str(bundle / "encoder" / "weights.safetensors")))
        save_file(weights, str(folder / "model.safetensors"))
        yield folder


def sample_test(texts: Sequence[str], *, n: int, seed: int) -> list[str]:
    """``n`` test sentences drawn as ``benchmarks.attack_strength`` draws them (``random.Random(seed).sample``)."""
    return random.Random(seed).sample(list(texts), min(n, len(texts)))
