"""8 threads and 8 async tasks share one ProtectedEmbeddings: results stay correct and independent."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from langchain_textcrafter import ProtectedEmbeddings
from textcrafter_rag import GaussianNoise


def _check(outs: list[list[list[float]]], raw: np.ndarray) -> None:
    for out in outs:
        arr = np.asarray(out)
        # each row is its own text's vector plus small noise: no rows swapped between calls
        assert np.array_equal(np.argmin(((arr[:, None] - raw[None]) ** 2).sum(-1), axis=1), np.arange(len(raw)))
        assert not np.any(np.all(arr == raw, axis=1))
    firsts = {np.asarray(o[0]).tobytes() for o in outs}
    assert len(firsts) == len(outs)  # every call drew fresh noise


def test_threads_and_tasks(fake_base) -> None:
    emb = ProtectedEmbeddings(base=fake_base, policy=GaussianNoise(s=1e-3, secure_mode=True), secure_mode=True)
    texts = [f"document {i}" for i in range(12)]
    raw = np.asarray(fake_base.embed_documents(texts))
    with ThreadPoolExecutor(max_workers=8) as pool:
        threaded = list(pool.map(lambda _: emb.embed_documents(texts), range(8)))

    async def tasks():
        return await asyncio.gather(*(emb.aembed_documents(texts) for _ in range(8)))

    _check(threaded + list(asyncio.run(tasks())), raw)
