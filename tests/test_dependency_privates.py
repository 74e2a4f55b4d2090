"""memsvc uses its dependencies through their public APIs only.

A private attribute (``obj._name``) of asyncpg, redis, OpenTelemetry,
SQLAlchemy or any other library can change in a patch release and break
every call at run time. This reads memsvc's source and fails on any access
to an underscored attribute that memsvc does not define itself (on its own
classes, modules or instances), including ``getattr(obj, "_name")``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "memsvc"

# Underscored names that are public API: the named tuple protocol.
PUBLIC_UNDERSCORED = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})


def _trees() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(encoding="utf-8")) for path in PACKAGE.rglob("*.py")}


def _own_names(trees: dict[Path, ast.Module]) -> set[str]:
    """Every underscored name memsvc defines: functions, classes, globals, own attributes.

    An attribute counts as memsvc's when memsvc assigns it on ``self`` or
    ``cls``: assigning another object's private attribute defines nothing.
    """
    own: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                own.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in {"self", "cls"}
            ):
                own.add(node.attr)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                own.add(node.target.id)
            elif isinstance(node, ast.alias):
                own.add(node.asname or node.name.split(".")[-1])
    return {name for name in own if name.startswith("_")}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in PUBLIC_UNDERSCORED


def foreign_private_accesses() -> list[str]:
    """``file:line name`` of each underscored attribute memsvc reads but never defines."""
    trees = _trees()
    own = _own_names(trees)
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Attribute) and _private(node.attr):
                name = node.attr
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in {"getattr", "hasattr", "setattr"}
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
                and _private(node.args[1].value)
            ):
                name = node.args[1].value
            if name is not None and name not in own:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {name}")
    return sorted(found)


def test_no_private_attribute_of_a_dependency_is_used() -> None:
    assert foreign_private_accesses() == []


def test_the_check_sees_a_private_attribute_of_asyncpg(tmp_path: Path) -> None:
    # The control: code reaching into asyncpg's pool, as memsvc once did.
    planted = "def take(pool):\n    return pool._queue.get_nowait()._con\n"
    tree = ast.parse(planted)
    names = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and _private(n.attr)]
    own = _own_names({tmp_path / "planted.py": tree})
    assert sorted(name for name in names if name not in own) == ["_con", "_queue"]
