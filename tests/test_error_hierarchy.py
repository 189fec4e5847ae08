"""One error hierarchy, enforced on the source: no module raises a built-in exception type on purpose.

Issue 31, item 4. ``tests/test_errors.py`` walks the public API with bad inputs; this walks every module of the
core and both integrations (``ast``, as ``tests/test_layout.py`` checks the layers), so a raise deep inside a
module cannot escape the hierarchy either: every deliberate error is a
:class:`~textcrafter_rag.errors.TextcrafterError`, which also derives from the built-in type callers expect
(``InvalidInputError`` is a ``ValueError``, ``MissingColumnError`` a ``KeyError``...).
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pkgutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import langchain_textcrafter
import llama_index.embeddings.textcrafter as llama_textcrafter
import textcrafter_rag
from textcrafter_rag.errors import TextcrafterError

ROOT = Path(__file__).resolve().parents[1]
SOURCES = (
    ROOT / "textcrafter_rag",
    ROOT / "integrations" / "langchain-textcrafter" / "langchain_textcrafter",
    ROOT / "integrations" / "llama-index-embeddings-textcrafter" / "llama_index",
)
BUILT_IN = {name for name, obj in vars(builtins).items() if isinstance(obj, type) and issubclass(obj, BaseException)}

#: Raises of built-in types in modules other work owns, by module and type, with how many there are.
#: Each is to become the package's error (``InvalidInputError`` for ``ValueError``, ``NotSupportedError``
#: for ``NotImplementedError``, ...); the lead empties this list. A fixed raise must leave it (the test
#: below fails on a stale entry), so it only shrinks.
LLAMA = "integrations/llama-index-embeddings-textcrafter/llama_index/embeddings/textcrafter"
ALLOWED: dict[tuple[str, str], int] = {}


def _modules() -> Iterator[Path]:
    for root in SOURCES:
        yield from sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _builtin_raises(path: Path) -> Iterator[tuple[str, int]]:
    """``(type name, line)`` of every ``raise`` of a built-in exception type in ``path``, minus what protocols demand.

    Exempt: ``AttributeError`` from ``__getattr__`` (Python's attribute protocol), and ``AssertionError`` from the
    assertion helpers of :mod:`textcrafter_rag.testing` (a test runner reports it as a failed check).
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    testing = path.is_relative_to(ROOT / "textcrafter_rag" / "testing")

    def visit(node: ast.AST, function: str | None) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Raise) and child.exc is not None:
                raised = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                kind = raised.id if isinstance(raised, ast.Name) else None
                exempt = (kind == "AttributeError" and function == "__getattr__") or (
                    kind == "AssertionError" and testing
                )
                if kind in BUILT_IN and not exempt:
                    yield kind, child.lineno
            yield from visit(child, name)

    yield from visit(tree, None)


def test_no_module_raises_a_built_in_exception_type() -> None:
    found: Counter[tuple[str, str]] = Counter()
    where: dict[tuple[str, str], list[int]] = {}
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        for kind, line in _builtin_raises(path):
            found[rel, kind] += 1
            where.setdefault((rel, kind), []).append(line)
    unexpected = {k: where[k] for k, n in found.items() if n > ALLOWED.get(k, 0)}
    assert not unexpected, "raise the package's error (textcrafter_rag.errors) instead:\n" + "\n".join(
        f"{path}:{lines} {kind}" for (path, kind), lines in sorted(unexpected.items())
    )
    stale = {k: (n, found.get(k, 0)) for k, n in ALLOWED.items() if found.get(k, 0) < n}
    assert not stale, f"fixed raises still allowed; lower or remove these ALLOWED entries: {stale}"


def test_the_scan_sees_raises_and_their_exemptions(tmp_path: Path) -> None:
    source = (
        "def f(x):\n    raise ValueError('bad')\n"
        "def g():\n    raise KeyError\n"
        "def __getattr__(name):\n    raise AttributeError(name)\n"
        "def h(exc):\n    raise exc\n"
        "def k():\n    raise ProtectionError('fine')\n"
    )
    probe = tmp_path / "probe.py"
    probe.write_text(source)
    assert list(_builtin_raises(probe)) == [("ValueError", 2), ("KeyError", 4)]


def test_every_exception_class_of_the_packages_is_a_textcrafter_error() -> None:
    """The classes the raises name: each one defined in these packages joins the hierarchy (warnings aside)."""
    outside = []
    for package in (textcrafter_rag, langchain_textcrafter, llama_textcrafter):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for name, obj in vars(module).items():
                if (
                    inspect.isclass(obj)
                    and obj.__module__ == module.__name__
                    and issubclass(obj, BaseException)
                    and not issubclass(obj, (Warning, TextcrafterError))
                ):
                    outside.append(f"{module.__name__}.{name}")
    assert not outside, f"derive these from textcrafter_rag.errors.TextcrafterError: {outside}"
