"""SQL of :mod:`memsvc.langgraph_db.store_indexes`.

Each function returns one statement's text for a schema name (a validated
identifier); values are ``$n`` parameters, except in the DDL, whose
predicates are literals by nature (the planner proves them from a search's
identical literals). ``$1`` is the tenant where there is one, ``$2`` the
namespace's stored text (its labels joined with ``.``).
"""

from __future__ import annotations

import hashlib

from memsvc.db import index_ddl
from memsvc.db.index_ddl import create_partial_hnsw
from memsvc.db.sql import quote_literal, string_literals

# Names of the partial HNSW indexes of single namespaces (see create_index).
NAMESPACE_INDEX_PREFIX = "ix_langgraph_store_ns_"
CATALOG = "langgraph_store_namespace_indexes"

# Namespace index DDL of a schema runs under the schema's index DDL lock
# (see memsvc.db.index_ddl); these names stay here for the callers that use them.
TRY_LOCK = index_ddl.TRY_LOCK
UNLOCK = index_ddl.UNLOCK
NO_TIMEOUTS = index_ddl.NO_TIMEOUTS
lock_key = index_ddl.lock_key


def namespace_index_name(tenant: str, prefix: str) -> str:
    """The name of the namespace's own index: a digest, so any tenant and labels fit."""
    digest = hashlib.sha256(f"{tenant}\x00{prefix}".encode()).hexdigest()[:32]
    return NAMESPACE_INDEX_PREFIX + digest


def analyze_tables(schema: str) -> str:
    """Gather the store tables' statistics (what the planner sizes a namespace from)."""
    return f"ANALYZE {schema}.langgraph_store_items, {schema}.langgraph_store_vectors"


def namespace_literal_condition(prefix: str | None, alias: str = "i") -> str:
    """Rows of the namespace ``prefix`` and those under it, the bounds written into the text.

    For searches: the planner then knows how many rows the namespace holds
    even in a prepared statement's generic plan, and picks the HNSW index or
    an exact scan by the namespace's real size; and it proves the predicate
    of the namespace's own index (:func:`create_index`) from it. None: every
    namespace.
    """
    if prefix is None:
        return "true"
    exact = quote_literal(prefix)
    low, high = quote_literal(prefix + "."), quote_literal(prefix + "/")
    return f"({alias}.prefix = {exact} OR ({alias}.prefix >= {low} AND {alias}.prefix < {high}))"


def range_condition(prefix: str, alias: str = "v") -> str:
    """Vectors of the namespace ``prefix`` (an SQL expression) and of those under it.

    One key range (the primary key serves it) plus a recheck that drops
    names continuing the namespace with a character before '.'.
    """
    column = f"{alias}.prefix"
    return (
        f"({column} >= {prefix} AND {column} < {prefix} || '/' "
        f"AND ({column} = {prefix} OR starts_with({column}, {prefix} || '.')))"
    )


def _namespace_indexes_of_table(schema: str) -> str:
    return f"""
    FROM pg_index AS x JOIN pg_class AS c ON c.oid = x.indexrelid
    WHERE x.indrelid = '{schema}.langgraph_store_vectors'::regclass
      AND left(c.relname, {len(NAMESPACE_INDEX_PREFIX)}) = '{NAMESPACE_INDEX_PREFIX}'"""


def claim(schema: str, minimum: int) -> str:
    """Under the DDL lock: whether tenant ``$1``'s namespace ``$2`` gets index ``$3``.

    ``outcome`` is ``'small'`` (fewer than ``minimum`` vectors: emptied or
    erased since the build was decided), ``'full'`` (``$4`` namespace
    indexes exist already), ``'ready'`` (its valid index exists) or
    ``'build'``; ``'build'`` and ``'ready'`` are recorded in the catalog
    (``'building'``, ``'ready'``). ``leftover`` says an invalid index of
    that name is there (a build that stopped), to drop first.
    """
    return f"""
WITH namespace AS (
    SELECT count(*) AS vectors FROM (
        SELECT 1 FROM {schema}.langgraph_store_vectors AS v
        WHERE v.tenant_id = $1 AND {range_condition("$2")}
        LIMIT {int(minimum)}
    ) AS c
), own AS (
    SELECT x.indisvalid AS valid {_namespace_indexes_of_table(schema)} AND c.relname = $3
), decision AS (
    SELECT CASE
        WHEN (SELECT vectors FROM namespace) < {int(minimum)} THEN 'small'
        WHEN coalesce((SELECT valid FROM own), false) THEN 'ready'
        WHEN (SELECT count(*) {_namespace_indexes_of_table(schema)} AND c.relname <> $3) >= $4
            THEN 'full'
        ELSE 'build'
    END AS outcome
), recorded AS (
    INSERT INTO {schema}.{CATALOG} AS n (tenant_id, prefix, index_name, state)
    SELECT $1, $2, $3, CASE WHEN d.outcome = 'ready' THEN 'ready' ELSE 'building' END
    FROM decision AS d WHERE d.outcome IN ('build', 'ready')
    ON CONFLICT (tenant_id, prefix) DO UPDATE
    SET index_name = EXCLUDED.index_name, state = EXCLUDED.state,
        updated_at = EXCLUDED.updated_at  -- now(), the column's default (see record)
    RETURNING 1
)
SELECT d.outcome, NOT coalesce((SELECT valid FROM own), true) AS leftover,
       (SELECT count(*) FROM recorded) AS recorded
FROM decision AS d"""


def mark_ready(schema: str) -> str:
    """After a build: mark tenant ``$1``'s claim on ``$2`` (index ``$3``) ready, if it stands.

    It stands when its row is still there (erasure removes the tenant's
    rows) and the namespace still holds a vector. Returns whether it did.
    """
    return f"""
WITH marked AS (
    UPDATE {schema}.{CATALOG} AS n SET state = 'ready', updated_at = now()
    WHERE n.tenant_id = $1 AND n.prefix = $2 AND n.index_name = $3
      AND EXISTS (
          SELECT 1 FROM {schema}.langgraph_store_vectors AS v
          WHERE v.tenant_id = $1 AND {range_condition("$2")}
      )
    RETURNING 1
)
SELECT count(*) > 0 FROM marked"""


def forget(schema: str) -> str:
    """Remove tenant ``$1``'s catalog row of namespace ``$2`` (its index is gone or going)."""
    return f"DELETE FROM {schema}.{CATALOG} WHERE tenant_id = $1 AND prefix = $2"


def forget_tenant(schema: str) -> str:
    """Remove every catalog row of tenant ``$1``; returns their index names."""
    return f"DELETE FROM {schema}.{CATALOG} WHERE tenant_id = $1 RETURNING index_name"


def catalog_of_tenant(schema: str) -> str:
    """Index names the catalog lists for tenant ``$1``."""
    return f"SELECT index_name FROM {schema}.{CATALOG} WHERE tenant_id = $1"


def record(schema: str) -> str:
    """Record tenant ``$1``'s namespace ``$2`` index ``$3`` as ready (one the catalog lacked).

    ``EXCLUDED.updated_at`` is the column's default, ``now()``: Citus refuses
    a function that is not immutable in ``DO UPDATE SET``.
    """
    return f"""
INSERT INTO {schema}.{CATALOG} AS n (tenant_id, prefix, index_name, state)
VALUES ($1, $2, $3, 'ready')
ON CONFLICT (tenant_id, prefix) DO UPDATE
SET index_name = EXCLUDED.index_name, state = 'ready', updated_at = EXCLUDED.updated_at"""


def emptied(schema: str) -> str:
    """Indexed namespaces of tenant ``$1`` among ``$2`` (prefixes) holding no vector now."""
    return f"""
SELECT n.prefix, n.index_name FROM {schema}.{CATALOG} AS n
WHERE n.tenant_id = $1 AND n.prefix = ANY($2::text[])
  AND NOT EXISTS (
      SELECT 1 FROM {schema}.langgraph_store_vectors AS v
      WHERE v.tenant_id = $1 AND {range_condition("n.prefix")}
  )"""


def holds_vectors(schema: str) -> str:
    """Whether tenant ``$1``'s namespace ``$2`` (or one under it) holds a vector."""
    return f"""
SELECT EXISTS (
    SELECT 1 FROM {schema}.langgraph_store_vectors AS v
    WHERE v.tenant_id = $1 AND {range_condition("$2")}
)"""


def every_claim(schema: str) -> str:
    """Every catalog row, of every tenant (gc)."""
    return f"SELECT tenant_id, prefix, index_name, state FROM {schema}.{CATALOG}"


def namespace_indexes(schema: str) -> str:
    """Every namespace index of the vectors table: name, validity and predicate as text.

    ``conforming`` is the session's ``standard_conforming_strings``: how the
    predicate's string literals are written (see :func:`read_predicate`).
    """
    return f"""
SELECT c.relname AS name, x.indisvalid AS valid,
       pg_get_expr(x.indpred, x.indrelid) AS predicate,
       current_setting('standard_conforming_strings') = 'on' AS conforming
{_namespace_indexes_of_table(schema)}
ORDER BY c.relname"""


def count_namespace_indexes(schema: str) -> str:
    """How many namespace indexes the vectors table has (valid or not)."""
    return f"SELECT count(*) {_namespace_indexes_of_table(schema)}"


def create_index(
    schema: str,
    name: str,
    tenant: str,
    prefix: str,
    expression: str,
    opclass: str,
    m: int,
    ef_construction: int,
) -> str:
    """A partial HNSW index of one namespace's vectors (and those under it), built concurrently.

    Its predicate is :func:`namespace_literal_condition` for one tenant: a
    search of that namespace written with the same literals (the planner
    proves the predicate from the identical condition, and estimates its rows
    from the column's statistics) walks a graph of the namespace's vectors
    only, instead of stepping over every other namespace's in the table's
    graph. Writers are not blocked.
    """
    return create_partial_hnsw(
        name, f"{schema}.langgraph_store_vectors", f"({expression})", opclass, m,
        ef_construction,
        f"tenant_id = {quote_literal(tenant)} "
        f"AND {namespace_literal_condition(prefix, 'langgraph_store_vectors')}",
    )


def _deparsed(text: str) -> str:
    # A string literal as pg_get_expr writes it with standard_conforming_strings on.
    return "'" + text.replace("'", "''") + "'"


def deparsed_predicate(tenant: str, prefix: str) -> str:
    """The predicate :func:`create_index` writes, as ``pg_get_expr`` gives it back."""
    exact, low, high = (_deparsed(p) for p in (prefix, prefix + ".", prefix + "/"))
    return (
        f"((tenant_id = {_deparsed(tenant)}::text) AND ((prefix = {exact}::text) OR "
        f"((prefix >= {low}::text) AND (prefix < {high}::text))))"
    )


def read_predicate(predicate: str, conforming: bool = True) -> tuple[str, str] | None:
    """The (tenant, namespace) a namespace index's predicate names, read as values.

    ``predicate`` is ``pg_get_expr``'s text; with ``conforming`` False (the
    session's ``standard_conforming_strings`` off) its literals double
    backslashes. The values are read from the first two literals, then the
    whole predicate must equal the one :func:`create_index` writes for them
    (so any other shape reads as None: not one of memsvc's).
    """
    if not conforming:
        predicate = predicate.replace("\\\\", "\\")
    values = string_literals(predicate)
    if values is None or len(values) < 2:
        return None
    tenant, prefix = values[:2]
    if predicate != deparsed_predicate(tenant, prefix):
        return None
    return tenant, prefix
