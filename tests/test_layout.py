"""The house rules, checked on the source: module size, parameter lists, and who imports whom.

These are static checks over the repository's Python files (``ast``, no imports executed), so
they are deterministic and cheap. Each rule names the offending file so a failure says what to fix.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "textcrafter_rag"
INTEGRATIONS = ROOT / "integrations"
MAX_LINES = 450
MAX_PARAMS = 12

#: Infrastructure at the bottom of the core: it may import nothing from the layers above it.
INFRASTRUCTURE = {
    "textcrafter_rag._version",
    "textcrafter_rag.errors",
    "textcrafter_rag.validation",
    "textcrafter_rag.numerics",
    "textcrafter_rag.randomness",
    "textcrafter_rag.artifacts",
    "textcrafter_rag.encoders",
    "textcrafter_rag.embedding",
    "textcrafter_rag.data",
    "textcrafter_rag.policies",
    "textcrafter_rag.sealing",
    "textcrafter_rag.keyed",
    "textcrafter_rag.batches",
    "textcrafter_rag.vectorfiles",
}
#: Layers above the infrastructure, each allowed to import only what is listed below it.
UPPER = (
    "textcrafter_rag.textcrafter",
    "textcrafter_rag.specs",
    "textcrafter_rag.protector",
    "textcrafter_rag.attacks",
    "textcrafter_rag.audit",
    "textcrafter_rag.cli",
    "textcrafter_rag.demo",
    "textcrafter_rag.streaming",
    "textcrafter_rag.ray_data",
    "textcrafter_rag.testing",
)
#: Parts of the method that run at protection time: they never import the training side.
INFERENCE = {"mechanism", "policy", "projection", "reward", "rollout", "pii", "priors"}
TRAINING = {
    "textcrafter_rag.textcrafter.training",
    "textcrafter_rag.textcrafter.fitting",
    "textcrafter_rag.textcrafter.calibration",
}


def _python_files(*roots: Path) -> Iterator[Path]:
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if not any(part in {".venv", "build", "__pycache__"} or part.endswith(".egg-info") for part in path.parts):
                yield path


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> Iterator[tuple[str, int, bool]]:
    """``(absolute module, line, inside a function)`` for every import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]

    def visit(node: ast.AST, in_function: bool) -> Iterator[tuple[str, int, bool]]:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, child.lineno, in_function
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*anchor, base]) if base else ".".join(anchor)
                yield base, child.lineno, in_function
                for alias in child.names:  # `from . import x` may name a submodule
                    yield f"{base}.{alias.name}", child.lineno, in_function
            yield from visit(child, nested)

    yield from visit(tree, False)


def _under(module: str, prefixes: set[str] | tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


PACKAGE_FILES = list(_python_files(PACKAGE))
ALL_FILES = list(_python_files(PACKAGE, INTEGRATIONS, ROOT / "benchmarks", ROOT / "examples", ROOT / "tests"))


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_over_450_lines(path: Path) -> None:
    n = len(path.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(ROOT)} has {n} lines; split it by role"


def test_no_public_function_takes_over_12_parameters() -> None:
    offenders = []
    for path in _python_files(PACKAGE, INTEGRATIONS, ROOT / "benchmarks"):
        if "tests" in path.relative_to(ROOT).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                a = node.args
                bound = bool(a.args) and a.args[0].arg in {"self", "cls"}
                n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) - bound
                if n > MAX_PARAMS:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} parameters)")
    assert not offenders, "use a config dataclass:\n" + "\n".join(offenders)


def test_the_core_imports_no_integration_and_no_benchmark() -> None:
    bad = [
        f"{p.relative_to(ROOT)}:{line} imports {m}"
        for p in PACKAGE_FILES
        for m, line, _ in _imports(p)
        if _under(m, ("langchain_textcrafter", "llama_index", "langchain_core", "benchmarks"))
    ]
    assert not bad, "\n".join(bad)


def test_infrastructure_never_imports_the_layers_above_it() -> None:
    bad = []
    for p in PACKAGE_FILES:
        mod = _module_name(p)
        if _under(mod, INFRASTRUCTURE) or _under(mod, ("textcrafter_rag.mechanisms",)):
            bad += [f"{p.relative_to(ROOT)}:{line} imports {m}" for m, line, _ in _imports(p) if _under(m, UPPER)]
    assert not bad, "\n".join(bad)


def test_protection_imports_nothing_from_training() -> None:
    bad = []
    for name in INFERENCE:
        p = PACKAGE / "textcrafter" / f"{name}.py"
        bad += [f"{p.relative_to(ROOT)}:{line} imports {m}" for m, line, _ in _imports(p) if _under(m, TRAINING)]
    assert not bad, "\n".join(bad)


def test_the_core_never_imports_attacks_or_audit() -> None:
    allowed = ("textcrafter_rag.attacks", "textcrafter_rag.audit", "textcrafter_rag.cli")
    bad = [
        f"{p.relative_to(ROOT)}:{line} imports {m}"
        for p in PACKAGE_FILES
        for m, line, _ in _imports(p)
        if _under(m, ("textcrafter_rag.attacks", "textcrafter_rag.audit")) and not _under(_module_name(p), allowed)
    ]
    assert not bad, "\n".join(bad)


def test_no_first_party_import_hides_inside_a_function() -> None:
    """A function-level import of our own modules is how an import cycle gets dodged instead of fixed."""
    first_party = ("textcrafter_rag", "langchain_textcrafter", "llama_index.embeddings.textcrafter", "benchmarks")
    bad = [
        f"{p.relative_to(ROOT)}:{line} imports {m} inside a function"
        for p in _python_files(PACKAGE, INTEGRATIONS, ROOT / "benchmarks")
        if "tests" not in p.relative_to(ROOT).parts
        for m, line, inner in _imports(p)
        if inner and _under(m, first_party)
    ]
    assert not bad, "\n".join(bad)


def test_nothing_edits_sys_path() -> None:
    edits = tuple(f"sys.path.{verb}(" for verb in ("insert", "append"))
    bad = [str(p.relative_to(ROOT)) for p in ALL_FILES if any(e in p.read_text(encoding="utf-8") for e in edits)]
    assert not bad, "run benchmarks as `python -m benchmarks.NAME`; import, don't edit sys.path: " + ", ".join(bad)


def test_code_runs_on_the_oldest_python_that_requires_python_admits() -> None:
    """requires-python is >=3.10: no names that only exist from 3.11 on."""
    newer = {
        ("typing", "Self"),
        ("typing", "Never"),
        ("typing", "LiteralString"),
        ("typing", "assert_never"),
        ("datetime", "UTC"),
        ("tomllib", None),
        ("enum", "StrEnum"),
    }
    bad = []
    for p in ALL_FILES:
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.ImportFrom) and any((node.module, a.name) in newer for a in node.names)) or (
                isinstance(node, ast.Import) and any((a.name, None) in newer for a in node.names)
            ):
                bad.append(f"{p.relative_to(ROOT)}:{node.lineno}")
            elif isinstance(node, getattr(ast, "TryStar", ())):  # ast.TryStar exists from 3.11 on
                bad.append(f"{p.relative_to(ROOT)}:{node.lineno} except*")
    assert not bad, "\n".join(bad)
