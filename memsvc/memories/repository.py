"""Long-term memories: :class:`MemoryRepository` (``svc.memories``), its writes and reads.

A search is planned in :mod:`memsvc.memories.search_plan` (its arguments, its
one statement, cached by shape) and run in :mod:`memsvc.memories.search`
(rows, hits, reordering); writes check their input in
:mod:`memsvc.memories.write_inputs` and insert past duplicates in
:mod:`memsvc.memories.inserts`.
"""

from __future__ import annotations

import builtins
import functools
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import asyncpg
import numpy as np

from memsvc.changes.signal import signals_changes
from memsvc.core.errors import ConflictError, NotFoundError, ValidationError
from memsvc.core.ids import new_id, parse_id
from memsvc.core.models import Memory, SearchHit, real_value
from memsvc.core.scope import Include, Scope, validate_include
from memsvc.core.settings import Settings
from memsvc.core.validation import (
    validate_limit,
    validate_metadata,
    validate_name,
    validate_scope,
    validate_sequence,
)
from memsvc.db.codecs import vector_bytes
from memsvc.db.replicas import ReadRouter
from memsvc.db.repository import citus_limited
from memsvc.db.sql import Params, scope_condition
from memsvc.embedding import Embedder
from memsvc.memories import queries as q
from memsvc.memories import ranking
from memsvc.memories.embedding_space import EmbeddingSpace
from memsvc.memories.inserts import (
    batch_memories,
    find_duplicate,
    insert_batch,
    insert_one,
    scope_params,
)
from memsvc.memories.reads import KEY_MAX_LENGTH, MAX_PAGE, MemoryReads
from memsvc.memories.search import SearchRunner
from memsvc.memories.search_plan import (
    MAX_K,
    MAX_QUERY_CHARS,
    PlannedSearch,
    Rank,
    SearchMode,
    SearchPlan,
    SearchPlanner,
)
from memsvc.memories.write_inputs import (
    content_hash,
    prepare,
    prepare_items,
    prepare_update,
)
from memsvc.telemetry import traced_operations

# The limits and the fingerprint live beside the code that uses them; callers
# (integrations, transfer, tests) import them from here too.
__all__ = [
    "KEY_MAX_LENGTH",
    "MAX_K",
    "MAX_PAGE",
    "MAX_QUERY_CHARS",
    "DeleteHook",
    "MemoryRepository",
    "content_hash",
]

# Called with memory rows already locked, before they are deleted, in the
# same transaction (assemblies use it to keep member counts and centroids).
DeleteHook = Callable[[asyncpg.Connection, list[str], list[uuid.UUID]], Awaitable[None]]



@traced_operations("memsvc.memories", exclude=["delete_locked"])
@signals_changes(
    "add", "add_many", "put", "update", "patch_metadata", "delete", "delete_locked", "delete_scope"
)
class MemoryRepository(MemoryReads):
    """Store, fetch, change and search long-term memories.

    Writes never lose or duplicate under concurrency: exact duplicates within a
    scope are refused by a unique index (the existing memory is returned),
    keyed memories are upserted through a unique index, updates take a row
    lock and can check an expected version, and every change writes its history
    event in the same statement.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: Settings,
        *,
        embedder: Embedder | None = None,
        reranker: ranking.Reranker | None = None,
        before_delete: DeleteHook | None = None,
        embeddings_changed: DeleteHook | None = None,
        reads: ReadRouter | None = None,
        space: EmbeddingSpace | None = None,
    ) -> None:
        super().__init__(pool, settings, reads=reads)
        self._init_reads()
        # The embedder and dimension in use; they change at the switch of an
        # embedding-model migration (see memsvc.memories.embedding_space).
        self._space = space or EmbeddingSpace(settings, embedder)
        self._before_delete = before_delete
        # Called, in the same transaction and after the memory row is locked,
        # when a memory's embedding changed (assemblies recompute centroids).
        self._embeddings_changed = embeddings_changed
        self._insert_sql = q.insert_memory(self._schema)
        self._insert_many_sql = q.insert_many(self._schema, settings.vector_type)
        # The one search path: arguments -> plan (its statement cached by
        # shape) -> rows -> hits (see memsvc.memories.search_plan).
        self._planner = SearchPlanner(settings, self._space, reranks=reranker is not None)
        self._runner = SearchRunner(settings, self._run_search, reranker)

    # ------------------------------------------------------------------ input

    @property
    def embedding_dim(self) -> int:
        """The dimension of the embeddings memories are stored and searched with now.

        ``Settings.embedding_dim`` until an embedding-model migration switches.
        """
        return self._space.dim

    async def _follow_space(self) -> None:
        """Notice an embedding-model migration (re-read at most every few seconds)."""
        if self._space.refresh_due():
            await self._space.refresh(self._pool)
        self._space.check()

    # ------------------------------------------------------------------ writes

    @citus_limited("memories.add")
    async def add(
        self,
        scope: Scope,
        content: str,
        *,
        embedding: Sequence[float] | np.ndarray[Any, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        importance: float = 0.5,
        ttl: float | Any | None = None,
        id: uuid.UUID | str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Memory:
        """Store a memory and return it.

        Adding content that already exists in the same exact scope returns the
        existing memory instead of a duplicate (a unique index decides, so
        racing writers agree). Passing your own ``id`` makes a retried call
        idempotent; reusing an id for different content is a ConflictError.
        An expired memory (not yet collected by gc) counts as gone: the add
        removes it and stores a new memory (see
        :mod:`memsvc.memories.expired`).

        Args:
            scope: Where the memory lives.
            content: The text to remember.
            embedding: Its vector; computed by the service's embedder when omitted.
            metadata: A JSON object, filterable in :meth:`search`.
            importance: In [0, 1].
            ttl: Seconds (or a timedelta) until the memory expires; None keeps it.
            id: A client-chosen UUID.
            conn: A connection (and transaction) of your own to run on.
        """
        scope = validate_scope(scope)
        fields = prepare(self._settings, content, metadata, importance, ttl)
        text, digest, meta, weight, ttl_s = fields
        memory_id = new_id() if id is None else parse_id("id", id)
        await self._follow_space()
        if embedding is None and self._space.embedder is not None:
            # Content already stored here comes back as it is, as the insert
            # below would return it: embedding the text again would be wasted.
            # Only a shortcut: the insert's conflict handling stays the truth.
            stored, _ = await self._read(
                conn,
                lambda active: find_duplicate(active, self._schema, scope, memory_id, digest),
                routed=False,
                tenant=scope.tenant,
            )
            if stored is not None:
                return stored
        generation, (vector, nexts) = await self._space.consistent(
            lambda: self._space.embeddings_for(text, embedding)
        )
        args = [*scope_params(scope), memory_id, text, digest, meta, vector, weight, ttl_s]

        async def attempt() -> Memory:
            async with self._writing(scope, conn) as active:
                vector = args[8] = self._space.held_vector(generation, args[8], nexts and nexts[0])
                row, existing = await insert_one(
                    active, self._schema, self._insert_sql, scope, args, self.delete_locked
                )
                if existing is not None:
                    return existing
                if nexts is not None:
                    await self._space.write_next(
                        active, [scope.tenant], [memory_id], [digest], nexts
                    )
            return Memory(
                id=memory_id,
                scope=scope,
                content=text,
                content_hash=digest,
                metadata=json.loads(meta),
                embedding=None if vector is None else vector.tolist(),
                # the column is REAL: report what a read returns
                importance=real_value(weight),
                version=row["version"],
                created_at=row["created_at"],
                updated_at=row["updated_at"],
                expires_at=row["expires_at"],
            )

        return await self._retrying(attempt, owns_transaction=conn is None)

    @asynccontextmanager
    async def _writing(
        self, scope: Scope, conn: asyncpg.Connection | None, *, always_transaction: bool = False
    ) -> AsyncIterator[asyncpg.Connection]:
        """Where writes to a scope run, enforcing ``max_memories_per_scope``.

        With a limit, writers to one scope take a transaction-scoped advisory
        lock, write, then count: past the limit the transaction rolls back
        with a ConflictError. Counting under the lock, after the write, is what
        stops racing writers from each seeing room for one more (write skew).
        """
        limit = self._settings.max_memories_per_scope
        migrating = self._space.migrating
        if limit is None and not always_transaction and not migrating:
            async with self._connection(conn, tenant=scope.tenant) as active:
                yield active
            return
        async with self._transaction(conn, tenant=scope.tenant) as active:
            # During an embedding-model migration the write runs wholly before
            # or wholly after the switch (see EmbeddingSpace.hold).
            await self._space.hold(active)
            if limit is not None:
                key = json.dumps([self._schema, "memories", *scope.levels])
                await active.execute(q.LOCK_SCOPE, key)
            yield active
            if limit is not None:
                params = Params()
                sql = q.count(self._schema, scope_condition(scope, "exact", params))
                if await active.fetchval(sql, *params.values) > limit:
                    raise ConflictError(
                        f"scope would hold more than max_memories_per_scope={limit} memories"
                    )

    @citus_limited("memories.put")
    async def put(
        self,
        scope: Scope,
        key: str,
        content: str,
        *,
        embedding: Sequence[float] | np.ndarray[Any, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        importance: float = 0.5,
        ttl: float | Any | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Memory:
        """Insert or replace the memory stored under ``key`` in this exact scope.

        One atomic upsert: racing writers never create two rows for a key; each
        replacement bumps ``version`` and records the prior value in history.
        """
        scope = validate_scope(scope)
        key = validate_name(key, "key", KEY_MAX_LENGTH)
        fields = prepare(self._settings, content, metadata, importance, ttl)
        text, digest, meta, weight, ttl_s = fields
        await self._follow_space()
        generation, (vector, nexts) = await self._space.consistent(
            lambda: self._space.embeddings_for(text, embedding)
        )
        params = Params(*scope_params(scope), key, new_id(), text, digest, meta, vector)
        params.values.extend([weight, ttl_s])
        scope_sql = scope_condition(scope, "exact", params)
        sql = q.upsert_by_key(self._schema, scope_sql)

        async def attempt() -> Any:
            async with self._writing(scope, conn, always_transaction=True) as active:
                params.values[9] = self._space.held_vector(
                    generation, params.values[9], nexts and nexts[0]
                )
                row = await active.fetchrow(sql, *params.values)
                assert row is not None
                if nexts is not None:
                    await self._space.write_next(
                        active, [scope.tenant], [row["id"]], [digest], nexts
                    )
                if row["in_assembly"] and self._embeddings_changed is not None:
                    await self._embeddings_changed(active, [row["tenant_id"]], [row["id"]])
            return row

        return Memory.from_row(await self._retrying(attempt, owns_transaction=conn is None))

    @citus_limited("memories.add_many")
    async def add_many(
        self,
        scope: Scope,
        items: Iterable[str | Mapping[str, Any]],
        *,
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[Memory]:
        """Store many memories in one transaction: all of them, or none.

        Each item is a string (the content) or a mapping with ``content`` and
        optionally ``embedding``, ``metadata``, ``importance``, ``ttl``, ``id``.
        Every item is validated before anything is sent. Duplicates (of stored
        memories or within the batch) come back as the existing memory, so the
        result has one memory per item, in order; an expired memory counts as
        gone, as in :meth:`add`.
        """
        scope = validate_scope(scope)
        batch = validate_sequence(items, "items")
        ids, texts, digests, metas, vectors, weights, ttls = prepare_items(
            self._settings, self._space, batch
        )
        await self._follow_space()
        given = builtins.list(vectors)

        async def embed() -> tuple[builtins.list[int], builtins.list[Any] | None]:
            vectors[:] = given
            if self._space.embedder is not None and any(vector is None for vector in vectors):
                await self._embed_missing(scope, texts, digests, vectors, conn)
            # During a migration: the new model's vectors of the items that have one.
            embedded = [i for i, vector in enumerate(vectors) if vector is not None]
            return embedded, await self._space.embed_next([texts[i] for i in embedded])

        generation, (embedded, nexts) = await self._space.consistent(embed)
        if not ids:
            return []
        vector_type = self._settings.vector_type

        async def attempt() -> tuple[dict[uuid.UUID, Memory], dict[str, Memory]]:
            async with self._writing(scope, conn, always_transaction=True) as active:
                for j, i in enumerate(embedded):
                    next_vector = None if nexts is None else nexts[j]
                    vectors[i] = self._space.held_vector(generation, vectors[i], next_vector)
                wire = [None if v is None else vector_bytes(v, vector_type) for v in vectors]
                columns: builtins.list[builtins.list[Any]] = [
                    ids, texts, digests, metas, wire, weights, ttls
                ]
                found = await insert_batch(
                    active, self._schema, self._insert_many_sql, scope, columns, self.delete_locked
                )
                if nexts is not None:
                    await self._space.write_next(
                        active,
                        [scope.tenant] * len(embedded),
                        [ids[i] for i in embedded],
                        [digests[i] for i in embedded],
                        nexts,
                    )
            return found

        by_id, by_digest = await self._retrying(attempt, owns_transaction=conn is None)
        return batch_memories(scope, ids, digests, by_id, by_digest)

    async def _embed_missing(
        self,
        scope: Scope,
        texts: builtins.list[str],
        digests: builtins.list[str],
        vectors: builtins.list[Any],
        conn: asyncpg.Connection | None,
    ) -> None:
        """Fill the missing ``vectors``, embedding each distinct new content once.

        Content already stored in the scope reuses its stored embedding (the
        same text embeds to the same vector), so a batch re-adding known
        memories costs no embedder call, and if the stored row is deleted
        meanwhile the insert still has a vector for the new one.
        """
        params = Params(sorted({digests[i] for i, vector in enumerate(vectors) if vector is None}))
        sql = q.stored_embeddings(self._schema, scope_condition(scope, "exact", params))
        rows = await self._read(
            conn, lambda active: active.fetch(sql, *params.values), routed=False,
            tenant=scope.tenant,
        )
        stored = {row["content_hash"]: row["embedding"] for row in rows}
        await self._space.fill_missing(texts, digests, vectors, stored)

    @citus_limited("memories.update")
    async def update(
        self,
        id: uuid.UUID | str,
        *,
        content: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        importance: float | None = None,
        embedding: Sequence[float] | np.ndarray[Any, Any] | None = None,
        expected_version: int | None = None,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Memory:
        """Change a memory's fields under a row lock; None leaves a field as it is.

        With ``expected_version`` the update happens only if nobody changed the
        memory since you read it; otherwise ConflictError. New content without
        a new embedding is re-embedded when the service has an embedder.
        ``metadata`` replaces the whole object (see :meth:`patch_metadata`).
        """
        memory_id = parse_id("id", id)
        text, digest, meta, weight = prepare_update(
            self._settings, content, metadata, importance, expected_version
        )
        await self._follow_space()

        async def embed() -> tuple[Any, builtins.list[Any] | None]:
            if text is None:
                # A new embedding without new content is re-embedded from the stored
                # content by the migration's workers (the memories' trigger clears it).
                return (None if embedding is None else self._space.vector(embedding)), None
            return await self._space.embeddings_for(text, embedding)

        generation, (vector, nexts) = await self._space.consistent(embed)
        tenant = await self._routed("memories", memory_id, tenant, conn)
        sql = q.update_memory(self._schema, tenant is not None)
        args = [
            memory_id, tenant, expected_version,
            text is not None, text, digest,
            meta is not None, meta,
            weight is not None, weight,
            vector is not None, vector,
        ]  # fmt: skip

        async def attempt() -> Any:
            migrating = self._space.migrating
            if (vector is None or self._embeddings_changed is None) and not migrating:
                async with self._connection(conn, tenant=tenant) as active:
                    return await active.fetchrow(sql, *args)
            # A new embedding moves the centroids of the memory's assemblies:
            # recompute them in the same transaction, after the row lock.
            async with self._transaction(conn, tenant=tenant) as active:
                await self._space.hold(active)
                args[11] = self._space.held_vector(generation, args[11], nexts and nexts[0])
                row = await active.fetchrow(sql, *args)
                found = row is not None and row["id"] is not None
                if found and nexts is not None and digest is not None:
                    await self._space.write_next(
                        active, [row["tenant_id"]], [row["id"]], [digest], nexts
                    )
                if found and vector is not None and self._embeddings_changed is not None:
                    await self._embeddings_changed(active, [row["tenant_id"]], [row["id"]])
            return row

        row = await self._retrying(attempt, owns_transaction=conn is None)
        return Memory.from_row(
            self._versioned_outcome(row, f"memory {memory_id}", expected_version)
        )

    @citus_limited("memories.patch_metadata")
    async def patch_metadata(
        self,
        id: uuid.UUID | str,
        patch: Mapping[str, Any],
        *,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Memory:
        """Merge ``patch`` into the memory's metadata atomically (top-level keys).

        The merge runs inside PostgreSQL (``metadata || patch``), so concurrent
        patches of different keys all survive.
        """
        memory_id = parse_id("id", id)
        if not isinstance(patch, Mapping):
            raise ValidationError("patch", "must be a mapping")
        patch_json = validate_metadata(patch, self._settings.max_metadata_bytes, "patch")
        tenant = await self._routed("memories", memory_id, tenant, conn)
        sql = q.patch_metadata(self._schema, tenant is not None)
        args = [memory_id, patch_json, tenant, self._settings.max_metadata_bytes]

        async def attempt() -> Any:
            async with self._connection(conn, tenant=tenant) as active:
                return await active.fetchrow(sql, *args)

        row = await self._retrying(attempt, owns_transaction=conn is None)
        assert row is not None
        self._exactly_one(row["found"], f"memory {memory_id}")
        if row["id"] is None:
            raise ValidationError(
                "patch", f"merged metadata would exceed {self._settings.max_metadata_bytes} bytes"
            )
        return Memory.from_row(row)

    @citus_limited("memories.delete")
    async def delete(
        self,
        id: uuid.UUID | str,
        *,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> bool:
        """Delete a memory (and its assembly memberships). False if it did not exist."""
        memory_id = parse_id("id", id)
        try:
            tenant = await self._routed("memories", memory_id, tenant, conn)
        except NotFoundError:
            return False
        args: builtins.list[object] = [[memory_id]]
        if tenant is not None:
            args.append(tenant)
        sql = q.lock_for_delete(self._schema, tenant is not None)

        async def attempt() -> bool:
            async with self._transaction(conn, tenant=tenant) as active:
                rows = await active.fetch(sql, *args)
                if len(rows) > 1:
                    raise ConflictError(f"memory id {memory_id} exists in several tenants")
                return await self.delete_locked(active, rows) > 0

        return await self._retrying(attempt, owns_transaction=conn is None)

    async def delete_locked(self, conn: asyncpg.Connection, rows: Sequence[Any]) -> int:
        """Delete memory rows the caller has locked (``tenant_id``, ``id`` columns).

        The one way rows leave the table: assemblies are detached first (the
        delete hook), then each row goes with its ``deleted`` history event.
        For maintenance (gc), which selects and locks its own batches.
        """
        if not rows:
            return 0
        tenants = [row["tenant_id"] for row in rows]
        ids = [row["id"] for row in rows]
        if self._before_delete is not None:
            await self._before_delete(conn, tenants, ids)
        deleted: int = await conn.fetchval(q.delete_locked(self._schema), tenants, ids)
        return deleted

    @citus_limited("memories.delete_scope")
    async def delete_scope(
        self,
        scope: Scope,
        *,
        include: Include = "descendants",
        batch_size: int = 1000,
        conn: asyncpg.Connection | None = None,
    ) -> int:
        """Delete every memory of a scope (and, by default, of the scopes under it).

        Works in batches, each its own transaction (unless you pass ``conn``),
        until nothing is left, however many rows there are. Returns the count.
        """
        scope = validate_scope(scope)
        include = validate_include(include)
        batch_size = validate_limit(batch_size, "batch_size", 100_000)
        params = Params()
        scope_sql = scope_condition(scope, include, params)
        sql = q.lock_scope_batch(self._schema, scope_sql, params.add(batch_size))
        total = 0
        while True:

            async def attempt() -> int:
                async with self._transaction(conn, tenant=scope.tenant) as active:
                    rows = await active.fetch(sql, *params.values)
                    return await self.delete_locked(active, rows)

            deleted = await self._retrying(attempt, owns_transaction=conn is None)
            total += deleted
            if deleted == 0:
                return total

    async def search(
        self,
        scope: Scope,
        query: str | Sequence[float] | np.ndarray[Any, Any],
        *,
        k: int = 10,
        include: Include = "exact",
        where: Mapping[str, Any] | None = None,
        min_importance: float | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        rank: Rank = "similarity",
        mode: SearchMode | None = None,
        query_embedding: Sequence[float] | np.ndarray[Any, Any] | None = None,
        diversity: float | None = None,
        plan: SearchPlan = "auto",
        with_embeddings: bool = False,
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[SearchHit]:
        """The ``k`` memories that best match ``query`` within the scope.

        Three modes (see docs/how-to/hybrid-search.md): ``vector`` (nearest
        embeddings), ``text`` (PostgreSQL full-text search over content,
        ``websearch_to_tsquery`` syntax) and ``hybrid`` (both arms in one
        statement, fused by reciprocal rank; a memory holding every
        identifier token of a question, such as ``ENG-4312``, ranks above
        those only the vector arm found). Scope, ``include`` and every
        filter apply to each arm alike, and a filtered search returns k hits
        whenever k matching rows exist: PostgreSQL reads small scopes exactly
        and walks the HNSW index (iterative scans) for large ones; when
        filters leave the index short, memsvc scans exactly. Expired memories
        are never returned.

        Args:
            scope: Where to search.
            query: An embedding, or text.
            k: How many hits (1-1000).
            include: ``exact`` scope only, ``ancestors`` (the scope and those
                above it on its path), or ``descendants`` (the scope and all below).
            where: Metadata filter (see :mod:`memsvc.memories.filters`).
            min_importance: Only memories at least this important.
            created_after: Only memories created after this moment.
            created_before: Only memories created before this moment.
            rank: ``similarity`` (the mode's own order), or ``recall``: 0.7 x
                relevance + 0.2 x importance + 0.1 x 0.5 ** (age / 30 days),
                over the 4k best candidates.
            mode: ``vector``, ``text`` or ``hybrid``. Default: ``vector`` for an
                embedding; for text, ``hybrid`` when the service has an embedder
                (or ``query_embedding`` is given), else ``text``.
            query_embedding: The text query's embedding, computed by the app
                (vector and hybrid modes; the embedder is then not called).
            diversity: 0..1: maximal marginal relevance over the candidates,
                trading relevance for hits unlike each other (0 = pure relevance).
            plan: How the vector arm runs: ``auto``; ``exact`` forces an exact
                scan, ``index`` lets the planner choose without the exact
                fallback (benchmarks, tests).
            with_embeddings: Also return each hit's embedding
                (``hit.memory.embedding``); by default it is None, which saves
                sending and decoding vectors most callers never read.
            conn: A connection of your own to run on.

        Returns:
            Hits, best first (see :class:`memsvc.core.models.SearchHit` for scores).
        """
        # _follow_space()'s body, without its coroutine (a search's client
        # work is a few such layers).
        if self._space.refresh_due():
            await self._space.refresh(self._pool)
        self._space.check()
        arguments = (
            scope, query, k, include, where, min_importance, created_after, created_before,
            rank, mode, query_embedding, diversity, plan, with_embeddings,
        )  # fmt: skip
        if self._space.migrating:
            planned, (rows, terms) = await self._search_held(arguments, conn)
        else:
            planned = await self._planner.plan(*arguments)
            rows, terms = await self._read(
                conn, functools.partial(self._runner.rows, planned), tenant=planned.scope.tenant
            )
        hits = self._runner.hits(planned, rows, terms)
        if planned.reordered:
            return await self._runner.reorder(planned, hits)
        return hits

    async def _search_held(
        self, arguments: tuple[Any, ...], conn: asyncpg.Connection | None
    ) -> tuple[PlannedSearch, tuple[builtins.list[Any], int | None]]:
        """A search during an embedding-model migration, under the migration's row.

        The query is embedded and searched both in the old model, or (if the
        migration switched meanwhile) both in the new one.
        """
        scope = validate_scope(arguments[0])

        async def held() -> tuple[PlannedSearch, tuple[builtins.list[Any], int | None]]:
            async with self._transaction(conn, tenant=scope.tenant, writes=False) as active:
                await self._space.hold(active)
                self._space.check()
                planned = await self._planner.plan(*arguments)
                return planned, await self._runner.rows(planned, active)

        return await self._retrying(held, owns_transaction=conn is None, idempotent=True)

    async def explain_search(
        self,
        scope: Scope,
        query: str | Sequence[float] | np.ndarray[Any, Any],
        *,
        k: int = 10,
        include: Include = "exact",
        where: Mapping[str, Any] | None = None,
        mode: SearchMode | None = None,
        query_embedding: Sequence[float] | np.ndarray[Any, Any] | None = None,
        plan: SearchPlan = "auto",
        conn: asyncpg.Connection | None = None,
    ) -> str:
        """``EXPLAIN ANALYZE`` of the search statement: which indexes ran, and how long.

        ``mode``, ``query_embedding`` and ``plan`` as in :meth:`search`.
        """
        planned = await self._planner.plan(
            scope, query, k, include, where, None, None, None, "similarity", mode,
            query_embedding, None, plan, True,
        )  # fmt: skip
        tenant = planned.scope.tenant
        reading = self._connection(conn, tenant=tenant, writes=False)
        async with reading as active, active.transaction():
            if not self._settings.pgbouncer:
                sql = "EXPLAIN ANALYZE " + planned.statement.sql
                rows = await active.fetch(sql, *planned.values)
            else:
                rows = []
        return "\n".join(row[0] for row in rows)
