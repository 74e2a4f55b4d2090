"""A search's plan: its arguments checked, its mode, its values, and its one statement cache.

Every search (vector, text or hybrid; filtered or not; ``explain_search``
too) takes one path::

    arguments checked -> PlannedSearch -> statement (cached by shape) -> rows -> hits

This module is the first half: :class:`SearchPlanner` checks the arguments,
chooses the mode, binds the call's values and finds the statement.
:mod:`memsvc.memories.search` runs it and builds the hits.

A statement's SQL text, and its exact fallback, depend only on the search's
*shape* (see :data:`Shape`), never on a bound value: so
:class:`SearchStatements` builds each shape's statement once and every
search of that shape reuses it, whatever its scope, query or ``k``. The
values of a call are bound in the order the statement numbers its
placeholders: the query vector, the text parameters, ``k``, the hybrid
candidates, the optional filters (``valid_at`` last), then the scope's levels and the metadata
filter's values (see :meth:`SearchPlanner.plan` and
:meth:`SearchStatements.build`).

``SearchPlan`` is the name of the ``plan=`` argument's type ("auto", "exact",
"index": how the vector arm runs), a public name of ``svc.memories.search``;
the plan object is therefore :class:`PlannedSearch`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import numpy as np

from memsvc.core.errors import ValidationError
from memsvc.core.scope import Include, Scope, validate_include
from memsvc.core.settings import Settings
from memsvc.core.time_limits import validate_time
from memsvc.core.validation import check_text, validate_importance, validate_limit, validate_scope
from memsvc.db.codecs import vector_bytes
from memsvc.db.hnsw_walks import counted_graph_ef
from memsvc.db.sql import Params, scope_condition
from memsvc.memories import queries as q
from memsvc.memories.embedding_space import EmbeddingSpace
from memsvc.memories.filters import compile_where
from memsvc.memories.scope_index_queries import scope_index_name, scope_literals
from memsvc.memories.scope_indexes import ScopeIndexes
from memsvc.memories.text_terms import hybrid_terms, text_words
from memsvc.memories.validity import Validity, check_validity, validity_sql

Rank = Literal["similarity", "recall"]
SearchMode = Literal["vector", "text", "hybrid"]
SearchPlan = Literal["auto", "exact", "index"]

MAX_K = 1000
# Text and hybrid search parse the query into a text-search query with a term
# per word; PostgreSQL's stack runs out past about ten thousand of them
# (max_stack_depth's default), and a query this long holds at most half as many.
MAX_QUERY_CHARS = 16_384
# Hybrid search: each arm contributes its best max(2 x fetched rows, 50)
# candidates (at most MAX_K) to reciprocal rank fusion (constant q.RRF_K).
HYBRID_MIN_CANDIDATES = 50
# Statements kept at most: metadata filters of different structures compile
# to different texts, so the shapes an app uses are many but not unbounded.
STATEMENTS_CACHED = 1024


# What a search statement's text depends on, and all it depends on (with the
# repository's schema, distance and text search configuration, fixed per
# SearchStatements): (mode, include, which of project/agent/session are set,
# the metadata filter's compiled text, whether min_importance, created_after,
# created_before are given, plan, whether embeddings are read, whether the
# hybrid text arm splits the question into required and ranked terms, whether
# it boosts identifiers, and which validity it keeps: "now", "at" or "all").
# A plain tuple: hashed and compared in C, on every search.
Shape = tuple[
    str, Include, tuple[bool, bool, bool], str, bool, bool, bool, SearchPlan, bool, bool, bool,
    str,
]


@dataclass(frozen=True, slots=True)
class SearchStatement:
    """A shape's SQL, and (plan "auto", vector and hybrid modes) its exact fallback."""

    sql: str
    exact_sql: str | None


# Not frozen: one is built per search, and a frozen dataclass's __init__
# costs one object.__setattr__ call per field. Never changed once built.
@dataclass(slots=True)
class PlannedSearch:
    """One search, checked and bound: its statement, the values, and how to finish it."""

    statement: SearchStatement
    values: list[object]  # in the statement's placeholder order
    mode: str
    text: str | None  # the query text, None for an embedding query
    k: int
    fetch: int  # rows the statement returns at most (k, or more to reorder)
    candidates: int  # rows each hybrid arm contributes at most (0: no hybrid search)
    rank: Rank
    diversity: float | None
    reordered: bool  # reranked, ranked for recall or diversified after the database
    scope: Scope
    hit_scope: Scope | None  # the scope of every hit, when include="exact"
    scope_index: str | None = None  # the scope's own index the statement can walk, if any
    walk_ef: int | None = None  # hnsw.ef_search its walk sets for itself, if any
    # Filters whose selectivity decides the plan: planned for these values
    # (see memsvc.db.repository.Repository._run_search).
    custom_plan: bool = False


def scope_values(scope: Scope, include: str) -> list[object]:
    """The scope's values, in the order :func:`memsvc.db.sql.scope_condition` binds them.

    ``exact`` and ``descendants`` bind the levels that are set, tenant
    first; ``ancestors`` binds the tenant, then each scope on the path
    upwards (nearest first) by its levels below the tenant that are set.
    Built without the SQL text, which the statement already has;
    :meth:`SearchStatements.build` checks the order against
    ``scope_condition`` for each shape it builds.
    """
    if include != "ancestors":
        values: list[object] = [scope.tenant]
        for level in (scope.project, scope.agent, scope.session):
            if level is not None:
                values.append(level)
        return values
    below = [level for level in (scope.project, scope.agent, scope.session) if level is not None]
    values = [scope.tenant]
    for depth in range(len(below), 0, -1):
        values += below[:depth]
    return values


def check_arguments(
    scope: object,
    include: object,
    k: object,
    rank: object,
    plan: object,
    diversity: object,
    with_embeddings: object,
) -> tuple[Scope, Include, int, float | None]:
    """The search arguments every mode checks first, normalised."""
    checked_scope = validate_scope(scope)
    checked_include = validate_include(include)
    checked_k = validate_limit(k, "k", MAX_K)
    if rank not in ("similarity", "recall"):
        raise ValidationError("rank", "must be similarity or recall")
    if plan not in ("auto", "exact", "index"):
        raise ValidationError("plan", "must be auto, exact or index")
    if not isinstance(with_embeddings, bool):
        raise ValidationError("with_embeddings", "must be True or False")
    if diversity is None:
        return checked_scope, checked_include, checked_k, None
    if (
        isinstance(diversity, bool)
        or not isinstance(diversity, int | float)
        or not 0 <= diversity <= 1
    ):
        raise ValidationError("diversity", "must be a number from 0 to 1")
    return checked_scope, checked_include, checked_k, float(diversity)


def search_mode(
    query: object, mode: object, query_embedding: object, has_embedder: bool
) -> tuple[str, str | None]:
    """The mode to run and the query text (None for an embedding query)."""
    if mode is None and query_embedding is None and not isinstance(query, str):
        return "vector", None  # the commonest search: an embedding
    text = query if isinstance(query, str) else None
    if mode is None:
        if text is None:
            mode = "vector"
        elif has_embedder or query_embedding is not None:
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
    if mode == "hybrid" and not has_embedder and query_embedding is None:
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


class SearchStatements:
    """The one cache of search statements: each shape's built once, on first use.

    ``cache_info()`` reports its hits and misses (a miss is a statement built).
    """

    def __init__(self, settings: Settings, maxsize: int = STATEMENTS_CACHED) -> None:
        self._schema = settings.db_schema
        self._distance = settings.distance
        self._config = settings.text_search_config
        self._vector_type = settings.vector_type
        # (The cache holds this object through its method: a cycle the
        # garbage collector frees with the repository.)
        self.get = functools.lru_cache(maxsize=maxsize)(self.build)
        self.cache_info = self.get.cache_info
        # Statements of the scopes with an index of their own: one per
        # (shape, scope), at most Settings.scope_indexes_max scopes.
        self.scoped = functools.lru_cache(maxsize=maxsize)(self.build)

    def build(
        self, shape: Shape, literals: str | None = None, walk_ef: int | None = None
    ) -> SearchStatement:
        """The statement of ``shape``, numbering placeholders in the order ``plan`` binds values.

        ``literals``: the scope's levels written in (see
        :func:`memsvc.memories.scope_index_queries.scope_literals`), so the
        planner can walk the scope's own index; the values bound are the same.
        ``walk_ef``: the hnsw.ef_search its walk sets for its own transaction.
        """
        (
            mode, include, levels, filter_sql, floor, after, before, plan, embeddings, split,
            boost, valid,
        ) = shape  # fmt: skip
        params = Params()  # placeholders only: the values are the call's
        query_param = None if mode == "text" else params.add(None)
        text_param = None if mode == "vector" else params.add(None)
        required_param = params.add(None) if split else None
        ranked_param = params.add(None) if split else None
        k_param = params.add(None)
        candidates_param = params.add(None) if mode == "hybrid" else None
        filters = [filter_sql]
        for given, condition in (
            (floor, "importance >= {}"),
            (after, "created_at > {}"),
            (before, "created_at < {}"),
        ):
            if given:
                filters.append(condition.format(params.add(None)))
        filters.append(validity_sql((valid, None), params.add))
        # Any scope with these levels set: the text does not depend on their values.
        project, agent, session = (
            name if present else None
            for name, present in zip(("project", "agent", "session"), levels, strict=True)
        )
        scope = Scope("tenant", project, agent, session)
        bound = len(params.values)
        scope_sql = scope_condition(scope, include, params)
        assert params.values[bound:] == scope_values(scope, include), "scope values out of order"
        if literals is not None:
            scope_sql = f"{scope_sql} AND {literals}"
        options: dict[str, Any] = {
            "mode": mode,
            "distance": self._distance,
            "scope_sql": scope_sql,
            "filter_sql": " AND ".join(filters),
            "query_param": query_param,
            "text_param": text_param,
            "required_param": required_param,
            "ranked_param": ranked_param,
            "identifier_boost": boost,
            "config": self._config,
            "k_param": k_param,
            "candidates_param": candidates_param,
            "with_embeddings": embeddings,
            "walk_ef": walk_ef,
            "vector_type": self._vector_type,
        }
        sql = q.search(self._schema, exact=plan == "exact", **options)
        fallback = None
        if plan == "auto" and mode != "text":
            fallback = q.search(self._schema, exact=True, **options)
        return SearchStatement(sql, fallback)


class SearchPlanner:
    """Turns a search's arguments into a :class:`PlannedSearch` (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        space: EmbeddingSpace,
        *,
        reranks: bool,
        scope_indexes: ScopeIndexes | None = None,
    ) -> None:
        self._space = space
        self._vector_type = settings.vector_type
        self._reranks = reranks  # the service has a reranker (text queries fetch more)
        self._scope_indexes = scope_indexes
        self._ef_search = settings.hnsw_ef_search
        self.statements = SearchStatements(settings)

    async def plan(
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
        with_embeddings: bool,
        valid: object = "now",
        valid_at: object = None,
        *,
        own_transaction: bool = True,
    ) -> PlannedSearch:
        """Check the arguments, bind the values, find the statement; embed the query last.

        Every argument is checked before the embedder is called.
        ``own_transaction``: the statement runs in a transaction memsvc owns
        (not a caller's), so it may set its walk's ``hnsw.ef_search``.
        """
        scope, include, k, diversity = check_arguments(
            scope, include, k, rank, plan, diversity, with_embeddings
        )
        validity = check_validity(valid, valid_at)
        mode_name, text = search_mode(
            query, mode, query_embedding, self._space.embedder is not None
        )
        reordered = (
            rank == "recall" or diversity is not None or (self._reranks and text is not None)
        )
        fetch = min(MAX_K, max(4 * k, 40)) if reordered else k
        # $1: the query vector (all but text mode), filled in last.
        values: list[object] = [] if mode_name == "text" else [None]
        split, boost = self._bind_text(values, mode_name, text)
        values.append(fetch)
        candidates = 0
        if mode_name == "hybrid":
            candidates = min(MAX_K, max(2 * fetch, HYBRID_MIN_CANDIDATES))
            values.append(candidates)
        filter_sql = self._bind_filters(
            values, scope, include, where, min_importance, created_after, created_before, validity
        )
        levels = (scope.project is not None, scope.agent is not None, scope.session is not None)
        shape: Shape = (
            mode_name,
            include,
            levels,
            filter_sql,
            min_importance is not None,
            created_after is not None,
            created_before is not None,
            plan,
            # Diversity compares the candidates' vectors: they are read for it.
            with_embeddings or diversity is not None,
            split,
            boost,
            validity[0],
        )
        statement = self.statements.get(shape)
        scope_index = walk_ef = None
        if (
            self._scope_indexes is not None
            and include != "ancestors"
            and mode_name != "text"
            and plan != "exact"
            and self._scope_indexes.indexed(scope, include)
        ):
            if own_transaction:
                walk_ef = counted_graph_ef(
                    candidates or fetch,
                    self._ef_search,
                    self._scope_indexes.vectors(scope, include),
                )
            statement = self.statements.scoped(shape, scope_literals(scope), walk_ef)
            scope_index = scope_index_name(scope, include)
        if mode_name != "text":
            # Encoded here rather than by the codec: the checked array is a
            # copy already (the caller may change its own meanwhile), and the
            # codec passes bytes through where it would convert it again.
            if query_embedding is not None:
                vector = self._space.vector(query_embedding, "query_embedding")
            elif text is None:
                vector = self._space.vector(query, "query")
            else:
                vector = (await self._space.embed([text], "query"))[0]
            values[0] = vector_bytes(vector, self._vector_type)
        return PlannedSearch(
            statement,
            values,
            mode_name,
            text,
            k,
            fetch,
            candidates,
            rank,
            diversity,
            reordered,
            scope,
            scope if include == "exact" else None,
            scope_index,
            walk_ef,
            custom_plan=(
                where is not None
                or min_importance is not None
                or created_after is not None
                or created_before is not None
                or validity[0] == "at"
            ),
        )

    @staticmethod
    def _bind_filters(
        values: list[object],
        scope: Scope,
        include: Include,
        where: Mapping[str, Any] | None,
        min_importance: float | None,
        created_after: datetime | None,
        created_before: datetime | None,
        validity: Validity,
    ) -> str:
        """Bind the optional filters, the scope, the metadata filter; returns the latter's SQL."""
        if min_importance is not None:
            values.append(validate_importance(min_importance, "min_importance"))
        if created_after is not None:
            values.append(validate_time(created_after, "created_after"))
        if created_before is not None:
            values.append(validate_time(created_before, "created_before"))
        if validity[0] == "at":
            values.append(validity[1])
        values += scope_values(scope, include)
        if where is None:
            return "TRUE"
        params = Params()
        params.values = values  # the filter's placeholders follow the values so far
        return compile_where(where, params)

    @staticmethod
    def _bind_text(values: list[object], mode: str, text: str | None) -> tuple[bool, bool]:
        """Bind a text query's parameters; returns (split into two arms' terms, boosted)."""
        if mode == "vector":
            return False, False
        assert text is not None
        values.append(text_words(text))
        if mode != "hybrid":
            return False, False
        terms = hybrid_terms(text)
        if terms.required == text:
            return False, terms.identifiers
        values.append(text_words(terms.required))
        values.append(text_words(terms.ranked))
        return True, terms.identifiers
