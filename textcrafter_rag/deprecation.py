"""The one way a renamed keyword, flag or function is kept working for a while: a deprecation warning."""

from __future__ import annotations

import argparse
import warnings
from typing import Any, TypeVar

from .errors import InvalidInputError

__all__ = ["warn_renamed", "renamed_keyword", "RenamedFlag", "add_renamed_flag"]

T = TypeVar("T")


def warn_renamed(old: str, new: str, *, stacklevel: int = 3, category: type[Warning] = DeprecationWarning) -> None:
    """Warn that ``old`` (a keyword, flag or function) is a deprecated alias of ``new``.

    ``stacklevel`` counts from the caller of this helper, as :func:`warnings.warn` does from its own caller.
    """
    warnings.warn(f"{old} is deprecated and will be removed; use {new}", category, stacklevel=stacklevel)


def renamed_keyword(value: T, old_value: T | None, *, new: str, old: str, default: T, stacklevel: int = 4) -> T:
    """The value of a renamed keyword: ``value``, or the deprecated ``old_value`` (warned) where it was given.

    ``old_value`` is ``None`` when the old keyword was left out; giving both (``value`` not at its ``default``)
    is refused. ``stacklevel`` counts from the caller of this helper (4: the user of a public function).
    """
    if old_value is None:
        return value
    warn_renamed(old, new, stacklevel=stacklevel)
    if value != default:
        raise InvalidInputError(f"give either {new} or its deprecated name {old}, not both")
    return old_value


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
