"""Long-term memories: :class:`MemoryRepository` (``svc.memories``)."""

from __future__ import annotations

import builtins
import functools
import hashlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar

import asyncpg
import numpy as np

from memsvc.changes.signal import signals_changes
from memsvc.core.errors import ConflictError, NotFoundError, SchemaError, ValidationError
from memsvc.core.ids import new_id, parse_id
from memsvc.core.models import Memory, MemoryEvent, SearchHit, real_value
from memsvc.core.scope import Include, Scope, validate_include
from memsvc.core.settings import Settings
from memsvc.core.time_limits import validate_time
from memsvc.core.validation import (
    check_text,
    validate_content,
    validate_embedded,
    validate_embedding,
    validate_importance,
    validate_limit,
    validate_metadata,
    validate_name,
    validate_scope,
    validate_sequence,
    validate_ttl,
)
from memsvc.db.codecs import vector_bytes
from memsvc.db.replicas import ReadRouter
from memsvc.db.repository import Repository
from memsvc.db.sql import Params, scope_condition
from memsvc.embedding import Embedder
from memsvc.memories import asof_queries as asof_q
from memsvc.memories import queries as q
from memsvc.memories import ranking
from memsvc.memories.asof import AsOfReads, validate_as_of
from memsvc.memories.embedding_space import EmbeddingSpace
from memsvc.memories.expired import remove_expired, split_live
from memsvc.memories.filters import compile_where
from memsvc.memories.searchable_words import SearchableWords
from memsvc.memories.text_terms import hybrid_terms
from memsvc.telemetry import traced_operations

T = TypeVar("T")
Rank = Literal["similarity", "recall"]
SearchMode = Literal["vector", "text", "hybrid"]
SearchPlan = Literal["auto", "exact", "index"]

# Called with memory rows already locked, before they are deleted, in the
# same transaction (assemblies use it to keep member counts and centroids).
DeleteHook = Callable[[asyncpg.Connection, list[str], list[uuid.UUID]], Awaitable[None]]

MAX_K = 1000
MAX_PAGE = 10_000
ADD_MANY_CHUNK = 2_000
KEY_MAX_LENGTH = 1024
# Text and hybrid search parse the query into a text-search query with a term
# per word; PostgreSQL's stack runs out past about ten thousand of them
# (max_stack_depth's default), and a query this long holds at most half as many.
MAX_QUERY_CHARS = 16_384

# Hybrid search: each arm contributes its best max(2 x fetched rows, 50)
# candidates (at most MAX_K) to reciprocal rank fusion (constant q.RRF_K).
HYBRID_MIN_CANDIDATES = 50


@functools.lru_cache(maxsize=256)
def _search_sqls(schema: str, plan: str, **options: Any) -> tuple[str, str | None]:
    """A search statement under ``plan``, and its exact fallback (auto plan).

    Cached: the SQL text depends only on the schema, which placeholders and
    filter texts a call has, never on bound values, and building it costs a
    tenth of a small-scope search's client work. Filter texts vary with
    their structure, so the cache is bounded.
    """
    sql = q.search(schema, exact=plan == "exact", **options)
    fallback = None
    if plan == "auto" and options["mode"] != "text":
        fallback = q.search(schema, exact=True, **options)
    return sql, fallback


# "-" and "_" inside a word: read as spaces in text queries, as the text search
# column reads them in its raw-token half (see tables.content_tsv_expression),
# so "node-07" or "retry_backoff_ms" match however the parser split them. A
# "-" after a space stays websearch_to_tsquery's "not".
_JOINED = re.compile(r"(?<=\w)[-_](?=\w)")


def content_hash(content: str) -> str:
    """The ``sha256:<hex>`` fingerprint deduplication uses."""
    return "sha256:" + hashlib.sha256(content.encode("utf-8")).hexdigest()


def _scope_params(scope: Scope) -> list[object]:
    return [scope.tenant, scope.project, scope.agent, scope.session]


# Not frozen: built once per search, and a frozen dataclass's __init__ costs
# one object.__setattr__ call per field. Never changed once built: a plain
# vector search's statement is a template shared by every such search (see
# bound), and a change would reach them all.
@dataclass(slots=True)
class _SearchStatement:
    sql: str
    values: builtins.list[object]
    fetch: int  # rows the statement returns at most (k, or more to reorder)
    exact_sql: str | None  # the fallback, in auto plan
    mode: str
    text: str | None  # the query text, None for an embedding query
    k: int
    rank: Rank
    diversity: float | None
    candidates: int  # rows each hybrid arm contributes at most
    scope: Scope | None = None  # the scope of every hit, when include="exact"

    def bound(self, vector: object) -> _SearchStatement:
        """This statement with ``vector`` as its query vector (``$1``), the rest shared."""
        values = self.values.copy()
        values[0] = vector
        return _SearchStatement(
            self.sql,
            values,
            self.fetch,
            self.exact_sql,
            self.mode,
            self.text,
            self.k,
            self.rank,
            self.diversity,
            self.candidates,
            self.scope,
        )


@traced_operations("memsvc.memories", exclude=["delete_locked"])
@signals_changes(
    "add", "add_many", "put", "update", "patch_metadata", "delete", "delete_locked", "delete_scope"
)
class MemoryRepository(Repository):
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
        # The embedder and dimension in use; they change at the switch of an
        # embedding-model migration (see memsvc.memories.embedding_space).
        self._space = space or EmbeddingSpace(settings, embedder)
        self._reranker = reranker
        self._before_delete = before_delete
        # Called, in the same transaction and after the memory row is locked,
        # when a memory's embedding changed (assemblies recompute centroids).
        self._embeddings_changed = embeddings_changed
        self._insert_sql = q.insert_memory(self._schema)
        # get's statements, by (track_access, one id, tenant filter): built
        # once, not per call (a get is a ~0.1 ms query).
        self._by_ids_sql = {
            (touch, single, tenant): make(self._schema, tenant)
            for touch, single, make in (
                (False, True, q.select_by_id),
                (False, False, q.select_by_ids),
                (True, True, q.touch_by_id),
                (True, False, q.touch_by_ids),
            )
            for tenant in (False, True)
        }
        self._insert_many_sql = q.insert_many(self._schema, settings.vector_type)
        self._as_of = AsOfReads()
        self._searchable = SearchableWords()
        # Plain vector searches' statements, by their arguments but the query
        # (see _search_statement). Bounded: apps search many scopes. (The
        # cache holds this repository through its method: a cycle the garbage
        # collector frees with the service.)
        self._vector_search_templates = functools.lru_cache(maxsize=4096)(
            self._vector_search_template
        )

    # ------------------------------------------------------------------ input

    @property
    def _embedder(self) -> Embedder | None:
        return self._space.embedder

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

    async def _consistent(self, compute: Callable[[], Awaitable[T]]) -> tuple[int, T]:
        """Run ``compute`` (embeddings) until no switch of model happened during it.

        Returns the embedding space's generation its result belongs to.
        """
        while True:
            generation = self._space.generation
            result = await compute()
            if self._space.generation == generation:
                return generation, result

    def _held_vector(self, generation: int, vector: Any, next_vector: Any) -> Any:
        """The vector a write stores once it holds the migration row (see ``_writing``).

        The one computed, unless the migration switched between computing it
        and the write's hold: then the new model's.
        """
        if self._space.generation == generation or vector is None:
            return vector
        self._space.check()
        if next_vector is None:
            raise SchemaError(
                "an embedding-model migration switched during this call: embeddings are now "
                f"{self._space.dim}-dimensional; call again"
            )
        return next_vector

    def _vector(self, value: object, field: str = "embedding") -> np.ndarray[Any, Any]:
        settings = self._settings
        return validate_embedding(
            value, self._space.dim, settings.vector_type, field, distance=settings.distance
        )

    async def _embed(self, texts: Sequence[str], field: str) -> list[np.ndarray[Any, Any]]:
        if self._embedder is None:
            raise ValidationError(field, "no embedding given and the service has no embedder")
        settings = self._settings
        return validate_embedded(
            await self._embedder(list(texts)),
            len(texts),
            self._space.dim,
            settings.vector_type,
            field,
            distance=settings.distance,
        )

    async def _embeddings_for(
        self, content: str, embedding: object
    ) -> tuple[np.ndarray[Any, Any] | None, builtins.list[np.ndarray[Any, Any]] | None]:
        """The embedding to store, and (during a migration) the new model's of the content."""
        vector = await self._embedding_for(content, embedding)
        nexts = None if vector is None else await self._space.embed_next([content])
        return vector, nexts

    async def _embedding_for(self, content: str, embedding: object) -> np.ndarray[Any, Any] | None:
        if embedding is not None:
            return self._vector(embedding)
        if self._embedder is None:
            return None
        return (await self._embed([content], "embedding"))[0]

    def _prepare(
        self, content: object, metadata: object, importance: object, ttl: object
    ) -> tuple[str, str, str, float, float | None]:
        text = validate_content(content, self._settings.max_content_bytes)
        meta = validate_metadata(metadata, self._settings.max_metadata_bytes)
        return text, content_hash(text), meta, validate_importance(importance), validate_ttl(ttl)

    # ------------------------------------------------------------------ writes

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
        text, digest, meta, weight, ttl_s = self._prepare(content, metadata, importance, ttl)
        memory_id = new_id() if id is None else parse_id("id", id)
        await self._follow_space()
        if embedding is None and self._embedder is not None:
            # Content already stored here comes back as it is, as the insert
            # below would return it: embedding the text again would be wasted.
            # Only a shortcut: the insert's conflict handling stays the truth.
            stored, _ = await self._read(
                conn,
                lambda active: self._find_duplicate(active, scope, memory_id, digest),
                routed=False,
                tenant=scope.tenant,
            )
            if stored is not None:
                return stored
        generation, (vector, nexts) = await self._consistent(
            lambda: self._embeddings_for(text, embedding)
        )
        args = [*_scope_params(scope), memory_id, text, digest, meta, vector, weight, ttl_s]

        async def attempt() -> Memory:
            async with self._writing(scope, conn) as active:
                vector = args[8] = self._held_vector(generation, args[8], nexts and nexts[0])
                for _ in range(3):
                    row = await active.fetchrow(self._insert_sql, *args)
                    if row is not None:
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
                    existing, expired = await self._find_duplicate(
                        active, scope, memory_id, digest
                    )
                    if existing is not None:
                        return existing
                    if expired:
                        await remove_expired(active, self._schema, expired, self.delete_locked)
                    # The row we collided with expired, or was deleted in between: try again.
            raise ConflictError("memory could not be inserted: it kept colliding with a deletion")

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

    async def _find_duplicate(
        self, conn: asyncpg.Connection, scope: Scope, memory_id: uuid.UUID, digest: str
    ) -> tuple[Memory | None, builtins.list[Any]]:
        """The live memory an add of ``digest``/``memory_id`` collides with, and the
        expired rows in its way (which count as gone)."""
        params = Params(scope.tenant, memory_id, digest)
        sql = q.find_duplicate(self._schema, scope_condition(scope, "exact", params))
        live, expired = split_live(await conn.fetch(sql, *params.values))
        for row in live:
            found = Memory.from_row(row)
            if found.id == memory_id and (found.content_hash != digest or found.scope != scope):
                raise ConflictError(f"id {memory_id} is already used by a different memory")
            return found, expired
        return None, expired

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
        text, digest, meta, weight, ttl_s = self._prepare(content, metadata, importance, ttl)
        await self._follow_space()
        generation, (vector, nexts) = await self._consistent(
            lambda: self._embeddings_for(text, embedding)
        )
        params = Params(*_scope_params(scope), key, new_id(), text, digest, meta, vector)
        params.values.extend([weight, ttl_s])
        scope_sql = scope_condition(scope, "exact", params)
        sql = q.upsert_by_key(self._schema, scope_sql)

        async def attempt() -> Any:
            async with self._writing(scope, conn, always_transaction=True) as active:
                params.values[9] = self._held_vector(
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

    async def get_by_key(
        self,
        scope: Scope,
        key: str,
        *,
        as_of: datetime | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Memory:
        """The memory stored under ``key`` in this exact scope (NotFoundError if none).

        With ``as_of`` (a timezone-aware datetime): the memory stored under
        the key as committed at that moment (see :meth:`get`).
        """
        scope = validate_scope(scope)
        params = Params(validate_name(key, "key", KEY_MAX_LENGTH))
        if as_of is not None:
            rows = await self._read_as_of(scope, "exact", as_of, conn, key=key)
            if not rows:
                raise NotFoundError(f"no memory under key {key!r} in this scope at {as_of}")
            return rows[0]
        sql = q.select_by_key(self._schema, scope_condition(scope, "exact", params))
        row = await self._read(
            conn, lambda active: active.fetchrow(sql, *params.values), tenant=scope.tenant
        )
        if row is None:
            raise NotFoundError(f"no memory under key {key!r} in this scope")
        return Memory.from_row(row)

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
        ids, texts, digests, metas, vectors, weights, ttls = self._prepare_batch(batch)
        await self._follow_space()
        given = builtins.list(vectors)

        async def embed() -> tuple[builtins.list[int], builtins.list[Any] | None]:
            vectors[:] = given
            if self._embedder is not None and any(vector is None for vector in vectors):
                await self._embed_missing(scope, texts, digests, vectors, conn)
            # During a migration: the new model's vectors of the items that have one.
            embedded = [i for i, vector in enumerate(vectors) if vector is not None]
            return embedded, await self._space.embed_next([texts[i] for i in embedded])

        generation, (embedded, nexts) = await self._consistent(embed)
        if not ids:
            return []
        vector_type = self._settings.vector_type

        async def attempt() -> tuple[dict[uuid.UUID, Memory], dict[str, Memory]]:
            by_id: dict[uuid.UUID, Memory] = {}
            by_digest: dict[str, Memory] = {}
            async with self._writing(scope, conn, always_transaction=True) as active:
                for j, i in enumerate(embedded):
                    next_vector = None if nexts is None else nexts[j]
                    vectors[i] = self._held_vector(generation, vectors[i], next_vector)
                wire = [None if v is None else vector_bytes(v, vector_type) for v in vectors]
                columns: builtins.list[builtins.list[Any]] = [
                    ids, texts, digests, metas, wire, weights, ttls
                ]
                chosen: builtins.list[int] | None = None  # None: every item
                for _ in range(3):
                    await self._insert_items(active, scope, columns, chosen, by_id)
                    absent = [i for i in chosen or range(len(ids)) if ids[i] not in by_id]
                    if not absent:
                        break
                    params = Params(
                        scope.tenant, [ids[i] for i in absent], [digests[i] for i in absent]
                    )
                    sql = q.find_batch_duplicates(
                        self._schema, scope_condition(scope, "exact", params)
                    )
                    live, expired = split_live(await active.fetch(sql, *params.values))
                    for row in live:
                        found = Memory.from_row(row)
                        by_id.setdefault(found.id, found)
                        if found.scope == scope and found.key is None:
                            by_digest[found.content_hash] = found
                    if not expired:
                        break
                    # Expired rows count as gone: remove them, insert those items again.
                    await remove_expired(active, self._schema, expired, self.delete_locked)
                    chosen = absent
                if nexts is not None:
                    await self._space.write_next(
                        active,
                        [scope.tenant] * len(embedded),
                        [ids[i] for i in embedded],
                        [digests[i] for i in embedded],
                        nexts,
                    )
            return by_id, by_digest

        by_id, by_digest = await self._retrying(attempt, owns_transaction=conn is None)
        result = []
        for i, memory_id in enumerate(ids):
            memory = by_id.get(memory_id)
            if memory is not None and (memory.content_hash != digests[i] or memory.scope != scope):
                raise ConflictError(f"items[{i}].id {memory_id} is already used by another memory")
            memory = memory or by_digest.get(digests[i])
            if memory is None:
                raise ConflictError(f"items[{i}] collided with a memory deleted meanwhile; retry")
            result.append(memory)
        return result

    async def _insert_items(
        self,
        conn: asyncpg.Connection,
        scope: Scope,
        columns: builtins.list[builtins.list[Any]],
        chosen: builtins.list[int] | None,
        by_id: dict[uuid.UUID, Memory],
    ) -> None:
        """Insert a batch's items (``chosen`` indexes of the parallel ``columns``;
        None: all of them) in chunks; the rows inserted go into ``by_id``."""
        if chosen is not None:
            columns = [[column[i] for i in chosen] for column in columns]
        for start in range(0, len(columns[0]), ADD_MANY_CHUNK):
            chunk = slice(start, start + ADD_MANY_CHUNK)
            rows = await conn.fetch(
                self._insert_many_sql,
                *_scope_params(scope),
                *(column[chunk] for column in columns),
            )
            for row in rows:
                by_id[row["id"]] = Memory.from_row(row)

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
        missing = [i for i, vector in enumerate(vectors) if vector is None]
        wanted = sorted({digests[i] for i in missing})
        params = Params(wanted)
        sql = q.stored_embeddings(self._schema, scope_condition(scope, "exact", params))
        rows = await self._read(
            conn, lambda active: active.fetch(sql, *params.values), routed=False,
            tenant=scope.tenant,
        )
        known = {row["content_hash"]: self._vector(row["embedding"]) for row in rows}
        first: dict[str, int] = {}  # digest -> the first item needing it embedded
        for i in missing:
            if digests[i] not in known:
                first.setdefault(digests[i], i)
        if first:
            computed = await self._embed([texts[i] for i in first.values()], "items.embedding")
            known.update(zip(first, computed, strict=True))
        for i in missing:
            vectors[i] = known[digests[i]]

    def _prepare_batch(
        self, items: Iterable[str | Mapping[str, Any]]
    ) -> tuple[
        builtins.list[uuid.UUID],
        builtins.list[str],
        builtins.list[str],
        builtins.list[str],
        builtins.list[Any],
        builtins.list[float],
        builtins.list[float | None],
    ]:
        ids: builtins.list[uuid.UUID] = []
        texts: builtins.list[str] = []
        digests: builtins.list[str] = []
        metas: builtins.list[str] = []
        vectors: builtins.list[Any] = []
        weights: builtins.list[float] = []
        ttls: builtins.list[float | None] = []
        for i, item in enumerate(items):
            spec: Mapping[str, Any] = {"content": item} if isinstance(item, str) else item
            if not isinstance(spec, Mapping) or "content" not in spec:
                raise ValidationError(f"items[{i}]", "must be a string or a mapping with content")
            unknown = set(spec) - {"content", "embedding", "metadata", "importance", "ttl", "id"}
            if unknown:
                raise ValidationError(f"items[{i}]", f"unknown fields {sorted(unknown)}")
            try:
                text, digest, meta, weight, ttl_s = self._prepare(
                    spec["content"],
                    spec.get("metadata"),
                    spec.get("importance", 0.5),
                    spec.get("ttl"),
                )
                raw_id = spec.get("id")
                ids.append(new_id() if raw_id is None else parse_id("id", raw_id))
                embedding = spec.get("embedding")
                vectors.append(None if embedding is None else self._vector(embedding))
            except ValidationError as exc:
                raise ValidationError(f"items[{i}].{exc.field}", exc.reason) from exc
            texts.append(text)
            digests.append(digest)
            metas.append(meta)
            weights.append(weight)
            ttls.append(ttl_s)
        return ids, texts, digests, metas, vectors, weights, ttls

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
        if expected_version is not None and (
            isinstance(expected_version, bool) or not isinstance(expected_version, int)
        ):
            raise ValidationError("expected_version", "must be an integer")
        text = digest = None
        if content is not None:
            text = validate_content(content, self._settings.max_content_bytes)
            digest = content_hash(text)
        meta = (
            None
            if metadata is None
            else validate_metadata(metadata, self._settings.max_metadata_bytes)
        )
        weight = None if importance is None else validate_importance(importance)
        await self._follow_space()

        async def embed() -> tuple[Any, builtins.list[Any] | None]:
            vector = None
            if embedding is not None:
                vector = self._vector(embedding)
            elif text is not None and self._embedder is not None:
                vector = (await self._embed([text], "embedding"))[0]
            # A new embedding without new content is re-embedded from the stored
            # content by the migration's workers (the memories' trigger clears it).
            nexts = None
            if vector is not None and text is not None:
                nexts = await self._space.embed_next([text])
            return vector, nexts

        generation, (vector, nexts) = await self._consistent(embed)
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
                args[11] = self._held_vector(generation, args[11], nexts and nexts[0])
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

    async def delete(
        self,
        id: uuid.UUID | str,
        *,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> bool:
        """Delete a memory (and its assembly memberships). False if it did not exist."""
        memory_id = parse_id("id", id)
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

    # ------------------------------------------------------------------ reads

    async def get(
        self,
        id: uuid.UUID | str,
        *,
        tenant: str | None = None,
        track_access: bool = False,
        as_of: datetime | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Memory:
        """The memory with this id (NotFoundError if missing or expired).

        With ``track_access`` the read also counts the access
        (``access_count``, ``last_accessed_at``).

        With ``as_of`` (a timezone-aware datetime): the memory as committed
        at that moment, rebuilt from its history: a memory deleted since
        reappears as it was, later updates are not shown, one created later
        or expired by then is not found. Exact to the commit (see the
        README's "As-of reads"); ``embedding`` is None unless the memory
        still has the version it had then, access statistics are 0/None. A
        moment in the future or before the history horizon is a
        ValidationError.
        """
        if as_of is not None and track_access:
            raise ValidationError("track_access", "an as_of read is not an access")
        found = await self._by_ids([parse_id("id", id)], tenant, track_access, conn, as_of)
        if len(found) != 1:
            self._exactly_one(len(found), f"memory {id}")
        return found[0]

    async def get_many(
        self,
        ids: Iterable[uuid.UUID | str],
        *,
        tenant: str | None = None,
        as_of: datetime | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[Memory]:
        """The memories that exist among ``ids``, in the order asked for.

        ``as_of``: those that existed at that moment, as they were (see :meth:`get`).
        """
        wanted = [
            parse_id(f"ids[{i}]", value) for i, value in enumerate(validate_sequence(ids, "ids"))
        ]
        found = {m.id: m for m in await self._by_ids(wanted, tenant, False, conn, as_of)}
        return [found[i] for i in dict.fromkeys(wanted) if i in found]

    async def _by_ids(
        self,
        ids: builtins.list[uuid.UUID],
        tenant: str | None,
        track_access: bool,
        conn: asyncpg.Connection | None,
        as_of: datetime | None = None,
    ) -> builtins.list[Memory]:
        if tenant is not None:
            tenant = Scope(tenant).tenant
        if as_of is not None:
            moment = validate_as_of(as_of)
            as_of_sql = asof_q.by_ids(self._schema, None if tenant is None else "$3")
            values: builtins.list[object] = [ids, moment]
            if tenant is not None:
                values.append(tenant)
            rows = await self._read(
                conn, lambda active: self._as_of.fetch(active, as_of_sql, values, moment),
                routed=False,  # see memory_asof: a replica may not have replayed t yet,
                tenant=tenant,
            )
            return [Memory.from_row(row) for row in rows if row["id"] is not None]
        single = len(ids) == 1
        key: object = ids[0] if single else ids
        sql = self._by_ids_sql[track_access, single, tenant is not None]
        args: builtins.list[object] = [key] if tenant is None else [key, tenant]
        if track_access and tenant is None:
            # The id may exist in several tenants: that get fails, and must
            # not have counted an access of each.
            async with self._transaction(conn, tenant=tenant) as active:
                rows = await active.fetch(sql, *args)
                if len(rows) > 1:
                    self._exactly_one(len(rows), f"memory {ids[0]}")
        elif track_access:
            async with self._connection(conn, tenant=tenant) as active:
                rows = await active.fetch(sql, *args)
        else:
            rows = await self._read(conn, lambda active: active.fetch(sql, *args), tenant=tenant)
        return [Memory.from_row(row) for row in rows]

    async def list(
        self,
        scope: Scope,
        *,
        limit: int = 100,
        after: uuid.UUID | str | None = None,
        include: Include = "exact",
        as_of: datetime | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[Memory]:
        """One page of live memories in creation order.

        Pass the last id of a page as ``after`` to get the next one (keyset
        pagination: stable and fast however deep you page). ``as_of``: the
        memories of the scope as committed at that moment (see :meth:`get`);
        page through them with the same ``as_of``.
        """
        scope = validate_scope(scope)
        include = validate_include(include)
        limit = validate_limit(limit, "limit", MAX_PAGE)
        if as_of is not None:
            after_id = None if after is None else parse_id("after", after)
            return await self._read_as_of(
                scope, include, as_of, conn, after=after_id, limit=limit
            )
        params = Params()
        scope_sql = scope_condition(scope, include, params)
        after_param = None if after is None else params.add(parse_id("after", after))
        sql = q.list_page(self._schema, scope_sql, after_param, params.add(limit))
        rows = await self._read(
            conn, lambda active: active.fetch(sql, *params.values), tenant=scope.tenant
        )
        return [Memory.from_row(row) for row in rows]

    async def count(
        self,
        scope: Scope,
        *,
        include: Include = "exact",
        as_of: datetime | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> int:
        """Number of live memories in a scope (``as_of``: at that moment, see :meth:`get`)."""
        scope = validate_scope(scope)
        if as_of is not None:
            moment = validate_as_of(as_of)
            include = validate_include(include)
            params = Params(scope.tenant, moment)
            scope_sql = scope_condition(scope, include, params)
            row_scope_sql = scope_condition(scope, include, params, alias="m")
            sql = asof_q.count_in_scope(self._schema, "$1", scope_sql, row_scope_sql, "$2")
            rows = await self._read(
                conn, lambda active: self._as_of.fetch(active, sql, params.values, moment),
                routed=False,  # see memory_asof: a replica may not have replayed t yet,
                tenant=scope.tenant,
            )
            counted: int = rows[0]["n"]
            return counted
        params = Params()
        sql = q.count(self._schema, scope_condition(scope, validate_include(include), params))
        result: int = await self._read(
            conn, lambda active: active.fetchval(sql, *params.values), tenant=scope.tenant
        )
        return result

    async def _read_as_of(
        self,
        scope: Scope,
        include: Include,
        as_of: object,
        conn: asyncpg.Connection | None,
        *,
        key: str | None = None,
        after: uuid.UUID | None = None,
        limit: int | None = None,
    ) -> builtins.list[Memory]:
        """A scope's memories at ``as_of`` (under a key, or a page after an id), id order."""
        moment = validate_as_of(as_of)
        params = Params()
        tenant_param, t_param = params.add(scope.tenant), params.add(moment)
        scope_sql = scope_condition(scope, include, params)
        row_scope_sql = scope_condition(scope, include, params, alias="m")
        sql = asof_q.in_scope(
            self._schema,
            tenant_param,
            scope_sql,
            row_scope_sql,
            t_param,
            key_param=None if key is None else params.add(key),
            after_param=None if after is None else params.add(after),
            limit_param=None if limit is None else params.add(limit),
        )
        rows = await self._read(
            conn, lambda active: self._as_of.fetch(active, sql, params.values, moment),
            routed=False,  # see memory_asof: a replica may not have replayed t yet,
            tenant=scope.tenant,
        )
        return [Memory.from_row(row) for row in rows if row["id"] is not None]

    async def history(
        self,
        id: uuid.UUID | str,
        *,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[MemoryEvent]:
        """The memory's events (created, updated, deleted), oldest first."""
        memory_id = parse_id("id", id)
        tenant_param, args = self._by_id(memory_id, tenant)
        sql = q.history(self._schema, tenant_param)
        rows = await self._read(conn, lambda active: active.fetch(sql, *args), tenant=tenant)
        return [MemoryEvent.from_row(row) for row in rows]

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

        Three modes (see the README's "Search modes"): ``vector`` (nearest
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
        if not isinstance(with_embeddings, bool):
            raise ValidationError("with_embeddings", "must be True or False")
        # _follow_space()'s body, without its coroutine (a search's client
        # work is a few such layers).
        if self._space.refresh_due():
            await self._space.refresh(self._pool)
        self._space.check()

        arguments = (
            scope,
            query,
            k,
            include,
            where,
            min_importance,
            created_after,
            created_before,
            rank,
            mode,
            query_embedding,
            diversity,
            plan,
            with_embeddings,
        )
        if self._space.migrating:
            # Embed the query and search under the migration's row: both in the
            # old model, or (if it switched meanwhile) both in the new one.
            async def held() -> tuple[_SearchStatement, tuple[builtins.list[Any], int | None]]:
                async with self._transaction(conn, tenant=scope.tenant) as active:
                    await self._space.hold(active)
                    self._space.check()
                    held_statement = await self._search_statement(*arguments)
                    return held_statement, await self._search_rows(held_statement, active)

            statement, (rows, terms) = await self._retrying(
                held, owns_transaction=conn is None, idempotent=True
            )
        else:
            statement = await self._search_statement(*arguments)
            rows, terms = await self._read(
                conn, functools.partial(self._search_rows, statement), tenant=scope.tenant
            )
        if terms == 0:
            raise ValidationError(
                "query",
                "has no searchable words under the text search configuration "
                f"{self._settings.text_search_config!r} (empty, only stop words, or only "
                "operators)",
            )
        if statement.mode == "vector":
            hits = SearchHit.vector_hits(rows, statement.scope)
        else:
            found = (row for row in rows if row["id"] is not None)
            hits = [self._hit(statement, place, row) for place, row in enumerate(found, 1)]
        if self._reranker is not None and statement.text is not None:
            hits = await ranking.rerank(self._reranker, statement.text, hits)
        if statement.rank == "recall":
            hits = ranking.rank_for_recall(
                hits, by_similarity=statement.mode == "vector" and self._reranker is None
            )
        if statement.diversity is not None:
            return ranking.diversify(hits, statement.diversity, statement.k)
        return hits[: statement.k]

    async def _search_rows(
        self, statement: _SearchStatement, active: asyncpg.Connection
    ) -> tuple[builtins.list[Any], int | None]:
        """The statement's rows, and (text and hybrid modes) how many terms the query had."""
        rows = await self._run_search(active, statement.sql, statement.values)
        if statement.exact_sql is not None and self._short(statement, rows):
            # The index ran out (max_scan_tuples) before filters let k rows
            # through, or the scope is small: scan exactly to be sure.
            rows = await self._run_search(active, statement.exact_sql, statement.values)
        if statement.mode == "vector":
            return rows, None
        if statement.mode == "text":
            # Text mode's statement has no row to carry the count: only
            # an empty result asks whether the query had words at all,
            # unless it holds a word known to be searchable.
            text = statement.values[0]
            assert isinstance(text, str)
            if rows or self._searchable.known_in(text):
                return rows, None
            words = self._searchable.plain_words(text)
            found = await active.fetchrow(
                q.query_terms(self._settings.text_search_config), text, words
            )
            self._searchable.learn(found["searchable"])
            return rows, found["terms"]
        return rows, rows[0]["query_terms"]

    @staticmethod
    def _hit(statement: _SearchStatement, place: int, row: Any) -> SearchHit:
        """A text or hybrid hit (vector hits: :meth:`SearchHit.vector_hits`)."""
        memory = Memory.from_row(row, statement.scope)
        if statement.mode == "text":
            return SearchHit(memory, float(row["text_score"]), None, ("text",), None, place)
        arms = tuple(
            arm
            for arm, found in (("vector", row["vector_rank"]), ("text", row["text_rank"]))
            if found is not None
        )
        similarity = None if row["similarity"] is None else float(row["similarity"])
        return SearchHit(
            memory,
            float(row["fused_score"]),
            similarity,
            arms,
            row["vector_rank"],
            row["text_rank"],
        )

    @staticmethod
    def _short(statement: _SearchStatement, rows: Sequence[Any]) -> bool:
        """Whether the vector arm may have missed rows the exact scan would find."""
        if statement.mode == "vector":
            # A short page from the exact branch is the whole answer; a short
            # (or empty) page from the index may not be.
            return len(rows) < statement.fetch and not (rows and rows[0]["via_exact"])
        found = sum(1 for row in rows if row["id"] is not None)
        return found < statement.fetch and rows[0]["vector_found"] < statement.candidates

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
        statement = await self._search_statement(
            scope,
            query,
            k,
            include,
            where,
            None,
            None,
            None,
            "similarity",
            mode,
            query_embedding,
            None,
            plan,
        )
        async with self._connection(conn, tenant=scope.tenant) as active, active.transaction():
            if not self._settings.pgbouncer:
                rows = await active.fetch("EXPLAIN ANALYZE " + statement.sql, *statement.values)
            else:
                rows = []
        return "\n".join(row[0] for row in rows)

    def _search_mode(
        self, query: object, mode: object, query_embedding: object
    ) -> tuple[str, str | None]:
        """The mode to run and the query text (None for an embedding query)."""
        text = query if isinstance(query, str) else None
        if mode is None:
            if text is None:
                mode = "vector"
            elif self._embedder is not None or query_embedding is not None:
                mode = "hybrid"
            else:
                mode = "text"
        if mode in ("auto", "exact", "index"):
            raise ValidationError("mode", f"{mode!r} is a plan now: pass plan={mode!r}")
        if mode not in ("vector", "text", "hybrid"):
            raise ValidationError("mode", "must be vector, text or hybrid")
        if text is None and mode != "vector":
            raise ValidationError("mode", f"{mode} search needs a text query, not an embedding")
        if text is None and query_embedding is not None:
            raise ValidationError("query_embedding", "only for text queries")
        if mode == "text" and query_embedding is not None:
            raise ValidationError("query_embedding", "text mode uses no embedding")
        if mode == "hybrid" and self._embedder is None and query_embedding is None:
            raise ValidationError(
                "mode", "hybrid search needs an embedder on the service or a query_embedding"
            )
        if text is not None:
            check_text("query", text)
            if not text.strip():
                raise ValidationError("query", "must not be empty or only whitespace")
            if mode != "vector" and len(text) > MAX_QUERY_CHARS:
                raise ValidationError(
                    "query",
                    f"is {len(text)} characters, over the limit of {MAX_QUERY_CHARS} for text "
                    "and hybrid search (each word is a term of the text query); pass "
                    "mode='vector' to search by its embedding alone",
                )
        return str(mode), text

    async def _search_statement(
        self,
        scope: Scope,
        query: str | Sequence[float] | np.ndarray[Any, Any],
        k: int,
        include: Include,
        where: Mapping[str, Any] | None,
        min_importance: float | None,
        created_after: datetime | None,
        created_before: datetime | None,
        rank: Rank,
        mode: SearchMode | None,
        query_embedding: Sequence[float] | np.ndarray[Any, Any] | None,
        diversity: float | None,
        plan: SearchPlan,
        with_embeddings: bool = True,
    ) -> _SearchStatement:
        if (
            type(query) is np.ndarray
            and type(scope) is Scope
            and type(include) is str
            and type(k) is int
            and type(plan) is str
            and where is None
            and min_importance is None
            and created_after is None
            and created_before is None
            and rank == "similarity"
            and mode is None
            and query_embedding is None
            and diversity is None
        ):
            # The commonest search: an embedding, nothing but a scope. Its
            # statement differs between calls only in the query vector, so it
            # is built (and its arguments checked) once per set of arguments:
            # on a small scope, building it cost as much client time as the
            # rest of the search. Exact types in the key: True == 1, and a
            # value equal to a checked one is only as good when it is one.
            template = self._vector_search_templates(
                self._space.generation,
                # The scope by its levels: strings hash and compare in C,
                # a Scope through its dataclass methods.
                scope.tenant,
                scope.project,
                scope.agent,
                scope.session,
                include,
                k,
                plan,
                with_embeddings,
            )
            return template.bound(self._query_vector(query, "query"))
        scope, include, k, diversity = self._search_arguments(
            scope, include, k, rank, plan, diversity
        )
        search_mode, text = self._search_mode(query, mode, query_embedding)
        vector: object = None
        if search_mode != "text":
            if query_embedding is not None:
                vector = self._query_vector(query_embedding, "query_embedding")
            elif text is not None:
                vector = (await self._embed([text], "query"))[0]
            else:
                vector = self._query_vector(query, "query")
        return self._statement(
            scope,
            include,
            k,
            search_mode,
            text=text,
            vector=vector,
            where=where,
            min_importance=min_importance,
            created_after=created_after,
            created_before=created_before,
            rank=rank,
            diversity=diversity,
            plan=plan,
            with_embeddings=with_embeddings,
        )

    def _search_arguments(
        self,
        scope: object,
        include: object,
        k: object,
        rank: object,
        plan: object,
        diversity: object,
    ) -> tuple[Scope, Include, int, float | None]:
        """The search arguments every mode checks first, normalised."""
        checked_scope = validate_scope(scope)
        checked_include = validate_include(include)
        checked_k = validate_limit(k, "k", MAX_K)
        if rank not in ("similarity", "recall"):
            raise ValidationError("rank", "must be similarity or recall")
        if plan not in ("auto", "exact", "index"):
            raise ValidationError("plan", "must be auto, exact or index")
        if diversity is None:
            return checked_scope, checked_include, checked_k, None
        if (
            isinstance(diversity, bool)
            or not isinstance(diversity, int | float)
            or not 0 <= diversity <= 1
        ):
            raise ValidationError("diversity", "must be a number from 0 to 1")
        return checked_scope, checked_include, checked_k, float(diversity)

    def _vector_search_template(
        self,
        generation: int,
        tenant: str,
        project: str | None,
        agent: str | None,
        session: str | None,
        include: Include,
        k: int,
        plan: SearchPlan,
        with_embeddings: bool,
    ) -> _SearchStatement:
        """A plain vector search's statement, its query vector left out (see ``bound``).

        ``generation``, the embedding space's, is in the cache key only: the
        templates of one model are not reused after a switch to another (the
        query's dimension is checked per call). The levels are those of a
        Scope the caller passed, so they make one again without new checks,
        as the general path takes a Scope as it is.
        """
        del generation
        scope, include, k, _ = self._search_arguments(
            Scope.trusted(tenant, project, agent, session), include, k, "similarity", plan, None
        )
        return self._statement(
            scope, include, k, "vector", plan=plan, with_embeddings=with_embeddings
        )

    def _query_vector(self, value: object, field: str) -> bytes:
        """A query embedding, checked, in the wire format the statement sends.

        Encoded here rather than by the codec: the checked array is a copy
        already (the caller may change its own meanwhile), and the codec
        passes bytes through where it would convert the array again.
        """
        return vector_bytes(self._vector(value, field), self._settings.vector_type)

    def _statement(
        self,
        scope: Scope,
        include: Include,
        k: int,
        search_mode: str,
        *,
        text: str | None = None,
        vector: object = None,
        where: Mapping[str, Any] | None = None,
        min_importance: float | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        rank: Rank = "similarity",
        diversity: float | None = None,
        plan: SearchPlan,
        with_embeddings: bool,
    ) -> _SearchStatement:
        """The search statement of checked arguments; the query vector (if any) is ``$1``.

        A plain vector search's template passes no ``vector``: ``$1`` is then
        None until :meth:`_SearchStatement.bound` fills it in.
        """
        reordered = (
            rank == "recall"
            or diversity is not None
            or (self._reranker is not None and text is not None)
        )
        fetch = min(MAX_K, max(4 * k, 40)) if reordered else k
        candidates = min(MAX_K, max(2 * fetch, HYBRID_MIN_CANDIDATES))

        params = Params()
        query_param = None if search_mode == "text" else params.add(vector)
        text_param = required_param = ranked_param = None
        identifier_boost = False
        if search_mode != "vector":
            assert text is not None
            text_param = params.add(_JOINED.sub(" ", text))
        if search_mode == "hybrid":
            assert text is not None
            terms = hybrid_terms(text)
            identifier_boost = terms.identifiers
            if terms.required != text:
                required_param = params.add(_JOINED.sub(" ", terms.required))
                ranked_param = params.add(_JOINED.sub(" ", terms.ranked))
        scope_sql = scope_condition(scope, include, params)
        filters = [compile_where(where, params)]
        if min_importance is not None:
            weight = validate_importance(min_importance, "min_importance")
            filters.append(f"importance >= {params.add(weight)}")
        for name, moment, op in (
            ("created_after", created_after, ">"),
            ("created_before", created_before, "<"),
        ):
            if moment is not None:
                filters.append(f"created_at {op} {params.add(validate_time(moment, name))}")
        options = {
            "mode": search_mode,
            "distance": self._settings.distance,
            "scope_sql": scope_sql,
            "filter_sql": " AND ".join(filters),
            "query_param": query_param,
            "text_param": text_param,
            "required_param": required_param,
            "ranked_param": ranked_param,
            "identifier_boost": identifier_boost,
            "config": self._settings.text_search_config,
            "k_param": params.add(fetch),
            "candidates_param": params.add(candidates) if search_mode == "hybrid" else None,
            # Diversity compares the candidates' vectors: they are read for it.
            "with_embeddings": with_embeddings or diversity is not None,
        }
        sql, fallback = _search_sqls(self._schema, plan, **options)
        return _SearchStatement(
            sql,
            params.values,
            fetch,
            fallback,
            mode=search_mode,
            text=text,
            k=k,
            rank=rank,
            diversity=diversity,
            candidates=candidates,
            scope=scope if include == "exact" else None,
        )
