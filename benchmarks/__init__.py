"""Benchmarks of textcrafter-rag: run each script from the repository root as ``python -m benchmarks.NAME``.

The scripts (``retrieval``, ``utility``, ``privacy``, ``attack_strength``, ``speed``,
``streaming_memory``, ``ray_throughput``, ``table1``, ``audit_example``) share, by role:

* :mod:`.options` — the command line (sizes, data folder, output), threads and warnings;
* :mod:`.caches` — the cache folder, cache keys and cached clean embeddings;
* :mod:`.fitted_policies` — the calibration and the TextCrafter policies of each size, cached;
* :mod:`.grid` — the defense grid and the measured perturbation norm;
* :mod:`.attack_rows` — the attacks package's results as flat rows, with the floor;
* :mod:`.reporting` — metadata, results files, tables and plots.

Benchmarks run offline: Hugging Face models come from the local cache (``HF_HUB_OFFLINE``, set here
before any script imports a model library).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
