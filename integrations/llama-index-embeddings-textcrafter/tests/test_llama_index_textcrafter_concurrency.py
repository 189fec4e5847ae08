"""8 threads and 8 async tasks share one ProtectedEmbedding: results stay correct and independent."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from llama_index.embeddings.textcrafter import ProtectedEmbedding
from textcrafter_rag import GaussianNoise


def test_threads_and_tasks(fake_base) -> None:
    emb = ProtectedEmbedding(base=fake_base, policy=GaussianNoise(s=1e-3, secure_mode=True), secure_mode=True)
    texts = [f"node {i}" for i in range(12)]
    raw = np.asarray([fake_base.doc(t) for t in texts])
    with ThreadPoolExecutor(max_workers=8) as pool:
        threaded = list(pool.map(lambda _: emb.get_text_embedding_batch(texts), range(8)))

    async def tasks():
        return await asyncio.gather(*(emb.aget_text_embedding_batch(texts) for _ in range(8)))

    outs = threaded + list(asyncio.run(tasks()))
    for out in outs:
        arr = np.asarray(out)
        assert np.array_equal(np.argmin(((arr[:, None] - raw[None]) ** 2).sum(-1), axis=1), np.arange(len(raw)))
        assert not np.any(np.all(arr == raw, axis=1))
    assert len({np.asarray(o[0]).tobytes() for o in outs}) == len(outs)
