"""How many records a query of the store-held index opens, and how many PQ codes it scans, by the store's size.

Past a few million records PQ's order puts fewer of a query's true neighbours among the first hundred records it
ranks, so a query must scan more lists and open more records to keep its quality; below a million, fewer opened
records keep it, and each record opened is one more read from the store. :class:`~.store_index.StoreIndexSearch` leaves
``open_k`` and ``scan_codes`` unset by default, and each search takes them from :data:`BY_SIZE` for the records
the index then holds; a value set in the options is used as given, at every size.
"""

from __future__ import annotations

__all__ = ["BY_SIZE", "OPEN_K_MOST", "SCAN_CODES", "sized"]

#: PQ codes a query scans once trained, up to three million records (whole lists, nearest first).
SCAN_CODES = 262_144
#: Rows of (records held at most, records opened, codes scanned): a search takes the first row whose bound the
#: index does not pass. Chosen on SciFact's 809 train queries, never on the 300 reported test queries, from the
#: sweeps of ``benchmarks/results/store_index_scale_{20k,200k,3m,10m}_train_sweep.md``, ``_1m_train.md``,
#: ``_10m_train_scan.md`` and ``_{20k,30k,50k}_train_scan*.md``: at the sizes each row covers, the fewest records
#: opened that kept 0.99 of clean NDCG@10, then the fewest codes scanned that kept what scanning more did (the
#: comments give it at the sizes measured). Up to 262,144 records the whole scan probes every list, and each list
#: probed has a cost of its own: fewer codes scanned, fewer lists probed, a faster search.
BY_SIZE: tuple[tuple[int, int, int], ...] = (
    (30_000, 25, 8_192),  # 0.998 at 20,000 records, as the whole scan; 0.992 at 30,000, as twice the codes
    (100_000, 40, SCAN_CODES),  # 0.992 at 50,000 (25 gave 0.989)
    (1_000_000, 60, SCAN_CODES),  # 0.996 at 200,000, 1.001 at 1,000,000
    (3_000_000, 150, SCAN_CODES),  # 0.996 at 3,000,000 (100 gave 0.985; 4x the scan 1.000, at 4x its time)
    (1 << 62, 200, 1_048_576),  # 0.994 at 10,000,000 (the default scan gave 0.966)
)
#: The most records a query opens by :data:`BY_SIZE`: the cap on ``k`` where ``open_k`` is unset.
OPEN_K_MOST = max(opened for _, opened, _ in BY_SIZE)


def sized(n_records: int) -> tuple[int, int]:
    """The records a query opens and the codes it scans, by :data:`BY_SIZE`, in an index of ``n_records``."""
    return next((opened, codes) for bound, opened, codes in BY_SIZE if n_records <= bound)
