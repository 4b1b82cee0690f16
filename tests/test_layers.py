"""Data flows one way: SQL -> plan -> executor -> engine. These checks read every module's imports
(at module level and inside functions) so a shortcut across a layer fails here, not in review."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "aisql"


def imports_of(path: Path) -> set[str]:
    """Every module `path` imports, wherever the import statement stands."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == "aisql":
            # `from aisql import functions` names a submodule; `from aisql import connect` the root
            for alias in node.names:
                is_module = (PACKAGE / alias.name).is_dir() or (PACKAGE / f"{alias.name}.py").is_file()
                names.add(f"aisql.{alias.name}" if is_module else "aisql")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def modules_under(folder: str) -> list[Path]:
    return sorted((PACKAGE / folder).rglob("*.py"))


def offending(folder: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    found = {}
    for path in modules_under(folder):
        bad = sorted(n for n in imports_of(path) if n == "aisql" or n.startswith(forbidden))
        if bad:
            found[str(path.relative_to(PACKAGE))] = bad
    return found


def test_the_planner_imports_no_executor_and_no_package_root():
    assert offending("planner", ("aisql.executor", "aisql.api", "aisql.cli", "aisql.serve")) == {}


def test_the_engine_knows_no_sql_plan_or_executor():
    layers = ("aisql.sql", "aisql.planner", "aisql.executor", "aisql.functions", "aisql.api", "aisql.cli", "aisql.serve")
    assert offending("engine", layers) == {}


def test_the_front_end_and_functions_never_load_a_model():
    # Framing and facts read without weights are fine; loading code and the executor are not.
    loaders = ("aisql.executor", "aisql.planner", "aisql.engine.model.loader", "aisql.engine.backends.hf", "aisql.engine.batch.model_runner")
    assert offending("sql", loaders) == {}
    assert offending("functions", loaders) == {}


@pytest.mark.parametrize("rules_user", ["executor", "engine", "sql", "functions"])
def test_rule_modules_are_imported_by_the_optimizer_alone(rules_user):
    assert offending(rules_user, ("aisql.planner.rules",)) == {}


def test_importing_the_front_end_loads_no_model_code():
    import subprocess
    import sys

    code = "import sys, aisql.sql.bind, aisql.functions; print(sorted(m for m in sys.modules if m.startswith('aisql.engine')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "aisql.engine.model.loader" not in loaded and "torch" not in loaded, loaded


def _module_graph() -> dict[str, set[str]]:
    """aisql's modules -> the aisql modules each imports, wherever the import stands: inside a
    function (such an import still ties the two modules) and under `if TYPE_CHECKING:` too (a
    type-only circle never runs, but says two files are one unit or a type lives in the wrong
    place: the type goes where both can import it, or the reader names what it reads by a
    Protocol)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(resolve(alias.name) for alias in node.names if alias.name.startswith("aisql"))
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith("aisql"):
                found.update(resolve(f"{node.module}.{alias.name}") for alias in node.names)
        graph[name] = found - {None, name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph.get(module, ()):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_circle_anywhere():
    """A circle closed by an import inside a function still ties its modules together (the Ray
    worker could reach the driver's node runtimes through one), and one closed by a type-only
    import says a type lives in the wrong place; none is left."""
    assert _cycles(_module_graph()) == []


EXECUTOR = "aisql.executor"
# The executor's concern folders, lowest first: a folder imports only folders listed before it
# (and anything outside the executor the layer rules above allow).
EXECUTOR_FLOORS = ("store", "report", "options", "answers", "approximate", "joins", "cluster", "estimates", "node")


def _folder(module: str) -> str | None:
    """The executor concern folder a module sits in (None: outside one, e.g. query.py)."""
    if not module.startswith(EXECUTOR + "."):
        return None
    part = module[len(EXECUTOR) + 1 :].split(".")[0]
    return part if part in EXECUTOR_FLOORS else None


def test_executor_folders_import_nothing_above_them():
    """The store, report and options folders are the floor (they import no other executor
    folder but those below them); approximate mode and joins never reach the node runtime."""
    graph = _module_graph()
    upward = sorted(
        f"{module} -> {other}"
        for module, imported in graph.items()
        if (mine := _folder(module)) is not None
        for other in imported
        if (theirs := _folder(other)) is not None and EXECUTOR_FLOORS.index(theirs) > EXECUTOR_FLOORS.index(mine)
    )
    assert upward == []
    top = sorted(
        f"{module} -> {other}"
        for module, imported in graph.items()
        if _folder(module) is not None
        for other in imported
        if other.startswith(EXECUTOR + ".") and _folder(other) is None and other != EXECUTOR
    )
    assert top == []  # no folder imports the driver's files (query, session, script, plan_executor)


def test_the_executor_keeps_few_files_at_its_top():
    top = sorted(p.name for p in (PACKAGE / "executor").glob("*.py"))
    assert len(top) <= 8, top


def test_the_floor_rule_finds_an_upward_import():
    assert _folder("aisql.executor.store.cache") == "store" and _folder("aisql.executor.query") is None
    assert EXECUTOR_FLOORS.index("node") > EXECUTOR_FLOORS.index("joins") > EXECUTOR_FLOORS.index("approximate")


def test_the_circle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _sizes(kind: type, limit: int) -> list[str]:
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, kind) and node.end_lineno - node.lineno + 1 > limit:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)")
    return sorted(found)


def test_functions_and_classes_stay_small():
    """A function reads on one screen (60 lines), a class holds one job (300 lines)."""
    assert _sizes((ast.FunctionDef, ast.AsyncFunctionDef), 60) == []
    assert _sizes(ast.ClassDef, 300) == []
