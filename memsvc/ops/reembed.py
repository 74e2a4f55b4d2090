"""Online embedding-model migration: ``memsvc reembed`` / ``svc.maintenance.reembed``.

Steps, each safe to run from several processes at once and to resume after
a crash (the state is in the database, never in a worker):

1. start: record the migration in ``embedding_migrations`` (or join the one in
   progress, which must name the same embedder and dimension), add the second
   column ``embedding_next`` of the new dimension, and a trigger that clears
   it on rows whose content or old embedding changes;
2. fill: batches of rows lacking the new embedding, claimed ``FOR UPDATE SKIP
   LOCKED`` (workers never wait for each other), embedded and stored in the
   batch's transaction;
3. index: the new column's HNSW index, built ``CONCURRENTLY`` by one worker
   (a session advisory lock; the others wait for it);
4. switch, in one transaction, no sooner than twice
   ``embedding_state_refresh_s`` after the start (every service has read the
   migration by then): lock the migration row (writes and searches running
   under it finish first) and the memories table, embed the rows still
   missing, drop the old column (and its index), rename the new column and
   index to the old names, recompute the assemblies' centroids (they are
   means of member embeddings, so they live in the same space), record the
   new ``embedding_dim`` and mark the migration switched.

Searches read the old column until the switch and the new one after it;
services opened with ``next_embedder`` follow (see
:mod:`memsvc.memories.embedding_space`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from memsvc.assemblies import queries as assembly_queries
from memsvc.core.errors import MemsvcError, SchemaError, ValidationError
from memsvc.core.settings import Settings
from memsvc.core.validation import validate_embedded
from memsvc.db.codecs import register_codecs, vector_bytes
from memsvc.db.errors import translate_errors
from memsvc.db.pool import connect, find_vector_schema
from memsvc.db.tables import OPCLASSES, store_vector_bits_expression
from memsvc.embedding import Embedder
from memsvc.memories.embedding_space_queries import NEXT_INDEX
from memsvc.ops import reembed_queries as q
from memsvc.progress import NO_PROGRESS, ProgressReporter
from memsvc.transfer import bulk_queries as bulk_q
from memsvc.transfer.bulk import build_index, index_state, metadata_index_definition

log = logging.getLogger(__name__)

DEFAULT_BATCH = 200
MAX_BATCH = 10_000
# The switch waits at most this long for its locks, then lets others run and
# tries again (a queued ACCESS EXCLUSIVE request blocks new searches).
SWITCH_LOCK_TIMEOUT = "5s"
LOCK_POLL_S = 0.2
STORE_VECTOR_INDEX = "ix_langgraph_store_vectors_embedding_hnsw"
STORE_BITS_INDEX = "ix_langgraph_store_vectors_namespace_bits"
_FIRST_KEY = ("", uuid.UUID(int=0))


@dataclass
class ReembedReport:
    """What one ``reembed`` call did (its share of a migration other workers may share)."""

    migration_id: int
    embedder: str
    dim: int
    embedded: int = 0  # rows this worker embedded in batches
    batches: int = 0
    caught_up: int = 0  # rows embedded at the switch, under the table lock
    switched_here: bool = False  # this worker ran the switch
    already_done: bool = False  # the migration had switched before this call


class Reembedder:
    """One worker of a migration to ``embedder`` (``spec`` names it in the state table)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: Settings,
        dsn: str,
        embedder: Embedder,
        *,
        spec: str,
        dim: int,
        batch_size: int = DEFAULT_BATCH,
        progress: ProgressReporter = NO_PROGRESS,
    ) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= 16_000:
            raise ValidationError("dim", "must be an integer from 1 to 16000")
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, int)
            or not 1 <= batch_size <= MAX_BATCH
        ):
            raise ValidationError("batch_size", f"must be an integer from 1 to {MAX_BATCH}")
        if not isinstance(spec, str) or not spec.strip() or len(spec) > 1000:
            raise ValidationError("embedder", "needs a spec naming it (1-1000 characters)")
        self._pool = pool
        self._settings = settings
        self._schema = settings.db_schema
        self._dsn = dsn
        self._embedder = embedder
        self._spec = spec.strip()
        self._dim = dim
        self._batch = batch_size
        self._progress = progress
        self._vector_type = settings.vector_type
        self._column_type = f"{settings.vector_type}({int(dim)})"

    async def run(self) -> ReembedReport:
        """Take part in the migration until it has switched; returns this worker's report."""
        report = await self._start()
        if report.already_done:
            return report
        await self._fill(report)
        conn = await connect(self._dsn, self._settings)
        try:
            with translate_errors():
                await register_codecs(conn, await find_vector_schema(conn))
                # One worker builds the index and switches; the others wait
                # here and then find the migration switched. They poll: a
                # session blocked in pg_advisory_lock holds a snapshot, which
                # CREATE INDEX CONCURRENTLY would wait for (a deadlock).
                while not await conn.fetchval(bulk_q.TRY_LOCK, q.REEMBED_LOCK_KEY):
                    if await self._switched(conn, report.migration_id):
                        return report
                    await asyncio.sleep(LOCK_POLL_S)
                try:
                    if not await self._switched(conn, report.migration_id):
                        await self._build_index(conn)
                        await self._switch(conn, report)
                finally:
                    await conn.execute(bulk_q.UNLOCK, q.REEMBED_LOCK_KEY)
        finally:
            await conn.close()
        return report

    # ------------------------------------------------------------ start

    async def _start(self) -> ReembedReport:
        schema = self._schema
        async with self._pool.acquire() as conn, conn.transaction():
            with translate_errors():
                await conn.execute(q.LOCK, q.REEMBED_LOCK_KEY)
                if await conn.fetchval(q.sees_only_one_tenant(schema)):
                    # It would see no rows to embed, then drop the old column.
                    raise SchemaError(
                        "reembed must see every tenant's memories: row-level security is "
                        "forced on memories, so run it as a role with BYPASSRLS (or a superuser)"
                    )
                row = await conn.fetchrow(q.running(schema))
                if row is None:
                    last = await conn.fetchrow(q.last_switched(schema))
                    if last is not None and (last["embedder"], last["dim"]) == (
                        self._spec,
                        self._dim,
                    ):
                        # Another worker finished this very migration already.
                        return ReembedReport(last["id"], self._spec, self._dim, already_done=True)
                    await self._check_startable(conn)
                    row = await conn.fetchrow(q.start(schema), self._spec, self._dim)
                    assert row is not None
                    log.info("embedding migration %s to %s started", row["id"], self._spec)
                elif (row["embedder"], row["dim"]) != (self._spec, self._dim):
                    raise ValidationError(
                        "embedder",
                        f"a migration to {row['embedder']!r} ({row['dim']} dimensions) is in "
                        "progress: run reembed with that embedder and dimension to finish it",
                    )
                await conn.execute(q.add_column(schema, self._column_type))
                declared = await conn.fetchval(q.next_column_type(schema))
                if declared != self._column_type:
                    raise SchemaError(
                        f"memories.embedding_next is {declared}, this migration needs "
                        f"{self._column_type}: drop that column (nothing uses it) and run again"
                    )
                await conn.execute(q.reset_function(schema))
                await conn.execute(q.reset_trigger(schema))
        return ReembedReport(row["id"], self._spec, self._dim)

    async def _check_startable(self, conn: asyncpg.Connection) -> None:
        recorded = await conn.fetchval(q.recorded_dim(self._schema))
        if recorded != str(self._settings.embedding_dim):
            raise SchemaError(
                f"the database's embedding_dim is {recorded}, settings say "
                f"{self._settings.embedding_dim}: reembed runs with the current settings"
            )
        if self._dim != self._settings.embedding_dim and await conn.fetchval(
            q.store_vectors(self._schema)
        ):
            raise ValidationError(
                "dim",
                "the LangGraph store holds vectors of the current dimension and is not "
                "re-embedded: keep the dimension, or empty the store's index first",
            )

    # ------------------------------------------------------------ fill

    async def _embed(self, texts: Sequence[str]) -> list[bytes]:
        settings = self._settings
        vectors = validate_embedded(
            await self._embedder(list(texts)),
            len(texts),
            self._dim,
            settings.vector_type,
            "embedder",
            distance=settings.distance,
        )
        return [vector_bytes(v, settings.vector_type) for v in vectors]

    async def _fill_rows(self, conn: asyncpg.Connection, rows: Sequence[Any]) -> None:
        vectors = await self._embed([row["content"] for row in rows])
        await conn.execute(
            q.fill(self._schema, self._vector_type),
            [row["tenant_id"] for row in rows],
            [row["id"] for row in rows],
            vectors,
        )

    async def _fill(self, report: ReembedReport) -> None:
        """Embed batches until a whole pass from the start finds nothing left to claim."""
        try:
            await self._fill_passes(report)
        except MemsvcError as exc:
            if not isinstance(exc.__cause__, asyncpg.UndefinedColumnError):
                raise
            # Another worker switched while this one looked for rows: the
            # second column is gone, and its work is done.
            log.info("embedding migration %s switched by another worker", report.migration_id)
        self._progress.done()

    async def _fill_passes(self, report: ReembedReport) -> None:
        async with self._pool.acquire() as conn:
            with translate_errors():
                counts = await conn.fetchrow(q.progress(self._schema))
        assert counts is not None
        self._progress.start(
            f"re-embedding memories with {self._spec}", total=counts["remaining"]
        )
        claim = q.claim_batch(self._schema)
        after: tuple[str, uuid.UUID] = _FIRST_KEY
        while True:
            async with self._pool.acquire() as conn, conn.transaction():
                with translate_errors():
                    rows = await conn.fetch(claim, self._batch, *after)
                    if rows:
                        await self._fill_rows(conn, rows)
            if rows:
                after = (rows[-1]["tenant_id"], rows[-1]["id"])
                report.embedded += len(rows)
                report.batches += 1
                self._progress.advance(len(rows))
                continue
            if after == _FIRST_KEY:
                break
            # Rows behind the cursor may have changed (the trigger cleared
            # them) or been skipped while another worker held them: once more.
            after = _FIRST_KEY

    # ------------------------------------------------------------ index

    async def _build_index(self, conn: asyncpg.Connection) -> None:
        settings = self._settings
        definition = q.next_index(
            self._schema,
            OPCLASSES[(settings.vector_type, settings.distance)],
            settings.hnsw_m,
            settings.hnsw_ef_construction,
        )
        counts = await conn.fetchrow(q.progress(self._schema))
        assert counts is not None
        await build_index(
            conn, settings, NEXT_INDEX, definition, rows=counts["total"], progress=self._progress
        )
        # build_index set session settings for the build; they end here.
        await conn.execute("RESET ALL")

    # ------------------------------------------------------------ switch

    async def _switched(self, conn: asyncpg.Connection, migration_id: int) -> bool:
        row = await conn.fetchrow(q.state(self._schema), migration_id)
        return row is None or row["switched_at"] is not None

    async def _switch(self, conn: asyncpg.Connection, report: ReembedReport) -> None:
        grace = 2 * self._settings.embedding_state_refresh_s
        while True:
            row = await conn.fetchrow(q.state(self._schema), report.migration_id)
            assert row is not None
            age = row["age_s"]
            if age < grace:
                # Services re-read the state at least this often: after it,
                # every one of them knows the migration is running.
                await asyncio.sleep(grace - age)
                continue
            try:
                async with conn.transaction():
                    await conn.execute(q.set_lock_timeout(SWITCH_LOCK_TIMEOUT))
                    await self._switch_locked(conn, report)
                return
            except asyncpg.LockNotAvailableError:
                log.info("embedding switch: locks busy, trying again")
                await asyncio.sleep(0.5)

    async def _switch_locked(self, conn: asyncpg.Connection, report: ReembedReport) -> None:
        schema = self._schema
        row = await conn.fetchrow(q.by_id(schema), report.migration_id)
        if row is None or row["switched_at"] is not None:
            return
        await conn.execute(q.lock_memories(schema))
        await conn.execute(q.set_lock_timeout("0"))
        self._progress.start("switching to the new embeddings", total=None)
        while rows := await conn.fetch(q.claim_all(schema), self._batch):
            await self._fill_rows(conn, rows)
            report.caught_up += len(rows)
        views = await conn.fetch(q.dependent_views(schema))
        for view in views:
            await conn.execute(q.drop_view(schema, view["relname"]))
        for statement in q.switch_columns(schema):
            await conn.execute(statement)
        for view in views:
            await self._recreate_view(conn, view)
        new_dim = self._dim != self._settings.embedding_dim
        if new_dim:
            await self._retype_store(conn)
            await conn.execute(q.switch_centroids(schema, self._column_type))
        keys = await conn.fetch(assembly_queries.lock_every_assembly(schema))
        if keys:
            tenants = [k["tenant_id"] for k in keys]
            ids = [k["id"] for k in keys]
            recompute = assembly_queries.recompute(schema, self._vector_type, one_tenant=False)
            await conn.execute(recompute, tenants, ids)
        await conn.execute(q.record_dim(schema), str(self._dim))
        await conn.execute(q.mark_switched(schema), report.migration_id)
        report.switched_here = True
        self._progress.done()
        log.info("embedding migration %s switched to %s", report.migration_id, self._spec)

    async def _recreate_view(self, conn: asyncpg.Connection, view: Any) -> None:
        """Recreate a view the column swap had to drop, with its comments and grants."""
        for statement in q.recreate_view(
            self._schema,
            view["relname"],
            view["definition"],
            view["comment"],
            view["column_comments"],
            view["grants"],
        ):
            await conn.execute(statement)

    async def _retype_store(self, conn: asyncpg.Connection) -> None:
        """The LangGraph store's vector column shares the dimension; it must be empty."""
        if await conn.fetchval(q.store_vectors(self._schema)):
            raise SchemaError(
                "the LangGraph store gained vectors during the migration: it is not "
                "re-embedded, so the dimension cannot change; empty its index and run again"
            )
        settings = self._settings.model_copy(update={"embedding_dim": self._dim})
        statements = q.switch_store_vectors(
            self._schema,
            self._column_type,
            store_vector_bits_expression(settings),
            self._dim,
            [
                metadata_index_definition(settings, STORE_VECTOR_INDEX),
                metadata_index_definition(settings, STORE_BITS_INDEX),
            ],
        )
        for statement in statements:
            await conn.execute(statement)


async def migration_progress(conn: asyncpg.Connection, schema: str) -> dict[str, Any] | None:
    """The migration in progress with its row counts, or None (for ``doctor``)."""
    row = await conn.fetchrow(q.running(schema))
    if row is None:
        return None
    declared = await conn.fetchval(q.next_column_type(schema))
    counts = None if declared is None else await conn.fetchrow(q.progress(schema))
    index = await index_state(conn, schema, NEXT_INDEX)
    return {
        "id": row["id"],
        "embedder": row["embedder"],
        "dim": row["dim"],
        "started_at": row["started_at"],
        "total": None if counts is None else counts["total"],
        "remaining": None if counts is None else counts["remaining"],
        "index": "absent" if index is None else ("valid" if index.valid else "building"),
    }
