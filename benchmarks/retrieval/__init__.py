"""Retrieval study: SciFact retrieval quality under protection (``python -m benchmarks.retrieval``) and
the privacy of the query vectors the store host sees (``python -m benchmarks.retrieval.queries``)."""
