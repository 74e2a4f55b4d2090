"""Assemblies: named groups of memories (``svc.assemblies``).

An assembly keeps ``member_count``, ``embedded_count`` (members with an
embedding), ``embedding_sum`` (their sum, in double precision) and
``centroid`` (sum / embedded_count, NULL when no member has an embedding).
Every membership change updates them incrementally, from just the members
added or removed, while holding the assembly row lock, so they stay exact
under any concurrency.

Lock order (shared with :meth:`MemoryRepository.delete` and ``delete_scope``,
which is what keeps the two from deadlocking): memory rows first, then
assembly rows, each set in ``(tenant_id, id)`` order. Adding members takes
``FOR KEY SHARE`` on the memories (they cannot be deleted until we commit;
other adders are not blocked), then ``FOR UPDATE`` on the assembly. Removing
members and deleting assemblies lock only the assembly. Deleting memories
locks them ``FOR UPDATE``, then (in :meth:`AssemblyRepository.detach_memories`)
their assemblies.

Visibility: a memory can join an assembly when it is in the assembly's tenant
and its scope is the assembly's scope, one of its ancestors (a session's
assembly may group agent-, project- and tenant-wide memories) or one of its
descendants (a project's assembly may group memories of the project's
sessions). Memories of sibling scopes, of other tenants, and expired ones are
refused with a ValidationError naming ``memory_ids``.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import asyncpg
import numpy as np

from memsvc.assemblies import queries as q
from memsvc.changes.signal import signals_changes
from memsvc.core.errors import ConflictError, NotFoundError, ValidationError
from memsvc.core.ids import new_id, parse_id
from memsvc.core.models import Assembly, AssemblyHit, Memory
from memsvc.core.scope import Include, Scope, validate_include
from memsvc.core.settings import Settings
from memsvc.core.validation import (
    check_text,
    validate_embedded,
    validate_embedding,
    validate_limit,
    validate_metadata,
    validate_name,
    validate_scope,
    validate_sequence,
    validate_tenant,
    validate_text,
)
from memsvc.db.replicas import ReadRouter
from memsvc.db.repository import Repository
from memsvc.db.sql import Params, by_tenant, scope_condition
from memsvc.memories.embedding_space import EmbeddingSpace
from memsvc.telemetry import traced_operations

SearchPlan = Literal["auto", "exact", "index"]

MAX_NAME_LENGTH = 1024
MAX_DESCRIPTION_BYTES = 64 * 1024
MAX_MEMBERS_PER_CALL = 10_000
MAX_PAGE = 10_000
MAX_K = 1000

Vector = np.ndarray[Any, Any]

# The unique index on (scope, name); see memsvc.db.tables.
NAME_INDEX = "uq_assemblies_name"


def _member_ids(values: object, field: str = "memory_ids") -> list[uuid.UUID]:
    """Parse memory ids, dropping repeats (first occurrence wins)."""
    items = validate_sequence(values, field)
    ids = [parse_id(f"{field}[{i}]", value) for i, value in enumerate(items)]
    unique = list(dict.fromkeys(ids))
    if len(unique) > MAX_MEMBERS_PER_CALL:
        raise ValidationError(field, f"at most {MAX_MEMBERS_PER_CALL} ids per call")
    return unique


def _scope_text(scope: Scope) -> str:
    return ", ".join(f"{level} {value!r}" for level, value in scope.as_dict().items() if value)


def _is_name_clash(exc: ConflictError) -> bool:
    # By the index the database names, never by message text.
    return getattr(exc.__cause__, "constraint_name", None) == NAME_INDEX


def _name_clash(name: str, scope: Scope | None) -> ConflictError:
    """The error for a name the scope already has: which name, in which scope."""
    where = "the assembly's scope" if scope is None else f"scope ({_scope_text(scope)})"
    return ConflictError(
        f"an assembly named {name!r} already exists in {where}; names are unique per scope"
    )


def can_see(assembly: Scope, memory: Scope) -> bool:
    """Whether a memory in scope ``memory`` may join an assembly in scope ``assembly``.

    True when ``memory`` is ``assembly`` itself, an ancestor on its path, or
    nested under it (the same rule as ``include="ancestors"`` and
    ``include="descendants"`` in searches).
    """
    if memory.tenant != assembly.tenant:
        return False
    if memory in assembly.ancestors():
        return True
    depth = assembly.depth
    return memory.levels[: depth + 1] == assembly.levels[: depth + 1]


class _Aggregates:
    """Member count, embedded count and embedding sum of one (locked) assembly."""

    __slots__ = ("embedded_count", "member_count", "total")

    def __init__(self, member_count: int, embedded_count: int, total: Vector | None) -> None:
        self.member_count = member_count
        self.embedded_count = embedded_count
        self.total = total

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> _Aggregates:
        total = row["embedding_sum"]
        return cls(
            row["member_count"],
            row["embedded_count"],
            None if total is None else np.asarray(total, dtype=np.float64),
        )

    def change(self, embeddings: Sequence[Vector | None], sign: int) -> None:
        """Add (sign 1) or subtract (sign -1) members with these embeddings."""
        self.member_count += sign * len(embeddings)
        present = [e for e in embeddings if e is not None]
        if present:
            delta = np.sum(np.asarray(present, dtype=np.float64), axis=0)
            base = self.total if self.total is not None else np.zeros_like(delta)
            self.total = base + sign * delta
            self.embedded_count += sign * len(present)
        if self.embedded_count <= 0:
            # Nothing left to average: drop the sum, which also resets any
            # floating-point residue left by subtractions.
            self.embedded_count = 0
            self.total = None

    def values(self) -> tuple[int, int, list[float] | None, Vector | None]:
        """Column values: member_count, embedded_count, embedding_sum, centroid."""
        if self.total is None:
            return self.member_count, self.embedded_count, None, None
        centroid = (self.total / self.embedded_count).astype(np.float32)
        return self.member_count, self.embedded_count, self.total.tolist(), centroid


@traced_operations(
    "memsvc.assemblies", exclude=["detach_memories", "embeddings_changed", "erase_memberships"]
)
@signals_changes("create", "add_members", "remove_members", "recompute", "update", "delete")
class AssemblyRepository(Repository):
    """Named groups of memories with exact member counts and centroids."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: Settings,
        *,
        reads: ReadRouter | None = None,
        space: EmbeddingSpace | None = None,
    ) -> None:
        super().__init__(pool, settings, reads=reads)
        # Centroids are in the memories' embedding space: their dimension
        # follows an embedding-model migration's switch.
        self._space = space
        schema = self._schema
        self._insert_sql = q.insert_assembly(schema)
        self._lock_memories_sql = q.lock_memories(schema)
        self._lock_insert_sql = q.lock_and_insert_members(schema)
        self._delete_members_sql = q.delete_members(schema)
        self._set_sql = q.set_aggregates(schema)
        self._set_many_sql = q.set_aggregates_many(schema)
        self._lock_sql = q.lock_assemblies(schema)
        self._recompute_sql = q.recompute(schema, settings.vector_type)

    # ------------------------------------------------------------------ input

    def _vector(self, value: object, field: str) -> Vector:
        settings = self._settings
        dim = settings.embedding_dim if self._space is None else self._space.dim
        return validate_embedding(
            value, dim, settings.vector_type, field, distance=settings.distance
        )

    async def _query_vector(self, query: object) -> Vector:
        """A search's query embedding: the one given, or the service's embedding of text."""
        if not isinstance(query, str):
            return self._vector(query, "query")
        check_text("query", query)
        if not query.strip():
            raise ValidationError("query", "must not be empty or only whitespace")
        space = self._space
        if space is None or space.embedder is None:
            raise ValidationError(
                "query", "a text query needs a service opened with an embedder; pass an embedding"
            )
        if space.refresh_due():
            await space.refresh(self._pool)
        space.check()  # the model may have moved on (embedding-model migration)
        settings = self._settings
        (vector,) = validate_embedded(
            await space.embedder([query]),
            1,
            space.dim,
            settings.vector_type,
            "query",
            distance=settings.distance,
        )
        return vector

    def _description(self, value: object) -> str:
        return validate_text(value, MAX_DESCRIPTION_BYTES, "description")

    # ------------------------------------------------------------------ writes

    async def create(
        self,
        scope: Scope,
        name: str,
        *,
        description: str = "",
        metadata: Mapping[str, Any] | None = None,
        memory_ids: Iterable[uuid.UUID | str] = (),
        conn: asyncpg.Connection | None = None,
    ) -> Assembly:
        """Create an assembly, optionally with its first members, atomically.

        Args:
            scope: Where the assembly lives; its name is unique in this exact scope.
            name: The assembly's name (ConflictError if the scope already has it).
            description: What the group is for.
            metadata: A JSON object.
            memory_ids: Initial members: memories the scope can see (its own,
                its ancestors' or its descendants'), else ValidationError.
            conn: A connection (and transaction) of your own to run on.
        """
        scope = validate_scope(scope)
        name = validate_name(name, "name", MAX_NAME_LENGTH)
        text = self._description(description)
        meta = validate_metadata(metadata, self._settings.max_metadata_bytes)
        wanted = _member_ids(memory_ids)
        assembly_id = new_id()

        async def attempt() -> Assembly:
            # Without members it is one statement: no transaction needed.
            scoped = self._transaction(
                conn, tenant=scope.tenant) if wanted else self._connection(conn, tenant=scope.tenant
            )
            try:
                async with scoped as active:
                    aggregates = _Aggregates(0, 0, None)
                    if wanted:
                        rows = await active.fetch(self._lock_memories_sql, scope.tenant, wanted)
                        embeddings = self._check_members(scope, wanted, rows)
                        aggregates.change([embeddings[m] for m in wanted], 1)
                    row = await active.fetchrow(
                        self._insert_sql,
                        *scope.levels,
                        assembly_id,
                        name,
                        text,
                        meta,
                        *aggregates.values(),
                        wanted,
                    )
            except ConflictError as exc:
                if not _is_name_clash(exc):
                    raise
                raise _name_clash(name, scope) from exc.__cause__
            assert row is not None
            return Assembly.from_row(row)

        return await self._retrying(attempt, owns_transaction=conn is None)

    @staticmethod
    def _check_members(
        scope: Scope, wanted: list[uuid.UUID], rows: Sequence[Mapping[str, Any]]
    ) -> dict[uuid.UUID, Vector | None]:
        """Embeddings of the locked memories; ValidationError unless all may join."""
        found = {row["id"]: row for row in rows}
        missing = [m for m in wanted if m not in found]
        if missing:
            raise ValidationError(
                "memory_ids",
                f"{len(missing)} memories do not exist in tenant {scope.tenant!r} "
                f"(first: {missing[0]})",
            )
        for row in rows:
            if not row["live"]:
                raise ValidationError("memory_ids", f"memory {row['id']} has expired")
            levels = (row["project_id"], row["agent_id"], row["session_id"])
            if not can_see(scope, Scope(scope.tenant, *levels)):
                raise ValidationError(
                    "memory_ids",
                    f"memory {row['id']} is in a scope this assembly cannot see "
                    "(only its own scope, its ancestors and its descendants)",
                )
        return {row["id"]: row["embedding"] for row in rows}

    async def add_members(
        self,
        id: uuid.UUID | str,
        memory_ids: Iterable[uuid.UUID | str],
        *,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Assembly:
        """Add memories to an assembly; existing members are left as they are.

        All or nothing: if any memory is missing, expired, in another tenant
        or in a scope the assembly cannot see, nothing is added
        (ValidationError naming ``memory_ids``). Counts and centroid change by
        exactly the members this call inserted, and ``version`` is bumped only
        when something changed.
        """
        assembly_id = parse_id("id", id)
        wanted = _member_ids(memory_ids)
        tenant = validate_tenant(tenant)
        tenant = await self._routed("assemblies", assembly_id, tenant, conn)
        if not wanted:
            return await self.get(assembly_id, tenant=tenant, conn=conn)
        lock_sql = q.lock_memories_for_assembly(self._schema, None if tenant is None else "$3")
        args: list[object] = (
            [assembly_id, wanted] if tenant is None else [assembly_id, wanted, tenant]
        )

        async def attempt() -> Assembly:
            async with self._transaction(conn, tenant=tenant) as active:
                # 1. The memories, FOR KEY SHARE in id order (the global lock order).
                rows = await active.fetch(lock_sql, *args)
                tenants = {row["tenant_id"] for row in rows}
                if len(tenants) > 1:
                    raise ConflictError(f"assembly id {assembly_id} exists in several tenants")
                if not rows:
                    await self._require_one(active, assembly_id, tenant)
                    raise ValidationError(
                        "memory_ids", "none of these memories exists in the assembly's tenant"
                    )
                first = rows[0]
                scope = Scope(
                    first["tenant_id"],
                    first["a_project_id"],
                    first["a_agent_id"],
                    first["a_session_id"],
                )
                embeddings = self._check_members(scope, wanted, rows)
                # 2. The assembly, FOR UPDATE, and the member rows.
                row = await active.fetchrow(
                    self._lock_insert_sql, scope.tenant, assembly_id, wanted
                )
                if row is None:
                    raise NotFoundError(f"assembly {assembly_id} not found")
                added: list[uuid.UUID] = row["added"]
                if not added:
                    return Assembly.from_row(row)
                # 3. The new aggregates, from just the inserted members.
                aggregates = _Aggregates.of(row)
                aggregates.change([embeddings[m] for m in added], 1)
                updated = await active.fetchrow(
                    self._set_sql, scope.tenant, assembly_id, *aggregates.values()
                )
            assert updated is not None
            return Assembly.from_row(updated)

        return await self._retrying(attempt, owns_transaction=conn is None)

    async def remove_members(
        self,
        id: uuid.UUID | str,
        memory_ids: Iterable[uuid.UUID | str],
        *,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Assembly:
        """Remove memories from an assembly (ids that are not members are ignored).

        The memories themselves are not touched. Counts and centroid change by
        exactly the members this call removed.
        """
        assembly_id = parse_id("id", id)
        wanted = _member_ids(memory_ids)
        tenant = validate_tenant(tenant)
        tenant = await self._routed("assemblies", assembly_id, tenant, conn)
        if not wanted:
            return await self.get(assembly_id, tenant=tenant, conn=conn)
        tenant_param, args = self._by_id(assembly_id, tenant)
        lock_sql = q.lock_assembly(self._schema, tenant_param)

        async def attempt() -> Assembly:
            async with self._transaction(conn, tenant=tenant) as active:
                locked = await active.fetch(lock_sql, *args)
                row = self._one(locked, assembly_id)
                # A statement of its own, after the lock: its snapshot then
                # includes every membership committed while we waited.
                removed = await active.fetch(
                    self._delete_members_sql, row["tenant_id"], assembly_id, wanted
                )
                if not removed:
                    return Assembly.from_row(row)
                aggregates = _Aggregates.of(row)
                aggregates.change([r["embedding"] for r in removed], -1)
                updated = await active.fetchrow(
                    self._set_sql, row["tenant_id"], assembly_id, *aggregates.values()
                )
            assert updated is not None
            return Assembly.from_row(updated)

        return await self._retrying(attempt, owns_transaction=conn is None)

    async def detach_memories(
        self, conn: asyncpg.Connection, tenants: list[str], memory_ids: list[uuid.UUID]
    ) -> None:
        """Remove memories about to be deleted from their assemblies (same transaction).

        The memory repository's delete hook: the caller has locked the memory
        rows FOR UPDATE, so no membership of them can appear meanwhile. Their
        assemblies are locked in (tenant_id, id) order, the member rows deleted
        and the aggregates reduced by exactly what was deleted. Driver errors
        are left to the caller, which owns the transaction and its retries.
        """
        if not memory_ids:
            return
        affected = await conn.fetch(q.assemblies_of_memories(self._schema), tenants, memory_ids)
        if not affected:
            return
        locked = await self._lock(conn, [(r["tenant_id"], r["assembly_id"]) for r in affected])
        # After the locks, so this snapshot sees removals committed meanwhile.
        lost: dict[tuple[str, uuid.UUID], list[Vector | None]] = {}
        for r in await conn.fetch(q.detach_members(self._schema), tenants, memory_ids):
            lost.setdefault((r["tenant_id"], r["assembly_id"]), []).append(r["embedding"])
        updates = []
        for row in locked:
            key = (row["tenant_id"], row["id"])
            if key not in lost:
                continue  # its membership was removed while we waited for the lock
            aggregates = _Aggregates.of(row)
            aggregates.change(lost[key], -1)
            updates.append((*key, *aggregates.values()))
        if updates:
            await conn.executemany(self._set_many_sql, updates)

    async def erase_memberships(
        self, conn: asyncpg.Connection, tenants: list[str], memory_ids: list[uuid.UUID]
    ) -> int:
        """Remove memories about to be erased from their assemblies; recompute those.

        Like :meth:`detach_memories` (same transaction, memory rows already
        locked, assemblies locked in key order), but the surviving assemblies'
        counts, sums and centroids are recomputed from their remaining members
        rather than reduced, so nothing derived from an erased embedding is
        left in them. Returns how many memberships went.
        """
        if not memory_ids:
            return 0
        affected = await conn.fetch(q.assemblies_of_memories(self._schema), tenants, memory_ids)
        if not affected:
            return 0
        locked = await self._lock(conn, [(r["tenant_id"], r["assembly_id"]) for r in affected])
        removed = await conn.fetch(q.detach_members(self._schema), tenants, memory_ids)
        await self._recompute(conn, locked)
        return len(removed)

    async def embeddings_changed(
        self, conn: asyncpg.Connection, tenants: list[str], memory_ids: list[uuid.UUID]
    ) -> None:
        """Recompute the assemblies of memories whose embedding just changed (same transaction).

        For the memory repository to call after changing embeddings, with the
        memory rows locked (as its updates do), which keeps the lock order.
        The affected assemblies are recomputed from their members.
        """
        if not memory_ids:
            return
        affected = await conn.fetch(q.assemblies_of_memories(self._schema), tenants, memory_ids)
        if affected:
            await self._recompute_locked(
                conn, [(r["tenant_id"], r["assembly_id"]) for r in affected]
            )

    async def _lock(
        self, conn: asyncpg.Connection, keys: Iterable[tuple[str, uuid.UUID]]
    ) -> builtins.list[Any]:
        """Lock the assemblies ``keys`` (tenant, id) FOR UPDATE, tenant by tenant in key order."""
        locked: builtins.list[Any] = []
        for tenant, ids in by_tenant(keys):
            locked.extend(await conn.fetch(self._lock_sql, tenant, ids))
        return locked

    async def _recompute(
        self, conn: asyncpg.Connection, locked: Sequence[Any]
    ) -> builtins.list[Assembly]:
        """Recompute the locked assemblies (rows with ``tenant_id``, ``id``), tenant by tenant."""
        rows: builtins.list[Any] = []
        for tenant, ids in by_tenant((r["tenant_id"], r["id"]) for r in locked):
            rows.extend(await conn.fetch(self._recompute_sql, tenant, ids))
        return [Assembly.from_row(row) for row in rows]

    async def _recompute_locked(
        self, conn: asyncpg.Connection, keys: Iterable[tuple[str, uuid.UUID]]
    ) -> builtins.list[Assembly]:
        return await self._recompute(conn, await self._lock(conn, keys))

    async def recompute(
        self,
        id: uuid.UUID | str,
        *,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Assembly:
        """Recompute an assembly's counts and centroid from its member rows (a repair tool).

        Never needed in normal operation; useful after editing rows by hand.
        """
        assembly_id = parse_id("id", id)
        tenant = validate_tenant(tenant)
        tenant = await self._routed("assemblies", assembly_id, tenant, conn)
        tenant_param, args = self._by_id(assembly_id, tenant)
        lock_sql = q.lock_assembly(self._schema, tenant_param)

        async def attempt() -> Assembly:
            async with self._transaction(conn, tenant=tenant) as active:
                row = self._one(await active.fetch(lock_sql, *args), assembly_id)
                done = await self._recompute_locked(active, [(row["tenant_id"], assembly_id)])
            return done[0]

        return await self._retrying(attempt, owns_transaction=conn is None)

    async def update(
        self,
        id: uuid.UUID | str,
        *,
        name: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        expected_version: int | None = None,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Assembly:
        """Change name, description or metadata; None leaves a field as it is.

        With ``expected_version`` the change happens only if the assembly is
        still at that version (membership changes bump it too); otherwise
        ConflictError. A name taken in the scope is a ConflictError.
        ``metadata`` replaces the whole object.
        """
        assembly_id = parse_id("id", id)
        if expected_version is not None and (
            isinstance(expected_version, bool) or not isinstance(expected_version, int)
        ):
            raise ValidationError("expected_version", "must be an integer")
        new_name = None if name is None else validate_name(name, "name", MAX_NAME_LENGTH)
        text = None if description is None else self._description(description)
        meta = (
            None
            if metadata is None
            else validate_metadata(metadata, self._settings.max_metadata_bytes)
        )
        tenant = validate_tenant(tenant)
        tenant = await self._routed("assemblies", assembly_id, tenant, conn)
        try:
            async with self._connection(conn, tenant=tenant) as active:
                row = await active.fetchrow(
                    q.update_assembly(self._schema, tenant is not None),
                    assembly_id,
                    tenant,
                    expected_version,
                    new_name,
                    text,
                    meta,
                )
        except ConflictError as exc:
            if new_name is None or not _is_name_clash(exc):
                raise
            # On a connection of ours the scope can be looked up to name it;
            # the caller's transaction is aborted by the violation.
            scope = None if conn is not None else (await self.get(assembly_id, tenant=tenant)).scope
            raise _name_clash(new_name, scope) from exc.__cause__
        return Assembly.from_row(
            self._versioned_outcome(row, f"assembly {assembly_id}", expected_version)
        )

    async def delete(
        self,
        id: uuid.UUID | str,
        *,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> bool:
        """Delete an assembly; its member memories are kept. False if it did not exist."""
        assembly_id = parse_id("id", id)
        tenant = validate_tenant(tenant)
        try:
            tenant = await self._routed("assemblies", assembly_id, tenant, conn)
        except NotFoundError:
            return False
        tenant_param, args = self._by_id(assembly_id, tenant)
        sql = q.delete_assembly(self._schema, tenant_param)
        return await self._delete_one(sql, args, f"assembly {assembly_id}", conn, tenant=tenant)

    # ------------------------------------------------------------------ reads

    def _one(self, rows: Sequence[Mapping[str, Any]], assembly_id: uuid.UUID) -> Mapping[str, Any]:
        self._exactly_one(len(rows), f"assembly {assembly_id}")
        return rows[0]

    async def _require_one(
        self, conn: asyncpg.Connection, assembly_id: uuid.UUID, tenant: str | None
    ) -> None:
        tenant_param, args = self._by_id(assembly_id, tenant)
        sql = q.count_by_id(self._schema, tenant_param)
        self._exactly_one(await conn.fetchval(sql, *args), f"assembly {assembly_id}")

    async def get(
        self,
        id: uuid.UUID | str,
        *,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> Assembly:
        """The assembly with this id (NotFoundError if there is none)."""
        assembly_id = parse_id("id", id)
        tenant = validate_tenant(tenant)
        tenant_param, args = self._by_id(assembly_id, tenant)
        sql = q.select_by_id(self._schema, tenant_param)
        rows = await self._read(conn, lambda active: active.fetch(sql, *args), tenant=tenant)
        return Assembly.from_row(self._one(rows, assembly_id))

    async def get_by_name(
        self, scope: Scope, name: str, *, conn: asyncpg.Connection | None = None
    ) -> Assembly:
        """The assembly named ``name`` in this exact scope (NotFoundError if none)."""
        scope = validate_scope(scope)
        params = Params()
        scope_sql = scope_condition(scope, "exact", params)
        sql = q.select_by_name(
            self._schema, scope_sql, params.add(validate_name(name, "name", MAX_NAME_LENGTH))
        )
        row = await self._read(
            conn, lambda active: active.fetchrow(sql, *params.values), tenant=scope.tenant
        )
        if row is None:
            raise NotFoundError(f"no assembly named {name!r} in this scope")
        return Assembly.from_row(row)

    async def list(
        self,
        scope: Scope,
        *,
        limit: int = 100,
        after: uuid.UUID | str | None = None,
        include: Include = "exact",
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[Assembly]:
        """One page of a scope's assemblies in creation order.

        Pass the last id of a page as ``after`` to get the next (keyset
        pagination). ``include`` widens the scope as in searches.
        """
        scope = validate_scope(scope)
        include = validate_include(include)
        limit = validate_limit(limit, "limit", MAX_PAGE)
        params = Params()
        scope_sql = scope_condition(scope, include, params)
        after_param = None if after is None else params.add(parse_id("after", after))
        sql = q.list_page(self._schema, scope_sql, after_param, params.add(limit))
        rows = await self._read(
            conn, lambda active: active.fetch(sql, *params.values), tenant=scope.tenant
        )
        return [Assembly.from_row(row) for row in rows]

    async def members(
        self,
        id: uuid.UUID | str,
        *,
        limit: int = 100,
        after: uuid.UUID | str | None = None,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[Memory]:
        """One page of the assembly's live member memories, in memory id order.

        Pass the last memory's id as ``after`` for the next page. Expired
        members are skipped (they still count in ``member_count`` until gc
        deletes them). NotFoundError if the assembly does not exist.
        """
        assembly_id = parse_id("id", id)
        limit = validate_limit(limit, "limit", MAX_PAGE)
        after_id = None if after is None else parse_id("after", after)
        tenant = validate_tenant(tenant)
        sql = q.members_page(self._schema, None if tenant is None else "$4")
        args: list[object] = [assembly_id, after_id, limit]
        if tenant is not None:
            args.append(tenant)

        async def page(active: asyncpg.Connection) -> builtins.list[Any]:
            rows: builtins.list[Any] = await active.fetch(sql, *args)
            if not rows:
                await self._require_one(active, assembly_id, tenant)
            return rows

        return [Memory.from_row(row) for row in await self._read(conn, page, tenant=tenant)]

    async def memberships(
        self,
        memory_id: uuid.UUID | str,
        *,
        tenant: str | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[Assembly]:
        """The assemblies a memory belongs to, in creation order (empty if none)."""
        wanted = parse_id("memory_id", memory_id)
        tenant = validate_tenant(tenant)
        tenant_param, args = self._by_id(wanted, tenant)
        sql = q.memberships(self._schema, tenant_param)
        rows = await self._read(conn, lambda active: active.fetch(sql, *args), tenant=tenant)
        return [Assembly.from_row(row) for row in rows]

    async def search(
        self,
        scope: Scope,
        query: str | Sequence[float] | np.ndarray[Any, Any],
        *,
        k: int = 10,
        include: Include = "exact",
        mode: Literal["vector"] | None = None,
        plan: SearchPlan = "auto",
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[AssemblyHit]:
        """The ``k`` assemblies whose centroid is nearest to ``query``, best first.

        Args:
            scope: Where to search.
            query: An embedding of the configured dimension, or text, which the
                service's embedder embeds (as ``svc.memories.search`` does; a
                ValidationError naming ``query`` without an embedder).
            k: How many hits (1-1000).
            include: ``exact``, ``ancestors`` or ``descendants``, as in memory search.
            mode: ``vector`` (the default, and the only mode: assemblies are
                found by their centroid; they have no text of their own to search).
            plan: ``auto``; ``exact`` or ``index`` force a strategy (tests, benchmarks).
            conn: A connection of your own to run on.

        Returns:
            Hits; ``score`` is the similarity (1 - cosine distance for cosine).
            Assemblies without a centroid (no member has an embedding) never match.
        """
        scope = validate_scope(scope)
        include = validate_include(include)
        k = validate_limit(k, "k", MAX_K)
        if mode in ("auto", "exact", "index"):
            raise ValidationError("mode", f"{mode!r} is a plan now: pass plan={mode!r}")
        if mode not in (None, "vector"):
            raise ValidationError("mode", "assemblies are searched by centroid: only vector")
        if plan not in ("auto", "exact", "index"):
            raise ValidationError("plan", "must be auto, exact or index")
        vector = await self._query_vector(query)
        params = Params()
        query_param = params.add(vector)
        scope_sql = scope_condition(scope, include, params)
        options = {
            "distance": self._settings.distance,
            "scope_sql": scope_sql,
            "query_param": query_param,
            "k_param": params.add(k),
            "threshold_param": params.add(self._settings.exact_search_threshold),
        }
        # Only ``auto`` uses the threshold, the last parameter.
        values = params.values if plan == "auto" else params.values[:-1]
        sql = q.search(self._schema, mode=plan, **options)

        async def run(active: asyncpg.Connection) -> builtins.list[Any]:
            rows = await self._run_search(active, sql, values)
            if len(rows) < k and plan == "auto" and not (rows and rows[0]["via_exact"]):
                # The index gave up (max_scan_tuples) before k rows of this
                # scope turned up, or the scope is empty: scan exactly.
                exact_sql = q.search(self._schema, mode="exact", **options)
                rows = await self._run_search(active, exact_sql, params.values[:-1])
            return rows

        rows = await self._read(conn, run, tenant=scope.tenant)
        return [AssemblyHit(Assembly.from_row(row), float(row["similarity"])) for row in rows]
