"""Utility study: classification on protected embeddings, the paper's Table I utility columns
(``python -m benchmarks.utility``), and Table I collected across datasets
(``python -m benchmarks.utility.table1``)."""
