"""Citus: the script distributing memsvc's tables by tenant across worker nodes.

``memsvc citus --print-sql`` prints :func:`citus_sql` for a DBA to review and
run on the coordinator. Every table with a ``tenant_id`` column (a tenant
table) is hash-distributed by it and co-located with ``memories``; tables
without one (``schema_info``) become reference tables, copied to every node.
Every key and foreign key of a tenant table includes ``tenant_id`` and every
statement memsvc sends to one filters by it (``tests/test_citus_ready.py``
proves both), which is what distribution requires.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from sqlalchemy import Table

from memsvc.core.settings import Settings
from memsvc.db.tables import build_metadata
from memsvc.ops.citus_queries import (
    ANCHOR_TABLE,
    COLOCATED_TABLE,
    HEADER,
    REFERENCE_TABLE,
    SEARCH_SETTINGS,
)

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


def citus_sql(settings: Settings) -> str:
    """The distribution script for ``settings.db_schema`` (see the module docstring)."""
    schema = settings.db_schema
    metadata = build_metadata(settings)
    parts = [HEADER.format(schema=schema, anchor=f"{schema}.{ANCHOR}")]
    for placement in placements(settings):
        table = metadata.tables[f"{schema}.{placement.table}"]
        comment = "\n-- ".join(textwrap.wrap(table.comment or placement.table, 75))
        if not placement.distributed:
            template = REFERENCE_TABLE
        elif placement.table == ANCHOR:
            template = ANCHOR_TABLE
        else:
            template = COLOCATED_TABLE
        parts.append(
            template.format(schema=schema, table=placement.table, anchor=ANCHOR, comment=comment)
        )
    parts.append(
        SEARCH_SETTINGS.format(
            ef_search=int(settings.hnsw_ef_search),
            max_scan_tuples=int(settings.hnsw_max_scan_tuples),
        )
    )
    return "\n".join(parts)
