"""The privacy frontier (``python -m benchmarks.privacy.frontier``): each mechanism set to a fixed share of
clean NDCG@10, then attacked. Helpers: :mod:`.candidates` (the mechanism registry), :mod:`.search`
(the NDCG@10 bisection), :mod:`.attacks` (victim corpora, attack rows), :mod:`.pii_sentences`
(synthetic PII notes), :mod:`.report` (the report and its verdicts)."""
