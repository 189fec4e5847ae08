"""The quickstart (`textcrafter demo`) shows the default sealed store and what an attacker gets from it."""

from __future__ import annotations

import re

from langchain_textcrafter.demo import run_demo


def test_the_demo_shows_the_sealed_store_retrieval_and_the_guessing_attacker(capsys) -> None:
    assert run_demo(n_docs=50, queries=["football results"]) == 0
    out = capsys.readouterr().out
    assert "SealedVectorStore(InMemoryVectorStore" in out
    assert "Plaintext in the whole store: 0 of 50 articles" in out  # what the store holds, printed and scanned
    assert re.search(r"text +tcsealed:v2:", out) and re.search(r"headline +tcsealed:v2:", out)
    recall = dict(
        re.findall(r"(plain store, clean vectors|sealed store \(default\)) +Recall@1 [\d.]+ +Recall@10 ([\d.]+)", out)
    )
    assert float(recall["sealed store (default)"]) >= float(recall["plain store, clean vectors"]) - 0.05
    found = dict(
        re.findall(r"(plain store \(clean vectors\)|sealed store \(default\)) +its record ranked first +([\d.]+)%", out)
    )
    assert float(found["plain store (clean vectors)"]) > 90 and float(found["sealed store (default)"]) < 20
    assert "Query: 'football results'" in out
