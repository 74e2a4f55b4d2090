"""Citus: distributing memsvc's tables by tenant across worker nodes, and checking it.

``memsvc citus --print-sql`` prints :func:`citus_sql` for a DBA to review and
run on the coordinator; ``memsvc citus apply`` runs the same statements
(:func:`citus_statements`) itself, one at a time in one transaction. Every
table with a ``tenant_id`` column (a tenant table) is hash-distributed by it
and co-located with ``memories``; tables without one (``schema_info``,
``embedding_migrations``) become reference tables, copied to every node.
Every key and foreign key of a tenant table includes ``tenant_id`` and every
statement memsvc sends to one filters by it (``tests/test_citus_ready.py``
proves both), which is what distribution requires. The script is idempotent:
a table already placed is skipped.

:func:`check_distribution` is the doctor's ``citus`` check on a coordinator:
each table's placement, shards per worker, co-location, and any tenant table
left local.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass

import asyncpg
from sqlalchemy import Table

from memsvc.core.settings import Settings
from memsvc.db.tables import build_metadata
from memsvc.ops import citus_queries as q
from memsvc.ops.doctor_report import DoctorReport

DISTRIBUTION_COLUMN = "tenant_id"
# The table the others are co-located with: the largest, and the one most joined.
ANCHOR = "memories"


@dataclass(frozen=True)
class Placement:
    """How one table is placed on a Citus cluster."""

    table: str
    distributed: bool  # False: a reference table (a full copy on every node)


def placements(settings: Settings) -> list[Placement]:
    """Every table of the schema, parents before the tables referencing them.

    The anchor comes first among the distributed tables, so the others can
    name it in ``colocate_with``.
    """
    tables: list[Table] = build_metadata(settings).sorted_tables
    reference = [t for t in tables if DISTRIBUTION_COLUMN not in t.c]
    distributed = [t for t in tables if DISTRIBUTION_COLUMN in t.c]
    # Moving the anchor to the front keeps the order valid: it references nothing.
    distributed.sort(key=lambda t: t.name != ANCHOR)
    return [Placement(t.name, False) for t in reference] + [
        Placement(t.name, True) for t in distributed
    ]


def citus_statements(settings: Settings) -> list[str]:
    """The script's statements, each to be sent on its own, ``BEGIN`` to ``COMMIT``."""
    schema = settings.db_schema
    metadata = build_metadata(settings)
    statements = [q.BEGIN, q.UNSAFE_TRIGGERS]
    for placement in placements(settings):
        table = metadata.tables[f"{schema}.{placement.table}"]
        comment = "\n-- ".join(textwrap.wrap(table.comment or placement.table, 75))
        if not placement.distributed:
            template = q.REFERENCE_TABLE
        elif placement.table == ANCHOR:
            template = q.ANCHOR_TABLE
        else:
            template = q.COLOCATED_TABLE
        statements.append(
            template.format(schema=schema, table=placement.table, anchor=ANCHOR, comment=comment)
        )
    statements.append(
        q.SEARCH_SETTINGS.format(
            ef_search=int(settings.hnsw_ef_search),
            max_scan_tuples=int(settings.hnsw_max_scan_tuples),
        )
    )
    statements.append(q.COMMIT)
    return statements


def citus_sql(settings: Settings) -> str:
    """The distribution script for ``settings.db_schema`` (see the module docstring)."""
    header = q.HEADER.format(schema=settings.db_schema, anchor=f"{settings.db_schema}.{ANCHOR}")
    return "\n\n".join([header, *citus_statements(settings)]) + "\n"


class CitusNotInstalled(Exception):
    """The database has no Citus extension, or is not the coordinator."""


async def apply_citus(conn: asyncpg.Connection, settings: Settings) -> list[str]:
    """Run the script on the coordinator ``conn``: every table placed, or none.

    Returns the tables it placed now (empty when everything already was).
    """
    if not await conn.fetchval(q.CITUS_INSTALLED):
        raise CitusNotInstalled("the citus extension is not installed in this database")
    if not await conn.fetchval(q.IS_COORDINATOR):
        raise CitusNotInstalled("this is a Citus worker: run it on the coordinator")
    before = await _placed(conn, settings.db_schema)
    statements = citus_statements(settings)
    assert statements[0] == q.BEGIN and statements[-1] == q.COMMIT
    async with conn.transaction():
        for statement in statements[1:-1]:
            await conn.execute(statement)
    after = await _placed(conn, settings.db_schema)
    return sorted(set(after) - set(before))


async def _placed(conn: asyncpg.Connection, schema: str) -> dict[str, str]:
    rows = await conn.fetch(q.placed_tables(schema))
    return {r["table_name"]: r["placement"] for r in rows if r["placement"] != "local"}


async def check_distribution(
    conn: asyncpg.Connection, settings: Settings, report: DoctorReport
) -> None:
    """The doctor's ``citus`` check (nothing reported without Citus or on a worker)."""
    if not await conn.fetchval(q.CITUS_INSTALLED) or not await conn.fetchval(q.IS_COORDINATOR):
        return
    rows = await conn.fetch(q.placed_tables(settings.db_schema))
    workers = await conn.fetchval(q.ACTIVE_WORKERS)
    expected = {p.table for p in placements(settings)}
    missing = sorted(
        r["table_name"] for r in rows if r["placement"] == "local" and r["table_name"] in expected
    )
    distributed = [r for r in rows if r["placement"] == "distributed"]
    groups = {r["colocation_id"] for r in distributed}
    per_node: dict[str, int] = {}
    for row in distributed:
        for node, shards in json.loads(row["shards_per_node"]).items():
            per_node[node] = per_node.get(node, 0) + int(shards)
    nodes = ", ".join(f"{node}: {count} shards" for node, count in sorted(per_node.items()))
    references = sorted(r["table_name"] for r in rows if r["placement"] == "reference")
    detail = (
        f"{len(distributed)} tables distributed by tenant_id in "
        f"{len(groups)} co-location group(s), {workers} active workers ({nodes or 'no shards'}); "
        f"reference tables: {', '.join(references) or 'none'}"
    )
    if missing:
        report.add(
            "citus",
            "problem",
            f"not distributed: {', '.join(missing)} ({detail}); run `memsvc citus apply`",
            repairable=False,
        )
    elif len(groups) > 1:
        report.add(
            "citus", "problem", f"tenant tables are not co-located ({detail})", repairable=False
        )
    else:
        report.add("citus", "ok", detail)
