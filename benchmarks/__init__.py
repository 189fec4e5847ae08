"""Benchmarks of textcrafter-rag, a folder per study; run each script from the repository root.

Scripts (each ``main(argv) -> int``; writes ``benchmarks/results/<name>.*`` by default):

* retrieval — ``python -m benchmarks.retrieval`` (SciFact retrieval quality under protection),
  ``python -m benchmarks.retrieval.queries`` (what an inverter recovers from the query vectors);
* utility — ``python -m benchmarks.utility`` (classification accuracy, the paper's Table I utility
  columns), ``python -m benchmarks.utility.table1`` (Table I collected from the privacy runs);
* privacy — ``python -m benchmarks.privacy`` (both attackers at the shipped settings),
  ``python -m benchmarks.privacy.frontier`` (privacy at equal retrieval quality),
  ``python -m benchmarks.privacy.attack_strength`` (the attacker on undefended vectors),
  ``python -m benchmarks.privacy.audit_example`` (the example ``textcrafter audit`` report);
* threat_models — ``python -m benchmarks.threat_models`` (which protection survives which attacker);
* speed — ``python -m benchmarks.speed`` (protection throughput and fit time),
  ``python -m benchmarks.speed.ray_throughput`` (Ray Data), ``python -m benchmarks.speed.streaming_memory``
  (peak memory of ``textcrafter protect``), ``python -m benchmarks.speed.autofit`` (zero-configuration cost),
  ``python -m benchmarks.speed.install_size`` (the lean install against the full one);
* two_stage — ``python -m benchmarks.two_stage`` (two-stage sealed search: retrieval, store size, repeated
  releases, privacy, cost);
* sealed_search — ``python -m benchmarks.sealed_search`` (every sealed-search mode against every store-side
  attacker, and at 1,000,000 records: the verdict of issues 29 and 30),
  ``python -m benchmarks.sealed_search.store_index`` (the store-held index: latency on Qdrant local and a
  Chroma server, open time, memory per record), ``python -m benchmarks.sealed_search.bulk_load`` (a Ray Data
  bulk load into the store-held index on a Chroma server: records per second, then a fresh process's check),
  ``python -m benchmarks.sealed_search.llama_index_ndcg`` (SciFact NDCG@10 and latency through LlamaIndex's
  default sealed store on Qdrant local, beside a plain LlamaIndex store),
  ``python -m benchmarks.sealed_search.store_index_scale`` (the store-held index's in-memory index at 10,000,000
  records: NDCG@10 against clean, records opened, app work, bytes a record),
  ``python -m benchmarks.sealed_search.store_index_reads`` (the default's search on a Chroma server, part by part:
  the in-memory scan, the read by id against a plain store's query and read, and the same records packed),
  ``python -m benchmarks.sealed_search.store_index_stall`` (how long a write waits for a compaction, as one
  store-held index grows to 10,000,000 records),
  ``python -m benchmarks.sealed_search.access_patterns`` (what the store learns from reads and writes, with and
  without the local replica, and the replica's costs, in process and on a Chroma server with a writer in another
  process);
* sealing_padding — ``python -m benchmarks.sealing_padding`` (what padding sealed values costs in bytes and time,
  and what token lengths still tell);
* gpu_inverter — ``python -m benchmarks.gpu_inverter.prepare`` (here) and ``python -m benchmarks.gpu_inverter``
  (``train`` on a GPU machine, ``unpack`` here), then ``python -m benchmarks.gpu_inverter.record`` (the results
  files, here): the stronger attacker, a device tool rather than a results script;

A study's main script is its package's ``__main__``; the other modules of a study folder that have
no ``main`` are its helpers (reports, cells, candidates). What several studies share is in
:mod:`benchmarks.common`. Benchmarks run offline: Hugging Face models come from the local cache
(``HF_HUB_OFFLINE``, set here before any script imports a model library).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
