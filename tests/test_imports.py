"""The core's public names, pinned: adding or removing one is a deliberate, reviewed change."""

from textcrafter_rag import __all__

EXPECTED_ALL = [
    "Protector",
    "TextCrafter",
    "fit_textcrafter",
    "Mechanism",
    "NoDefense",
    "Shuffle",
    "GaussianNoise",
    "LDPGaussian",
    "Purkayastha",
    "from_spec",
    "resolve_policy",
    "Encoder",
    "as_encoder",
    "bundled_minilm",
    "register_encoder_adapter",
    "TextcrafterError",
    "ArtifactError",
    "FingerprintMismatch",
    "MissingPolicyError",
    "VectorFileError",
    "__version__",
]


def test_all_imports() -> None:
    assert sorted(EXPECTED_ALL) == sorted(__all__)
