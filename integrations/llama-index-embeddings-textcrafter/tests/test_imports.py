import subprocess
import sys

from llama_index.embeddings import textcrafter

from llama_index.embeddings.textcrafter import __all__

EXPECTED_ALL = [
    "ProtectedEmbedding",
    "BypassedCacheWarning",
    "ReportedVectorsWarning",
    "SealedEmbedding",
    "SealedVectorStore",
    "SealedKVStore",
    "sealed_storage_context",
    "SingleStageSearch",
    "StoreIndexSearch",
    "TwoStageSearch",
    "AppIndexSearch",
]


def test_all_imports() -> None:
    assert sorted(EXPECTED_ALL) == sorted(__all__)
    assert all(getattr(textcrafter, name) is not None for name in __all__)  # the lazy names resolve


_IMPORT_WARNINGS = """
import warnings
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    import llama_index.embeddings.textcrafter
ours = [f"{w.category.__name__}: {w.message}" for w in seen if w.category.__module__.startswith("textcrafter_rag")
        or "textcrafter" in w.filename]
assert not ours, ours
"""


def test_importing_the_package_warns_nothing() -> None:
    """A fresh interpreter imports it and records every warning: none is the library's (it once built
    AppIndexSearch() at import, whose single-process warning then reached every user)."""
    done = subprocess.run([sys.executable, "-c", _IMPORT_WARNINGS], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
