"""Running a planned search: its statement's rows, then the hits, reordered as asked.

The second half of the search path (the first is :mod:`memsvc.memories.search_plan`):
the statement runs, then its exact fallback when the index came back short
(a filtered search returns a full page whenever k matching rows exist); the
rows become :class:`~memsvc.core.models.SearchHit` objects; the reranker,
recall ranking and diversity (:mod:`memsvc.memories.ranking`) reorder them
before the top ``k`` are cut.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, Protocol

import asyncpg

from memsvc.core.errors import ValidationError
from memsvc.core.models import Memory, SearchHit
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.memories import queries as q
from memsvc.memories import ranking
from memsvc.memories.search_plan import PlannedSearch
from memsvc.memories.searchable_words import SearchableWords


class RunStatement(Protocol):
    """Runs a search statement with memsvc's HNSW settings in force (the repository's)."""

    def __call__(
        self, conn: asyncpg.Connection, sql: str, values: list[object], *, custom_plan: bool
    ) -> Awaitable[list[Any]]: ...


class SearchRunner:
    """Runs :class:`PlannedSearch` objects: rows first, then hits."""

    def __init__(
        self, settings: Settings, run: RunStatement, reranker: ranking.Reranker | None
    ) -> None:
        self._run = run
        self._reranker = reranker
        self._config = settings.text_search_config
        self._searchable = SearchableWords()

    async def rows(
        self, plan: PlannedSearch, conn: asyncpg.Connection
    ) -> tuple[list[Any], int | None]:
        """The plan's rows, and (text and hybrid modes) how many terms the query had."""
        statement = plan.statement
        custom = plan.custom_plan
        rows = await self._run(conn, statement.sql, plan.values, custom_plan=custom)
        if statement.exact_sql is not None and _short(plan, rows):
            # The index ran out (max_scan_tuples) before filters let k rows
            # through, or the scope is small: scan exactly to be sure.
            rows = await self._run(conn, statement.exact_sql, plan.values, custom_plan=custom)
        if plan.mode == "vector":
            return rows, None
        if plan.mode == "hybrid":
            return rows, rows[0]["query_terms"]
        # Text mode's statement has no row to carry the count: only an empty
        # result asks whether the query had words at all, unless it holds a
        # word known to be searchable. (The text as bound: "-" and "_" inside
        # words read as spaces.)
        text = plan.values[0]
        assert isinstance(text, str)
        if rows or self._searchable.known_in(text):
            return rows, None
        found = await conn.fetchrow(
            q.query_terms(self._config), text, SearchableWords.plain_words(text)
        )
        self._searchable.learn(found["searchable"])
        return rows, found["terms"]

    def hits(self, plan: PlannedSearch, rows: list[Any], terms: int | None) -> list[SearchHit]:
        """The rows as hits, best first, in the statement's order (see :meth:`reorder`)."""
        if terms == 0:
            raise ValidationError(
                "query",
                "has no searchable words under the text search configuration "
                f"{self._config!r} (empty, only stop words, or only operators)",
            )
        if plan.mode == "vector":
            hits = SearchHit.vector_hits(rows, plan.hit_scope)
        else:
            found = (row for row in rows if row["id"] is not None)
            hits = [_hit(plan, place, row) for place, row in enumerate(found, 1)]
        return hits

    async def reorder(
        self,
        plan: PlannedSearch,
        hits: list[SearchHit],
        half_lives: Mapping[Scope, float] | None = None,
    ) -> list[SearchHit]:
        """The top ``k`` of a reordered plan's hits: reranked, ranked for recall, diversified.

        ``half_lives``: the tenant's policies, by exact scope, for ``rank="recall"``.
        """
        if self._reranker is not None and plan.text is not None:
            hits = await ranking.rerank(self._reranker, plan.text, hits)
        if plan.rank == "recall":
            hits = ranking.rank_for_recall(
                hits,
                by_similarity=plan.mode == "vector" and self._reranker is None,
                half_lives=half_lives,
            )
        if plan.diversity is not None:
            return ranking.diversify(hits, plan.diversity, plan.k)
        return hits[: plan.k]


def _hit(plan: PlannedSearch, place: int, row: Any) -> SearchHit:
    """A text or hybrid hit (vector hits: :meth:`SearchHit.vector_hits`)."""
    memory = Memory.from_row(row, plan.hit_scope)
    if plan.mode == "text":
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


def _short(plan: PlannedSearch, rows: Sequence[Any]) -> bool:
    """Whether the vector arm may have missed rows the exact scan would find."""
    if plan.mode == "vector":
        # A short page from the exact branch is the whole answer; a short
        # (or empty) page from the index may not be.
        return len(rows) < plan.fetch and not (rows and rows[0]["via_exact"])
    found = sum(1 for row in rows if row["id"] is not None)
    return found < plan.fetch and rows[0]["vector_found"] < plan.candidates
