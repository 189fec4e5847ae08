"""benchmarks/sealing_padding.py: its length model matches real tokens, and a smoke run writes its results."""

from __future__ import annotations

import json

from benchmarks import sealing_padding
from textcrafter_rag.sealing import TEXT_MIN_BYTES, VALUE_MIN_BYTES, Sealer, generate_key


def test_the_length_model_is_the_sealers() -> None:
    s = Sealer(generate_key())
    shipped_text = sealing_padding.size_rules(TEXT_MIN_BYTES)[f"powers of 2 from {TEXT_MIN_BYTES} (shipped)"]
    shipped_value = sealing_padding.size_rules(VALUE_MIN_BYTES)[f"powers of 2 from {VALUE_MIN_BYTES} (shipped)"]
    for n in (0, 1, 63, 64, 254, 255, 256, 257, 1000, 4095, 4096):
        text = "x" * n
        assert len(s.seal(text, record_id="r")) == sealing_padding.token_bytes(shipped_text(n + 1))
        plain = len(json.dumps(text))
        assert len(s.seal_json(text, record_id="r", field="f")) == sealing_padding.token_bytes(shipped_value(plain + 1))


def test_smoke_run_writes_every_section(tmp_path) -> None:
    assert sealing_padding.main(["--smoke", "--n", "20", "--out-dir", str(tmp_path), "--no-progress"]) == 0
    data = json.loads((tmp_path / "sealing_padding_smoke.json").read_text())
    kinds = {r["kind"] for r in data["rows"]}
    assert kinds == {"text", "metadata", "throughput"}
    shipped = [r for r in data["rows"] if r["kind"] == "metadata" and "shipped" in r["rule"]]
    assert shipped and all(r["distinct_lengths"] == 1 for r in shipped)  # every metadata value: one token length
    assert "## Throughput" in (tmp_path / "sealing_padding_smoke.md").read_text()
