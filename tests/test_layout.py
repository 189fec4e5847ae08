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
    "textcrafter_rag.logs",
    "textcrafter_rag.deprecation",
    "textcrafter_rag.extras",
    "textcrafter_rag.validation",
    "textcrafter_rag.numerics",
    "textcrafter_rag.heap",
    "textcrafter_rag.metrics",
    "textcrafter_rag.randomness",
    "textcrafter_rag.artifacts",
    "textcrafter_rag.encoders",
    "textcrafter_rag.embedding",
    "textcrafter_rag.data",
    "textcrafter_rag.policies",
    "textcrafter_rag.sealing",
    "textcrafter_rag.sealed",  # the sealed-search wing, one folder (its own floors: SEALED_FLOORS)
    "textcrafter_rag.keyed",
    "textcrafter_rag.batches",
    "textcrafter_rag.vectorfiles",
}
#: The package facade (``textcrafter_rag/__init__.py``): it re-exports from every layer, so it is the top one.
FACADE = "textcrafter_rag"
#: Every layer of the core, bottom to top: a module imports only from its own layer and the ones below it.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset(INFRASTRUCTURE),
    frozenset({"textcrafter_rag.mechanisms"}),
    frozenset({"textcrafter_rag.textcrafter"}),
    frozenset({"textcrafter_rag.autofit"}),
    frozenset({"textcrafter_rag.specs", "textcrafter_rag.noise_fitting"}),
    frozenset({"textcrafter_rag.options"}),
    frozenset({"textcrafter_rag.protector"}),
    frozenset({"textcrafter_rag.adapters", "textcrafter_rag.streaming", "textcrafter_rag.ray_data"}),
    frozenset({"textcrafter_rag.demo", "textcrafter_rag.testing"}),
    frozenset({"textcrafter_rag.attacks"}),
    frozenset({"textcrafter_rag.audit"}),
    frozenset({"textcrafter_rag.cli"}),
    frozenset({FACADE}),
)
#: Layers above the infrastructure.
UPPER = tuple(sorted(set().union(*LAYERS[1:]) - {FACADE}))
#: Parts of the method that run at protection time: they never import the training side.
INFERENCE = {"mechanism", "policy", "projection", "reward", "rollout", "pii", "priors"}
#: The only first-party imports allowed inside functions: TextCrafter's torch side, loaded on first use so that
#: importing the library never imports torch (``test_runtime_install``). Not a cycle being dodged: the torch
#: modules import the mechanism, never the reverse at import time.
LAZY_TORCH_SIDE = {
    ("textcrafter_rag.textcrafter", "textcrafter_rag.textcrafter.fitting"),
    ("textcrafter_rag.textcrafter", "textcrafter_rag.textcrafter.fitting.fit_textcrafter"),
    ("textcrafter_rag.textcrafter", "textcrafter_rag.textcrafter.calibration"),
    ("textcrafter_rag.textcrafter", "textcrafter_rag.textcrafter.calibration.calibrate"),
    ("textcrafter_rag.textcrafter", "textcrafter_rag.textcrafter.calibration.Calibration"),
    ("textcrafter_rag.textcrafter", "textcrafter_rag.textcrafter.policy"),
    ("textcrafter_rag.textcrafter", "textcrafter_rag.textcrafter.policy.TextCrafterPolicy"),
    ("textcrafter_rag.textcrafter.mechanism", "textcrafter_rag.textcrafter.policy"),
    ("textcrafter_rag.textcrafter.mechanism", "textcrafter_rag.textcrafter.policy.TextCrafterPolicy"),
    ("textcrafter_rag.textcrafter.mechanism", "textcrafter_rag.textcrafter.rollout"),
    ("textcrafter_rag.textcrafter.mechanism", "textcrafter_rag.textcrafter.rollout.refine_batch"),
}
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


#: What a dynamic import of a name computed at run time is reported as.
COMPUTED = "<computed name>"
#: What a call to ``importlib.metadata.entry_points`` (which loads whatever installed packages declare) is
#: reported as.
ENTRY_POINTS = "<entry points>"


def _dynamic_import(call: ast.Call) -> str | None:
    """The module an ``import_module(...)`` / ``__import__(...)`` call loads, or what an entry-point lookup is."""
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
    if name == "entry_points":
        return ENTRY_POINTS
    if name not in {"import_module", "__import__"} or not call.args:
        return None
    target = call.args[0]
    if isinstance(target, ast.Constant) and isinstance(target.value, str):
        return target.value
    if isinstance(target, ast.JoinedStr) and target.values and isinstance(target.values[0], ast.Constant):
        prefix = str(target.values[0].value).rpartition(".")[0]  # f"pkg.{name}": some module under pkg
        return prefix or COMPUTED
    return COMPUTED


def _imports(path: Path) -> Iterator[tuple[str, int, bool]]:
    """``(absolute module, line, inside a function)`` for every import in ``path``, dynamic ones included."""
    return _imports_of_source(path.read_text(encoding="utf-8"), path)


def _imports_of_source(source: str, path: Path) -> Iterator[tuple[str, int, bool]]:
    tree = ast.parse(source, filename=str(path))
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
            elif isinstance(child, ast.Call) and (dynamic := _dynamic_import(child)) is not None:
                yield dynamic, child.lineno, in_function
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


def _layer(module: str) -> int | None:
    """The index in :data:`LAYERS` of a core module (or of a name the facade exports), ``None`` outside the core."""
    best: tuple[int, int] | None = None  # (length of the matching entry, layer)
    for i, layer in enumerate(LAYERS):
        for entry in layer:
            if entry != FACADE and _under(module, (entry,)) and (best is None or len(entry) > best[0]):
                best = (len(entry), i)
    if best is not None:
        return best[1]
    return len(LAYERS) - 1 if _under(module, (FACADE,)) else None


def test_every_core_module_sits_in_a_layer() -> None:
    assert not [_module_name(p) for p in PACKAGE_FILES if _layer(_module_name(p)) is None]
    placed = [entry for layer in LAYERS for entry in layer]
    assert len(placed) == len(set(placed)), "a module is placed in two layers"


def test_each_layer_imports_only_its_own_and_the_layers_below_it() -> None:
    bad = []
    for p in PACKAGE_FILES:
        mod = _module_name(p)
        own = _layer(mod)
        for m, line, _ in _imports(p):
            if m == FACADE:
                continue  # the parent package of every module, imported by Python anyway
            theirs = _layer(m)
            if theirs is not None and own is not None and theirs > own:
                bad.append(f"{p.relative_to(ROOT)}:{line} ({mod}, layer {own}) imports {m} (layer {theirs})")
    assert not bad, "\n".join(bad)


#: The sealed-search wing (``textcrafter_rag/sealed``, one folder), bottom to top: records and their layout, each
#: mode's machinery, the engine, the modes (one file each, :mod:`textcrafter_rag.sealed.modes`), the core.
SEALED = "textcrafter_rag.sealed"
SEALED_FLOORS: tuple[frozenset[str], ...] = tuple(
    frozenset(f"{SEALED}.{name}" for name in floor.split())
    for floor in (
        "filters port record_ids records layout marker segment id_table exact_shards sizing inverted_lists index_copy"
        " background",
        "candidates rounds app_index log_records log compaction vector_index store_index",
        "replica",
        "engine",
        "modes",
        "index_modes core",
    )
)


def _sealed_floor(module: str) -> int | None:
    for i, floor in enumerate(SEALED_FLOORS):
        if _under(module, floor):
            return i
    return None


def test_the_sealed_wing_is_one_folder_with_floors() -> None:
    """Every sealed-search module sits on a floor of its folder and imports only its own floor and those below."""
    wing = [p for p in PACKAGE_FILES if _under(_module_name(p), (SEALED,)) and _module_name(p) != SEALED]
    assert not [_module_name(p) for p in wing if _sealed_floor(_module_name(p)) is None], "a module on no floor"
    bad = []
    for p in wing:
        own = _sealed_floor(_module_name(p))
        for m, line, _ in _imports(p):
            theirs = _sealed_floor(m)
            if theirs is not None and own is not None and theirs > own:
                bad.append(f"{p.relative_to(ROOT)}:{line} (floor {own}) imports {m} (floor {theirs})")
    assert not bad, "\n".join(bad)
    flat = {"sealed_search", "two_stage", "candidate_rounds", "app_index", "sealed_records", "record_ids"}
    assert not [p.name for p in PACKAGE.glob("*.py") if p.stem in flat], "a sealed-search module outside its folder"


#: What a mode says of itself (:class:`textcrafter_rag.sealed.engine.SearchMode`) and the names of the modes'
#: options and marker: an adapter that reads them branches on the mode.
MODE_CAPABILITIES = {"store_ranks", "seals_vectors", "keeps_index", "ranks_in_store", "parallel_writers", "answered_by"}
MODE_OPTIONS = {"TwoStageSearch", "StoreIndexSearch", "AppIndexSearch", "SingleStageSearch"}
MODE_NAMES = {"single", "candidates", "store-index", "index"}
#: The adapters' one lookup by mode: their reader of each answering kind (``ANSWERS[mode.answered_by]``).
READER_REGISTRIES = {"ANSWERS", "_readers"}
#: Deprecated accessors that answer what they always did (warned): ``two_stage`` is the candidate options or None.
DEPRECATED_ACCESSORS = {"two_stage"}
ADAPTERS = (
    INTEGRATIONS / "langchain-textcrafter" / "langchain_textcrafter",
    INTEGRATIONS / "llama-index-embeddings-textcrafter" / "llama_index",
)


def _mode_branches(path: Path) -> list[str]:
    """Where an adapter module reads a mode's capabilities, tests options by type or compares a mode's name,
    other than the registry lookup of its reader and the deprecated accessors."""
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def lookup(node: ast.AST) -> bool:  # ANSWERS[... .answered_by] or self._readers[... .answered_by]
        parent = parents.get(node)
        if not isinstance(parent, ast.Subscript) or parent.slice is not node:
            return False
        registry = parent.value
        name = registry.id if isinstance(registry, ast.Name) else getattr(registry, "attr", None)
        return name in READER_REGISTRIES

    def deprecated(node: ast.AST) -> bool:
        while node in parents:
            node = parents[node]
            if isinstance(node, ast.FunctionDef) and node.name in DEPRECATED_ACCESSORS:
                return True
        return False

    found = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Attribute) and node.attr in MODE_CAPABILITIES:
            if not (node.attr == "answered_by" and lookup(node)):
                found.append(f"{where} reads .{node.attr}")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2:
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            names = {getattr(k, "id", getattr(k, "attr", None)) for k in kinds}
            if names & MODE_OPTIONS and not deprecated(node):
                found.append(f"{where} tests options by type")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(x, ast.Constant) and x.value in MODE_NAMES for x in sides):
                found.append(f"{where} compares a mode's name")
    return found


def test_the_adapters_hold_no_mode_branch_but_the_lookup_of_their_reader() -> None:
    """Each adapter looks up its reader by the mode's ``answered_by`` (the engine, or the wrapped store) and asks
    the core and the engine for the rest: no capability read, no options type test, no mode name compared."""
    files = [p for root in ADAPTERS for p in _python_files(root)]
    assert len(files) > 10
    found = [hit for p in files for hit in _mode_branches(p)]
    assert not found, "\n".join(found)


def test_the_mode_branch_check_sees_each_kind_of_branch(tmp_path: Path) -> None:
    """The check above finds a capability read, a type test and a name compare, and lets the lookup through."""
    module = tmp_path / "adapter.py"
    module.write_text(
        "def search(self, mode, options):\n"
        "    reader = ANSWERS[mode.answered_by]\n"
        "    if mode.store_ranks:\n"
        "        return isinstance(options, (TwoStageSearch, int))\n"
        "    return mode.name == 'candidates' or mode.answered_by\n"
    )
    assert sorted(_mode_branches(module)) == [
        "adapter.py:3 reads .store_ranks",
        "adapter.py:4 tests options by type",
        "adapter.py:5 compares a mode's name",
        "adapter.py:5 reads .answered_by",
    ]


def test_infrastructure_never_imports_the_layers_above_it() -> None:
    bad = []
    for p in PACKAGE_FILES:
        if _under(_module_name(p), INFRASTRUCTURE):
            bad += [f"{p.relative_to(ROOT)}:{line} imports {m}" for m, line, _ in _imports(p) if _under(m, UPPER)]
    assert not bad, "\n".join(bad)


def test_the_core_loads_no_plugin_and_no_computed_module() -> None:
    """Entry points and computed names load code no static check sees (the core once loaded an integration so)."""
    bad = [
        f"{p.relative_to(ROOT)}:{line} loads {m}"
        for p in PACKAGE_FILES
        for m, line, _ in _imports(p)
        if m in {ENTRY_POINTS, COMPUTED}
    ]
    assert not bad, "\n".join(bad)


def test_dynamic_imports_are_seen() -> None:
    """The scanner reports importlib loads, so the layer checks above cover them too."""
    source = (
        "import importlib\nfrom importlib.metadata import entry_points\n"
        "def f(name):\n"
        "    importlib.import_module('textcrafter_rag.cli')\n"
        "    importlib.import_module(f'llama_index.embeddings.textcrafter.{name}')\n"
        "    __import__(name)\n"
        "    entry_points(group='x')\n"
    )
    probe = PACKAGE / "encoders.py"
    tree_imports = list(_imports_of_source(source, probe))
    found = [m for m, _, inner in tree_imports if inner]
    assert found == ["textcrafter_rag.cli", "llama_index.embeddings.textcrafter", COMPUTED, ENTRY_POINTS]
    assert _layer("textcrafter_rag.cli") > _layer("textcrafter_rag.encoders")


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
        if inner and _under(m, first_party) and (_module_name(p), m) not in LAZY_TORCH_SIDE
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
