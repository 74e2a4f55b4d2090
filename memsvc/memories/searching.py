"""Searching long-term memories: the search methods of ``svc.memories``.

:class:`MemorySearches` holds :meth:`search` and :meth:`explain_search` of
:class:`memsvc.memories.repository.MemoryRepository`: the arguments are
planned in :mod:`memsvc.memories.search_plan` (one statement, cached by
shape) and run in :mod:`memsvc.memories.search`.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import asyncpg
import numpy as np

from memsvc.core.models import SearchHit
from memsvc.core.scope import Include, Scope
from memsvc.core.validation import validate_scope
from memsvc.memories import validity
from memsvc.memories.embedding_space import EmbeddingSpace
from memsvc.memories.policies import PolicyRepository
from memsvc.memories.reads import MemoryReads
from memsvc.memories.search import SearchRunner
from memsvc.memories.search_plan import (
    PlannedSearch,
    Rank,
    SearchMode,
    SearchPlan,
    SearchPlanner,
)
from memsvc.telemetry import traced_operations


@traced_operations("memsvc.memories")
class MemorySearches(MemoryReads):
    """Searches of long-term memories (the repository builds the planner and runner)."""

    _space: EmbeddingSpace
    _planner: SearchPlanner
    _runner: SearchRunner
    _policies: PolicyRepository | None

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
        valid: validity.Valid = "now",
        valid_at: datetime | None = None,
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
                relevance + 0.3 x strength (importance x 0.5 ** (age /
                half-life): the scope's policy, else 30 days; see
                docs/how-to/forgetting.md), over the 4k best candidates.
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
            valid: ``now`` (only memories valid now) or ``all`` (whatever
                their validity); see docs/how-to/valid-time.md.
            valid_at: Only memories valid at this moment (timezone-aware).
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
            rank, mode, query_embedding, diversity, plan, with_embeddings, valid, valid_at,
        )  # fmt: skip
        if self._space.migrating:
            planned, (rows, terms) = await self._search_held(arguments, conn)
        else:
            planned = await self._planner.plan(*arguments, own_transaction=conn is None)
            rows, terms = await self._read(
                conn, functools.partial(self._runner.rows, planned), tenant=planned.scope.tenant
            )
        hits = self._runner.hits(planned, rows, terms)
        if planned.reordered:
            half_lives = None
            if planned.rank == "recall" and self._policies is not None and hits:
                half_lives = await self._policies.half_lives(planned.scope.tenant, conn)
            return await self._runner.reorder(planned, hits, half_lives)
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
                planned = await self._planner.plan(*arguments, own_transaction=conn is None)
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
        valid: validity.Valid = "now",
        valid_at: datetime | None = None,
        conn: asyncpg.Connection | None = None,
    ) -> str:
        """``EXPLAIN ANALYZE`` of the search statement: which indexes ran, and how long.

        When the scope has an index of its own (see
        docs/how-to/scope-indexes.md), a last line names it, after one
        saying how many candidates a walk of it keeps (when fewer than
        ``Settings.hnsw_ef_search``).

        ``mode``, ``query_embedding``, ``plan``, ``valid`` and ``valid_at`` as
        in :meth:`search`.
        """
        planned = await self._planner.plan(
            scope, query, k, include, where, None, None, None, "similarity", mode,
            query_embedding, None, plan, True, valid, valid_at, own_transaction=conn is None,
        )  # fmt: skip
        tenant = planned.scope.tenant
        reading = self._connection(conn, tenant=tenant, writes=False)
        async with reading as active, active.transaction():
            if not self._settings.pgbouncer:
                sql = "EXPLAIN ANALYZE " + planned.statement.sql
                rows = await active.fetch(sql, *planned.values)
            else:
                rows = []
        lines = [row[0] for row in rows]
        if planned.walk_ef is not None:
            lines.append(f"A walk of the scope's own index keeps {planned.walk_ef} candidates")
        if planned.scope_index is not None:
            # Whether it ran is the plan's to say (an index scan using it).
            lines.append(f"Scope index of this scope: {planned.scope_index}")
        return "\n".join(lines)
