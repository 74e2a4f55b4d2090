"""What one read of the change feed costs the server: the events after its position,
not the ledger behind it, whichever plan PostgreSQL picks for the prepared read."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from memsvc import MemoryService, Scope
from memsvc.changes import queries as q
from memsvc.changes.feed import Position, read_arguments, read_statement

HISTORY_BATCHES = 8
BATCH = 250
# Rows a read after the last few events looks at through an index range
# (those events, and a few held back or of other scopes); a read through the
# scope's or the whole ledger's history looks at thousands.
MOST_ROWS = 40


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(int(value))


def _rows_scanned(node: dict[str, Any]) -> int:
    """Rows the plan's scans produced or filtered out, subplans included."""
    rows = 0
    if node["Node Type"].endswith("Scan") and not node["Node Type"].startswith("CTE"):
        rows += int(node["Actual Rows"] * node["Actual Loops"])
        rows += int(node.get("Rows Removed by Filter", 0))
        rows += int(node.get("Rows Removed by Index Recheck", 0))
    return rows + sum(_rows_scanned(child) for child in node.get("Plans", []))


async def _read(
    conn: asyncpg.Connection, sql: str, args: list[Any], mode: str
) -> tuple[list[tuple[str, Any]], int]:
    """The read's changes (entity, id) and the rows it scanned, planned under ``mode``."""
    await conn.execute(f"SET plan_cache_mode = {mode}")
    statement = await conn.prepare(sql)
    rows = await statement.fetch(*args)
    plan = await conn.fetchval(
        f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE {statement.get_name()}"
        f"({', '.join(_literal(a) for a in args)})"
    )
    top = json.loads(plan)[0]["Plan"]
    changes = [(r["entity"], r["entity_id"]) for r in rows if r["event_id"] is not None]
    return changes, _rows_scanned(top)


@pytest.mark.parametrize("analyzed", [False, True], ids=["no statistics", "analyzed"])
async def test_a_read_touches_the_events_after_its_position_not_the_history(
    service: MemoryService, scope: Scope, analyzed: bool
) -> None:
    other = Scope("another-tenant", "p")
    conn = await asyncpg.connect(service.dsn)
    try:
        if not analyzed:
            # A ledger PostgreSQL has no statistics of yet (a new database,
            # or before autovacuum's first pass): tenants look selective.
            for table in ("memory_events", "entity_events"):
                await conn.execute(f"ALTER TABLE memsvc.{table} SET (autovacuum_enabled = false)")
        for i in range(HISTORY_BATCHES):
            await service.memories.add_many(scope, [f"old {i}-{j}" for j in range(BATCH)])
            await service.memories.add_many(other, [f"other {i}-{j}" for j in range(BATCH)])
            await service.checkpoints.create(scope, {"i": i})
        if analyzed:
            await conn.execute("ANALYZE memsvc.memory_events, memsvc.entity_events")
        position = Position(int(await conn.fetchval(q.watermark())), -1, 0)
        new = [await service.memories.add(scope, f"new {i}") for i in range(3)]
        checkpoint = await service.checkpoints.create(scope, {"new": True})
        await service.memories.add(other, "not followed")
        expected = [("memory", m.id) for m in new] + [("checkpoint", checkpoint.id)]

        # Both watermarks: the plain one, and the refined one a stalled feed reads with.
        for refined in (False, True):
            for followed, include in (
                (scope, "descendants"),
                (Scope(scope.tenant), "descendants"),
            ):
                sql, args = read_statement(
                    "memsvc", followed, include, with_values=False, batch_size=500,
                    refined=refined,
                )
                for mode in ("force_generic_plan", "force_custom_plan"):
                    changes, scanned = await _read(
                        conn, sql, read_arguments(args, position), mode
                    )
                    assert changes == expected, (followed, mode, refined)
                    assert scanned <= MOST_ROWS, (followed, mode, refined, scanned)
            sql, args = read_statement(
                "memsvc", None, "descendants", with_values=False, batch_size=500, refined=refined
            )
            for mode in ("force_generic_plan", "force_custom_plan"):
                changes, scanned = await _read(conn, sql, read_arguments(args, position), mode)
                assert changes[: len(expected)] == expected and len(changes) == len(expected) + 1
                assert scanned <= MOST_ROWS, (None, mode, refined, scanned)
    finally:
        await conn.close()
