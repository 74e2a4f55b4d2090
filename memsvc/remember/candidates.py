"""The memories shown to an extractor: for each candidate fact, its nearest in the scope.

Each fact is searched in the exact scope (hybrid search when the service has
an embedder, text search otherwise; the facts are embedded in one call), and
the hits of every fact are shown once each under a short handle, ``m1``,
``m2``... in order of first appearance. The handles stand for the memories
as read (id and version), which the apply step holds the memories to.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from memsvc.core.models import Memory
from memsvc.core.scope import Scope
from memsvc.extraction.protocols import Candidate, Fact
from memsvc.memories.embedding_space import EmbeddingSpace
from memsvc.memories.repository import MemoryRepository


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
    scope: Scope,
    facts: Sequence[str],
    vectors: Sequence[Any],
    k: int,
    conn: asyncpg.Connection,
) -> CandidateSet:
    """The ``k`` memories most related to each fact in the exact scope, under handles.

    ``conn`` is a connection to the primary: the versions read are the ones
    the batch's transaction will hold the memories to, so no replica's lag
    may show an older one.
    """
    if not facts:
        return CandidateSet()
    by_id: dict[uuid.UUID, str] = {}
    by_ref: dict[str, Shown] = {}
    related: list[Fact] = []
    for text, vector in zip(facts, vectors, strict=True):
        hits = await memories.search(
            scope, text, k=k, include="exact", query_embedding=vector, valid="now", conn=conn
        )
        refs: list[str] = []
        for hit in hits:
            ref = by_id.get(hit.memory.id)
            if ref is None:
                ref = by_id[hit.memory.id] = f"m{len(by_id) + 1}"
                by_ref[ref] = Shown(ref, hit.memory)
            refs.append(ref)
        related.append(Fact(text, tuple(refs)))
    return CandidateSet(tuple(related), by_ref)
