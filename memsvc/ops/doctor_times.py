"""Doctor's ``time ranges`` check: stored times Python cannot read, and their repair.

A time outside :mod:`memsvc.core.time_limits`' range makes every read meeting its
row fail. Revision 0024's CHECK constraints refuse new ones; rows written
before them (when the constraint stayed ``NOT VALID``) are found here, per
table and column, with one scan per table. The memories' history is checked
too: an ``updated``/``deleted`` event's prior expiry is read back by as-of
reads.

The repair moves each such time to the nearest end of the range, except an
expiry past it (``infinity``, a TTL of millennia), which becomes NULL (no
expiry), and a store item's ``ttl_minutes`` out of range, which is dropped
(the item keeps its expiry). Then the constraints left ``NOT VALID`` are
validated. Each statement is its own transaction.
"""

from __future__ import annotations

import asyncpg

from memsvc.core.errors import MemsvcError
from memsvc.db.time_checks import EXPIRY_COLUMNS, TIME_COLUMNS, range_constraints
from memsvc.ops import doctor_queries as q

CHECK_NAME = "time ranges"

# (table, column) of each problem found, with how many rows hold it.
Found = dict[tuple[str, str], int]


async def find_out_of_range(conn: asyncpg.Connection, schema: str) -> Found:
    """Rows holding a time (or TTL) out of range, by table and column."""
    found: Found = {}
    for table, columns in TIME_COLUMNS.items():
        row = await conn.fetchrow(q.times_out_of_range(schema, table, columns))
        for column, count in row.items():
            if count:
                found[(table, column)] = count
    return found


async def unvalidated(conn: asyncpg.Connection, schema: str) -> list[tuple[str, str]]:
    """``(table, constraint)`` of the range constraints still NOT VALID."""
    names = [name for _, name, _ in range_constraints()]
    rows = await conn.fetch(q.unvalidated_constraints(), schema, names)
    return [(row["table_name"], row["name"]) for row in rows]


async def repair(
    conn: asyncpg.Connection,
    schema: str,
    found: Found,
    constraints: list[tuple[str, str]],
) -> tuple[list[str], list[str]]:
    """Bring the rows found into range, then validate the constraints: (fixes, failures)."""
    fixes: list[str] = []
    failures: list[str] = []
    by_table: dict[str, dict[str, bool]] = {}
    for table, column in found:
        by_table.setdefault(table, {})[column] = (table, column) in EXPIRY_COLUMNS
    for table, columns in by_table.items():
        try:
            status = await conn.execute(q.bring_times_into_range(schema, table, columns))
        except (MemsvcError, asyncpg.PostgresError) as exc:
            failures.append(f"{table}: repair failed: {exc}")
            continue
        rows = int(status.rsplit(" ", 1)[-1])
        fixes.append(f"{table}: {rows} rows brought into range ({', '.join(columns)})")
    for table, name in constraints:
        try:
            await conn.execute(q.validate_constraint(schema, table, name))
        except (MemsvcError, asyncpg.PostgresError) as exc:
            failures.append(f"{name}: not validated: {exc}")
            continue
        fixes.append(f"validated constraint {name}")
    return fixes, failures


def describe(found: Found, constraints: list[tuple[str, str]]) -> str:
    """One line: what is out of range, and which constraints are not validated."""
    parts = [f"{table}.{column}: {count} rows" for (table, column), count in found.items()]
    detail = ""
    if parts:
        detail = (
            "times Python cannot read (outside 0001-01-02 .. 9999-12-30 UTC), which make "
            "reads meeting them fail: " + ", ".join(parts)
        )
    if constraints:
        names = ", ".join(name for _, name in constraints)
        detail += ("; " if detail else "") + f"constraints not yet validated: {names}"
    return detail
