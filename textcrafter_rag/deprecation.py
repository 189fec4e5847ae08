"""The one way a renamed keyword, flag or function is kept working for a while: a deprecation warning."""

from __future__ import annotations

import argparse
import warnings
from typing import Any

__all__ = ["warn_renamed", "RenamedFlag", "add_renamed_flag"]


def warn_renamed(old: str, new: str, *, stacklevel: int = 3, category: type[Warning] = DeprecationWarning) -> None:
    """Warn that ``old`` (a keyword, flag or function) is a deprecated alias of ``new``.

    ``stacklevel`` counts from the caller of this helper, as :func:`warnings.warn` does from its own caller.
    """
    warnings.warn(f"{old} is deprecated and will be removed; use {new}", category, stacklevel=stacklevel)


class RenamedFlag(argparse.Action):
    """A command-line flag kept under its old name: stores into the new flag's ``dest`` and warns.

    The warning is a :class:`FutureWarning`, the category Python shows to the users of an application
    (a :class:`DeprecationWarning` is hidden outside ``__main__``). Pass the new flag as ``const``.
    """

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: str | None = None
    ) -> None:
        warn_renamed(str(option_string), str(self.const), stacklevel=2, category=FutureWarning)
        setattr(namespace, self.dest, values)


def add_renamed_flag(parser: argparse.ArgumentParser, old: str, new: str, *, dest: str, **kwargs: Any) -> None:
    """Accept ``old`` as a hidden, warning alias of the flag ``new`` (same ``dest``)."""
    parser.add_argument(old, dest=dest, action=RenamedFlag, const=new, help=argparse.SUPPRESS, **kwargs)
