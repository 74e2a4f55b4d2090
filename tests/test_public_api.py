"""The public API does not change by accident.

The surface users call (``from memsvc import ...``, the repositories the
service exposes, working memory, the blocking client, the integrations, the
documented helpers, the command line and the settings) is compared with a
snapshot in ``tests/public_api.json``: every public name, and every public
method's signature. A change of the surface is a deliberate act: regenerate
the snapshot with ``python -m tests.test_public_api`` and say why in the
commit (and the changelog).
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
from pathlib import Path
from typing import Any

import click

SNAPSHOT = Path(__file__).with_name("public_api.json")

# Where each documented object lives. The left side is how users reach it
# and is part of the snapshot; the right side is where the code is today.
SURFACE: dict[str, str] = {
    "svc.memories": "memsvc.memories.repository:MemoryRepository",
    "svc.assemblies": "memsvc.assemblies.repository:AssemblyRepository",
    "svc.checkpoints": "memsvc.checkpoints.repository:CheckpointRepository",
    "svc.maintenance": "memsvc.ops.maintenance:Maintenance",
    "svc.reads": "memsvc.db.replicas:ReadRouter",
    "svc.working(scope)": "memsvc.remember.session:SessionMemory",
    "memsvc.remember.ScratchpadConsolidation": "memsvc.remember.session:ScratchpadConsolidation",
    "memsvc.sync.SyncMemoryService": "memsvc.sync:SyncMemoryService",
    "memsvc.integrations.langgraph.MemsvcSaver": "memsvc.integrations.langgraph:MemsvcSaver",
    "memsvc.integrations.langgraph.MemsvcStore": "memsvc.integrations.langgraph:MemsvcStore",
    "memsvc.integrations.langgraph.remember_node": (
        "memsvc.integrations.langgraph:remember_node"
    ),
    "memsvc.integrations.langchain.MemsvcVectorStore": (
        "memsvc.integrations.langchain:MemsvcVectorStore"
    ),
    "memsvc.integrations.mcp.create_server": "memsvc.integrations.mcp:create_server",
    "memsvc.working.keys.tenant_key_pattern": "memsvc.working.keys:tenant_key_pattern",
    "memsvc.telemetry.configure": "memsvc.telemetry:configure",
    "memsvc.progress.LineProgress": "memsvc.progress:LineProgress",
    "memsvc.progress.RichProgress": "memsvc.progress:RichProgress",
    "memsvc.progress.ProgressReporter": "memsvc.progress:ProgressReporter",
    "memsvc.extraction.ADD": "memsvc.extraction:ADD",
    "memsvc.extraction.UPDATE": "memsvc.extraction:UPDATE",
    "memsvc.extraction.SUPERSEDE": "memsvc.extraction:SUPERSEDE",
    "memsvc.extraction.INVALIDATE": "memsvc.extraction:INVALIDATE",
    "memsvc.extraction.NOOP": "memsvc.extraction:NOOP",
    "memsvc.extraction.Rejected": "memsvc.extraction:Rejected",
    "memsvc.extraction.Limits": "memsvc.extraction:Limits",
    "memsvc.extraction.Message": "memsvc.extraction:Message",
    "memsvc.extraction.Candidate": "memsvc.extraction:Candidate",
    "memsvc.extraction.Fact": "memsvc.extraction:Fact",
    "memsvc.extraction.ExtractionRequest": "memsvc.extraction:ExtractionRequest",
    "memsvc.extraction.SummaryMember": "memsvc.extraction:SummaryMember",
    "memsvc.remember.Applied": "memsvc.remember:Applied",
}


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _signature(obj: Any) -> str:
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(no signature)"
    return re.sub(r" at 0x[0-9a-f]+", "", text)  # default values' reprs carry addresses


def _describe(obj: Any) -> dict[str, str] | str:
    """A class as its public members' signatures; anything else as its signature."""
    if not inspect.isclass(obj):
        return _signature(obj)
    members: dict[str, str] = {"__init__": _signature(obj)}
    for name, member in inspect.getmembers(obj):
        if name.startswith("_"):
            continue
        if callable(member):
            members[name] = _signature(member)
        elif isinstance(member, property):
            members[name] = "property"
    fields = getattr(obj, "__dataclass_fields__", None) or getattr(obj, "model_fields", None)
    for name in fields or ():
        members.setdefault(name, "field")
    return dict(sorted(members.items()))


def _commands(group: click.Group, prefix: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            found.update(_commands(command, f"{prefix} {name}"))
        else:
            found[f"{prefix} {name}"] = sorted(
                option for param in command.params for option in param.opts
            )
    return found


def surface() -> dict[str, Any]:
    """The public surface as it is now."""
    import memsvc
    from memsvc.cli import main

    found: dict[str, Any] = {
        f"memsvc.{name}": _describe(getattr(memsvc, name)) for name in sorted(memsvc.__all__)
    }
    found.update({label: _describe(_load(path)) for label, path in SURFACE.items()})
    found["command line"] = _commands(main, "memsvc")
    return found


def test_the_public_api_matches_its_snapshot() -> None:
    snapshot = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    current = json.loads(json.dumps(surface()))
    changed = sorted(
        name for name in snapshot.keys() | current.keys() if snapshot.get(name) != current.get(name)
    )
    assert changed == [], "regenerate with python -m tests.test_public_api if deliberate"


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(surface(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT}")
