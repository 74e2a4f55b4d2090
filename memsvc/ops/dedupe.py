"""``svc.maintenance.dedupe``: merge near-duplicates a store already holds.

The same rule as ``add(..., dedupe="semantic")`` (see
:mod:`memsvc.memories.semantic`), applied after the fact: in each exact
scope under the one given, memories are taken in id order (the order they
were written), and one at least ``threshold`` similar to an older live
memory of its scope, valid now and holding the same identifier-like
tokens, is merged into it: the older memory is reinforced (its history
keeps the merged wording) and the newer one deleted the way ``delete``
deletes. Never across scopes, never keyed memories.

Each batch is one transaction holding the scope's advisory lock, the lock
semantic adds take, so a pass and racing semantic writes agree. A pass
stopped midway leaves every batch before it done; running it again resumes
(what was merged is gone, what is left is looked at again).
"""

from __future__ import annotations

import builtins
import json
import uuid
from dataclasses import dataclass, field

import asyncpg

from memsvc.core.models import scope_from_row
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.core.validation import validate_limit, validate_scope
from memsvc.db.codecs import vector_bytes
from memsvc.db.replicas import ReadRouter
from memsvc.db.repository import Repository
from memsvc.db.sql import Params, scope_condition
from memsvc.memories import dedupe_queries as q
from memsvc.memories import queries as memory_q
from memsvc.memories.dedupe_rule import same_identifiers
from memsvc.memories.repository import MemoryRepository
from memsvc.memories.semantic import SemanticDedupe, validate_threshold

DEFAULT_BATCH = 200
MAX_BATCH = 10_000


@dataclass
class DedupeReport:
    """What a dedupe pass merged: ``merges`` lists (merged id, kept id) pairs."""

    scanned: int = 0
    merged: int = 0
    merges: list[tuple[uuid.UUID, uuid.UUID]] = field(default_factory=list)
    scopes: int = 0
    batches: int = 0


class Deduplication(Repository):
    """Runs dedupe passes (see the module docstring)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: Settings,
        *,
        memories: MemoryRepository,
        reads: ReadRouter | None = None,
    ) -> None:
        super().__init__(pool, settings, reads=reads)
        self._memories = memories
        self._semantic = SemanticDedupe(settings)

    async def run(
        self,
        scope: Scope,
        threshold: float | None = None,
        *,
        batch_size: int = DEFAULT_BATCH,
    ) -> DedupeReport:
        """Merge the near-duplicates of ``scope`` and the scopes under it."""
        scope = validate_scope(scope)
        cut = validate_threshold(
            self._settings.semantic_dedupe_threshold if threshold is None else threshold,
            "threshold",
        )
        batch_size = validate_limit(batch_size, "batch_size", MAX_BATCH)
        params = Params()
        sql = q.scopes_under(self._schema, scope_condition(scope, "descendants", params))
        rows = await self._read(
            None, lambda active: active.fetch(sql, *params.values), tenant=scope.tenant,
            routed=False,
        )
        report = DedupeReport()
        for row in sorted(rows, key=lambda r: tuple(str(v) for v in r.values())):
            await self._scope(scope_from_row(row), cut, batch_size, report)
            report.scopes += 1
        return report

    async def _scope(
        self, scope: Scope, threshold: float, batch_size: int, report: DedupeReport
    ) -> None:
        params = Params()
        scope_sql = scope_condition(scope, "exact", params)
        after = params.add(uuid.UUID(int=0))
        page_sql = q.page(self._schema, scope_sql, after, params.add(batch_size))
        # $1 the row's vector, $2 its id, $3 how many candidates, then the scope.
        near = Params(None, None, q.CANDIDATES)
        nearest_sql = q.older_nearest(
            self._schema, self._settings.distance, scope_condition(scope, "exact", near)
        )
        citus = await self._on_citus()
        while True:

            async def batch() -> tuple[int, builtins.list[tuple[uuid.UUID, uuid.UUID]]]:
                merges = []
                async with self._transaction(tenant=scope.tenant) as active:
                    await self._semantic.lock(active, scope, citus=citus)
                    found = await active.fetch(page_sql, *params.values)
                    for row in found:
                        kept = await self._merge_one(
                            active, nearest_sql, near.values, row, threshold
                        )
                        if kept is not None:
                            merges.append((row["id"], kept))
                if found:
                    params.values[-2] = found[-1]["id"]
                return len(found), merges

            scanned, merges = await self._retrying(batch, owns_transaction=True)
            report.batches += 1
            report.scanned += scanned
            report.merged += len(merges)
            report.merges += merges
            if scanned < batch_size:
                return

    async def _merge_one(
        self,
        conn: asyncpg.Connection,
        nearest_sql: str,
        values: builtins.list[object],
        row: asyncpg.Record,
        threshold: float,
    ) -> uuid.UUID | None:
        """Merge ``row`` into an older near-duplicate, if there is one; its id."""
        args = [vector_bytes(row["embedding"], self._settings.vector_type), row["id"], *values[2:]]
        for candidate in await conn.fetch(nearest_sql, *args):
            if candidate["cosine"] < threshold:
                return None
            if not same_identifiers(candidate["content"], row["content"]):
                continue
            metadata = json.dumps(row["metadata"])
            merged = await self._semantic.merge(
                conn, candidate, row["content"], metadata, row["importance"],
                pinned=row["pinned"], valid_from=row["valid_from"],
            )
            if merged is None:
                continue
            doomed = await conn.fetch(
                memory_q.lock_for_delete(self._schema, True), [row["id"]], row["tenant_id"]
            )
            await self._memories.delete_locked(conn, doomed)
            kept: uuid.UUID = candidate["id"]
            return kept
        return None
