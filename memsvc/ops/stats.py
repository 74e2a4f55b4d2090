"""What a database holds: row counts per tenant and scope level, sizes, gc backlog."""

from __future__ import annotations

from dataclasses import dataclass, field

import asyncpg

from memsvc.core.scope import validate_id
from memsvc.db.errors import translate_errors
from memsvc.ops import stats_queries as q


@dataclass(frozen=True, slots=True)
class TenantStats:
    """Row counts of one tenant."""

    tenant: str
    memories: int = 0
    tenant_only: int = 0
    project: int = 0
    agent: int = 0
    session: int = 0
    expired: int = 0
    embedded: int = 0
    keyed: int = 0
    assemblies: int = 0
    assembly_members: int = 0
    checkpoints: int = 0
    checkpoint_bytes: int = 0
    checkpoint_sessions: int = 0
    store_items: int = 0
    store_items_expired: int = 0


@dataclass(frozen=True, slots=True)
class RelationSize:
    """On-disk size of one table or index."""

    name: str
    kind: str  # "table" or "index"
    table: str
    bytes: int
    total_bytes: int | None  # tables: with indexes and TOAST
    index_bytes: int | None
    # The planner's estimate; None before the table was first analyzed
    # (PostgreSQL says -1 then, which is no row count).
    estimated_rows: int | None


@dataclass(frozen=True, slots=True)
class Stats:
    """The report of :meth:`memsvc.ops.Maintenance.stats`."""

    tenants: list[TenantStats] = field(default_factory=list)
    relations: list[RelationSize] = field(default_factory=list)

    @property
    def expired(self) -> int:
        """Expired memories waiting for gc, over all tenants shown."""
        return sum(t.expired for t in self.tenants)

    @property
    def checkpoints(self) -> int:
        """Checkpoints over all tenants shown."""
        return sum(t.checkpoints for t in self.tenants)

    @property
    def checkpoint_bytes(self) -> int:
        """Bytes of checkpoint data over all tenants shown."""
        return sum(t.checkpoint_bytes for t in self.tenants)


async def collect_stats(conn: asyncpg.Connection, schema: str, tenant: str | None) -> Stats:
    """Count rows per tenant (optionally one tenant) and measure the schema's relations.

    Counting reads every row (``count(*)``); on very large tables prefer the
    ``estimated_rows`` of :attr:`Stats.relations`.
    """
    one_tenant = tenant is not None
    args = (validate_id("tenant", tenant),) if tenant is not None else ()
    with translate_errors():
        memories = await conn.fetch(q.memories_per_tenant(schema, one_tenant), *args)
        assemblies = await conn.fetch(q.assemblies_per_tenant(schema, one_tenant), *args)
        checkpoints = await conn.fetch(q.checkpoints_per_tenant(schema, one_tenant), *args)
        store_items = await conn.fetch(q.store_items_per_tenant(schema, one_tenant), *args)
        relations = await conn.fetch(q.relation_sizes(), schema)
    per_tenant: dict[str, dict[str, int]] = {}
    for row in memories:
        per_tenant.setdefault(row["tenant_id"], {}).update(
            memories=row["total"],
            tenant_only=row["tenant_only"],
            project=row["project"],
            agent=row["agent"],
            session=row["session"],
            expired=row["expired"],
            embedded=row["embedded"],
            keyed=row["keyed"],
        )
    for row in assemblies:
        per_tenant.setdefault(row["tenant_id"], {}).update(
            assemblies=row["assemblies"], assembly_members=row["members"]
        )
    for row in checkpoints:
        per_tenant.setdefault(row["tenant_id"], {}).update(
            checkpoints=row["checkpoints"],
            checkpoint_bytes=row["bytes"],
            checkpoint_sessions=row["sessions"],
        )
    for row in store_items:
        per_tenant.setdefault(row["tenant_id"], {}).update(
            store_items=row["items"], store_items_expired=row["expired"]
        )
    return Stats(
        tenants=[TenantStats(name, **counts) for name, counts in sorted(per_tenant.items())],
        relations=[
            RelationSize(
                name=row["name"],
                kind=row["kind"],
                table=row["table_name"],
                bytes=row["bytes"],
                total_bytes=row["total_bytes"],
                index_bytes=row["index_bytes"],
                estimated_rows=None if row["estimated_rows"] < 0 else row["estimated_rows"],
            )
            for row in relations
        ],
    )
