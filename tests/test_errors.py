"""Every deliberate error derives from TextcrafterError (and ValueError/TypeError), and no message holds user data.

Issue 23, item 5: the public API (``textcrafter_rag.__all__``, both integrations' constructors and
main methods) is walked with bad inputs. A new public name must be added to :data:`CASES` (or to
:data:`NO_BAD_INPUT` with the reason), so the walk cannot silently fall behind the API.
Issue 24, items 3, 5 and 6: keys, data values and unprotectable rows in messages.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import textcrafter_rag
from textcrafter_rag import (
    AppIndexSearch,
    Encoder,
    GaussianNoise,
    KeyedRotation,
    LDPGaussian,
    NoDefense,
    ProtectionOptions,
    Protector,
    Purkayastha,
    SecretKey,
    Shuffle,
    SingleStageSearch,
    StoreIndexSearch,
    TenantKey,
    TextCrafter,
    TextcrafterError,
    TwoStageSearch,
    as_encoder,
    fit_textcrafter,
    from_spec,
    resolve_mechanism,
    resolve_policy,
)
from textcrafter_rag.errors import InvalidInputError, InvalidTypeError, ProtectionError
from textcrafter_rag.sealed.core import SealedSearch
from textcrafter_rag.sealing import load_key

KEY = base64.urlsafe_b64encode(bytes(range(3, 35))).decode()  # fixed: never starts with "-" (argparse)
SECRET = "Jane Doe 4111-1111-1111-1111"  # a data value that must never reach a message


def _tiny_encoder() -> Encoder:
    return Encoder(lambda texts: np.ones((len(texts), 4)) + np.arange(4), model_id="tiny")


def _nan_rows() -> np.ndarray:
    x = np.ones((3, 4))
    x[2, 1] = np.nan
    return x


#: Public name -> bad calls, each expected to raise a TextcrafterError that is also a ValueError or TypeError.
CASES: dict[str, list[Callable[[], Any]]] = {
    "Protector": [
        lambda: Protector(mechanism=NoDefense(), chunk_size=0),
        lambda: Protector(mechanism=NoDefense(), tenant="acme"),
        lambda: Protector(mechanism=NoDefense(), key="not a key"),
        lambda: Protector(mechanism=NoDefense(), key=KEY, tenant=3),
        lambda: Protector(mechanism=42),
        lambda: Protector(mechanism="gaussian:s=0.01:bogus"),
        lambda: Protector(mechanism=NoDefense()).protect(_nan_rows()),
        lambda: Protector(mechanism=NoDefense()).protect(np.ones((2, 4), dtype=np.int64)),
        lambda: Protector(mechanism=NoDefense()).protect(np.ones((0, 4))),
        lambda: Protector(mechanism=NoDefense()).protect(np.ones(4)),
        lambda: Protector(mechanism=NoDefense()).embed_documents(["no encoder"]),
        lambda: Protector(base=_tiny_encoder(), mechanism=NoDefense()).embed_documents("a bare string"),
        lambda: Protector(base=_tiny_encoder(), mechanism=NoDefense()).embed_documents(["fine", "  "]),
        lambda: Protector(base=_tiny_encoder(), mechanism=NoDefense()).embed_query(3),
        lambda: Protector(base=_tiny_encoder(), mechanism=GaussianNoise(s=0.1)).protect(np.ones((1, 5))),
    ],
    "TextCrafter": [
        lambda: TextCrafter.load("/nonexistent/policy"),
        lambda: TextCrafter.load_shipped(eps=3.7),
    ],
    "fit_textcrafter": [lambda: fit_textcrafter(_tiny_encoder(), eps=-1.0, progress=False, log=None)],
    "Mechanism": [lambda: NoDefense().protect("not vectors")],
    "NoDefense": [lambda: NoDefense().protect(_nan_rows())],
    "Shuffle": [lambda: Shuffle().protect(np.zeros((2, 4)))],
    "GaussianNoise": [lambda: GaussianNoise(s=0), lambda: GaussianNoise(s=float("nan")), lambda: GaussianNoise(s="1")],
    "LDPGaussian": [lambda: LDPGaussian(epsilon=0), lambda: LDPGaussian(epsilon=1.0, delta=2.0)],
    "Purkayastha": [lambda: Purkayastha(epsilon=-1.0)],
    "SingleStageSearch": [
        lambda: SealedSearch(SecretKey(KEY), options=SingleStageSearch()).store_query(np.ones((1, 4))),
        lambda: SealedSearch(SecretKey(KEY), options="single"),  # type: ignore[arg-type]
    ],
    "StoreIndexSearch": [
        lambda: StoreIndexSearch(open_k=0),
        lambda: StoreIndexSearch(refresh_every=-1.0),
        lambda: StoreIndexSearch(compact_every=-1),
        lambda: StoreIndexSearch(replica="yes"),
        lambda: StoreIndexSearch(background_compaction="yes"),
    ],
    "TwoStageSearch": [lambda: TwoStageSearch(open_k=0), lambda: TwoStageSearch(recall=2.0)],
    "AppIndexSearch": [lambda: AppIndexSearch(open_k=0), lambda: AppIndexSearch(train_at=0)],
    "from_spec": [
        lambda: from_spec("bogus"),
        lambda: from_spec(""),
        lambda: from_spec(None),  # type: ignore[arg-type]
        lambda: from_spec("gaussian:s=abc"),
        lambda: from_spec("gaussian:q=1"),
        lambda: from_spec("gaussian:s"),
        lambda: from_spec("ldp:eps=-1"),
        lambda: from_spec("spectral:"),
        lambda: from_spec("textcrafter:/nonexistent/policy"),
    ],
    "resolve_mechanism": [
        lambda: resolve_mechanism(42, encoder=None),
        lambda: resolve_mechanism(GaussianNoise(s=0.1), encoder=None, secure_mode=True),
        lambda: resolve_mechanism("/nonexistent/policy", encoder=None),
        lambda: resolve_mechanism("gaussian:s=-1", encoder=None),
    ],
    "resolve_policy": [lambda: resolve_policy(42, encoder=None)],  # the deprecated name (warns, then raises)
    "ProtectionOptions": [
        lambda: ProtectionOptions(chunk_size=0),
        lambda: ProtectionOptions(tenant="acme"),
        lambda: ProtectionOptions(mechanism=42),
        lambda: ProtectionOptions(key="not a key"),
        lambda: ProtectionOptions.build(None, {"bogus": 1}),
    ],
    "Encoder": [
        lambda: _tiny_encoder().encode("a bare string"),
        lambda: _tiny_encoder().encode([]),
        lambda: Encoder(lambda texts: [["x"] * 4 for _ in texts], model_id="strings").encode(["a"]),
        lambda: Encoder(lambda texts: np.ones((len(texts) + 1, 4)), model_id="extra").encode(["a"]),
    ],
    "as_encoder": [lambda: as_encoder(42)],
    "SecretKey": [lambda: SecretKey("short"), lambda: SecretKey(b"\x00" * 31), lambda: SecretKey(123)],
    "KeyedRotation": [
        lambda: KeyedRotation(KEY, dim=0),
        lambda: KeyedRotation(KEY, dim=4.0),
        lambda: KeyedRotation(KEY, dim=4, tenant=1),
        lambda: KeyedRotation(KEY, dim=4).apply(np.ones((1, 3))),
        lambda: KeyedRotation(KEY, dim=4).rekey(np.ones((1, 4)), "not a rotation"),
    ],
    "TenantKey": [lambda: TenantKey(KEY, tenant=5), lambda: TenantKey.of(TenantKey(KEY, "a"), tenant="b")],
}

#: Public names that take no input that could be bad (or are only types), with the reason.
NO_BAD_INPUT = {
    "bundled_minilm": "its only option is the torch device, passed to sentence-transformers",
    "generate_key": "takes no input",
    "TextcrafterError": "an error class",
    "ArtifactError": "an error class",
    "FingerprintMismatch": "an error class",
    "MissingPolicyError": "an error class",
    "VectorFileError": "an error class",
    "__version__": "a string",
}


def test_every_public_name_is_walked() -> None:
    assert set(textcrafter_rag.__all__) == set(CASES) | set(NO_BAD_INPUT)


@pytest.mark.parametrize(
    ("name", "index"), [(name, i) for name, calls in CASES.items() for i in range(len(calls))], ids=str
)
def test_bad_input_raises_a_textcrafter_error(name: str, index: int) -> None:
    with pytest.raises(TextcrafterError) as info:
        CASES[name][index]()
    assert isinstance(info.value, (ValueError, TypeError)), type(info.value).__mro__


def test_the_three_named_in_issue_23_and_their_builtin_bases() -> None:
    with pytest.raises(InvalidInputError) as spec:
        from_spec("bogus")
    with pytest.raises(InvalidInputError) as chunk:
        Protector(mechanism=NoDefense(), chunk_size=0)
    with pytest.raises(InvalidInputError) as nan:
        Protector(mechanism=NoDefense()).protect(_nan_rows())
    assert all(isinstance(e.value, ValueError) for e in (spec, chunk, nan))
    with pytest.raises(InvalidTypeError) as typ:
        NoDefense().protect(np.ones((1, 4), dtype=np.int32))
    assert isinstance(typ.value, TypeError)


def test_a_base_encoder_returning_strings_names_no_value() -> None:
    """Issue 24.6: "could not convert string to float: '<the value>'" carried the encoder's output."""
    enc = Encoder(lambda texts: [[SECRET] * 4 for _ in texts], model_id="leaky")
    with pytest.raises(InvalidTypeError) as info:
        Protector(base=enc, mechanism=NoDefense()).embed_documents([SECRET])
    assert "Jane" not in str(info.value) and "4111" not in str(info.value)
    assert "could not convert" not in str(info.value) and str(len(SECRET)) not in str(info.value)
    ints = Encoder(lambda texts: [[1, 2, 3, 4] for _ in texts], model_id="int-lists")  # numbers as lists still work
    assert Protector(base=ints, mechanism=NoDefense()).embed_documents(["a"]).dtype == np.float32


def test_nan_and_bad_rows_are_named_never_shown() -> None:
    x = np.full((3, 4), 12345.678)
    x[1, 2] = np.nan
    with pytest.raises(InvalidInputError, match="row 1") as info:
        Protector(mechanism=NoDefense()).protect(x)
    assert "12345" not in str(info.value)


@pytest.mark.parametrize("mistake", ["env", "file"])
def test_a_key_passed_where_its_name_belongs_is_not_echoed(mistake: str) -> None:
    """Issue 24.3: "the environment variable <the key> holding the key is not set"."""
    raw = base64.urlsafe_b64decode(KEY + "=")
    with pytest.raises(TextcrafterError) as info:
        load_key(env=KEY) if mistake == "env" else load_key(KEY)
    message = str(info.value)
    assert KEY not in message and KEY.rstrip("=") not in message and raw.hex() not in message
    assert "looks like a key" in message
    assert isinstance(info.value, ValueError if mistake == "env" else FileNotFoundError)


def test_a_real_variable_or_file_name_is_still_shown(tmp_path) -> None:
    os.environ.pop("TEXTCRAFTER_TEST_UNSET_KEY", None)
    with pytest.raises(InvalidInputError, match="TEXTCRAFTER_TEST_UNSET_KEY"):
        load_key(env="TEXTCRAFTER_TEST_UNSET_KEY")
    with pytest.raises(FileNotFoundError, match=r"no-such\.key"):
        load_key(tmp_path / "no-such.key")


def test_the_cli_does_not_echo_a_key_given_to_key_env(tmp_path, capsys) -> None:
    from textcrafter_rag.cli import main

    src = tmp_path / "in.npy"
    np.save(src, np.ones((2, 384), dtype=np.float32))
    for option in ("--key-env", "--key-file"):
        code = main(["protect", "--input", str(src), "--output", str(tmp_path / "out.npy"), option, KEY])
        err = capsys.readouterr().err
        assert code != 0 and "looks like a key" in err and KEY not in err and KEY.rstrip("=") not in err


@pytest.mark.parametrize(
    "shape", ["/run/secrets/{}", "/run/secrets/{}.key", "secrets-{}", "{}_v2", "/keys/{}/current", "C:\\keys\\{}"]
)
def test_a_key_inside_a_path_or_name_is_never_printed(shape: str, tmp_path, capsys) -> None:
    """A key as part of a path (``--key-file /run/secrets/<KEY>``) was printed in full, by the API and the CLI.

    Only a name that decoded as a key as a whole was withheld; one that holds a key among other characters
    (a directory, an extension, a prefix) is withheld now too.
    """
    from textcrafter_rag.cli import main

    name = shape.format(KEY)
    pieces = (KEY.rstrip("="), KEY[:20], KEY[-21:-1], base64.urlsafe_b64decode(KEY).hex()[:16])

    def clean(message: str) -> bool:
        return not any(piece in message for piece in pieces)

    with pytest.raises(FileNotFoundError) as file_error:
        load_key(name)
    with pytest.raises(InvalidInputError) as env_error:
        load_key(env=name)
    for error in (file_error, env_error):
        assert clean(str(error.value)) and "looks like a key or holds one" in str(error.value)
    src = tmp_path / "in.npy"
    np.save(src, np.ones((2, 384), dtype=np.float32))
    out = str(tmp_path / "out.npy")
    for argv in (
        ["protect", "--input", str(src), "--output", out, "--key-file", name],
        ["protect", "--input", str(src), "--output", out, "--key-env", name],
        ["protect", "--input", name, "--output", out],  # any path an error names
    ):
        code = main(argv)
        captured = capsys.readouterr()
        assert code != 0 and clean(captured.err) and clean(captured.out)


@pytest.mark.parametrize(
    "mechanism",
    [
        lambda: TextCrafter.load_shipped(seed=0),
        lambda: GaussianNoise(s=0.01, seed=0),
        lambda: LDPGaussian(epsilon=4.0, seed=0),
        lambda: Purkayastha(epsilon=4.0, seed=0),
        lambda: Shuffle(seed=0),
        NoDefense,
    ],
    ids=["textcrafter", "gaussian", "ldp", "purkayastha", "shuffle", "none"],
)
@pytest.mark.parametrize("key", [None, KEY], ids=["plain", "keyed"])
@pytest.mark.parametrize("magnitude", [1e20, 1e30, 3e38])
@pytest.mark.filterwarnings("ignore::textcrafter_rag.randomness.SeedWarning")
def test_every_finite_row_is_protected_or_refused_by_name(mechanism, key, magnitude: float) -> None:
    """Issue 24.5: a finite row of 1e20 or more raised RuntimeError naming no row."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 384))
    x[2] = magnitude * np.sign(x[2])  # every coordinate at the magnitude: the hardest row for a norm
    protector = Protector(mechanism=mechanism(), key=key)
    refused: ProtectionError | None = None
    try:
        out = protector.protect(x)
    except ProtectionError as exc:  # refused: it must name the row, never a value
        refused = exc
    if refused is None:
        assert np.isfinite(out).all() and out.shape == x.shape
    else:
        message = str(refused)
        assert "row 2" in message and "nothing was released" in message
        assert "e+" not in message and str(int(magnitude)) not in message
        assert isinstance(refused, (TextcrafterError, ValueError))
