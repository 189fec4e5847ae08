"""Privacy study: both attackers at the shipped settings (``python -m benchmarks.privacy``), privacy at
equal retrieval quality (``python -m benchmarks.privacy.frontier``), the attacker's strength on
undefended vectors (``python -m benchmarks.privacy.attack_strength``) and the example audit report
(``python -m benchmarks.privacy.audit_example``)."""
