"""Hash partitioning of the memories table by tenant (``Settings.partitions``).

With ``partitions`` > 1 the first migration creates ``memories`` as
``PARTITION BY HASH (tenant_id)`` with that many partitions named
``memories_p0`` ... ``memories_p<N-1>``. Indexes are declared on the parent,
so each partition gets its own (its own HNSW graph included), and every
statement memsvc sends names one tenant, so the planner (or, for a generic
plan, the executor) reads a single partition. The count is recorded in
``schema_info`` like the embedding dimension: a service opened with another
one is refused.
"""

from __future__ import annotations

import re

# The tables partitioned when Settings.partitions > 1 (see
# docs/how-to/partitioning.md for why the others are not).
PARTITIONED_TABLES = ("memories",)

# Names of partitions (excluded from alembic's comparison with the metadata,
# which declares only the parents).
PARTITION_NAME = re.compile(r"^(" + "|".join(PARTITIONED_TABLES) + r")_p[0-9]+$")

SETTING_KEY = "partitions"


def partition_name(table: str, remainder: int) -> str:
    """The name of a table's partition holding the tenants with this hash remainder."""
    return f"{table}_p{remainder}"


def partition_by(count: int) -> str | None:
    """The ``PARTITION BY`` clause of a partitioned table (None: not partitioned)."""
    return "HASH (tenant_id)" if count > 1 else None
