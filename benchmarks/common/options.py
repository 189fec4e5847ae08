"""The command line and process settings every benchmark shares: sizes, data folder, threads, warnings.

Each script has three sizes: the default ``full``, ``--quick`` (a few minutes on 2 cores) and
``--smoke`` (seconds, for the test suite); the smaller ones write ``<name>_quick.*`` /
``<name>_smoke.*`` so that they never overwrite the committed full results.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

from textcrafter_rag.data import DatasetNotFoundError, resolve_data_dir
from textcrafter_rag.randomness import SeedWarning

from .reporting import RESULTS_DIR, Script

__all__ = [
    "SIZES",
    "add_renamed_option",
    "add_rerender_option",
    "base_parser",
    "quiet_seed_warnings",
    "resolve_data_or_none",
    "resolve_size",
    "script_parser",
    "set_threads",
]

SIZES = ("smoke", "quick", "full")


def script_parser(script: Script, doc: str | None) -> argparse.ArgumentParser:
    """A parser whose usage line is ``python -m <the script's module>`` and whose help is the module docstring.

    The docstring carries the script's example commands, so ``--help`` shows how to run it.
    """
    return argparse.ArgumentParser(
        prog=f"python -m {script.module}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def base_parser(script: Script, doc: str | None) -> argparse.ArgumentParser:
    """:func:`script_parser` plus the options every benchmark shares: sizes, data, output, seed, cache."""
    ap = script_parser(script, doc)
    size = ap.add_mutually_exclusive_group()
    size.add_argument(
        "--quick", action="store_true", help="small run (a few minutes on 2 cores); writes <name>_quick.*"
    )
    size.add_argument(
        "--smoke", action="store_true", help="tiny run for the test suite (seconds); writes <name>_smoke.*"
    )
    ap.add_argument(
        "--data-dir",
        default=None,
        help="benchmark datasets (default: $TEXTCRAFTER_DATA, else ../shared/datasets if present)",
    )
    ap.add_argument("--out-dir", default=str(RESULTS_DIR), help="where results go (default: benchmarks/results)")
    ap.add_argument("--seed", type=int, default=0, help="seed for sampling, noise and policy fitting")
    ap.add_argument(
        "--cache-dir",
        default=None,
        help="cache for embeddings and fitted policies (default: $TEXTCRAFTER_BENCH_CACHE or "
        "~/.cache/textcrafter_rag/bench)",
    )
    ap.add_argument("--tag", default="", help="suffix of the result file names (e.g. a privacy-only run)")
    ap.add_argument("--no-progress", action="store_true", help="hide progress bars")
    return ap


def add_rerender_option(ap: argparse.ArgumentParser) -> None:
    """``--from-json``: rebuild the Markdown and plots of an earlier run from its JSON, measuring nothing."""
    ap.add_argument(
        "--from-json",
        default=None,
        metavar="RESULTS_JSON",
        help="re-render the .md/.png of an earlier run from its results JSON (no measurement)",
    )


def resolve_size(args: argparse.Namespace) -> str:
    """``smoke``, ``quick`` or ``full`` from the parsed flags."""
    return "smoke" if getattr(args, "smoke", False) else "quick" if getattr(args, "quick", False) else "full"


def resolve_data_or_none(data_dir: str | None) -> Path | None:
    """The data directory, or ``None`` after printing the clear not-found message to stderr (exit code 2)."""
    try:
        return resolve_data_dir(data_dir)
    except DatasetNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


@contextlib.contextmanager
def quiet_seed_warnings() -> Iterator[None]:
    """Silence the expected ``SeedWarning``: benchmarks seed their noise on purpose, to be reproducible."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SeedWarning)
        yield


def set_threads() -> None:
    """Torch threads: ``$TEXTCRAFTER_BENCH_THREADS`` if set, else every core (up to 16).

    On a crowded machine use 1: with 2 cores shared by several jobs, two threads per process made
    policy training about 10x slower through oversubscription.
    """
    n = int(os.environ.get("TEXTCRAFTER_BENCH_THREADS") or 0) or max(1, min(os.cpu_count() or 1, 16))
    torch.set_num_threads(n)


class _RenamedOption(argparse.Action):
    """Stores the option's value like ``store``; its old spelling still works, with a warning."""

    def __init__(self, option_strings: list[str], dest: str, *, old: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.old, self.new = old, option_strings[0]

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object, option_string=None
    ) -> None:
        if option_string == self.old:
            warnings.warn(f"{self.old} is deprecated; use {self.new}", FutureWarning, stacklevel=2)
        setattr(namespace, self.dest, values)


def add_renamed_option(ap: argparse.ArgumentParser, new: str, old: str, **kwargs: object) -> None:
    """Option ``new``, still accepting ``old`` (deprecated): the benchmarks call a protection a *mechanism*."""
    ap.add_argument(new, old, action=_RenamedOption, old=old, **kwargs)
