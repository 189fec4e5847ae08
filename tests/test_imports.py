"""The core's public names, pinned: adding or removing one is a deliberate, reviewed change."""

from textcrafter_rag import __all__

EXPECTED_ALL = [
    "Protector",
    "ProtectionOptions",
    "TextCrafter",
    "fit_textcrafter",
    "Mechanism",
    "NoDefense",
    "Shuffle",
    "GaussianNoise",
    "LDPGaussian",
    "Purkayastha",
    "from_spec",
    "resolve_mechanism",
    "resolve_policy",
    "Encoder",
    "as_encoder",
    "bundled_minilm",
    "SecretKey",
    "generate_key",
    "KeyedRotation",
    "TenantKey",
    "SingleStageSearch",
    "StoreIndexSearch",
    "TwoStageSearch",
    "AppIndexSearch",
    "TextcrafterError",
    "ArtifactError",
    "FingerprintMismatch",
    "MissingPolicyError",
    "VectorFileError",
    "__version__",
]


def test_all_imports() -> None:
    assert sorted(EXPECTED_ALL) == sorted(__all__)


EXPECTED_MECHANISMS = [
    "Mechanism",
    "NoDefense",
    "Shuffle",
    "GaussianNoise",
    "LDPGaussian",
    "Purkayastha",
    "analytic_gaussian_sigma",
    "SpectralNoise",
    "SpectralConfig",
    "fit_spectral_noise",
    "water_fill",
    "NullspaceNoise",
    "NullspaceConfig",
    "fit_nullspace_noise",
]


def test_mechanisms_all() -> None:
    from textcrafter_rag import mechanisms

    assert sorted(EXPECTED_MECHANISMS) == sorted(mechanisms.__all__)
