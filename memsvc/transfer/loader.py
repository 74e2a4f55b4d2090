"""Loading records (from an export or a legacy store) idempotently, in constant memory.

:class:`Loader` takes records one at a time, with where each came from (a
line number, a file path), and writes them in batches on a connection of its
own: memories by binary COPY straight into the table (events copied in the
same transaction), or by binary COPY into a staging table and one ``INSERT ... ON
CONFLICT DO NOTHING`` per batch (with their ``created`` events) for a batch
holding an id already stored (checked unless the table was empty when the
load began), and for every batch after any error of a direct copy;
assemblies and checkpoints as they come. Nothing is ever duplicated: a record whose id
is already stored as the same row counts as ``already present``; one that
collides with a different row (its id, its content in the scope, its key)
is rejected with the reason and its source. Memory held is one batch.
Vectors that came as text (an import's lines) are parsed, a batch at a time,
just before their batch is written.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from memsvc.assemblies.repository import AssemblyRepository, can_see
from memsvc.core.errors import MemsvcError, ValidationError
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.core.validation import validate_embedding
from memsvc.db.codecs import register_binary_jsonb, register_codecs, vector_bytes
from memsvc.db.errors import translate_errors
from memsvc.db.pool import connect, find_vector_schema
from memsvc.db.tenancy import set_tenant
from memsvc.transfer import loader_queries as q
from memsvc.transfer.records import (
    AssemblyRecord,
    CheckpointRecord,
    MemoryRecord,
    Record,
    StoreItemRecord,
    parse_vector_texts,
)

log = logging.getLogger(__name__)

MEMORY_BATCH = 2_000
# While a batch is being written, hand the event loop to it every this many records.
YIELD_EVERY = 4
CHECKPOINT_BATCH_BYTES = 32 * 2**20
CHECKPOINT_BATCH = 500
# Problems kept for the report; beyond this only the count grows (constant memory).
MAX_REPORTED = 1_000


@dataclass(frozen=True, slots=True)
class Problem:
    """A record that was rejected (or loaded with a warning), and why."""

    source: str  # "line 12", "memories/abc.json", ...
    kind: str  # memory, assembly, checkpoint, file
    reason: str

    def __str__(self) -> str:
        return f"{self.source}: {self.kind}: {self.reason}"


@dataclass
class Counts:
    """What happened to the records of one kind."""

    inserted: int = 0
    already_present: int = 0
    rejected: int = 0


@dataclass
class LoadReport:
    """What a load did: counts per kind, and the rejected records with their reasons."""

    memories: Counts = field(default_factory=Counts)
    assemblies: Counts = field(default_factory=Counts)
    checkpoints: Counts = field(default_factory=Counts)
    store_items: Counts = field(default_factory=Counts)
    rejected: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    rejected_total: int = 0
    warnings_total: int = 0
    index_rebuilt: bool = False
    # Why the vector index was (or was not) dropped, when ``auto`` had to look.
    index_decision: str = ""
    index_build_seconds: float = 0.0
    # Scope and subtree indexes dropped with it for the load, and how many
    # of them (and of other big scopes') were built after it.
    scope_indexes_dropped: int = 0
    scope_indexes_built: int = 0
    # Indexes found invalid (an interrupted build) and rebuilt before the load.
    index_repairs: list[str] = field(default_factory=list)
    # The exact scopes memories were read for, and (Settings.dedupe="semantic")
    # how many near-duplicates were merged after the load.
    memory_scopes: set[Scope] = field(default_factory=set)
    merged: int = 0

    def reject(self, source: str, kind: str, reason: str) -> None:
        """Record a rejected record (``kind``: memory, assembly, checkpoint, line, file)."""
        counts = self.counts(kind)
        if counts is not None:
            counts.rejected += 1
        self.note_rejection(Problem(source, kind, reason))

    def note_rejection(self, problem: Problem) -> None:
        """Record a problem that rejects a whole input (a file, a line), not one row."""
        self.rejected_total += 1
        if len(self.rejected) < MAX_REPORTED:
            self.rejected.append(problem)

    def warn(self, source: str, kind: str, reason: str) -> None:
        """Record something loaded with a caveat (e.g. a member that does not exist)."""
        self.warnings_total += 1
        if len(self.warnings) < MAX_REPORTED:
            self.warnings.append(Problem(source, kind, reason))

    def counts(self, kind: str) -> Counts | None:
        """The counters of ``memory``, ``assembly`` or ``checkpoint`` records (else None)."""
        return {
            "memory": self.memories,
            "assembly": self.assemblies,
            "checkpoint": self.checkpoints,
            "store_item": self.store_items,
        }.get(kind)

    @property
    def other_rejected(self) -> int:
        """Rejected inputs that are no memory, assembly or checkpoint (lines, files)."""
        kinds = self.memories.rejected + self.assemblies.rejected + self.checkpoints.rejected
        return self.rejected_total - kinds

    @property
    def ok(self) -> bool:
        """True when nothing was rejected."""
        return self.rejected_total == 0


# The timestamps of each record kind that an import may carry, and the kind's name.
_RECORD_TIMES: dict[type, tuple[str, ...]] = {
    MemoryRecord: (
        "created_at", "updated_at", "last_accessed_at", "forgotten_at", "last_reinforced_at"
    ),
    AssemblyRecord: ("created_at", "updated_at"),
    CheckpointRecord: ("created_at",),
    StoreItemRecord: ("created_at", "updated_at"),
}
_RECORD_KINDS: dict[type, str] = {
    MemoryRecord: "memory",
    AssemblyRecord: "assembly",
    CheckpointRecord: "checkpoint",
    StoreItemRecord: "store_item",
}


def _scope_params(scope: Scope) -> list[str | None]:
    return [scope.tenant, scope.project, scope.agent, scope.session]


def _copy_row(record: MemoryRecord, now: datetime) -> tuple[Any, ...]:
    """One memory as a row of binary COPY into memories (``q.DIRECT_COLUMNS``).

    ``now`` is the transaction's ``now()``, for missing timestamps (what the
    staging path's ``coalesce(created_at, now())`` gives).
    """
    scope = record.scope
    created = now if record.created_at is None else record.created_at
    return (
        scope.tenant,
        scope.project,
        scope.agent,
        scope.session,
        record.id,
        record.key,
        record.content,
        record.content_hash,
        record.metadata,
        record.embedding,
        record.importance,
        record.version,
        created,
        created if record.updated_at is None else record.updated_at,
        record.expires_at,
        record.access_count,
        record.last_accessed_at,
        record.valid_from,
        record.valid_to,
        record.supersedes,
        record.superseded_by,
        record.pinned,
        record.forgotten_at,
        record.reinforced_count,
        record.last_reinforced_at,
        record.content_unique,
    )


class Loader:
    """Writes records in batches on its own connection; see the module docstring.

    Use as ``async with Loader(dsn, settings, assemblies) as loader:`` then
    ``await loader.add(record, source)`` for each record; leaving the block
    flushes what is buffered. ``loader.report`` says what happened.
    """

    def __init__(
        self,
        dsn: str,
        settings: Settings,
        assemblies: AssemblyRepository,
        *,
        report: LoadReport | None = None,
        memory_batch: int = MEMORY_BATCH,
    ) -> None:
        self._dsn = dsn
        self._settings = settings
        self._schema = settings.db_schema
        self._assemblies = assemblies
        self._memory_batch = memory_batch
        self.report = report or LoadReport()
        self._conn: asyncpg.Connection | None = None
        self._memories: list[tuple[MemoryRecord, str]] = []
        self._checkpoints: list[tuple[CheckpointRecord, str]] = []
        self._checkpoint_bytes = 0
        self._store_items: list[StoreItemRecord] = []
        self._insert_sql = ""
        # Whether batches may be copied straight into the table (decided on
        # entering: not under row-level security; any failure turns it off for
        # the rest of the load), and whether each must first be checked for
        # ids already stored (the table held rows when the load began).
        self._direct = False
        self._check_stored = True
        self._analyze_after_batch = False
        # The memory batch being written while the next one is parsed: the
        # server inserts (and parses vectors) as Python reads on, which uses
        # both cores of a small machine.
        self._in_flight: asyncio.Task[None] | None = None
        # The server's clock minus ours: future timestamps are judged by the server's.
        self._clock_offset = timedelta(0)

    async def __aenter__(self) -> Loader:
        conn = await connect(self._dsn, self._settings)
        try:
            with translate_errors():
                vector_schema = await find_vector_schema(conn)
                await register_codecs(conn, vector_schema)
                await register_binary_jsonb(conn)  # rows go in by binary COPY
                await conn.execute(q.STAGING_SESSION)
                await conn.execute(
                    q.create_staging(
                        vector_schema, self._settings.vector_type, self._settings.embedding_dim
                    )
                )
                direct = await conn.fetchrow(q.direct_copy_possible(self._schema))
                self._direct, self._check_stored = direct["possible"], not direct["empty"]
                self._analyze_after_batch = await conn.fetchval(
                    q.unknown_to_the_planner(self._schema), MEMORY_BATCH
                )
                server_now: datetime = await conn.fetchval(q.NOW)
                self._clock_offset = server_now - datetime.now(UTC)
        except BaseException:
            await conn.close()
            raise
        self._insert_sql = q.insert_staged(self._schema)
        self._conn = conn
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            if exc_type is None:
                await self.flush()
            elif self._in_flight is not None:
                self._in_flight.cancel()
                await asyncio.gather(self._in_flight, return_exceptions=True)
        finally:
            conn, self._conn = self._conn, None
            if conn is not None:
                await conn.close()

    @property
    def conn(self) -> asyncpg.Connection:
        """The loader's connection (only inside the ``async with`` block)."""
        if self._conn is None:
            raise RuntimeError("use the Loader inside `async with`")
        return self._conn

    async def add(self, record: Record, source: str) -> None:
        """Queue or write one record."""
        self._clamp_future_times(record, source)
        if isinstance(record, MemoryRecord):
            self.report.memory_scopes.add(record.scope)
            self._memories.append((record, source))
            if len(self._memories) >= self._memory_batch:
                await self._start_memory_batch()
            elif self._in_flight is not None and len(self._memories) % YIELD_EVERY == 0:
                # Reading records never suspends: let the batch in flight send
                # its next message, or it would only start when we wait for it.
                await asyncio.sleep(0)
        elif isinstance(record, CheckpointRecord):
            self._checkpoints.append((record, source))
            self._checkpoint_bytes += len(record.data)
            if (
                len(self._checkpoints) >= CHECKPOINT_BATCH
                or self._checkpoint_bytes >= CHECKPOINT_BATCH_BYTES
            ):
                await self._flush_checkpoints()
        elif isinstance(record, StoreItemRecord):
            self._store_items.append(record)
            if len(self._store_items) >= CHECKPOINT_BATCH:
                await self._flush_store_items()
        else:
            # Members must be stored before the assembly that groups them.
            await self._flush_memories()
            await self._load_assembly(record, source)

    def _clamp_future_times(self, record: Record, source: str) -> None:
        """Store times further in the future than ``import_clock_skew_s`` as now; report each.

        A future ``created_at`` would sort first for ever and, before erasure
        cut by transaction id, made the row unerasable until its date.
        """
        skew = self._settings.import_clock_skew_s
        now = datetime.now(UTC) + self._clock_offset
        latest = now + timedelta(seconds=skew)
        kind = _RECORD_KINDS[type(record)]
        for name in _RECORD_TIMES[type(record)]:
            value: datetime | None = getattr(record, name)
            if value is not None and value > latest:
                setattr(record, name, now)
                self.report.warn(
                    source,
                    kind,
                    f"{name} {value.isoformat()} is more than import_clock_skew_s "
                    f"({skew:g}s) in the future: stored as the time of the import",
                )

    async def flush(self) -> None:
        """Write everything buffered."""
        await self._flush_memories()
        await self._flush_checkpoints()
        await self._flush_store_items()

    # ------------------------------------------------------------ memories

    async def _wait_in_flight(self) -> None:
        task, self._in_flight = self._in_flight, None
        if task is not None:
            await task

    async def _start_memory_batch(self) -> None:
        """Write the buffered memories in the background (after the previous batch)."""
        batch, self._memories = self._memories, []
        # Vectors are parsed while the server still writes the batch before.
        batch = self._parse_text_embeddings(batch)
        await self._wait_in_flight()
        if batch:
            self._in_flight = asyncio.get_running_loop().create_task(self._insert_memories(batch))

    async def _flush_memories(self) -> None:
        await self._start_memory_batch()
        await self._wait_in_flight()

    def _parse_text_embeddings(
        self, batch: list[tuple[MemoryRecord, str]]
    ) -> list[tuple[MemoryRecord, str]]:
        """Turn the batch's vector texts into arrays; reject (with the reason) bad ones."""
        settings = self._settings
        texts = [r.embedding for r, _ in batch if isinstance(r.embedding, bytes)]
        parsed = iter(
            parse_vector_texts(
                texts, settings.embedding_dim, settings.vector_type, settings.distance
            )
        )
        kept = []
        for record, source in batch:
            if isinstance(record.embedding, bytes):
                vector = next(parsed)
                if vector is None:
                    # The whole check, on this one alone: it names the problem.
                    try:
                        vector = validate_embedding(
                            json.loads(b"[" + record.embedding + b"]"),
                            settings.embedding_dim,
                            settings.vector_type,
                            distance=settings.distance,
                        )
                    except (ValidationError, ValueError) as exc:
                        reason = exc.reason if isinstance(exc, ValidationError) else str(exc)
                        self.report.reject(source, "memory", f"embedding: {reason}")
                        continue
                record.embedding = vector
            kept.append((record, source))
        return kept

    async def _copy_memories(self, batch: list[tuple[MemoryRecord, str]]) -> bool:
        """Copy a batch straight into memories, with its events; False if it did not go in.

        One transaction: the rows and their ``created`` events commit
        together or not at all. On any error the transaction is rolled back,
        direct copies stop for this load, and the caller stages the batch.
        A batch with an id already stored is left to the staging path before
        anything is copied (a re-import would fail its copy, late and after
        updating every index, on its first row).
        """
        conn = self.conn
        try:
            async with conn.transaction():
                if self._check_stored and await conn.fetchval(
                    q.any_stored(self._schema),
                    [r.scope.tenant for r, _ in batch],
                    [r.id for r, _ in batch],
                ):
                    return False
                now: datetime = await conn.fetchval(q.NOW)
                await conn.copy_records_to_table(
                    "memories",
                    schema_name=self._schema,
                    records=[_copy_row(r, now) for r, _ in batch],
                    columns=q.DIRECT_COLUMNS,
                )
                await conn.copy_records_to_table(
                    "memory_events",
                    schema_name=self._schema,
                    records=[
                        (*_scope_params(r.scope), r.id, "created", r.version) for r, _ in batch
                    ],
                    columns=q.EVENT_COLUMNS,
                )
        except asyncpg.PostgresError as exc:
            # A duplicate (in the input or from a concurrent writer), a vector
            # PostgreSQL refuses...: the staging path sorts them out row by row.
            log.info("direct COPY of a batch failed (%s); staging from now on", exc)
            self._direct = False
            return False
        self.report.memories.inserted += len(batch)
        return True

    async def _insert_memories(self, batch: list[tuple[MemoryRecord, str]]) -> None:
        if not batch:
            return
        await self._write_memories(batch)
        if self._analyze_after_batch:
            # Into tables the planner knows nothing of, once a batch is in:
            # each later event's trigger reads its memory's history by index.
            self._analyze_after_batch = False
            with translate_errors():
                await self.conn.execute(q.analyze(self._schema))

    async def _write_memories(self, batch: list[tuple[MemoryRecord, str]]) -> None:
        if self._direct and await self._copy_memories(batch):
            return
        rows = [
            (
                i,
                *_scope_params(r.scope),
                r.id,
                r.key,
                r.content,
                r.content_hash,
                r.metadata,
                r.embedding,
                r.importance,
                r.version,
                r.created_at,
                r.updated_at,
                r.expires_at,
                r.access_count,
                r.last_accessed_at,
                r.valid_from,
                r.valid_to,
                r.supersedes,
                r.superseded_by,
                r.pinned,
                r.forgotten_at,
                r.reinforced_count,
                r.last_reinforced_at,
                r.content_unique,
            )
            for i, (r, _) in enumerate(batch)
        ]
        conn = self.conn
        with translate_errors():
            async with conn.transaction():
                await conn.copy_records_to_table(q.STAGING, records=rows, columns=q.STAGING_COLUMNS)
                inserted = {row["ord"] for row in await conn.fetch(self._insert_sql)}
                skipped = [i for i in range(len(batch)) if i not in inserted]
                diagnosis = (
                    await conn.fetch(q.diagnose_skipped(self._schema), skipped) if skipped else []
                )
        counts = self.report.memories
        counts.inserted += len(inserted)
        for row in diagnosis:
            record, source = batch[row["ord"]]
            if row["same"]:
                counts.already_present += 1
            elif row["id_owner"] is not None:
                self.report.reject(
                    source, "memory", f"id {record.id} is already used by a different memory"
                )
            elif row["content_owner"] is not None:
                self.report.reject(
                    source,
                    "memory",
                    f"the same content is already stored in this scope as memory "
                    f"{row['content_owner']}",
                )
            elif row["key_owner"] is not None:
                self.report.reject(
                    source,
                    "memory",
                    f"key {record.key!r} is already used in this scope by memory "
                    f"{row['key_owner']}",
                )
            else:
                # Another row of this batch took the id, content or key first.
                self.report.reject(
                    source, "memory", "duplicates another memory of the same input"
                )

    # ------------------------------------------------------------ assemblies

    async def _load_assembly(self, record: AssemblyRecord, source: str) -> None:
        await self._wait_in_flight()
        conn = self.conn
        scope = record.scope
        try:
            with translate_errors():
                async with conn.transaction():
                    created = await conn.fetchval(
                        q.insert_assembly(self._schema),
                        *_scope_params(scope),
                        record.id,
                        record.name,
                        record.description,
                        record.metadata,
                        record.version,
                        record.created_at,
                        record.updated_at,
                    )
                    if created is None:
                        await self._assembly_conflict(record, source)
                        return
                    await self._add_members(record, source)
        except MemsvcError as exc:
            self.report.reject(source, "assembly", f"{type(exc).__name__}: {exc}")
            return
        self.report.assemblies.inserted += 1

    async def _assembly_conflict(self, record: AssemblyRecord, source: str) -> None:
        scope = record.scope
        row = await self.conn.fetchrow(
            q.existing_assembly(self._schema),
            scope.tenant, record.id, record.name, scope.project, scope.agent, scope.session,
        )
        same_scope = row is not None and (
            (row["project_id"], row["agent_id"], row["session_id"])
            == (scope.project, scope.agent, scope.session)
        )
        if row is not None and row["id"] == record.id and same_scope and row["name"] == record.name:
            self.report.assemblies.already_present += 1
        elif row is not None and row["id"] == record.id:
            self.report.reject(
                source, "assembly", f"id {record.id} is already used by a different assembly"
            )
        elif row is not None:
            self.report.reject(
                source,
                "assembly",
                f"the name {record.name!r} is already taken in this scope by assembly {row['id']}",
            )
        else:
            self.report.reject(source, "assembly", "collided with a concurrent change; re-run")

    async def _add_members(self, record: AssemblyRecord, source: str) -> None:
        conn = self.conn
        tenant = record.scope.tenant
        found = {
            row["id"]: Scope.trusted(tenant, row["project_id"], row["agent_id"], row["session_id"])
            for row in await conn.fetch(
                q.lock_member_memories(self._schema), tenant, record.member_ids
            )
        }
        members: list[uuid.UUID] = []
        for memory_id in record.member_ids:
            memory_scope = found.get(memory_id)
            # Named as the input named it (a legacy id), not by the id derived from it.
            label = record.member_labels.get(memory_id, str(memory_id))
            if memory_scope is None:
                self.report.warn(
                    source, "assembly", f"member {label} is not a stored memory; left out"
                )
            elif not can_see(record.scope, memory_scope):
                self.report.warn(
                    source,
                    "assembly",
                    f"member {label} is outside the assembly's scope path; left out",
                )
            else:
                members.append(memory_id)
        if members:
            await conn.execute(q.insert_members(self._schema), tenant, record.id, members)
        # Counts and centroid from the members, by the repository's own repair path.
        await self._assemblies.recompute(record.id, tenant=tenant, conn=conn)
        await conn.execute(
            q.restore_assembly_version(self._schema),
            tenant, record.id, record.version, record.updated_at,
        )

    # ------------------------------------------------------------ checkpoints

    async def _flush_checkpoints(self) -> None:
        await self._wait_in_flight()
        batch, self._checkpoints = self._checkpoints, []
        self._checkpoint_bytes = 0
        if not batch:
            return
        columns: list[list[Any]] = [[] for _ in range(8)]
        for record, _ in batch:
            values: Sequence[Any] = (
                *_scope_params(record.scope),
                record.id,
                record.description,
                record.data,
                record.created_at,
            )
            for column, value in zip(columns, values, strict=True):
                column.append(value)
        with translate_errors():
            inserted = {
                row["id"]
                for row in await self.conn.fetch(q.insert_checkpoints(self._schema), *columns)
            }
        counts = self.report.checkpoints
        counts.inserted += len(inserted)
        counts.already_present += len(batch) - len(inserted)

    # ------------------------------------------------------------ store items

    async def _flush_store_items(self) -> None:
        """Insert buffered store items, each tenant's in one transaction with its vectors."""
        batch, self._store_items = self._store_items, []
        by_tenant: dict[str, list[StoreItemRecord]] = {}
        for record in batch:
            by_tenant.setdefault(record.tenant, []).append(record)
        vector_type = self._settings.vector_type
        for tenant, items in by_tenant.items():
            with translate_errors():
                async with self.conn.transaction():
                    await self.conn.execute(set_tenant(tenant))
                    rows = await self.conn.fetch(
                        q.insert_store_items(self._schema),
                        tenant,
                        [r.prefix for r in items],
                        [r.key for r in items],
                        [r.value for r in items],
                        [r.created_at for r in items],
                        [r.updated_at for r in items],
                        [r.expires_at for r in items],
                        [r.ttl_minutes for r in items],
                    )
                    inserted = {(row["prefix"], row["key"]) for row in rows}
                    vectors = [
                        (r.prefix, r.key, path, vector_bytes(vector, vector_type))
                        for r in items
                        if (r.prefix, r.key) in inserted
                        for path, vector in r.vectors.items()
                    ]
                    if vectors:
                        await self.conn.execute(
                            q.insert_store_vectors(self._schema, vector_type),
                            tenant,
                            *(list(column) for column in zip(*vectors, strict=True)),
                        )
            counts = self.report.store_items
            counts.inserted += len(inserted)
            counts.already_present += len(items) - len(inserted)
