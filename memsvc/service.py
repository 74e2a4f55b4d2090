"""The facade apps use: :class:`MemoryService`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator, Generator, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol

import asyncpg

from memsvc.assemblies.repository import AssemblyRepository
from memsvc.changes.feed import ChangeFeed
from memsvc.changes.signal import ChangeNotifier
from memsvc.checkpoints.repository import CheckpointRepository
from memsvc.core.errors import MemsvcError, SchemaError
from memsvc.core.models import Change
from memsvc.core.scope import Include, Scope
from memsvc.core.settings import Settings
from memsvc.db import migrate
from memsvc.db.embedded import EmbeddedPostgres
from memsvc.db.errors import translate_errors
from memsvc.db.pool import connect, create_pool, find_vector_schema
from memsvc.db.replicas import ReadRouter
from memsvc.embedding import Embedder
from memsvc.erasure.eraser import DEFAULT_BATCH as ERASE_BATCH
from memsvc.erasure.eraser import Erasure, Vacuum
from memsvc.erasure.receipt import ErasureReceipt
from memsvc.extraction.protocols import Extractor
from memsvc.langgraph_db.checkpoints import LangGraphCheckpointRepository
from memsvc.langgraph_db.store_indexes import NamespaceIndexes
from memsvc.memories.embedding_space import EmbeddingSpace
from memsvc.memories.policies import PolicyRepository
from memsvc.memories.ranking import Reranker
from memsvc.memories.repository import MemoryRepository
from memsvc.ops.maintenance import Maintenance
from memsvc.progress import NO_PROGRESS, ProgressReporter
from memsvc.remember.pipeline import Remembering
from memsvc.remember.result import RememberResult
from memsvc.remember.session import SessionMemory
from memsvc.telemetry import unwatch, watch
from memsvc.transfer.index_repair import find_broken_indexes, rebuild_broken_indexes
from memsvc.working import WorkingStore, open_working_store

log = logging.getLogger(__name__)

# Tables whose rows belong to a tenant (row-level security applies to them).
TENANT_TABLES = (
    "memories",
    "memory_events",
    "entity_events",
    "assemblies",
    "assembly_members",
    "session_checkpoints",
    "langgraph_checkpoints",
    "langgraph_checkpoint_blobs",
    "langgraph_checkpoint_writes",
    "langgraph_store_items",
    "langgraph_store_vectors",
    "langgraph_store_namespace_indexes",
    "remembered_messages",
    "consolidation_clusters",
    "consolidation_members",
    "memory_policies",
    "memory_scope_indexes",
)


class _Stoppable(Protocol):
    async def stop_background_work(self) -> None: ...


class MemoryService:
    """Long-term memories, assemblies, checkpoints and working memory, on PostgreSQL.

    Open it once per process and share it::

        async with MemoryService.open(Settings()) as svc:
            await svc.memories.add(scope, "the user prefers metric units")

    or ``svc = await MemoryService.open()`` ... ``await svc.close()``.
    """

    memories: MemoryRepository
    assemblies: AssemblyRepository
    checkpoints: CheckpointRepository
    policies: PolicyRepository
    maintenance: Maintenance

    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        *,
        dsn: str,
        embedder: Embedder | None = None,
        reranker: Reranker | None = None,
        embedded: EmbeddedPostgres | None = None,
        working_store: WorkingStore,
        reads: ReadRouter | None = None,
        next_embedder: Embedder | None = None,
        extractor: Extractor | None = None,
    ) -> None:
        self.settings = settings
        self.working_store = working_store
        self.dsn = dsn
        self.embedder = embedder
        self.reranker = reranker
        self._pool = pool
        self._embedded = embedded
        self._closed = False
        # Integrations with background work of their own (a LangGraph store's
        # sweeper and index builds), stopped before the pool closes: a pool
        # waits for every connection out, and a build can hold one for minutes.
        self._attached: weakref.WeakSet[_Stoppable] = weakref.WeakSet()
        # The pool's connections belong to the loop the service was opened on.
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._reads = reads or ReadRouter(pool, settings, [])
        # Which model memories are embedded with, and a migration to another.
        self.embedding_space = EmbeddingSpace(settings, embedder, next_embedder)
        self.assemblies = AssemblyRepository(
            pool, settings, reads=self._reads, space=self.embedding_space
        )
        self.checkpoints = CheckpointRepository(pool, settings, reads=self._reads)
        self.policies = PolicyRepository(pool, settings, reads=self._reads)
        self.memories = MemoryRepository(
            pool,
            settings,
            embedder=embedder,
            reranker=reranker,
            before_delete=self.assemblies.detach_memories,
            embeddings_changed=self.assemblies.embeddings_changed,
            reads=self._reads,
            space=self.embedding_space,
            policies=self.policies,
        )
        # Its directory reads run in the background: stopped before the pool closes.
        self.stop_on_close(self.memories.scope_indexes)
        self._feed = ChangeFeed(pool, settings, dsn=dsn)
        self._notifier = ChangeNotifier(dsn, settings)
        self._notifier.attach(self.memories, self.assemblies, self.checkpoints)
        self.maintenance = Maintenance(
            pool,
            settings,
            dsn=dsn,
            assemblies=self.assemblies,
            checkpoints=self.checkpoints,
            memories=self.memories,
            reads=self._reads,
            space=self.embedding_space,
        )
        # Erasure gets its repositories from the service, routed and tracked
        # like every other (the integrations make their own per store or saver).
        self._erasure = Erasure(
            pool,
            settings,
            assemblies=self.assemblies,
            langgraph_threads=LangGraphCheckpointRepository(pool, settings, reads=self._reads),
            namespace_indexes=NamespaceIndexes(pool, settings),
            working_store=working_store,
            reads=self._reads,
            scope_indexes=self.memories.scope_indexes,
        )
        self._remembering = Remembering(
            pool,
            settings,
            memories=self.memories,
            space=self.embedding_space,
            extractor=extractor,
            reads=self._reads,
        )
        watch(self, schema=settings.db_schema)

    @classmethod
    def open(
        cls,
        settings: Settings | None = None,
        *,
        embedder: Embedder | None = None,
        reranker: Reranker | None = None,
        next_embedder: Embedder | None = None,
        rebuild_invalid_indexes: bool = True,
        progress: ProgressReporter = NO_PROGRESS,
        extractor: Extractor | None = None,
    ) -> _Opening:
        """Connect (starting the embedded PostgreSQL if no URL is set) and check the schema.

        ``embedder`` embeds text (memories without an embedding, text queries);
        ``reranker``, an async ``(query_text, [contents]) -> [scores]``, reorders
        the candidates of text queries before the top ``k`` are cut.
        ``next_embedder`` is the model an embedding-model migration (``memsvc
        reembed``) moves to: while one runs, writes are embedded with both,
        and after its switch the service embeds with this one (see the
        docs/how-to/reembedding.md).

        An index of memsvc's that an interrupted build left invalid (or a
        vector index a stopped bulk load left missing) is rebuilt before the
        service opens, with a warning in the log: until then searches would
        fall back to exact scans for good. The build runs concurrently (other
        processes keep reading and writing) but open waits for it, which on a
        large table takes minutes; pass ``rebuild_invalid_indexes=False`` to
        open at once and leave it to ``memsvc migrate`` or ``memsvc doctor
        --repair``. ``progress`` is told the rebuild (see :mod:`memsvc.progress`).

        ``extractor`` is what :meth:`remember` uses when a call names none
        (default: the one ``MEMSVC_EXTRACTOR`` names, if set).

        Use as ``async with MemoryService.open(...) as svc`` or
        ``svc = await MemoryService.open(...)``. Raises SchemaError when the
        database is not migrated (unless ``auto_migrate``) or was created with
        another embedding dimension, vector type or distance.
        """
        return _Opening(
            settings or Settings(),
            embedder,
            reranker,
            next_embedder,
            _Repairs(rebuild_invalid_indexes, progress),
            extractor,
        )

    @classmethod
    async def _open(
        cls,
        settings: Settings,
        embedder: Embedder | None,
        reranker: Reranker | None = None,
        next_embedder: Embedder | None = None,
        repairs: _Repairs | None = None,
        extractor: Extractor | None = None,
    ) -> MemoryService:
        embedded: EmbeddedPostgres | None = None
        if settings.database_url is None:
            embedded = EmbeddedPostgres(settings.data_dir)
            dsn = await asyncio.to_thread(embedded.start)
        else:
            dsn = settings.database_url
        try:
            vector_schema = await prepare_database(settings, dsn, repairs or _Repairs())
            pool = await create_pool(dsn, settings, vector_schema)
        except BaseException:
            if embedded is not None:
                await asyncio.to_thread(embedded.close)
            raise
        try:
            reads = await ReadRouter.open(pool, settings, vector_schema)
        except BaseException:
            await pool.close()
            if embedded is not None:
                await asyncio.to_thread(embedded.close)
            raise
        try:
            working_store, _ = await open_working_store(settings)
        except BaseException:
            await reads.close()
            await pool.close()
            if embedded is not None:
                await asyncio.to_thread(embedded.close)
            raise
        service = cls(
            settings,
            pool,
            dsn=dsn,
            embedder=embedder,
            reranker=reranker,
            embedded=embedded,
            working_store=working_store,
            reads=reads,
            next_embedder=next_embedder,
            extractor=extractor,
        )
        try:
            with translate_errors():
                await service.embedding_space.refresh(pool)
        except BaseException:
            await service.close()
            raise
        return service

    def changes(
        self,
        scope: Scope | None = None,
        *,
        include: Include = "descendants",
        since: str | datetime | None = None,
        with_values: bool = False,
    ) -> AsyncIterator[Change]:
        """Follow every committed change to memories, assemblies and checkpoints.

        An async iterator of :class:`memsvc.Change`, oldest first, that waits
        for new changes once it has caught up (it never ends by itself)::

            async for change in svc.changes(scope, since=saved_cursor):
                handle(change)
                saved_cursor = change.cursor

        Resuming from the cursor of the last change processed delivers every
        committed change exactly once, each entity's in version order.
        ``since``: a ``Change.cursor``, ``"now"``, a timezone-aware datetime
        (changes whose transaction started then or later, some earlier ones
        too), or None (the oldest change still retained). ``include``:
        ``"descendants"`` (default), ``"exact"`` or ``"ancestors"``. Raises
        CursorExpiredError when gc removed changes after ``since``, and its
        subclass FeedEpochError for a cursor from before the database was
        restored into another cluster. See docs/how-to/change-feed.md.
        """
        return self._feed.changes(scope, include=include, since=since, with_values=with_values)

    async def remember(
        self,
        scope: Scope,
        messages: Sequence[Any],
        *,
        extractor: Extractor | None = None,
        k_candidates: int = 10,
    ) -> RememberResult:
        """Remember what a conversation's new messages state, each message exactly once.

        ``messages`` are dicts (``role``, ``content``, ``id``, optional
        ``at``) or LangChain messages, each with an id unique in the scope.
        Messages already remembered in this exact scope are skipped. For each
        batch of the others the extractor lists the facts they state, is
        shown, under short handles, the ``k_candidates`` memories of the
        scope most related to each fact (hybrid search), and answers with
        operations (ADD, UPDATE, SUPERSEDE, INVALIDATE, NOOP), each checked
        and applied or refused with a reason; a batch's operations and its
        messages' ledger rows commit in one transaction. Every memory
        written records its provenance in ``metadata["provenance"]``.
        See the documentation page "Remembering conversations".

        Raises:
            ValidationError: A malformed message (naming it), no extractor.
            ExtractionError: The extractor's endpoint failed (nothing of the
                batch applied; earlier batches stay applied).
            ConflictError: The memories shown changed twice while the
                extractor answered (nothing of the batch applied).
        """
        return await self._remembering.remember(
            scope, messages, extractor=extractor, k_candidates=k_candidates
        )

    @property
    def extractor(self) -> Extractor | None:
        """The extractor :meth:`remember` uses when a call names none."""
        return self._remembering.default_extractor()

    def working(self, scope: Scope) -> SessionMemory:
        """The working memory of a session (``scope`` must name a session).

        Its checkpoints are stored durably in PostgreSQL (``svc.checkpoints``);
        ``consolidate()`` remembers its scratchpad into the session scope's
        long-term memory (see :class:`memsvc.remember.SessionMemory`).
        """
        return SessionMemory(
            scope, self.working_store, self.settings, self.checkpoints,
            remembering=self._remembering,
        )

    async def erase(
        self,
        scope: Scope,
        *,
        include: Include = "descendants",
        batch_size: int = ERASE_BATCH,
        progress: ProgressReporter = NO_PROGRESS,
        vacuum: Vacuum = False,
    ) -> ErasureReceipt:
        """Erase everything memsvc holds for ``scope``, leaving no content behind.

        Unlike ``memories.delete_scope`` (which keeps each memory's content in
        its history, for audit), this removes the scope's memories with their
        whole history (one content-free ``erased`` event stays per memory),
        assembly memberships (surviving assemblies recomputed), the scope's
        assemblies and session checkpoints, the ids of messages ``remember``
        recorded (they count as new again), LangGraph checkpoints and store
        items when ``scope`` is a whole tenant, and the working memory of every
        session under it. Batched, idempotent, safe to run again after a crash.
        Ids below the scope the caller names become pseudonyms in what stays
        (tombstones, ledger events). ``vacuum=True`` (or ``"full"``) vacuums
        the tables it changed afterwards. The receipt says what went, what a
        check afterwards looked at and found (``verified``), and what still
        identifies the scope. Raises RedisUnavailableError, having erased
        nothing, when Redis is configured and does not answer. See
        :mod:`memsvc.erasure.eraser`.
        """
        return await self._erasure.erase(
            scope, include=include, batch_size=batch_size, progress=progress, vacuum=vacuum
        )

    @property
    def pool(self) -> asyncpg.Pool:
        """The asyncpg pool, for apps that run their own statements alongside memsvc's."""
        return self._pool

    @property
    def reads(self) -> ReadRouter:
        """Where reads run: ``async with svc.reads.connection() as conn`` gives a
        connection to read from (a healthy replica that has replayed this
        service's writes, else the primary); ``svc.reads.status()`` tells
        each replica's state. Without ``replica_urls`` it is always the primary.
        """
        return self._reads

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the service was opened on; its coroutines must run there.

        Code on other threads submits work to it with
        ``asyncio.run_coroutine_threadsafe(coroutine, svc.loop)``.
        """
        if self._loop is None:
            raise MemsvcError("this MemoryService was not opened on an event loop")
        return self._loop

    def stop_on_close(self, integration: _Stoppable) -> None:
        """Have :meth:`close` first stop ``integration``'s background work (held weakly)."""
        self._attached.add(integration)

    async def close(self) -> None:
        """Close the pool; stop the embedded server if this process started it."""
        if self._closed:
            return
        self._closed = True
        unwatch(self)
        # Every step runs even when one before it failed (the first failure is
        # raised at the end): the pool and the embedded server always close.
        async with contextlib.AsyncExitStack() as steps:
            if self._embedded is not None:
                steps.push_async_callback(asyncio.to_thread, self._embedded.close)
            steps.push_async_callback(self._pool.close)
            steps.push_async_callback(self._reads.close)
            steps.push_async_callback(self.working_store.close)
            steps.push_async_callback(self.maintenance.close)
            steps.push_async_callback(self._notifier.close)
            for attached in list(self._attached):
                steps.push_async_callback(attached.stop_background_work)

    async def __aenter__(self) -> MemoryService:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


@dataclass(frozen=True, slots=True)
class _Repairs:
    """What opening does about memsvc's broken indexes (see ``MemoryService.open``)."""

    rebuild: bool = True
    progress: ProgressReporter = NO_PROGRESS


class _Opening:
    """What ``MemoryService.open()`` returns: awaitable, or an async context manager."""

    def __init__(
        self,
        settings: Settings,
        embedder: Embedder | None,
        reranker: Reranker | None,
        next_embedder: Embedder | None = None,
        repairs: _Repairs | None = None,
        extractor: Extractor | None = None,
    ) -> None:
        self._settings = settings
        self._embedder = embedder
        self._reranker = reranker
        self._next_embedder = next_embedder
        self._repairs = repairs or _Repairs()
        self._extractor = extractor
        self._service: MemoryService | None = None

    def __await__(self) -> Generator[Any, None, MemoryService]:
        return MemoryService._open(
            self._settings, self._embedder, self._reranker, self._next_embedder, self._repairs,
            self._extractor,
        ).__await__()

    async def __aenter__(self) -> MemoryService:
        self._service = await MemoryService._open(
            self._settings, self._embedder, self._reranker, self._next_embedder, self._repairs,
            self._extractor,
        )
        return self._service

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._service is not None:
            await self._service.close()


async def prepare_database(
    settings: Settings, dsn: str, repairs: _Repairs | None = None
) -> str:
    """Check the database before the pool opens; returns pgvector's schema.

    It must be at the migrations' head (migrated here when allowed), created
    with the same vector settings, and, with row-level security on, enforce
    it on every tenant table. One connection serves every check. Broken
    indexes of memsvc's are rebuilt (unless ``repairs.rebuild`` is False).
    """
    repairs = repairs or _Repairs()
    head = migrate.head_revision()
    conn = await connect(dsn, settings)
    try:
        with translate_errors():
            current = await migrate.current_revision(conn, settings.db_schema)
            if current != head:
                if not settings.should_auto_migrate:
                    raise SchemaError(
                        f"database schema {settings.db_schema!r} is at revision "
                        f"{current or 'none'}, this memsvc needs {head}: run `memsvc migrate` "
                        "(or `alembic upgrade head`), or set MEMSVC_AUTO_MIGRATE=true"
                    )
                log.info("migrating schema %s from %s to %s", settings.db_schema, current, head)
                await migrate.upgrade_async(settings, dsn)
            rows = await conn.fetch(f"SELECT key, value FROM {settings.db_schema}.schema_info")
            recorded = {row["key"]: row["value"] for row in rows}
            partitioning = migrate.recorded_partitions_mismatch(recorded, settings)
            if partitioning is not None:
                raise SchemaError(partitioning)
            mismatches = migrate.recorded_settings_mismatch(recorded, settings)
            if mismatches:
                raise SchemaError(
                    "the database was created with other vector settings: "
                    + "; ".join(mismatches)
                    + ". (A new db_schema or database would start an empty schema instead.)"
                )
            if settings.row_level_security:
                await _check_row_level_security(conn, settings)
            vector_schema = await find_vector_schema(conn)
        if repairs.rebuild and await find_broken_indexes(conn, settings):
            await rebuild_broken_indexes(dsn, settings, progress=repairs.progress)
        return vector_schema
    finally:
        await conn.close()


async def _check_row_level_security(conn: asyncpg.Connection, settings: Settings) -> None:
    """With row_level_security on, refuse tables whose policies are not enforced."""
    loose = await conn.fetch(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = $1 AND c.relname = ANY($2::text[]) "
        "AND NOT (c.relrowsecurity AND c.relforcerowsecurity)",
        settings.db_schema,
        list(TENANT_TABLES),
    )
    if loose:
        names = ", ".join(row["relname"] for row in loose)
        raise SchemaError(
            f"row_level_security is on but these tables do not enforce it: {names}. Run "
            "ALTER TABLE ... ENABLE ROW LEVEL SECURITY and FORCE ROW LEVEL SECURITY on them "
            "(as their owner), or migrate a new schema with MEMSVC_ROW_LEVEL_SECURITY=true"
        )
