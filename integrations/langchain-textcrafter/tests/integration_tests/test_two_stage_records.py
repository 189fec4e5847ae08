"""Exact-record lookups over near-identical notes: what RAG over records needs (issue 21's new-user case).

Forty patient notes that differ only in a name suffix, a birth date and a ward, sealed with the bundled
MiniLM. Two-stage search ranks the candidates by the sealed clean vectors, so the query that names one
patient returns her note first, while the store only ever received noised vectors.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_textcrafter import ProtectedEmbeddings, SealedVectorStore
from textcrafter_rag.sealed.candidates import TwoStageSearch

KEY = "vf0oZ0Hc8Ybn7v1u1oU8mJk0m6Ca0XxyRr2H3J4cQdE="  # fixed: the candidate noise, and so this test, is deterministic
NAMES = ["Olivia Brennan", "Oliver Brennan", "Olivia Brenner", "Olive Brennan"]


def _notes() -> list[str]:
    return [
        f"Patient {NAMES[i % 4]}-{i // 4 + 1}, born 19{50 + i}-0{1 + i % 9}-{10 + i % 18}, was treated for "
        f"pneumonia at Riverside ward {i // 4 + 1}."
        for i in range(40)
    ]


def test_a_named_patient_comes_first_from_a_store_that_only_saw_noise(minilm: Any) -> None:
    notes = _notes()
    embeddings = ProtectedEmbeddings(base=minilm)
    search = TwoStageSearch(fetch_k=41)  # the whole store and its marker: the ranking is the clean vectors' exactly
    store = SealedVectorStore(InMemoryVectorStore, embedding=embeddings, key=KEY, fetch_k=search)
    ids = store.add_texts(notes)
    target = notes.index(next(n for n in notes if n.startswith("Patient Olivia Brennan-7,")))
    hits = store.similarity_search_with_score("Olivia Brennan-7 pneumonia Riverside ward 7", k=3)
    assert hits[0][0].page_content == notes[target] and hits[0][0].id == ids[target]
    query = np.asarray(minilm.encode(["Olivia Brennan-7 pneumonia Riverside ward 7"]))[0]
    exact = np.argsort(-(np.asarray(minilm.encode(notes)) @ query))[:3]
    assert [h.id for h, _ in hits] == [ids[i] for i in exact]  # the clean vectors' own ranking
    clean = np.asarray(minilm.encode(notes))
    stored = np.asarray([store.store.store[i]["vector"] for i in store.store_ids(ids)])
    cos = np.sum(clean * stored, axis=1) / np.linalg.norm(clean, axis=1) / np.linalg.norm(stored, axis=1)
    assert cos.max() < 0.8  # every stored vector is far from its note's clean vector (r = 1.5: cos ~ 0.55)
