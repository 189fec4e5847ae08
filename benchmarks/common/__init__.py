"""What the benchmark studies share, by role (no module here imports a study).

* :mod:`.options` — the command line (sizes, data folder, output), threads and warnings;
* :mod:`.caches` — the cache folder, cache keys and cached clean embeddings;
* :mod:`.fitted_policies` — the calibration and the TextCrafter policies of each size, cached;
* :mod:`.grid` — the mechanism grid and the measured perturbation norm;
* :mod:`.attack_rows` — the attacks package's results as flat rows, with the floor;
* :mod:`.scifact` — the SciFact retrieval set: subsamples, FAISS indexes, NDCG@10, abstract sentences;
* :mod:`.reporting` — the script identity, the one metadata helper (``make_meta``), results files,
  tables and plots.
"""
