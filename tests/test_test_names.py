"""Test files are named for the behaviour they check, and the documents that cite them name files that exist.

A file named after the development round that wrote it ("round3") says nothing to whoever looks for the tests of
a behaviour, and a renamed file leaves the tables of SECURITY.md pointing at nothing. Static checks over names.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEST_ROOTS = (ROOT / "tests", *sorted((ROOT / "integrations").glob("*/tests")))
#: A development round or iteration in a file name (``round3``, ``round_2``, ``iter4``); "rounds" of candidate
#: search (a product concept: ``test_candidate_rounds.py``) carry no number and are not matched.
ROUND_NAME = re.compile(r"(?:^|_)(?:round|iter(?:ation)?|phase|sprint)_?\d+(?:_|$)", re.IGNORECASE)
#: The pages that cite test files by path or name.
CITING = [ROOT / "SECURITY.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CITED_TEST = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*test_\w+\.py)")


def _test_files() -> list[Path]:
    return [p for root in TEST_ROOTS for p in sorted(root.rglob("test_*.py")) if ".venv" not in p.parts]


def test_no_test_file_is_named_after_a_development_round() -> None:
    named = [p.relative_to(ROOT).as_posix() for p in _test_files() if ROUND_NAME.search(p.stem)]
    assert not named, f"test files named after a development round, not a behaviour: {named}"


def test_the_round_check_catches_rounds_and_leaves_candidate_rounds_alone() -> None:
    for stem in ("test_security_round3", "test_sealed_round3_unit", "test_x_round_2", "test_iter4_fix"):
        assert ROUND_NAME.search(stem), stem
    for stem in ("test_candidate_rounds", "test_sealed_rounds_unit", "test_llama_index_textcrafter_rounds"):
        assert not ROUND_NAME.search(stem), stem


@pytest.mark.parametrize("page", CITING, ids=[p.relative_to(ROOT).as_posix() for p in CITING])
def test_every_test_file_a_document_cites_exists(page: Path) -> None:
    names = {p.name for p in _test_files()}
    paths = {p.relative_to(ROOT).as_posix() for p in _test_files()}
    missing = []
    for cited in CITED_TEST.findall(page.read_text(encoding="utf-8")):
        found = cited in paths or any(p.endswith("/" + cited) for p in paths) if "/" in cited else cited in names
        if not found:
            missing.append(cited)
    assert not missing, f"{page.relative_to(ROOT)} cites test files that do not exist: {sorted(set(missing))}"
