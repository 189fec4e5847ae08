"""``python -m benchmarks.speed.autofit --smoke``: a first construction fits and caches, the second loads."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.speed import autofit


def test_autofit_smoke_fits_once_then_loads(tmp_path: Path) -> None:
    assert autofit.main(["--smoke", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "autofit_smoke.json").read_text())
    (row,) = data["rows"]
    assert row["encoder"] == "benchmark/minilm-renamed" and row["dimension"] == 384
    assert row["texts_encoded"] == autofit.SMOKE.texts_encoded
    assert 0 < row["second_construction_s"] < row["first_construction_s"]  # loading is cheaper than fitting
    assert row["norm_scale"] == 1.0  # MiniLM is unit-norm
    assert data["meta"]["command"] == "python -m benchmarks.speed.autofit --smoke --out " + str(tmp_path)
