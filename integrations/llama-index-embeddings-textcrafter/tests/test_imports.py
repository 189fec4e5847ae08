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
    "StoreIndexSearch",
    "TwoStageSearch",
    "AppIndexSearch",
]


def test_all_imports() -> None:
    assert sorted(EXPECTED_ALL) == sorted(__all__)
    assert all(getattr(textcrafter, name) is not None for name in __all__)  # the lazy names resolve
