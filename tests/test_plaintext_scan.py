"""scan_for_plaintext finds every text and fragment wherever and however it was written, and nothing else."""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path

import pytest

from textcrafter_rag import sealing
from textcrafter_rag.sealing import Sealer, generate_key
from textcrafter_rag.testing import plaintext_scan, scan_for_plaintext, scanned_files
from textcrafter_rag.testing.plaintext_scan import plaintext_needles


def _noise(n: int, *, seed: int = 0) -> bytes:
    """Seeded "random" bytes: what a scan sees never depends on the run or on which tests ran before."""
    return random.Random(f"{seed}-{n}").randbytes(n)


TEXTS = [
    "Jane Doe lives at 12 Elm Street, Leeds.",
    "José Álvarez paid £40 with card 4111 1111.",
    "Call  Bob\nSmith on 555-0199 tomorrow.",
]


def test_needles_are_exact_substrings_with_their_separators() -> None:
    needles = plaintext_needles(TEXTS, fragment_words=3)
    assert (0, TEXTS[0], "text") in needles and (0, "Doe lives at", "fragment") in needles
    assert (2, "Call  Bob\nSmith", "fragment") in needles  # the text's own separators
    assert all(n in TEXTS[i] for i, n, _ in needles)
    assert len([n for n in needles if n[0] == 0]) == 1 + 6  # 8 words: the text and 6 fragments


def test_finds_texts_and_fragments_in_any_file_and_spelling(tmp_path: Path) -> None:
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    (nested / "blob.bin").write_bytes(_noise(50_000) + b"lives at 12 Elm" + _noise(99, seed=1))
    (tmp_path / "dump.json").write_text(json.dumps({"t": TEXTS[1]}), encoding="utf-8")  # ensure_ascii escapes
    (tmp_path / "docs.pkl").write_bytes(pickle.dumps({"x": TEXTS[2]}))
    hits = scan_for_plaintext([tmp_path], TEXTS)
    by_file = {h.path.name: h for h in hits}
    assert set(by_file) == {"blob.bin", "dump.json", "docs.pkl"}
    blob = [h for h in hits if h.path.name == "blob.bin"]
    assert {h.needle for h in blob} == {"lives at 12", "at 12 Elm"} and blob[0].offset == 50_000
    assert any(h.kind == "text" and h.encoding == "json-ascii" for h in hits if h.path.name == "dump.json")
    assert any(h.kind == "text" and h.text_index == 2 for h in hits if h.path.name == "docs.pkl")
    assert "blob.bin@50000" in str(blob[0])


def test_sealed_values_and_random_bytes_give_no_hit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Key and nonces from a seeded source, so the ciphertexts are the same every run. Single words
    # ("on", "12") turn up in any long enough base64 string by chance, so the finest check is 2-word runs.
    monkeypatch.setattr(sealing.os, "urandom", random.Random(7).randbytes)
    sealer = Sealer(generate_key())
    tokens = [sealer.seal(t, record_id=str(i)) for i, t in enumerate(TEXTS)]
    (tmp_path / "sealed.json").write_text(json.dumps(tokens), encoding="utf-8")
    (tmp_path / "noise.bin").write_bytes(_noise(1 << 20))
    assert scan_for_plaintext([tmp_path], TEXTS) == []
    assert scan_for_plaintext([tmp_path / "sealed.json"], TEXTS, fragment_words=2) == []


def test_a_hit_at_the_very_end_of_a_file(tmp_path: Path) -> None:
    (tmp_path / "end.txt").write_bytes(b"\x00" * 10 + TEXTS[0].encode())
    hits = scan_for_plaintext([tmp_path], TEXTS)
    assert any(h.kind == "text" and h.offset == 10 for h in hits)
    assert any(h.needle == "Elm Street, Leeds." and h.offset == 10 + 21 for h in hits)  # the last one, at EOF


def test_a_vacuous_scan_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no file"):
        scan_for_plaintext([tmp_path], TEXTS)
    with pytest.raises(FileNotFoundError):
        scan_for_plaintext([tmp_path / "missing"], TEXTS)
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(ValueError, match="no texts"):
        scan_for_plaintext([tmp_path], [])
    with pytest.raises(ValueError, match="empty"):
        scan_for_plaintext([tmp_path], ["  "])
    assert scanned_files([tmp_path]) == [tmp_path / "f"]


def test_hits_across_chunk_boundaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plaintext_scan, "_CHUNK", 64)  # many small vectorised steps
    data = bytearray(_noise(1000))
    for start in (60, 500, 1000 - len(TEXTS[0])):  # straddling a step, inside one, at the end of the file
        data[start : start + len(TEXTS[0])] = TEXTS[0].encode()
        (tmp_path / f"at{start}.bin").write_bytes(bytes(data))
        data = bytearray(_noise(1000))
    hits = [h for h in scan_for_plaintext([tmp_path], TEXTS) if h.kind == "text"]
    assert sorted((h.path.name, h.offset) for h in hits) == sorted(
        (f"at{s}.bin", s) for s in (60, 500, 1000 - len(TEXTS[0]))
    )
