"""Long-term memories: :class:`MemoryRepository` (``svc.memories``), its writes and reads.

A search is planned in :mod:`memsvc.memories.search_plan` (its arguments, its
one statement, cached by shape) and run in :mod:`memsvc.memories.search`
(rows, hits, reordering); writes check their input in
:mod:`memsvc.memories.write_inputs` and insert past duplicates in
:mod:`memsvc.memories.inserts`.
"""

from __future__ import annotations

import builtins
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
from memsvc.core.models import Memory
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
from memsvc.memories import ranking, validity
from memsvc.memories.embedding_space import EmbeddingSpace
from memsvc.memories.inserts import (
    batch_memories,
    find_duplicate,
    insert_batch,
    insert_one,
    inserted_memory,
    scope_params,
)
from memsvc.memories.invalidating import Invalidating
from memsvc.memories.policies import PolicyRepository
from memsvc.memories.reads import KEY_MAX_LENGTH, MAX_PAGE
from memsvc.memories.restoring import Restoring
from memsvc.memories.scope_indexes import ScopeIndexes
from memsvc.memories.search import SearchRunner
from memsvc.memories.search_plan import (
    MAX_K,
    MAX_QUERY_CHARS,
    SearchPlanner,
)
from memsvc.memories.searching import MemorySearches
from memsvc.memories.semantic import (
    Dedupe,
    SemanticDedupe,
    validate_dedupe,
    validate_threshold,
)
from memsvc.memories.write_inputs import (
    content_hash,
    prepare,
    prepare_items,
    prepare_update,
    validate_pinned,
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
    "add", "add_many", "put", "update", "patch_metadata", "delete", "delete_locked", "delete_scope",
    "supersede", "invalidate", "restore",
)
class MemoryRepository(MemorySearches, Restoring, Invalidating):
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
        policies: PolicyRepository | None = None,
    ) -> None:
        super().__init__(pool, settings, reads=reads)
        # Half-life policies, read by rank="recall" (see memsvc.memories.strength).
        self._policies = policies
        self._init_reads()
        # The embedder and dimension in use; they change at the switch of an
        # embedding-model migration (see memsvc.memories.embedding_space).
        self._space = space or EmbeddingSpace(settings, embedder)
        self._before_delete = before_delete
        # Called, in the same transaction and after the memory row is locked,
        # when a memory's embedding changed (assemblies recompute centroids).
        self._embeddings_changed = embeddings_changed
        self._insert_sql = q.insert_memory(self._schema)
        self._semantic = SemanticDedupe(settings)
        self._insert_many_sql = q.insert_many(self._schema, settings.vector_type)
        # The one search path: arguments -> plan (its statement cached by
        # shape) -> rows -> hits (see memsvc.memories.search_plan).
        self.scope_indexes = ScopeIndexes(pool, settings)
        self._planner = SearchPlanner(
            settings, self._space, reranks=reranker is not None, scope_indexes=self.scope_indexes
        )
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
        valid_from: datetime | None = None,
        supersedes: Iterable[uuid.UUID | str] | None = None,
        pinned: bool = False,
        dedupe: Dedupe | None = None,
        dedupe_threshold: float | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Memory:
        """Store a memory and return it.

        Adding content that already exists in the same exact scope, in a
        memory whose validity is open (not superseded or invalidated),
        returns that memory instead of a duplicate (a unique index decides,
        so racing writers agree); content stated again after its memory was
        superseded is a new memory. Passing your own ``id`` makes a retried call
        idempotent; reusing an id for different content is a ConflictError.
        An expired or forgotten memory (not yet collected by gc) counts as
        gone: the add removes it and stores a new memory (see
        :mod:`memsvc.memories.expired`).

        With ``dedupe="semantic"`` a near-duplicate counts too: if a memory of
        the exact scope, valid now and live, is at least ``dedupe_threshold``
        similar (cosine) and holds the same identifier-like tokens, nothing
        new is stored; that memory is reinforced and returned with
        ``merged=True`` (see docs/how-to/deduplication.md). A write that
        supersedes memories is always stored. ``dedupe="off"`` stores even
        an exact duplicate.

        Args:
            scope: Where the memory lives.
            content: The text to remember.
            embedding: Its vector; computed by the service's embedder when omitted.
            metadata: A JSON object, filterable in :meth:`search`.
            importance: In [0, 1].
            ttl: Seconds (or a timedelta) until the memory expires; None keeps it.
            id: A client-chosen UUID.
            valid_from: When the fact started to hold (timezone-aware); default:
                the writing transaction's time.
            supersedes: Memories of the same exact scope this one replaces:
                their validity ends at this one's ``valid_from``, in the same
                transaction (see :meth:`supersede`).
            pinned: Never forget this memory, whatever its strength (see
                docs/how-to/forgetting.md).
            dedupe: ``exact``, ``semantic`` or ``off``; default ``Settings.dedupe``.
            dedupe_threshold: Semantic mode's cosine similarity; default
                ``Settings.semantic_dedupe_threshold``.
            conn: A connection (and transaction) of your own to run on.
        """
        mode, threshold = self._dedupe_options(dedupe, dedupe_threshold)
        return await self._add(
            scope, content, embedding, metadata, importance, ttl, id,
            validity.check_optional_time(valid_from, "valid_from"),
            validity.check_predecessors(supersedes), {}, conn,
            pinned=validate_pinned(pinned), mode=mode, threshold=threshold,
        )  # fmt: skip

    def _dedupe_options(self, dedupe: object, threshold: object) -> tuple[Dedupe, float]:
        """The call's dedupe mode and threshold, checked (the settings' by default)."""
        mode = validate_dedupe(self._settings.dedupe if dedupe is None else dedupe)
        if threshold is None:
            return mode, self._settings.semantic_dedupe_threshold
        return mode, validate_threshold(threshold)

    async def _add(
        self,
        scope: Scope,
        content: str,
        embedding: Sequence[float] | np.ndarray[Any, Any] | None,
        metadata: Mapping[str, Any] | None,
        importance: float,
        ttl: float | Any | None,
        id: uuid.UUID | str | None,
        valid_from: datetime | None,
        predecessors: builtins.list[uuid.UUID],
        expected: Mapping[uuid.UUID, int | None],
        conn: asyncpg.Connection | None,
        *,
        pinned: bool = False,
        mode: Dedupe = "exact",
        threshold: float = 1.0,
    ) -> Memory:
        """:meth:`add`, with the versions the predecessors must have (``expected``)."""
        scope = validate_scope(scope)
        fields = prepare(self._settings, content, metadata, importance, ttl)
        text, digest, meta, weight, ttl_s = fields
        memory_id = new_id() if id is None else parse_id("id", id)
        await self._follow_space()
        exact = mode == "exact" and not predecessors
        if exact and embedding is None and self._space.embedder is not None:
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
                return await self._pinned(stored, pinned, conn)
        generation, (vector, nexts) = await self._space.consistent(
            lambda: self._space.embeddings_for(text, embedding)
        )
        args = [*scope_params(scope), memory_id, text, digest, meta, vector, weight, ttl_s]
        args += [valid_from, predecessors or None, pinned, mode != "off"]
        # A new version of a fact is stored whatever it resembles.
        semantic = mode == "semantic" and vector is not None and not predecessors

        async def attempt() -> Memory:
            transaction = bool(predecessors)
            async with self._writing(
                scope, conn, always_transaction=transaction, lock=semantic
            ) as active:
                vector = args[8] = self._space.held_vector(generation, args[8], nexts and nexts[0])
                if semantic:
                    found = await self._semantic.match(active, scope, text, vector, threshold)
                    merged = found and await self._semantic.merge(
                        active, found, text, meta, weight, pinned=pinned, valid_from=valid_from
                    )
                    if merged:
                        return merged
                if predecessors:
                    done = await self._close_predecessors(
                        active, scope, predecessors, memory_id, valid_from, expected, args
                    )
                    if done is not None:
                        return done
                row, existing = await insert_one(
                    active, self._schema, self._insert_sql, scope, args, self.delete_locked
                )
                if existing is not None and predecessors:
                    raise ConflictError(
                        f"the new content is already stored, valid now, as memory {existing.id}"
                    )
                if existing is not None and semantic:
                    return await self._semantic.merge_found(
                        active, existing, text, meta, weight, pinned=pinned,
                        valid_from=valid_from,
                    )
                if existing is not None:
                    return await self._pinned(existing, pinned, active)
                if nexts is not None:
                    await self._space.write_next(
                        active, [scope.tenant], [memory_id], [digest], nexts
                    )
            return inserted_memory(scope, args, row, vector)

        return await self._retrying(attempt, owns_transaction=conn is None)

    async def _pinned(
        self, memory: Memory, pinned: bool, conn: asyncpg.Connection | None
    ) -> Memory:
        """An exact duplicate a pinned add met, pinned as the add asked."""
        if not pinned or memory.pinned:
            return memory
        return await self.update(memory.id, pinned=True, tenant=memory.scope.tenant, conn=conn)

    async def _close_predecessors(
        self,
        conn: asyncpg.Connection,
        scope: Scope,
        ids: builtins.list[uuid.UUID],
        successor: uuid.UUID,
        valid_from: datetime | None,
        expected: Mapping[uuid.UUID, int | None],
        args: builtins.list[Any],
    ) -> Memory | None:
        """End the validity of the memories ``ids`` at the new memory's ``valid_from``.

        Sets the new memory's ``valid_from`` in ``args`` (the transaction's
        time by default). Returns the successor when a retry finds the work
        done, else None.
        """
        rows, done = await validity.lock_open(
            conn, self._schema, ids, scope.tenant, successor=successor, expected=expected
        )
        if done:
            row = await conn.fetchrow(self._by_ids_sql[False, True, True], successor, scope.tenant)
            if row is None:
                raise ConflictError(f"memory {successor} was deleted after it superseded {ids}")
            return Memory.from_row(row)
        moment = rows[0]["now"] if valid_from is None else valid_from
        validity.check_closable(rows, moment, "valid_from", scope)
        args[11] = moment
        await validity.close(conn, self._schema, scope.tenant, ids, moment, successor)
        return None

    async def supersede(
        self,
        old_id: uuid.UUID | str,
        content: str,
        *,
        valid_from: datetime | None = None,
        embedding: Sequence[float] | np.ndarray[Any, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        importance: float | None = None,
        ttl: float | Any | None = None,
        id: uuid.UUID | str | None = None,
        expected_version: int | None = None,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Memory:
        """Store ``content`` as the new version of a fact and end the old memory's validity.

        In one transaction: the new memory is written in the old one's scope
        (valid from ``valid_from``, by default the transaction's time), the
        old memory's ``valid_to`` becomes that moment, and each links the
        other (``superseded_by`` / ``supersedes``, and their history
        events). The old memory must still be valid: of racing supersessions
        exactly one wins, the others get a ConflictError (as does a
        mismatched ``expected_version``). ``valid_from`` must come after the
        old memory's ``valid_from`` (ValidationError). ``metadata`` and
        ``importance`` default to the old memory's; the other arguments are
        :meth:`add`'s. Returns the new memory.
        """
        old = parse_id("old_id", old_id)
        moment = validity.check_optional_time(valid_from, "valid_from")
        expected = {old: validity.check_expected_version(expected_version)}
        sql = self._by_ids_sql[False, True, tenant is not None]
        args: builtins.list[object] = [old] if tenant is None else [old, Scope(tenant).tenant]
        rows = await self._read(
            conn, lambda active: active.fetch(sql, *args), routed=False, tenant=tenant
        )
        if len(rows) != 1:
            self._exactly_one(len(rows), f"memory {old}")
        prior = Memory.from_row(rows[0])
        return await self._add(
            prior.scope, content, embedding,
            prior.metadata if metadata is None else metadata,
            prior.importance if importance is None else importance,
            ttl, id, moment, [old], expected, conn,
        )  # fmt: skip

    @asynccontextmanager
    async def _writing(
        self,
        scope: Scope,
        conn: asyncpg.Connection | None,
        *,
        always_transaction: bool = False,
        lock: bool = False,
    ) -> AsyncIterator[asyncpg.Connection]:
        """Where writes to a scope run, enforcing ``max_memories_per_scope``.

        With a limit, writers to one scope take a transaction-scoped advisory
        lock, write, then count: past the limit the transaction rolls back
        with a ConflictError. Counting under the lock, after the write, is what
        stops racing writers from each seeing room for one more (write skew).
        ``lock``: take the scope's lock anyway (semantic deduplication).
        """
        limit = self._settings.max_memories_per_scope
        migrating = self._space.migrating
        if limit is None and not always_transaction and not migrating and not lock:
            async with self._connection(conn, tenant=scope.tenant) as active:
                yield active
            return
        # Asked before the transaction: the first time it takes a pooled connection.
        citus = (limit is not None or lock) and await self._on_citus()
        async with self._transaction(conn, tenant=scope.tenant) as active:
            # During an embedding-model migration the write runs wholly before
            # or wholly after the switch (see EmbeddingSpace.hold).
            await self._space.hold(active)
            if limit is not None or lock:
                await self._semantic.lock(active, scope, citus=citus)
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
        valid_from: datetime | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Memory:
        """Insert or replace the memory stored under ``key`` in this exact scope.

        One atomic upsert: racing writers never create two rows for a key; each
        replacement bumps ``version`` and records the prior value in history.
        The value holds from ``valid_from`` (timezone-aware; default: the
        writing transaction's time), also when it replaces another.
        """
        scope = validate_scope(scope)
        key = validate_name(key, "key", KEY_MAX_LENGTH)
        moment = validity.check_optional_time(valid_from, "valid_from")
        fields = prepare(self._settings, content, metadata, importance, ttl)
        text, digest, meta, weight, ttl_s = fields
        await self._follow_space()
        generation, (vector, nexts) = await self._space.consistent(
            lambda: self._space.embeddings_for(text, embedding)
        )
        params = Params(*scope_params(scope), key, new_id(), text, digest, meta, vector)
        params.values.extend([weight, ttl_s, moment])
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
        dedupe: Dedupe | None = None,
        dedupe_threshold: float | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[Memory]:
        """Store many memories in one transaction: all of them, or none.

        Each item is a string (the content) or a mapping with ``content`` and
        optionally ``embedding``, ``metadata``, ``importance``, ``ttl``, ``id``,
        ``valid_from``, ``pinned``. Every item is validated before anything
        is sent. Duplicates (of stored memories or within the batch) come back
        as the existing memory, so the result has one memory per item, in
        order; an expired memory counts as gone, as in :meth:`add`.
        ``dedupe`` and ``dedupe_threshold`` as in :meth:`add`: in semantic
        mode each item is compared, in order, with the scope's memories and
        the items stored before it.
        """
        scope = validate_scope(scope)
        mode, threshold = self._dedupe_options(dedupe, dedupe_threshold)
        batch = validate_sequence(items, "items")
        ids, texts, digests, metas, vectors, weights, ttls, starts, pins = prepare_items(
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

        semantic = mode == "semantic"

        async def attempt() -> tuple[dict[uuid.UUID, Memory], dict[str, Memory]]:
            async with self._writing(scope, conn, always_transaction=True, lock=semantic) as active:
                for j, i in enumerate(embedded):
                    next_vector = None if nexts is None else nexts[j]
                    vectors[i] = self._space.held_vector(generation, vectors[i], next_vector)
                wire = [None if v is None else vector_bytes(v, vector_type) for v in vectors]
                unique = [mode != "off"] * len(ids)
                columns: builtins.list[builtins.list[Any]] = [
                    ids, texts, digests, metas, wire, weights, ttls, starts, pins, unique
                ]
                if semantic:
                    found = await self._semantic.add_each(
                        active, scope, columns, vectors, threshold, self._insert_sql,
                        self.delete_locked,
                    )
                else:
                    found = await insert_batch(
                        active, self._schema, self._insert_many_sql, scope, columns,
                        self.delete_locked,
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
        if semantic:
            # add_each keys the memories it merged or found by item position.
            return [by_id.get(ids[i]) or by_digest[str(i)] for i in range(len(ids))]
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
        pinned: bool | None = None,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Memory:
        """Change a memory's fields under a row lock; None leaves a field as it is.

        With ``expected_version`` the update happens only if nobody changed the
        memory since you read it; otherwise ConflictError. New content without
        a new embedding is re-embedded when the service has an embedder.
        ``metadata`` replaces the whole object (see :meth:`patch_metadata`).
        ``pinned`` pins (True) or unpins (False) the memory: a pinned memory
        is never forgotten (see docs/how-to/forgetting.md).
        """
        memory_id = parse_id("id", id)
        text, digest, meta, weight = prepare_update(
            self._settings, content, metadata, importance, expected_version
        )
        pin = None if pinned is None else validate_pinned(pinned)
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
            pin is not None, pin,
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
                if total and conn is None:
                    # Committed: scope indexes of emptied scopes go (in the
                    # caller's transaction, gc drops them).
                    await self.scope_indexes.drop_shrunken(scope, include)
                return total
