"""Speed and scale study: protection throughput and fit time (``python -m benchmarks.speed``), Ray Data
throughput (``python -m benchmarks.speed.ray_throughput``), the peak memory of ``textcrafter protect``
(``python -m benchmarks.speed.streaming_memory``) and the zero-configuration cost
(``python -m benchmarks.speed.autofit``)."""
