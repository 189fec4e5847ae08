"""Threat-model study (``python -m benchmarks.threat_models``): which protection survives which attacker.
Helpers: :mod:`.releases` (the protected stores), :mod:`.cells` (one attack per cell), :mod:`.report`."""
