"""The memories shown to an extractor: for each candidate fact, its nearest in the scope.

Each fact is searched in the exact scope (hybrid search when the service has
an embedder, every fact in one statement; text search otherwise; the facts
are embedded in one call). The statement reads a small scope's rows once
for all the facts; a scope with an HNSW index of its own is walked through
it, fact by fact; a bigger one without is left to the planner, fact by fact.
Then the hits of every fact are shown once each under a short handle,
``m1``, ``m2``... in order of first appearance. The handles stand for the
memories as read (id and version), which the apply step holds the memories
to.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from memsvc.core.models import Memory
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.db.codecs import vector_bytes
from memsvc.db.sql import Params, scope_condition
from memsvc.extraction.protocols import Candidate, Fact
from memsvc.memories.embedding_space import EmbeddingSpace
from memsvc.memories.repository import MemoryRepository
from memsvc.memories.scope_index_queries import scope_literals
from memsvc.memories.scope_indexes import ScopeIndexes
from memsvc.memories.search_plan import HYBRID_MIN_CANDIDATES, MAX_K
from memsvc.memories.text_terms import hybrid_terms, text_words
from memsvc.remember import queries as q

# Up to this many rows, a scope's vectors are read once for all of a batch's
# facts and sorted for each (exact); a bigger one, without an index of its
# own, is left to the planner fact by fact (an HNSW walk, most often), since
# reading it whole would cost more than the walks.
SHARED_SCAN_MAX_ROWS = 5_000


@dataclass(frozen=True)
class Shown:
    """A memory shown under a handle, as it was read."""

    ref: str
    memory: Memory

    @property
    def memory_id(self) -> uuid.UUID:
        return self.memory.id

    @property
    def version(self) -> int:
        return self.memory.version


@dataclass(frozen=True)
class CandidateSet:
    """The facts with their related handles, and what each handle stands for."""

    facts: tuple[Fact, ...] = ()
    by_ref: dict[str, Shown] = field(default_factory=dict)

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        """The memories as the extractor sees them."""
        return tuple(
            Candidate(
                ref=ref,
                content=shown.memory.content,
                created_at=shown.memory.created_at,
                valid_from=shown.memory.valid_from,
            )
            for ref, shown in self.by_ref.items()
        )


async def embed_facts(space: EmbeddingSpace | None, facts: Sequence[str]) -> list[Any]:
    """The facts' query embeddings in one embedder call (None each: the search embeds)."""
    if not facts or space is None or space.embedder is None or space.migrating:
        return [None] * len(facts)
    return list(await space.embed(list(facts), "facts"))


async def find_candidates(
    memories: MemoryRepository,
    settings: Settings,
    scope: Scope,
    facts: Sequence[str],
    vectors: Sequence[Any],
    k: int,
    conn: asyncpg.Connection,
    *,
    small_scope: bool,
) -> CandidateSet:
    """The ``k`` memories most related to each fact in the exact scope, under handles.

    ``conn`` is a connection to the primary: the versions read are the ones
    the batch's transaction will hold the memories to, so no replica's lag
    may show an older one. With the facts' vectors, every fact is searched in
    one statement; without (no embedder), each by text search.
    ``small_scope``: the scope held at most ``SHARED_SCAN_MAX_ROWS`` rows
    when last counted (then its rows are read once for all the facts).
    """
    if not facts:
        return CandidateSet()
    if any(vector is None for vector in vectors):
        found = [
            [
                hit.memory
                for hit in await memories.search(
                    scope, text, k=k, include="exact", valid="now", conn=conn
                )
            ]
            for text in facts
        ]
    else:
        found = await _related(
            settings, memories.scope_indexes, scope, facts, vectors, k, conn, small_scope
        )
    by_id: dict[uuid.UUID, str] = {}
    by_ref: dict[str, Shown] = {}
    related: list[Fact] = []
    for text, hits in zip(facts, found, strict=True):
        refs: list[str] = []
        for memory in hits:
            ref = by_id.get(memory.id)
            if ref is None:
                ref = by_id[memory.id] = f"m{len(by_id) + 1}"
                by_ref[ref] = Shown(ref, memory)
            refs.append(ref)
        related.append(Fact(text, tuple(refs)))
    return CandidateSet(tuple(related), by_ref)


async def _related(
    settings: Settings,
    indexes: ScopeIndexes,
    scope: Scope,
    facts: Sequence[str],
    vectors: Sequence[Any],
    k: int,
    conn: asyncpg.Connection,
    small_scope: bool,
) -> list[list[Memory]]:
    """Each fact's hybrid search, all in one statement (see ``q.related_memories``)."""
    terms = [hybrid_terms(text) for text in facts]
    params = Params(
        [vector_bytes(v, settings.vector_type) for v in vectors],
        [text_words(t.required) for t in terms],
        [text_words(t.ranked) for t in terms],
        [t.identifiers for t in terms],
        k,
        min(MAX_K, max(2 * k, HYBRID_MIN_CANDIDATES)),
    )
    tenant = params.add(scope.tenant)
    scope_sql = scope_condition(scope, "exact", params)
    shared_scan = 0
    if indexes.indexed(scope):
        # Each fact walks the scope's own HNSW index, which its levels
        # written in let the planner use.
        scope_sql = f"{scope_sql} AND {scope_literals(scope)}"
    elif small_scope:
        shared_scan = len(facts)
    sql = q.related_memories(
        settings.db_schema,
        vector_type=settings.vector_type,
        distance=settings.distance,
        config=settings.text_search_config,
        scope_sql=scope_sql,
        tenant=tenant,
        shared_scan=shared_scan,
    )
    found: list[list[Memory]] = [[] for _ in facts]
    for row in await conn.fetch(sql, *params.values):
        found[row["fact"] - 1].append(Memory.from_row(row))
    return found
