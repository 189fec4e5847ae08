"""Sealed search (issues 29 and 30): every mode against every store-side attacker, and at a million records.

Modes: ``none`` (clean vectors in the store), candidates without the rotation (the previous release), the
shipped candidates (rotation + noise 2.0 / 0.5; rounds to an expected recall of 0.95, at most 2,000 records, in
the scale grid, with fixed fetch_k rows beside it) and the app-side index (PQ codes in the app,
keyed random vectors in the store). The ``battery`` part attacks what the store holds with templated patient
notes: attribute guessing (stored notes and stored queries), membership and the access pattern, by the thief,
pair holders (400, 2,000, 5,000 known pairs), inserters (20 and 200 texts of their choice) and the key holder
(the bound). The ``scale`` part grows SciFact with cluster-preserving fitted distractors to 1,000,000 records:
NDCG@10 ratio to clean, records opened, in-process latency and bytes per record per mode. The report ends in a
verdict table against both issues' targets. Each part's rows are cached, so a rerun measures only what is missing.

Usage::

    python -m benchmarks.sealed_search                       # both parts, full size (~25 min once SciFact is embedded)
    python -m benchmarks.sealed_search --parts battery       # only the battery (the scale rows from the part cache)
    python -m benchmarks.sealed_search --gaussian            # also one-Gaussian distractors at the largest size
    python -m benchmarks.sealed_search --quick               # writes sealed_search_quick.*
"""
