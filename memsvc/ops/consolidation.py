"""``svc.maintenance.consolidate``: related memories grouped, each group with a summary memory.

A run over one exact scope:

1. clusters whose summary is out of date because a member changed, stopped
   being valid (superseded, invalidated, expired) or left (deleted, erased)
   are redone: the members still valid are summarized again, or, fewer than
   ``min_cluster`` left, the cluster is dissolved (assembly and summary
   deleted; its members count as new again);
2. each memory no run has considered yet (the ``consolidation_members``
   table has no row for it), oldest first, joins the nearest cluster when
   its centroid is at least ``threshold`` similar, or else starts one with
   the memories in no cluster at least that similar to it when they make
   ``min_cluster``; otherwise it is recorded as considered, and waits for a
   newer memory to pull it into a cluster;
3. clusters that grew are summarized again.

Each cluster is made, joined or redone in one transaction, and the summary
is written before it opens (the summarizer may be a model). A memory is
claimed for a cluster by a conditional upsert on its row: whatever runs
race, it lands in at most one cluster, and a run whose claim lost starts
that memory over. The summary is the keyed memory ``consolidation:<assembly
id>`` of the scope, so a cluster never has two. A crash loses at most the
cluster being written; the next run carries on from what committed.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg
import numpy as np

from memsvc.assemblies.repository import AssemblyRepository
from memsvc.core.errors import ConcurrencyError, NotFoundError, ValidationError
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.core.validation import validate_scope
from memsvc.db.replicas import ReadRouter
from memsvc.db.repository import Repository
from memsvc.db.sql import Params, scope_condition
from memsvc.db.tables import build_metadata
from memsvc.extraction.protocols import Summarizer, SummaryMember
from memsvc.extraction.specs import summarizer_from_spec
from memsvc.memories.embedding_space import EmbeddingSpace
from memsvc.memories.repository import MemoryRepository
from memsvc.ops import consolidation_queries as q

# Cosine similarity at which memories belong together: chosen with
# python -m benchmarks.memory_quality.cluster_sweep (all-MiniLM-L6-v2; the
# consolidation how-to has the table). Other embedders may need another.
CLUSTER_THRESHOLD = 0.75
MAX_MEMBERS = 64  # a cluster's size; a full one takes no more members
PAGE = 100  # new memories read at once
ATTEMPTS = 4  # placements or redos of one cluster lost to racing runs
SUMMARY_KEY = "consolidation:{}"


@dataclass(frozen=True)
class ConsolidationReport:
    """What one ``consolidate`` run did.

    Attributes:
        made: Clusters made (each with its assembly and summary memory).
        joined: Memories that joined an existing cluster.
        redone: Clusters summarized again because a member changed, stopped
            being valid or left.
        dissolved: Clusters removed because fewer than ``min_cluster`` of
            their members were left.
        considered: Memories no run had considered before that this run took
            up (placed in a cluster, or recorded as waiting for one).
        summaries: The summary memories written or rewritten, by id.
    """

    made: int = 0
    joined: int = 0
    redone: int = 0
    dissolved: int = 0
    considered: int = 0
    summaries: tuple[uuid.UUID, ...] = ()


@dataclass(frozen=True)
class _Member:
    id: uuid.UUID
    version: int
    content: str
    embedding: Any
    created_at: datetime
    importance: float
    valid_from: datetime | None

    @classmethod
    def of(cls, row: Any) -> _Member:
        return cls(
            row["id"], row["version"], row["content"], row["embedding"], row["created_at"],
            float(row["importance"]), row.get("valid_from"),
        )

    @property
    def since(self) -> datetime:
        """When the member's fact became true (its write, without valid time)."""
        return self.valid_from or self.created_at


@dataclass
class _Run:
    scope: Scope
    summarizer: Summarizer
    min_cluster: int
    threshold: float
    made: int = 0
    joined: int = 0
    redone: int = 0
    dissolved: int = 0
    considered: int = 0
    summaries: dict[uuid.UUID, None] = field(default_factory=dict)

    def report(self) -> ConsolidationReport:
        return ConsolidationReport(
            self.made, self.joined, self.redone, self.dissolved, self.considered,
            tuple(self.summaries),
        )


class _Lost(Exception):
    """A racing run changed what this transaction was about to write: start over."""


def _check_min_cluster(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= MAX_MEMBERS:
        raise ValidationError("min_cluster", f"must be an integer from 2 to {MAX_MEMBERS}")
    return value


def _check_threshold(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError("threshold", "must be a number")
    if not math.isfinite(value) or not 0 < value <= 1:
        raise ValidationError("threshold", "must be a cosine similarity in (0, 1]")
    return float(value)


class Consolidation(Repository):
    """Runs ``svc.maintenance.consolidate``; see the module docstring."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: Settings,
        *,
        memories: MemoryRepository,
        assemblies: AssemblyRepository,
        space: EmbeddingSpace | None = None,
        reads: ReadRouter | None = None,
    ) -> None:
        super().__init__(pool, settings, reads=reads)
        self._memories = memories
        self._assemblies = assemblies
        self._space = space
        self._default: Summarizer | None = None
        # Valid time (valid_from/valid_to) and forgetting (forgotten_at), read
        # from the schema so this runs on every revision that has the tables.
        columns = build_metadata(settings).tables[f"{self._schema}.memories"].c
        valid_time = "valid_to" in columns and "valid_from" in columns
        self._live = q.live_condition("m", valid_time, "forgotten_at" in columns)
        self._columns = q.member_columns(valid_time)

    def default_summarizer(self) -> Summarizer:
        """The summarizer ``Settings.summarizer`` names (``extractive`` by default)."""
        if self._default is None:
            self._default = summarizer_from_spec(self._settings.summarizer)
        return self._default

    async def consolidate(
        self,
        scope: Scope,
        *,
        summarizer: Summarizer | None = None,
        min_cluster: int = 3,
        threshold: float = CLUSTER_THRESHOLD,
    ) -> ConsolidationReport:
        """Group the scope's related memories under summaries; see the module docstring."""
        scope = validate_scope(scope)
        chosen = summarizer if summarizer is not None else self.default_summarizer()
        if not isinstance(chosen, Summarizer):
            raise ValidationError("summarizer", "must have name, version, model and summarize()")
        run = _Run(scope, chosen, _check_min_cluster(min_cluster), _check_threshold(threshold))
        await self._redo_stale(run)
        await self._place_new(run)
        await self._redo_stale(run)
        return run.report()

    async def _fetch(self, sql: str, params: Params, tenant: str) -> list[Any]:
        """Rows of a read on the primary (what the run acts on next must be current)."""
        rows: list[Any] = await self._read(
            None, lambda conn: conn.fetch(sql, *params.values), tenant=tenant, routed=False
        )
        return rows

    # ------------------------------------------------------------ stale clusters

    async def _redo_stale(self, run: _Run) -> None:
        params = Params()
        where = scope_condition(run.scope, "exact", params, "a")
        sql = q.stale_clusters(self._schema, where, self._live)
        rows = await self._fetch(sql, params, run.scope.tenant)
        for row in rows:
            for _ in range(ATTEMPTS):
                try:
                    await self._redo(run, row["assembly_id"], changed=row["changed"])
                except (_Lost, ConcurrencyError):
                    continue
                break

    async def _members(
        self, conn: asyncpg.Connection, tenant: str, cluster: uuid.UUID, *, lock: bool
    ) -> tuple[list[_Member], list[_Member]]:
        """The cluster's members still valid now, and those that are not."""
        rows = await conn.fetch(
            q.cluster_members(self._schema, self._live, self._columns, lock), tenant, cluster
        )
        live = [_Member.of(r) for r in rows if r["live"]]
        return live, [_Member.of(r) for r in rows if not r["live"]]

    async def _redo(self, run: _Run, cluster: uuid.UUID, *, changed: bool) -> None:
        """Summarize a stale cluster again (or dissolve it); raises _Lost to start over."""
        tenant = run.scope.tenant
        async with self._connection(tenant=tenant, writes=False) as conn:
            live, _ = await self._members(conn, tenant, cluster, lock=False)
        if len(live) < run.min_cluster:
            await self._dissolve(run, cluster)
            return
        text = await self._summarize(run, live)
        async with self._transaction(tenant=tenant) as conn:
            locked = q.lock_cluster(self._schema, share=False)
            if await conn.fetchrow(locked, tenant, cluster) is None:
                return  # dissolved meanwhile
            where = "c.tenant_id = $1 AND c.assembly_id = $2"
            stale = q.stale_clusters(self._schema, where, self._live)
            if not await conn.fetch(stale, tenant, cluster):
                return  # another run redid it
            now_live, gone = await self._members(conn, tenant, cluster, lock=True)
            if [(m.id, m.version) for m in now_live] != [(m.id, m.version) for m in live]:
                raise _Lost
            if gone:
                ids = [m.id for m in gone]
                await conn.execute(q.release(self._schema), tenant, cluster, ids)
                await self._assemblies.remove_members(cluster, ids, tenant=tenant, conn=conn)
            await self._write_summary(conn, run, cluster, live, text)
        run.redone += changed

    async def _dissolve(self, run: _Run, cluster: uuid.UUID) -> None:
        """Delete the cluster's assembly and summary: its members count as new again."""
        tenant = run.scope.tenant
        async with self._transaction(tenant=tenant) as conn:
            row = await conn.fetchrow(q.lock_cluster(self._schema, share=False), tenant, cluster)
            if row is None:
                return
            live, _ = await self._members(conn, tenant, cluster, lock=True)
            if len(live) >= run.min_cluster:
                raise _Lost  # members joined meanwhile: redo it instead
            if row["summary_id"] is not None:
                await self._memories.delete(row["summary_id"], tenant=tenant, conn=conn)
            await self._assemblies.delete(cluster, tenant=tenant, conn=conn)
        run.dissolved += 1

    # ------------------------------------------------------------ new memories

    async def _place_new(self, run: _Run) -> None:
        tenant = run.scope.tenant
        cursor: tuple[datetime, uuid.UUID] | None = None
        while True:
            params = Params()
            scope_sql = scope_condition(run.scope, "exact", params, "m")
            after = f"{params.add(cursor[0] if cursor else datetime.min)}::timestamptz, "
            after += params.add(cursor[1] if cursor else uuid.UUID(int=0))
            sql = q.new_memories(
                self._schema, scope_sql, self._live, self._columns, after, params.add(PAGE)
            )
            rows = await self._fetch(sql, params, tenant)
            if not rows:
                return
            for row in rows:
                await self._place(run, _Member.of(row))
            cursor = (rows[-1]["created_at"], rows[-1]["id"])

    async def _place(self, run: _Run, seed: _Member) -> None:
        """Put one new memory in a cluster, a new one, or on record as considered."""
        for _ in range(ATTEMPTS):
            joining, near = await self._near(run, seed)
            try:
                if joining is not None:
                    await self._join(run, seed, joining)
                elif 1 + len(near) >= run.min_cluster:
                    await self._make(run, [seed, *near])
                else:
                    async with self._transaction(tenant=run.scope.tenant) as conn:
                        recorded = await conn.fetch(
                            q.considered(self._schema), run.scope.tenant, seed.id, seed.version
                        )
                    run.considered += len(recorded)
            except (_Lost, ConcurrencyError):
                continue
            return

    async def _near(self, run: _Run, seed: _Member) -> tuple[uuid.UUID | None, list[_Member]]:
        """The cluster the seed joins, else the free memories similar enough to it."""
        tenant = run.scope.tenant
        async with self._connection(tenant=tenant, writes=False) as conn:
            if await conn.fetchval(q.placed(self._schema), tenant, seed.id) is not None:
                return None, []  # a racing run placed it
            params = Params()
            scope_sql = scope_condition(run.scope, "exact", params, "a")
            vector = params.add(seed.embedding)
            sql = q.nearest_cluster(self._schema, scope_sql, vector, params.add(MAX_MEMBERS))
            nearest = await conn.fetchrow(sql, *params.values)
            if nearest is not None and nearest["similarity"] >= run.threshold:
                return nearest["assembly_id"], []
            params = Params()
            scope_sql = scope_condition(run.scope, "exact", params, "m")
            sql = q.neighbours(
                self._schema, scope_sql, self._live, self._columns, params.add(seed.embedding),
                params.add(seed.id), params.add(MAX_MEMBERS - 1),
            )
            rows = await conn.fetch(sql, *params.values)
        return None, [_Member.of(r) for r in rows if r["similarity"] >= run.threshold]

    async def _check_versions(
        self, conn: asyncpg.Connection, tenant: str, members: Sequence[_Member]
    ) -> None:
        rows = await conn.fetch(
            q.lock_versions(self._schema, self._live), tenant, [m.id for m in members]
        )
        if {(r["id"], r["version"]) for r in rows} != {(m.id, m.version) for m in members}:
            raise _Lost  # changed, gone or no longer valid since read

    async def _join(self, run: _Run, seed: _Member, cluster: uuid.UUID) -> None:
        tenant = run.scope.tenant
        async with self._transaction(tenant=tenant) as conn:
            await self._check_versions(conn, tenant, [seed])
            locked = q.lock_cluster(self._schema, share=True)
            if await conn.fetchrow(locked, tenant, cluster) is None:
                raise _Lost  # dissolved meanwhile
            claimed = await conn.fetch(
                q.claim(self._schema), tenant, cluster, [seed.id], [seed.version], False
            )
            if not claimed:
                return  # a racing run placed it first
            try:
                await self._assemblies.add_members(cluster, [seed.id], tenant=tenant, conn=conn)
            except NotFoundError as exc:
                raise _Lost from exc
        run.joined += 1
        run.considered += sum(row["inserted"] for row in claimed)

    async def _make(self, run: _Run, members: list[_Member]) -> None:
        tenant = run.scope.tenant
        text = await self._summarize(run, members)
        async with self._transaction(tenant=tenant) as conn:
            await self._check_versions(conn, tenant, members)
            assembly = await self._assemblies.create(
                run.scope,
                f"consolidation:{uuid.uuid4()}",
                description="Memories consolidated under one summary.",
                metadata={"kind": "consolidation"},
                memory_ids=[m.id for m in members],
                conn=conn,
            )
            await conn.execute(
                q.insert_cluster(self._schema), tenant, assembly.id,
                _label(run.summarizer), run.summarizer.model,
            )
            claimed = await conn.fetch(
                q.claim(self._schema), tenant, assembly.id,
                [m.id for m in members], [m.version for m in members], False,
            )
            if len(claimed) != len(members):
                raise _Lost  # some are in a racing run's cluster now
            await self._write_summary(conn, run, assembly.id, members, text)
        run.made += 1
        run.considered += sum(row["inserted"] for row in claimed)

    # ------------------------------------------------------------ summaries

    async def _summarize(self, run: _Run, members: Sequence[_Member]) -> str:
        text = await run.summarizer.summarize(
            [
                SummaryMember(m.content, _floats(m.embedding), m.created_at)
                for m in sorted(members, key=lambda m: (m.created_at, m.id))
            ]
        )
        if not isinstance(text, str) or not text.strip():
            raise ValidationError("summarizer", "returned no summary text")
        return text

    async def _write_summary(
        self,
        conn: asyncpg.Connection,
        run: _Run,
        cluster: uuid.UUID,
        members: Sequence[_Member],
        text: str,
    ) -> None:
        """The cluster's summary memory, valid from its newest member's fact."""
        tenant = run.scope.tenant
        newest = max(m.since for m in members)
        metadata = {
            "kind": "summary",
            "derived_from": [str(m.id) for m in sorted(members, key=lambda m: m.id)],
            "consolidation": {
                "assembly_id": str(cluster),
                "summarizer": run.summarizer.name,
                "summarizer_version": run.summarizer.version,
                "model": run.summarizer.model,
                "valid_from": newest.isoformat(),
            },
        }
        summary = await self._memories.put(
            run.scope,
            SUMMARY_KEY.format(cluster),
            text,
            embedding=self._summary_embedding(members),
            metadata=metadata,
            importance=max(m.importance for m in members),
            conn=conn,
            valid_from=newest,
        )
        await conn.execute(
            q.summarized(self._schema), tenant, cluster,
            [m.id for m in members], [m.version for m in members],
        )
        await conn.execute(
            q.set_summary(self._schema), tenant, cluster, summary.id, len(members),
            _label(run.summarizer), run.summarizer.model,
        )
        run.summaries[summary.id] = None

    def _summary_embedding(self, members: Sequence[_Member]) -> Any:
        """None (the store embeds the summary) or, with no embedder, the members' mean."""
        if self._space is not None and self._space.embedder is not None:
            return None
        matrix = np.asarray([np.asarray(m.embedding, dtype=np.float64) for m in members])
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        mean = (matrix / np.where(norms == 0, 1.0, norms)).mean(axis=0)
        norm = float(np.linalg.norm(mean))
        return (mean / norm if norm > 0 else mean).astype(np.float32)


def _label(summarizer: Summarizer) -> str:
    return f"{summarizer.name}/{summarizer.version}"


def _floats(embedding: Any) -> list[float] | None:
    return None if embedding is None else [float(x) for x in embedding]
