from langchain_textcrafter import __all__

EXPECTED_ALL = [
    "ProtectedEmbeddings",
    "RawVectorCacheWarning",
    "SealedVectorStore",
    "SealError",
    "MissingPolicyError",
    "FingerprintMismatch",
    "__version__",
    "SingleStageSearch",
    "StoreIndexSearch",
    "TwoStageSearch",
    "AppIndexSearch",
]


def test_all_imports() -> None:
    assert sorted(EXPECTED_ALL) == sorted(__all__)
