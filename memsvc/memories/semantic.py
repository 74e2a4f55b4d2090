"""Semantic deduplication of writes: ``add(..., dedupe="semantic")``.

A write whose embedding is at least ``threshold`` similar (cosine) to a live
memory of the same exact scope, and holds the same identifier-like tokens
(:mod:`memsvc.memories.dedupe_rule`), stores nothing new: that memory is
reinforced instead (``reinforced_count``, ``last_reinforced_at``, importance
raised, the write's wording kept in its history) and returned with
``merged=True``. Keyed memories (``put``) are never candidates.

Writers of one scope are serialised in this mode only, by a transaction-scoped
advisory lock on the scope taken before the nearest memories are read: of
racing writes of one fact, the first stores it and the others find it.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

import asyncpg

from memsvc.core.errors import ValidationError
from memsvc.core.models import Memory
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.db.codecs import vector_bytes
from memsvc.db.sql import Params, quote_literal, scope_condition
from memsvc.memories import dedupe_queries as q
from memsvc.memories.dedupe_rule import same_identifiers
from memsvc.memories.expired import DeleteLocked
from memsvc.memories.inserts import insert_one, inserted_memory, scope_params

Dedupe = Literal["exact", "semantic", "off"]
DEDUPE_MODES = ("exact", "semantic", "off")


def validate_dedupe(value: object) -> Dedupe:
    """``dedupe`` is ``exact``, ``semantic`` or ``off``."""
    if value not in DEDUPE_MODES:
        raise ValidationError("dedupe", "must be exact, semantic or off")
    return value  # type: ignore[return-value]


def validate_threshold(value: object, field: str = "dedupe_threshold") -> float:
    """A cosine similarity threshold in (0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ValidationError(field, "must be a number above 0 and at most 1")
    return float(value)


def scope_lock_key(schema: str, scope: Scope) -> str:
    """The advisory lock key of a scope's writers (the per-scope limit's too)."""
    return json.dumps([schema, "memories", *scope.levels])


class SemanticDedupe:
    """Finds the memory a write duplicates, and merges the write into it."""

    def __init__(self, settings: Settings) -> None:
        self._schema = settings.db_schema
        self._distance = settings.distance
        self._vector_type = settings.vector_type
        self._reinforce_sql = q.reinforce(self._schema)
        # The nearest-neighbour read runs in the lock's transaction: its HNSW
        # settings are set there, in the same round trip as the lock (they
        # also hold behind pgbouncer, where session settings do not). A
        # near-duplicate is close to the write, and the graph walk finds it
        # with a short candidate list.
        ef_search = max(q.CANDIDATES, min(q.EF_SEARCH, settings.hnsw_ef_search))
        self._settings_sql = (
            f"SET LOCAL hnsw.ef_search = {int(ef_search)};"
            " SET LOCAL hnsw.iterative_scan = relaxed_order;"
            f" SET LOCAL hnsw.max_scan_tuples = {int(settings.hnsw_max_scan_tuples)};"
        )

    async def lock(self, conn: asyncpg.Connection, scope: Scope, *, citus: bool = False) -> None:
        """Serialise this transaction with the scope's other semantic writers.

        On Citus (``citus``) the settings go alone: Citus sends the whole
        text of a ``SET LOCAL`` to each worker connection the transaction
        opens, and a lock in that text would be taken again by a second
        connection to one worker, which then waits for the first forever.
        """
        key = quote_literal(scope_lock_key(self._schema, scope))
        lock = f"SELECT pg_advisory_xact_lock(hashtextextended({key}, 0))"
        if citus:
            await conn.execute(self._settings_sql)
            await conn.execute(lock)
            return
        await conn.execute(f"{self._settings_sql} {lock}")

    async def match(
        self,
        conn: asyncpg.Connection,
        scope: Scope,
        text: str,
        vector: Any,
        threshold: float,
        exclude: Sequence[uuid.UUID] = (),
    ) -> Any | None:
        """The row of the live memory ``text`` duplicates, or None."""
        params = Params(vector_bytes(vector, self._vector_type))
        scope_sql = scope_condition(scope, "exact", params)
        sql = q.nearest(self._schema, self._distance, scope_sql, "$1", params.add(q.CANDIDATES))
        for row in await conn.fetch(sql, *params.values):
            if row["cosine"] < threshold:
                return None  # sorted by cosine: none after it is closer
            if row["id"] not in exclude and same_identifiers(row["content"], text):
                return row
        return None

    async def add_each(
        self,
        conn: asyncpg.Connection,
        scope: Scope,
        columns: list[list[Any]],
        vectors: list[Any],
        threshold: float,
        insert_sql: str,
        delete_locked: DeleteLocked,
    ) -> tuple[dict[uuid.UUID, Memory], dict[str, Memory]]:
        """A batch's items, in order, each merged or inserted (``add_many``'s columns).

        Returns the memories inserted or found by item id, and the merged
        ones by item position (as text): the caller's one memory per item.
        """
        by_id: dict[uuid.UUID, Memory] = {}
        by_place: dict[str, Memory] = {}
        for i, (memory_id, text, digest, meta, wire, weight, ttl, start, pin, unique) in (
            enumerate(zip(*columns, strict=True))
        ):
            if vectors[i] is not None:
                found = await self.match(conn, scope, text, vectors[i], threshold)
                merged = found and await self.merge(
                    conn, found, text, meta, weight, pinned=pin, valid_from=start
                )
                if merged:
                    by_place[str(i)] = merged
                    continue
            args = [*scope_params(scope), memory_id, text, digest, meta, wire, weight, ttl]
            args += [start, None, pin, unique]
            row, existing = await insert_one(conn, self._schema, insert_sql, scope, args,
                                             delete_locked)
            if existing is not None:
                # The same content (under another embedding): merged too.
                by_place[str(i)] = await self.merge_found(
                    conn, existing, text, meta, weight, pinned=pin, valid_from=start
                )
            else:
                by_id[memory_id] = inserted_memory(scope, args, row, vectors[i])
        return by_id, by_place

    async def merge_found(
        self, conn: asyncpg.Connection, found: Memory, text: str, metadata: str, importance: float,
        *, pinned: bool = False, valid_from: datetime | None = None,
    ) -> Memory:
        """Reinforce an exact duplicate an insert met; the memory as found if it went."""
        row = {"tenant_id": found.scope.tenant, "id": found.id}
        merged = await self.merge(
            conn, row, text, metadata, importance, pinned=pinned, valid_from=valid_from
        )
        return merged or found

    async def merge(
        self,
        conn: asyncpg.Connection,
        row: Any,
        text: str,
        metadata: str,
        importance: float,
        *,
        pinned: bool = False,
        valid_from: datetime | None = None,
    ) -> Memory | None:
        """Reinforce the memory of ``row`` with a write; None if it went or closed meanwhile.

        A pinned write pins it; a write valid from earlier (``valid_from``)
        moves its ``valid_from`` back.
        """
        merged = await conn.fetchrow(
            self._reinforce_sql, row["tenant_id"], row["id"], importance, text, metadata,
            pinned, valid_from,
        )
        if merged is None:
            return None
        return dataclasses.replace(Memory.from_row(merged), merged=True)
