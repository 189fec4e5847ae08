"""Two-stage sealed search (issue 21): fetch candidates by heavily noised vectors, re-rank by sealed clean ones.

Measures what the sealed stores' two-stage search ships: end-to-end NDCG@10 and recall@fetch_k on SciFact per
candidate mechanism, strength, query noise and ``fetch_k`` (``utility``); the same with the store grown by
distractors to ~50,000 and ~500,000 records (``scale``); the averaging attack on re-protected records
(``averaging``); the adaptive inverter on the stored candidate vectors and on the query vectors (``privacy``);
bytes per record and the open + re-rank latency (``cost``). Each part's rows are cached, so a rerun measures only
what is missing; the results are rewritten after every part.

Usage::

    python -m benchmarks.two_stage                                # every part, full size
    python -m benchmarks.two_stage --parts utility scale          # only these (others from the part cache)
    python -m benchmarks.two_stage --parts privacy --max-minutes 60   # stop starting attacks after 60 min
    python -m benchmarks.two_stage --quick                        # writes two_stage_quick.*
"""
