"""SQL of :mod:`memsvc.memories.scope_indexes`.

Each function returns one statement's text for a schema name (a validated
identifier); values are ``$n`` parameters, except in the DDL and in the
scope condition searches add (:func:`scope_literals`), whose scope values
are literals by nature: the planner proves an index's predicate only from
constants. ``$1`` is the tenant where there is one, ``$2``-``$4`` the
project, agent and session (NULL for a level not set).

An index serves one scope's ``include``: ``"exact"`` (the scope's own rows:
its predicate names every level, equal or NULL) or ``"descendants"`` (a
subtree: the scope and everything under it, its predicate naming the levels
set).
"""

from __future__ import annotations

import hashlib
import json

from memsvc.core.scope import Include, Scope
from memsvc.db.index_ddl import create_partial_hnsw
from memsvc.db.sql import COLUMNS, quote_literal, string_literals

# Names of the partial HNSW indexes of single scopes of memories.
SCOPE_INDEX_PREFIX = "ix_memories_scope_"
CATALOG = "memory_scope_indexes"


def scope_index_name(scope: Scope, include: Include = "exact") -> str:
    """The name of the scope's own index (of its subtree for descendants): a digest."""
    key = json.dumps([include, *scope.levels])
    return SCOPE_INDEX_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:32]


def scope_literals(scope: Scope) -> str:
    """The scope's set levels as literal equalities, added to a search of it.

    They prove the predicate of the scope's subtree index, and with the
    statement's ``IS NULL`` conditions on the levels not set, that of its
    exact one (:func:`create_index`), in any plan, generic ones too;
    PostgreSQL merges each with the same level's bound equality, so the row
    estimate stays that of one condition.
    """
    return " AND ".join(
        f"{column} = {quote_literal(value)}"
        for column, value in zip(COLUMNS, scope.levels, strict=True)
        if value is not None
    )


def _named_levels(scope: Scope, include: Include) -> list[tuple[str, str | None]]:
    """The levels an index predicate names: all (exact), or down to the deepest set one.

    As :func:`memsvc.db.sql.scope_condition` reads the scope.
    """
    named = list(zip(COLUMNS, scope.levels, strict=True))
    return named if include == "exact" else named[: scope.depth + 1]


def predicate(scope: Scope, table: str = "", include: Include = "exact") -> str:
    """The predicate of the scope's index: each level it names, equal or NULL."""
    prefix = f"{table}." if table else ""
    return " AND ".join(
        f"{prefix}{column} IS NULL"
        if value is None
        else f"{prefix}{column} = {quote_literal(value)}"
        for column, value in _named_levels(scope, include)
    )


def create_index(
    schema: str,
    scope: Scope,
    expression: str,
    opclass: str,
    m: int,
    ef_construction: int,
    include: Include = "exact",
) -> str:
    """A partial HNSW index of a scope's (or subtree's) vectors, built without blocking writers."""
    return create_partial_hnsw(
        scope_index_name(scope, include), f"{schema}.memories", expression, opclass, m,
        ef_construction, predicate(scope, include=include),
    )


def _scope_indexes_of_table(schema: str) -> str:
    return f"""
    FROM pg_index AS x JOIN pg_class AS c ON c.oid = x.indexrelid
    WHERE x.indrelid = '{schema}.memories'::regclass
      AND left(c.relname, {len(SCOPE_INDEX_PREFIX)}) = '{SCOPE_INDEX_PREFIX}'"""


def scope_indexes(schema: str) -> str:
    """Every scope index of memories: name, validity, predicate text (:func:`read_predicate`)."""
    return f"""
SELECT c.relname AS name, x.indisvalid AS valid,
       pg_get_expr(x.indpred, x.indrelid) AS predicate,
       current_setting('standard_conforming_strings') = 'on' AS conforming
{_scope_indexes_of_table(schema)}
ORDER BY c.relname"""


def buildable(schema: str) -> str:
    """Whether this schema's memories can get scope indexes (a plain table, no Citus).

    ``CREATE INDEX CONCURRENTLY`` refuses a partitioned table; on Citus the
    index would be built on every shard of every tenant.
    """
    return f"""
SELECT c.relkind = 'r' AND NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')
FROM pg_class AS c WHERE c.oid = '{schema}.memories'::regclass"""


# grouping(project_id, agent_id, session_id) of each grouping set: a bit per
# level counted over (1) rather than grouped by.
_EXACT, _PROJECT, _TENANT = 0b000, 0b011, 0b111


def worth_an_index(schema: str) -> str:
    """Exact scopes and subtrees worth an index of their own, from one scan of the table.

    Exact scopes (``include`` ``'exact'``) holding at least ``$1`` live
    vectors, largest first, at most ``$2``; then tenant and project subtrees
    (``'descendants'``) holding at least ``$1``, some of them below the
    subtree's top level (else its exact scope's index serves it), and at
    most a share ``$3`` of the table's (a walk of the table's graph finds
    such a subtree's vectors on most of its steps), largest first, at most
    ``$2``. The three groupings nest, so one pass over the rows counts all.
    """
    return f"""
WITH groups AS (
    SELECT tenant_id, project_id, agent_id, session_id,
           grouping(project_id, agent_id, session_id) AS grouped,
           count(*) AS vectors,
           count(*) FILTER (WHERE project_id IS NOT NULL) AS with_project,
           count(*) FILTER (WHERE agent_id IS NOT NULL) AS with_agent
    FROM {schema}.memories
    WHERE embedding IS NOT NULL AND forgotten_at IS NULL
    GROUP BY GROUPING SETS (
        (tenant_id, project_id, agent_id, session_id), (tenant_id, project_id), (tenant_id)
    )
), exact AS (
    SELECT 'exact' AS include, tenant_id, project_id, agent_id, session_id, vectors
    FROM groups
    WHERE grouped = {_EXACT} AND vectors >= $1
    ORDER BY vectors DESC, tenant_id, project_id, agent_id, session_id
    LIMIT $2
), subtrees AS (
    SELECT 'descendants' AS include, tenant_id,
           CASE WHEN grouped = {_PROJECT} THEN project_id END AS project_id,
           NULL::text AS agent_id, NULL::text AS session_id, vectors
    FROM (
        SELECT *, sum(vectors) FILTER (WHERE grouped = {_TENANT}) OVER () AS table_vectors
        FROM groups WHERE grouped <> {_EXACT}
    ) AS tops
    WHERE vectors >= $1 AND vectors <= $3 * table_vectors
      AND CASE WHEN grouped = {_TENANT} THEN with_project > 0
               ELSE project_id IS NOT NULL AND with_agent > 0 END
    ORDER BY vectors DESC, tenant_id, project_id NULLS FIRST
    LIMIT $2
)
SELECT * FROM (SELECT * FROM exact UNION ALL SELECT * FROM subtrees) AS found
ORDER BY include = 'descendants', vectors DESC, tenant_id, project_id NULLS FIRST,
         agent_id, session_id"""


def vectors_in(schema: str, scope_sql: str, limit: int) -> str:
    """Vectors the scope ``scope_sql`` holds, counted up to ``limit``."""
    return f"""
SELECT count(*) FROM (
    SELECT 1 FROM {schema}.memories
    WHERE {scope_sql} AND embedding IS NOT NULL
    LIMIT {int(limit)}
) AS c"""


def claim(schema: str) -> str:
    """Record scope ``$1``-``$4``'s index ``$5`` as ``building``, unless ``$6`` others exist.

    ``$7``: which rows the index holds, ``'exact'`` or ``'descendants'``;
    ``$8``: how many vectors they are.

    Returns ``outcome``: ``'full'`` (that many scope indexes exist already),
    ``'ready'`` (its valid index exists: recorded ready) or ``'build'``;
    ``leftover`` says an invalid index of that name is there (a build that
    stopped), to drop first.
    """
    return f"""
WITH own AS (
    SELECT x.indisvalid AS valid {_scope_indexes_of_table(schema)} AND c.relname = $5
), decision AS (
    SELECT CASE
        WHEN coalesce((SELECT valid FROM own), false) THEN 'ready'
        WHEN (SELECT count(*) {_scope_indexes_of_table(schema)} AND c.relname <> $5) >= $6
            THEN 'full'
        ELSE 'build'
    END AS outcome
), recorded AS (
    INSERT INTO {schema}.{CATALOG} AS n
        (tenant_id, project_id, agent_id, session_id, index_name, state, include, vectors)
    SELECT $1, $2, $3, $4, $5, CASE WHEN d.outcome = 'ready' THEN 'ready' ELSE 'building' END,
           $7, $8
    FROM decision AS d WHERE d.outcome IN ('build', 'ready')
    ON CONFLICT (tenant_id, index_name)
        DO UPDATE SET state = EXCLUDED.state, vectors = EXCLUDED.vectors
    RETURNING 1
)
SELECT d.outcome, NOT coalesce((SELECT valid FROM own), true) AS leftover,
       (SELECT count(*) FROM recorded) AS recorded
FROM decision AS d"""


def mark_ready(schema: str, scope_sql: str, name_param: str) -> str:
    """After a build: mark index ``name_param`` ready if its row and a vector of its scope stand.

    ``scope_sql`` is the scope's condition, the tenant bound first (``$1``).

    Erasure removes the tenant's rows first; a scope emptied meanwhile
    holds no vector. Returns whether it did.
    """
    return f"""
WITH marked AS (
    UPDATE {schema}.{CATALOG} AS n SET state = 'ready'
    WHERE n.tenant_id = $1 AND n.index_name = {name_param}
      AND EXISTS (
          SELECT 1 FROM {schema}.memories WHERE {scope_sql} AND embedding IS NOT NULL
      )
    RETURNING 1
)
SELECT count(*) > 0 FROM marked"""


def forget(schema: str) -> str:
    """Remove tenant ``$1``'s catalog row of index ``$2`` (the index is gone or going)."""
    return f"DELETE FROM {schema}.{CATALOG} WHERE tenant_id = $1 AND index_name = $2"


def every_row(schema: str) -> str:
    """Every catalog row (gc; the searches' directory of ready scopes)."""
    return f"""
SELECT tenant_id, project_id, agent_id, session_id, index_name, state, include, vectors
FROM {schema}.{CATALOG}"""


def of_tenant(schema: str) -> str:
    """Tenant ``$1``'s catalog rows (the searches' directory under row-level security)."""
    return f"""
SELECT tenant_id, project_id, agent_id, session_id, index_name, state, include, vectors
FROM {schema}.{CATALOG} WHERE tenant_id = $1"""


def recount(schema: str) -> str:
    """Record the vectors ``$3`` counted in tenants ``$1``' indexes ``$2`` (arrays, in step)."""
    return f"""
UPDATE {schema}.{CATALOG} AS n SET vectors = counted.vectors
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS counted(tenant_id, index_name, vectors)
WHERE n.tenant_id = counted.tenant_id AND n.index_name = counted.index_name
  AND n.vectors IS DISTINCT FROM counted.vectors"""


def record(schema: str) -> str:
    """Record scope ``$1``-``$4``'s index ``$5`` (include ``$6``) ready (the catalog lacked it)."""
    return f"""
INSERT INTO {schema}.{CATALOG} AS n
    (tenant_id, project_id, agent_id, session_id, index_name, state, include)
VALUES ($1, $2, $3, $4, $5, 'ready', $6)
ON CONFLICT (tenant_id, index_name) DO UPDATE SET state = 'ready'"""


def _deparsed(text: str) -> str:
    # A string literal as pg_get_expr writes it with standard_conforming_strings on.
    return "'" + text.replace("'", "''") + "'"


def deparsed_predicate(scope: Scope, include: Include = "exact") -> str:
    """The predicate :func:`create_index` writes, as ``pg_get_expr`` gives it back."""
    clauses = [
        f"({column} IS NULL)" if value is None else f"({column} = {_deparsed(value)}::text)"
        for column, value in _named_levels(scope, include)
    ]
    if len(clauses) == 1:
        return clauses[0]
    return "(" + " AND ".join(clauses) + ")"


def read_predicate(predicate: str, conforming: bool = True) -> tuple[Scope, Include] | None:
    """The scope and include a scope index's predicate names, read as values (None: not memsvc's).

    The literals are read in order (the tenant, then the levels set); the
    whole predicate must then equal the one :func:`create_index` writes for
    a scope with those values at some levels, never matched as text alone.
    """
    if not conforming:
        predicate = predicate.replace("\\\\", "\\")
    values = string_literals(predicate)
    if not values or len(values) > 4:
        return None
    tenant, below = values[0], values[1:]
    for present in _level_choices(len(below)):
        levels: list[str | None] = [None, None, None]
        for slot, value in zip(present, below, strict=True):
            levels[slot] = value
        scope = Scope.trusted(tenant, *levels)
        for include in ("exact", "descendants"):
            if predicate == deparsed_predicate(scope, include):
                return scope, include
    return None


def _level_choices(count: int) -> list[tuple[int, ...]]:
    """Which of project, agent, session (0-2) may hold ``count`` values, in order."""
    slots = (0, 1, 2)
    if count == 0:
        return [()]
    if count == 3:
        return [slots]
    if count == 1:
        return [(s,) for s in slots]
    return [(0, 1), (0, 2), (1, 2)]
