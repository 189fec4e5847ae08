"""Protection throughput, overhead over encoding, policy fit time, memory, and arithmetic cost.

Measures vectors/s of ``Mechanism.protect`` at batch sizes 1, 32 and 1024 for D=384 (the
fitted MiniLM policy) and D=768 (an untrained policy of that size: speed does not depend on the
weights), for TextCrafter and the baselines; the bundled MiniLM's encoding throughput on real
sentences in the same run (so the overhead ratio is measured on one machine state); the time of
a quick policy fit; peak memory (tracemalloc for NumPy buffers, getrusage for the process); and
the FLOPs of the policy forward pass, counted from its matmuls.

Usage::

    python -m benchmarks.speed            # full
    python -m benchmarks.speed --quick    # writes speed_quick.*
"""

from __future__ import annotations

import resource
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from benchmarks.common.fitted_policies import PolicySource
from benchmarks.common.grid import perturbation_norm
from benchmarks.common.options import base_parser, quiet_seed_warnings, resolve_data_or_none, resolve_size, set_threads
from benchmarks.common.reporting import Script, Timer, fmt, make_meta, md_table, write_results
from textcrafter_rag.data import DatasetNotFoundError, bbc_sentences, load_classification
from textcrafter_rag.encoders import Encoder, bundled_minilm
from textcrafter_rag.mechanisms import GaussianNoise, LDPGaussian, Mechanism, NoDefense, Purkayastha, Shuffle
from textcrafter_rag.numerics import unit_rows
from textcrafter_rag.textcrafter import Calibration, PolicyTrainingConfig, TextCrafter, fit_textcrafter
from textcrafter_rag.textcrafter.pii import PIIClassifier
from textcrafter_rag.textcrafter.policy import PolicyConfig, TextCrafterPolicy
from textcrafter_rag.textcrafter.priors import ClusterPrior

NAME = "speed"
SCRIPT = Script(NAME, "benchmarks.speed")
SIZES: dict[str, dict[str, Any]] = {
    "smoke": {"dims": (384,), "batches": (1, 32), "min_seconds": 0.05, "n_encode": 16, "fit_steps": 5},
    "quick": {"dims": (384, 768), "batches": (1, 32, 1024), "min_seconds": 0.5, "n_encode": 256, "fit_steps": 150},
    "full": {"dims": (384, 768), "batches": (1, 32, 1024), "min_seconds": 2.0, "n_encode": 1024, "fit_steps": 150},
}


def unit_vectors(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """``n`` random unit vectors as float32 (the shape of a normalised encoder's output)."""
    return unit_rows(rng.standard_normal((n, dim))).astype(np.float32)


def untrained_textcrafter(dim: int, *, eps: float = 2.5, seed: int = 0) -> TextCrafter:
    """A TextCrafter of dimension ``dim`` with an untrained policy and a synthetic PII classifier and prior."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    policy = TextCrafterPolicy(PolicyConfig(dim=dim))
    pii = PIIClassifier(weight=torch.randn(dim, generator=g) / dim**0.5, bias=torch.tensor(0.0))
    centroids = torch.nn.functional.normalize(torch.randn(8, dim, generator=g), dim=-1)
    prior = ClusterPrior(centroids=centroids, safe=torch.tensor([True, False] * 4))
    with quiet_seed_warnings():
        return TextCrafter(policy=policy, eps=eps, pii=pii, prior=prior, seed=seed)


def policy_flops(policy: TextCrafterPolicy) -> dict[str, int]:
    """Multiply-accumulates of one policy forward per vector, counted from the matmuls actually run.

    Per branch (sequence length 1, so attention reduces to the value and output projections):
    ``W_v`` (D x D), ``W_o`` (D x D), FFN ``D x F`` and ``F x D``, head ``D x D``. Biases, LayerNorm,
    GELU and the projection/normalisation of the release are O(D) and listed separately.
    """
    d = policy.config.dim
    macs = 0
    for br in (policy.mean_branch, policy.direction_branch):
        macs += d * d  # value projection (rows 2D:3D of in_proj_weight)
        macs += br.attention.out_proj.in_features * br.attention.out_proj.out_features
        for lin in (br.ffn[0], br.ffn[2], br.head):
            macs += lin.in_features * lin.out_features
    linear_ops = 2 * 30 * d  # biases, residuals, 2 LayerNorms, GELU, positional add per branch (rough)
    release_ops = 12 * d  # mu + sigma*z, two projections off v, norm, scale, add
    return {
        "matmul_macs": macs,
        "matmul_flops": 2 * macs,
        "elementwise_flops_approx": linear_ops + release_ops,
        "total_flops_approx": 2 * macs + linear_ops + release_ops,
    }


def encoder_flops_per_token(encoder: Encoder) -> int:
    """About ``2 x`` the non-embedding parameters of the transformer, per token (matmul FLOPs)."""
    model = encoder.model
    total = sum(p.numel() for n, p in model.named_parameters() if "embeddings" not in n)
    return 2 * int(total)


def time_protect(mech: Mechanism, x: np.ndarray, *, min_seconds: float) -> tuple[float, int]:
    """Seconds per call (median of repeated calls) and number of calls, after one warm-up call."""
    mech.protect(x)
    times: list[float] = []
    t_end = time.perf_counter() + min_seconds
    while time.perf_counter() < t_end or len(times) < 3:
        t0 = time.perf_counter()
        mech.protect(x)
        times.append(time.perf_counter() - t0)
        if len(times) >= 2000:
            break
    return float(np.median(times)), len(times)


def peak_tracemalloc(mech: Mechanism, x: np.ndarray) -> float:
    """Peak Python/NumPy-tracked allocation (MiB) during one ``protect`` call (torch's own allocator is not traced)."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    mech.protect(x)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def encode_texts(data_dir: Path | None, n: int) -> tuple[list[str], str]:
    """``n`` real sentences to encode and their source: SST-2 dev if available, else BBC News."""
    if data_dir is not None:
        try:
            texts = load_classification("sst2", "test", data_dir=data_dir)[0]
            return (texts * (n // len(texts) + 1))[:n], "sst2-dev"
        except DatasetNotFoundError:
            pass
    return bbc_sentences()[:n], "bbc"


def measure_encoding(encoder: Encoder, texts: list[str], *, batch_size: int, dataset: str) -> dict[str, Any]:
    """The encoder's sentences/s on ``texts`` (after a warm-up), as the ``encode`` row."""
    tok = encoder.model.tokenizer
    mean_tokens = float(np.mean([len(tok(t, truncation=True, max_length=256)["input_ids"]) for t in texts]))
    encoder.encode(texts[: min(16, len(texts))])  # warm-up
    with Timer() as t_enc:
        for i in range(0, len(texts), batch_size):
            encoder.encode(texts[i : i + batch_size])
    return {
        "kind": "encode",
        "dataset": dataset,
        "mechanism": "none",
        "dim": 384,
        "batch_size": batch_size,
        "vectors_per_s": len(texts) / t_enc.seconds,
        "n_texts": len(texts),
        "mean_tokens": mean_tokens,
        "flops_per_vector_approx": encoder_flops_per_token(encoder) * mean_tokens,
    }


def _mechanisms(tc: TextCrafter, *, seed: int, smoke: bool) -> list[tuple[str, dict[str, float], Mechanism]]:
    with quiet_seed_warnings():
        mechs: list[tuple[str, dict[str, float], Mechanism]] = [
            ("none", {}, NoDefense()),
            ("shuffle", {}, Shuffle(seed=seed)),
            ("gaussian", {"s": 0.05}, GaussianNoise(s=0.05, seed=seed)),
            ("ldp", {"eps": 8.0}, LDPGaussian(epsilon=8.0, seed=seed)),
            ("purkayastha", {"eps": 128.0}, Purkayastha(epsilon=128.0, seed=seed)),
            ("textcrafter", {"eps": 2.5}, tc),
        ]
    return [m for m in mechs if m[0] in ("gaussian", "textcrafter")] if smoke else mechs


def measure_protect(
    dim: int, *, policies: PolicySource, cfg: dict[str, Any], rng: np.random.Generator, encode_vps: float
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The ``protect`` rows at dimension ``dim`` for every mechanism and batch size, and the policy's FLOPs."""
    size, seed = policies.size, policies.seed
    if dim == 384 and size != "smoke":
        tc = policies.textcrafter(2.5, noise_seed=seed)
        tc_note = f"fitted policy ({getattr(tc, 'path', '')})"
    else:
        tc = untrained_textcrafter(dim, seed=seed)
        tc_note = "untrained policy of this dimension"
    flops = policy_flops(tc.policy)
    rows = []
    mechs = _mechanisms(tc, seed=seed, smoke=size == "smoke")
    for b in cfg["batches"]:
        x = unit_vectors(rng, b, dim)
        for name, params, mech in tqdm(mechs, desc=f"D={dim} batch={b}", disable=not policies.progress):
            sec, calls = time_protect(mech, x, min_seconds=cfg["min_seconds"])
            vps = b / sec
            row = {
                "kind": "protect",
                "mechanism": name,
                **{f"param_{k}": v for k, v in params.items()},
                "dim": dim,
                "batch_size": b,
                "vectors_per_s": vps,
                "latency_ms": 1e3 * sec,
                "calls": calls,
                "perturbation_norm": perturbation_norm(x, mech.protect(x)),
            }
            if dim == 384:
                row["overhead_vs_encoding"] = encode_vps / vps  # protect time / encode time per vector
            if name == "textcrafter":
                row["policy"] = tc_note
                row["policy_flops_per_vector"] = flops["total_flops_approx"]
            if b == max(cfg["batches"]):
                row["tracemalloc_peak_mib"] = peak_tracemalloc(mech, x)
            rows.append(row)
    return rows, flops


def measure_fit(policies: PolicySource, *, steps: int, rng: np.random.Generator) -> dict[str, Any]:
    """The time of a quick policy fit (the calibration is cached; training is timed), as the ``fit`` row.

    The smoke size fits on a synthetic calibration: it checks the plumbing in seconds.
    """
    seed = policies.seed
    if policies.size == "smoke":
        base = untrained_textcrafter(384, seed=seed)
        cal = Calibration(
            encoder=policies.encoder,
            pii=base.pii,
            prior=base.prior,
            embeddings=unit_vectors(rng, 256, 384),
            provenance={"corpus": "synthetic", "calibration_seconds": 0.0},
        )
    else:
        cal = policies.at_size("quick").calibration()
    training = PolicyTrainingConfig(steps=steps, batch_size=128, eval_every=10, seed=seed)
    torch.manual_seed(seed)
    with Timer() as t_fit:
        fitted = fit_textcrafter(
            eps=2.5, calibration=cal, training=training, seed=seed, progress=policies.progress, log=None
        )
    rep = fitted.training_report
    print(f"[speed] quick fit: {t_fit.seconds:.1f}s ({rep.steps_run} steps)", flush=True)
    return {
        "kind": "fit",
        "mechanism": "textcrafter",
        "param_eps": 2.5,
        "dim": 384,
        "fit_seconds": t_fit.seconds,
        "training_seconds": rep.seconds,
        "steps_run": rep.steps_run,
        "batch_size": 128,
        "n_calibration": int(cal.embeddings.shape[0]),
        "calibration_seconds_recorded": cal.provenance.get("calibration_seconds"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = base_parser(SCRIPT, __doc__)
    ap.add_argument("--encode-batch", type=int, default=64, help="encoder batch size")
    args = ap.parse_args(argv)
    size = resolve_size(args)
    data_dir = resolve_data_or_none(args.data_dir)
    if data_dir is None:
        return 2
    cfg = SIZES[size]
    set_threads()
    t_all = time.perf_counter()
    encoder = bundled_minilm()
    policies = PolicySource.from_args(args, size=size, encoder=encoder, data_dir=data_dir)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

    # Encoding throughput on real sentences (same process, same machine state).
    texts, source = encode_texts(data_dir, cfg["n_encode"])
    enc_row = measure_encoding(encoder, texts, batch_size=args.encode_batch, dataset=source)
    enc_vps, mean_tokens = enc_row["vectors_per_s"], enc_row["mean_tokens"]
    print(
        f"[speed] encoding: {enc_vps:.1f} sentences/s (batch {args.encode_batch}, {mean_tokens:.1f} tokens)", flush=True
    )
    rows: list[dict[str, Any]] = [enc_row]
    flops: dict[int, dict[str, int]] = {}
    rng = np.random.default_rng(args.seed)
    for dim in cfg["dims"]:
        dim_rows, flops[dim] = measure_protect(dim, policies=policies, cfg=cfg, rng=rng, encode_vps=enc_vps)
        rows += dim_rows
    rows.append(measure_fit(policies, steps=cfg["fit_steps"], rng=rng))

    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    seconds = time.perf_counter() - t_all
    settings = {
        "dimensions": list(cfg["dims"]),
        "batch_sizes": list(cfg["batches"]),
        "min_seconds_per_point": cfg["min_seconds"],
        "timing": "median seconds per protect() call after one warm-up call, repeated for at least min_seconds",
        "encoding": {
            "texts": enc_row["dataset"],
            "n": len(texts),
            "batch_size": args.encode_batch,
            "mean_tokens": mean_tokens,
            "sentences_per_s": enc_vps,
        },
        "policy_flops": {str(k): v for k, v in flops.items()},
        "encoder_flops_per_token": encoder_flops_per_token(encoder),
        "peak_rss_mb": {"after_encoder_load": round(rss0, 1), "end": round(rss1, 1)},
        "attack_config": {"enabled": False},
        "runtime_seconds": round(seconds, 1),
    }
    meta = make_meta(SCRIPT, argv, size=size, seed=args.seed, encoder=encoder, **settings)
    md = render_markdown(rows, meta)
    jp, mp = write_results(NAME, size=size, meta=meta, rows=rows, markdown=md, out_dir=args.out_dir, tag=args.tag)
    print(f"[speed] wrote {jp}, {mp} in {seconds:.0f}s")
    return 0


def render_markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """Throughput tables per dimension, overhead ratios, fit time, memory and FLOPs."""
    enc = meta["encoding"]
    m = meta["machine"]
    parts = [
        f"# Protection speed ({meta['size']})",
        "",
        (
            f"Machine: {m['platform']}, {m['cpu_count']} CPUs ({m['torch_threads']} torch threads, load average "
            f"{m.get('load_avg_1m', '?')} at the end; the machine was shared, so absolute numbers are noisy), "
            f"torch {m['torch']}. Timing: {meta['timing']}. Command: `{meta['command']}`."
        ),
        "",
        (
            f"Encoding with {meta['encoder']}: **{enc['sentences_per_s']:.1f} sentences/s** ({enc['n']} {enc['texts']} "
            f"sentences, batch {enc['batch_size']}, mean {enc['mean_tokens']:.1f} WordPieces)."
        ),
        "",
    ]
    for dim in meta["dimensions"]:
        sel = [
            {**r, "vectors_per_s": round(r["vectors_per_s"])}
            for r in rows
            if r.get("kind") == "protect" and r["dim"] == dim
        ]
        cols = ["mechanism", "batch_size", "vectors_per_s", "latency_ms"]
        hdr = ["mechanism", "batch", "vectors/s", "ms/call"]
        if dim == 384:
            cols.append("overhead_vs_encoding")
            hdr.append("protect time / encode time")
        cols.append("tracemalloc_peak_mib")
        hdr.append("peak NumPy MiB (largest batch)")
        parts += [f"## D = {dim}", "", md_table(sel, cols, headers=hdr, digits=3), ""]
    fit = next(r for r in rows if r.get("kind") == "fit")
    parts += [
        "## Policy fit",
        "",
        (
            f"Quick fit (eps 2.5, {fit['steps_run']} REINFORCE steps of batch {fit['batch_size']} on "
            f"{fit['n_calibration']} calibration embeddings): **{fit['fit_seconds']:.1f} s** "
            f"(training {fit['training_seconds']:.1f} s). The eps-independent calibration (Presidio relabelling + "
            f"embedding) took {fmt(fit['calibration_seconds_recorded'], 1)} s when it was computed "
            "(cached afterwards)."
        ),
        "",
    ]
    parts += ["## Arithmetic cost", ""]
    for dim, f in meta["policy_flops"].items():
        parts.append(
            f"* D={dim}: policy forward = {f['matmul_macs']:,} MACs = {f['matmul_flops'] / 1e6:.2f} MFLOPs "
            f"per vector in matmuls (2 branches x [W_v, W_o, FFN up, FFN down, head], each D x D with the "
            f"default FFN width F = D: 10 D^2 MACs), plus ~{f['elementwise_flops_approx']:,} element-wise "
            "FLOPs (LayerNorms, GELU, projection)."
        )
    ept = meta["encoder_flops_per_token"]
    parts.append(
        f"* Encoder: ~{ept / 1e6:.1f} MFLOPs per token (2 x non-embedding parameters, attention "
        f"scores excluded) = ~{ept * enc['mean_tokens'] / 1e6:.0f} MFLOPs per sentence of "
        f"{enc['mean_tokens']:.0f} tokens, i.e. the D=384 policy costs "
        f"~{100 * meta['policy_flops']['384']['total_flops_approx'] / (ept * enc['mean_tokens']):.1f}% "
        "of encoding one such sentence."
    )
    parts += ["", f"Peak process RSS: {meta['peak_rss_mb']}."]
    return "\n".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
