"""memsvc's packages form layers: no import points upward, and none goes in a circle.

Each package's ``__init__`` docstring says what it may import; this test holds
the whole package to it, reading every ``import`` (lazy ones inside functions
and ``TYPE_CHECKING`` ones included) with ``ast``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "memsvc"

# Lowest first. A module may import its own package and anything in a lower
# layer; packages sharing a layer do not import each other.
LAYERS: list[set[str]] = [
    {"core"},
    {"openai_compat"},
    {"telemetry", "progress", "embedding"},
    {"extraction"},
    {"db"},
    {"changes", "langgraph_db"},
    {"memories"},
    {"assemblies", "checkpoints", "working"},
    {"erasure", "transfer"},
    {"ops"},
    {"remember"},
    {"service"},
    {"sync", "demo", "testing"},
    {"integrations"},
    {"cli", "__init__"},
    {"__main__"},
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}


def unit_of(module: str) -> str:
    """The layer unit of a dotted module name inside memsvc (``memsvc.db.pool`` -> ``db``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports() -> list[tuple[str, str, int]]:
    """(importing module, imported memsvc module, line) for every import in the package."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        module = ".".join(relative.parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module]
                if node.module == "memsvc":
                    targets = [f"memsvc.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                if target == "memsvc" or target.startswith("memsvc."):
                    found.append((module, target, node.lineno))
    return found


def test_every_package_has_a_layer() -> None:
    units = {unit_of(module) for module, _, _ in imports()}
    units |= {path.stem if path.is_file() else path.name for path in PACKAGE.iterdir()}
    units -= {"py", "__pycache__", "py.typed"}
    assert sorted(unit for unit in units if unit not in RANK and unit != "py") == []


def test_no_import_points_upward_or_sideways() -> None:
    wrong = []
    for module, target, line in imports():
        source, imported = unit_of(module), unit_of(target)
        if imported in RANK and source != imported and RANK[imported] >= RANK[source]:
            wrong.append(f"{module}:{line} imports {target}")
    assert wrong == []


def test_modules_import_no_circle() -> None:
    graph: dict[str, set[str]] = {}
    for module, target, _ in imports():
        graph.setdefault(module, set()).add(target)
    visiting: set[str] = set()
    done: set[str] = set()
    circles: list[str] = []

    def visit(module: str, path: list[str]) -> None:
        if module in done:
            return
        if module in visiting:
            circles.append(" -> ".join([*path[path.index(module):], module]))
            return
        visiting.add(module)
        for target in sorted(graph.get(module, ())):
            visit(target, [*path, module])
        visiting.discard(module)
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    # A package __init__ re-exporting its own modules is not a circle of logic.
    assert [c for c in circles if not _reexport(c)] == []


def _reexport(circle: str) -> bool:
    members = circle.split(" -> ")
    packages = {
        m for m in members if (PACKAGE.parent / m.replace(".", "/") / "__init__.py").exists()
    }
    return bool(packages) and all(
        any(m == p or m.startswith(p + ".") for p in packages) for m in members
    )
