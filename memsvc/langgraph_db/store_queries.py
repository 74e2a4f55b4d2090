"""SQL of :class:`memsvc.langgraph_db.store.LangGraphStoreRepository`.

Each function returns one statement's text for a schema name (a validated
identifier); values are always ``$n`` parameters. ``$1`` is the tenant. A
namespace is stored as its labels joined with ``.`` in the "C" collation, so
the items of a namespace prefix ``p`` are ``prefix = p`` plus the range
``[p || '.', p || '/')`` ('/' follows '.'), which the primary key serves.
"""

from __future__ import annotations

from typing import Any

from memsvc.db.hnsw_walks import walk_target
from memsvc.db.sql import Params, quote_literal
from memsvc.langgraph_db.store_index_queries import (
    NAMESPACE_INDEX_PREFIX,
    namespace_index_name,
    namespace_literal_condition,
)

__all__ = [
    "NAMESPACE_INDEX_PREFIX",
    "namespace_index_name",
    "namespace_literal_condition",
]

LIVE = "(i.expires_at IS NULL OR i.expires_at > now())"
ITEM_COLUMNS = "i.prefix, i.key, i.value, i.created_at, i.updated_at, i.ttl_minutes"
DISTANCE = {"cosine": "<=>", "l2": "<->", "ip": "<#>"}
# Namespaces with at most this many vectors are searched exactly (see search_items).
EXACT_UP_TO = 500
COMPARISONS = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
# For one transaction: the only plan of an ORDER BY ... LIMIT walk without a
# sort is the HNSW index (the other sorts of a search have no alternative).
PLAN_WITHOUT_SORTS = "SET LOCAL enable_sort = off"


def namespace_condition(prefix: str | None, params: Params, alias: str = "i") -> str:
    """Items whose namespace starts with the labels of ``prefix`` (None: every namespace)."""
    if prefix is None:
        return "true"
    exact = params.add(prefix)
    low, high = params.add(prefix + "."), params.add(prefix + "/")
    return f"({alias}.prefix = {exact} OR ({alias}.prefix >= {low} AND {alias}.prefix < {high}))"


def _path(path: list[str], params: Params) -> str:
    return f"coalesce(i.value #> {params.add(path)}::text[], 'null'::jsonb)"


def _operator(path: list[str], operator: str, operand: Any, params: Params) -> str:
    if operator in ("$eq", "$ne"):
        sign = "=" if operator == "$eq" else "<>"
        return f"{_path(path, params)} {sign} {params.add(operand)}::jsonb"
    sign = COMPARISONS[operator]
    value = f"(i.value #> {params.add(path)}::text[])"
    if isinstance(operand, int | float) and not isinstance(operand, bool):
        # Numbers compare as numbers (never as text); a non-number never matches.
        return (
            f"(CASE WHEN jsonb_typeof({value}) = 'number' "
            f"THEN {value}::numeric {sign} {params.add(operand)}::numeric END)"
        )
    return f"({value} #>> '{{}}') COLLATE \"C\" {sign} {params.add(operand)}::text"


def filter_condition(conditions: list[tuple[list[str], str, Any]], params: Params) -> str:
    """The item filter: each (path in the value, operator, operand as validated) must hold.

    ``$eq``/``$ne`` operands are JSON text; a missing value equals JSON null,
    as it does for LangGraph's in-memory store.
    """
    parts = [_operator(path, operator, operand, params) for path, operator, operand in conditions]
    return " AND ".join(parts) if parts else "true"


def put_items(schema: str, vector_type: str) -> str:
    """Put items and replace their vectors, in one call of migration 0018's function.

    $1 tenant, items' $2 prefixes, $3 keys, $4 values, $5 TTLs in minutes;
    their vectors' $6 prefixes, $7 keys, $8 fields, $9 embeddings. The
    function inserts or replaces the items (one put over an expired item
    starts afresh), drops vectors of fields the new values lack, and
    updates each field's vector in place (left alone when unchanged: no new
    row version, nothing inserted into the HNSW index). One round trip; its
    statements each take a fresh snapshot.
    """
    return (
        f"SELECT {schema}.langgraph_store_put($1, $2::text[], $3::text[], $4::jsonb[], "
        f"$5::float8[], $6::text[], $7::text[], $8::text[], $9::{vector_type}[])"
    )


def delete_items(schema: str) -> str:
    """Delete items ($2 prefixes, $3 keys); their vectors go with them."""
    return f"""
DELETE FROM {schema}.langgraph_store_items AS i
USING unnest($2::text[], $3::text[]) AS u(p, k)
WHERE i.tenant_id = $1 AND i.prefix = u.p AND i.key = u.k"""


def get_items(schema: str) -> str:
    """Live items by (prefix $2, key $3)."""
    return f"""
SELECT {ITEM_COLUMNS} FROM {schema}.langgraph_store_items AS i
JOIN unnest($2::text[], $3::text[]) AS w(p, k) ON i.prefix = w.p AND i.key = w.k
WHERE i.tenant_id = $1 AND {LIVE}"""


def refresh_items(schema: str) -> str:
    """Restart the TTL of live items ($2 prefixes, $3 keys) that have one.

    The sum is taken in UTC timestamps, whose ``+`` is immutable (a TTL is
    minutes, which no time zone changes): Citus refuses an ``UPDATE`` that
    calls a stable function, such as ``timestamptz + interval``, on a column.
    """
    return f"""
UPDATE {schema}.langgraph_store_items AS i
SET expires_at = ((now() AT TIME ZONE 'UTC') + i.ttl_minutes * interval '1 minute')
    AT TIME ZONE 'UTC'
FROM unnest($2::text[], $3::text[]) AS u(p, k)
WHERE i.tenant_id = $1 AND i.prefix = u.p AND i.key = u.k
  AND i.ttl_minutes IS NOT NULL AND {LIVE}"""


def list_items(schema: str, namespace_sql: str, filter_sql: str, limit: str, offset: str) -> str:
    """A page of live items, most recently put first (as LangGraph's PostgresStore orders)."""
    return f"""
SELECT {ITEM_COLUMNS}, NULL::float8 AS score FROM {schema}.langgraph_store_items AS i
WHERE i.tenant_id = $1 AND {namespace_sql} AND {LIVE} AND {filter_sql}
ORDER BY i.updated_at DESC, i.prefix, i.key
LIMIT {limit} OFFSET {offset}"""


def search_items(
    schema: str,
    namespace_sql: str,
    filter_sql: str,
    distance: str,
    query: str,
    scan: int,
    limit: str,
    offset: str,
    half_dims: int | None = None,
    tenant: str | None = None,
    ef_search: int | None = None,
    exact: bool = False,
) -> str:
    """A page of live items nearest a query vector, by their best-matching field.

    ``hits`` walks the HNSW index (iterative scan, so a filter that rejects
    candidates makes it read further instead of returning a short list) for
    the ``scan`` nearest vectors of matching items; an item is ranked by its
    nearest field. The first row also reports how many vectors and distinct
    items the scan found, and whether it was exact, so the caller can scan
    further when fields of one item filled the scan, or exactly when the
    walk gave up early (the page columns are NULL when the page is empty).
    ``scan`` is written into the text, not bound: with it a prepared
    statement's generic plan still sees a small LIMIT and walks the HNSW
    index instead of sorting every vector of the namespace.

    A namespace of at most ``EXACT_UP_TO`` vectors is searched exactly
    instead (``+ 0`` keeps the index out): reading a few hundred vectors by
    primary key beats walking a graph of the whole table for the few that
    match. Each branch runs only when its one-time condition holds. The exact
    branch repeats the namespace condition on the items so the planner reads
    only the namespace's items, whichever join it picks. ``exact`` makes the
    whole search exact, whatever the namespace's size.

    With ``half_dims`` (full-precision vectors of that many dimensions), the
    index holds half-precision copies (migration 0010): the walk orders by
    the copies' distance, every candidate is then ranked by its exact one.

    With ``tenant`` (and ``namespace_sql`` a :func:`namespace_literal_condition`)
    the tenant is written into the text too, so the planner can prove the
    predicate of the namespace's own index
    (:func:`~memsvc.langgraph_db.store_index_queries.create_index`)
    and walk that small graph instead of the table's.

    With ``ef_search``, the walk keeps that many candidates instead of the
    connection's ``hnsw.ef_search``: the setting is made by the subquery that
    yields the query vector, which the executor runs before the index scan
    starts (the index needs the vector first), and lasts until the
    transaction ends: only for a transaction memsvc owns (in a caller's it
    would outlive the search).
    """
    operator = DISTANCE[distance]
    target = query
    if ef_search is not None:
        cast = "vector" if half_dims is not None else "halfvec"
        target = walk_target(query, ef_search, cast)
    walk = f"v.embedding {operator} {target}"
    if half_dims is not None:
        half = f"halfvec({int(half_dims)})"
        walk = f"(v.embedding::{half}) {operator} ({target}::vector::{half})"
    vector_namespace = namespace_sql.replace("i.prefix", "v.prefix")
    tenant_sql = "$1" if tenant is None else quote_literal(tenant)
    candidates = f"""
    FROM {schema}.langgraph_store_vectors AS v
    JOIN {schema}.langgraph_store_items AS i
      ON i.tenant_id = v.tenant_id AND i.prefix = v.prefix AND i.key = v.key
    WHERE v.tenant_id = {tenant_sql} AND {vector_namespace} AND {LIVE} AND {filter_sql}"""
    nearest = f"SELECT v.prefix, v.key, v.embedding {operator} {query} AS distance"
    if exact:
        return f"""
WITH hits AS (
    {nearest} {candidates} AND {namespace_sql}
    ORDER BY (v.embedding {operator} {query}) + 0
    LIMIT {int(scan)}
){_ranked_page(schema, "hits", limit, offset, "true")}"""
    if tenant is not None:
        # The namespace's own index exists only for namespaces far above
        # EXACT_UP_TO: no count, no exact branch, the walk alone.
        return f"""
WITH hits AS (
    {nearest} {candidates}
    ORDER BY {walk}
    LIMIT {int(scan)}
){_ranked_page(schema, "hits", limit, offset, "false")}"""
    return f"""
WITH counted AS (
    SELECT count(*) AS vectors FROM (
        SELECT 1 FROM {schema}.langgraph_store_vectors AS v
        WHERE v.tenant_id = $1 AND {vector_namespace}
        LIMIT {EXACT_UP_TO + 1}
    ) AS c
), hits AS (
    ({nearest} {candidates}
       AND {namespace_sql} AND (SELECT vectors FROM counted) <= {EXACT_UP_TO}
     ORDER BY (v.embedding {operator} {query}) + 0
     LIMIT {int(scan)})
    UNION ALL
    ({nearest} {candidates}
       AND (SELECT vectors FROM counted) > {EXACT_UP_TO}
     ORDER BY {walk}
     LIMIT {int(scan)})
){_ranked_page(schema, "hits", limit, offset, f"(SELECT vectors FROM counted) <= {EXACT_UP_TO}")}"""


def _ranked_page(
    schema: str, scanned: str, limit: str, offset: str, exact: str = "false"
) -> str:
    """The end of a query search: ``hits`` (prefix, key, distance) ranked into a page.

    Each item counts once, by its nearest field. The first row also reports
    how many rows ``scanned`` holds, how many distinct items ``hits``
    found, and ``exact`` (an SQL boolean: whether ``hits`` is exact) (the
    page columns are NULL when the page is empty).
    """
    return f"""
, best AS (
    SELECT prefix, key, min(distance) AS distance FROM hits GROUP BY prefix, key
), page AS (
    -- Only the page's items are read (hits has already dropped expired ones).
    SELECT {ITEM_COLUMNS}, b.distance
    FROM (
        SELECT * FROM best ORDER BY distance, prefix, key LIMIT {limit} OFFSET {offset}
    ) AS b
    JOIN {schema}.langgraph_store_items AS i
      ON i.tenant_id = $1 AND i.prefix = b.prefix AND i.key = b.key
)
SELECT (SELECT count(*) FROM {scanned}) AS scanned, (SELECT count(*) FROM best) AS found,
       {exact} AS exact, page.*
FROM (SELECT 1) AS one LEFT JOIN page ON true
ORDER BY page.distance, page.prefix, page.key"""


def namespace_range_condition(prefix: str | None, alias: str = "v") -> str:
    """:func:`namespace_literal_condition` as one key range plus a recheck.

    ``[p, p || '/')`` holds the namespace ``p``, everything under it, and
    names that continue ``p`` with a character before '.', which the recheck
    drops. One range lets an index-only scan serve it; the recheck is no
    indexable OR, so the planner cannot turn it into a bitmap scan of the
    heap (which reads a page per vector).
    """
    if prefix is None:
        return "true"
    exact = quote_literal(prefix)
    under, high = quote_literal(prefix + "."), quote_literal(prefix + "/")
    head = f"substr({alias}.prefix, 1, {len(prefix) + 1})"
    return (
        f"({alias}.prefix >= {exact} AND {alias}.prefix < {high} "
        f"AND {head} IN ({exact}, {under}))"
    )


def namespace_size(schema: str, namespace_sql: str, cap: int, index_name: str) -> str:
    """Whether the namespace's own index ``index_name`` serves it; else its size in vectors.

    ``usable``: that index is built (valid). ``vectors``: the namespace's
    vectors counted up to ``cap`` (``namespace_sql`` is a
    :func:`namespace_range_condition` on ``v``), only when it is not (NULL
    otherwise: the count is an index scan of up to ``cap`` entries). The
    table's size is the larger of the planner's estimate (``reltuples``,
    set by the last vacuum or analyze) and the statistics' live rows (which
    follow writes within a second): free to read, and close enough to weigh
    a namespace's share of the HNSW graph. Also how many namespace indexes
    the table has (valid or not).
    """
    table = f"'{schema}.langgraph_store_vectors'::regclass"
    return f"""
WITH own AS (
    SELECT coalesce((
        SELECT x.indisvalid FROM pg_index AS x JOIN pg_class AS c ON c.oid = x.indexrelid
        WHERE x.indrelid = {table} AND c.relname = {quote_literal(index_name)}
    ), false) AS usable
)
SELECT own.usable,
       CASE WHEN own.usable THEN NULL ELSE (SELECT count(*) FROM (
            SELECT 1 FROM {schema}.langgraph_store_vectors AS v
            WHERE v.tenant_id = $1 AND {namespace_sql}
            LIMIT {int(cap)}
        ) AS c) END AS vectors,
       (SELECT greatest(c.reltuples, pg_stat_get_live_tuples(c.oid), 0)::float8
        FROM pg_class AS c WHERE c.oid = {table}) AS table_vectors,
       (SELECT count(*) FROM pg_index AS x JOIN pg_class AS c ON c.oid = x.indexrelid
        WHERE x.indrelid = {table}
          AND left(c.relname, {len(NAMESPACE_INDEX_PREFIX)}) = '{NAMESPACE_INDEX_PREFIX}'
       ) AS namespace_indexes
FROM own"""


def namespace_estimate(schema: str, namespace_sql: str) -> str:
    """The planner's plan for tenant ``$1``'s vectors of a namespace (JSON): its row estimate.

    ``namespace_sql`` is a :func:`namespace_literal_condition` on ``v``, as
    searches write it.
    """
    return (
        f"EXPLAIN (FORMAT JSON) SELECT 1 FROM {schema}.langgraph_store_vectors AS v "
        f"WHERE v.tenant_id = $1 AND {namespace_sql}"
    )


def search_items_quantized(
    schema: str,
    namespace_sql: str,
    distance: str,
    query: str,
    vector_type: str,
    dims: int,
    candidates: int,
    limit: str,
    offset: str,
) -> str:
    """A page of live items nearest a query vector, from a namespace's sign bits.

    ``near`` ranks the namespace's vectors by the Hamming distance between
    their sign bits and the query's, read by an index-only scan of the
    (tenant, namespace) covering index (migration 0018), and keeps the
    ``candidates`` nearest; those are re-ranked by their exact distance, so
    scores are the stored vectors'. ``namespace_sql`` is a
    :func:`namespace_range_condition` on ``v``. Expired items drop out after
    the bits are ranked; the caller reads more candidates when too few remain
    (``scanned`` counts the candidates, ``found`` the live items among them).
    """
    operator = DISTANCE[distance]
    bits = f"binary_quantize({query}::{vector_type})::bit({int(dims)})"
    return f"""
WITH near AS (
    SELECT v.prefix, v.key, v.field FROM {schema}.langgraph_store_vectors AS v
    WHERE v.tenant_id = $1 AND {namespace_sql}
    ORDER BY v.embedding_bits <~> {bits}
    LIMIT {int(candidates)}
), hits AS (
    SELECT v.prefix, v.key, v.embedding {operator} {query} AS distance
    FROM near AS n
    JOIN {schema}.langgraph_store_vectors AS v
      ON v.tenant_id = $1 AND v.prefix = n.prefix AND v.key = n.key AND v.field = n.field
    JOIN {schema}.langgraph_store_items AS i
      ON i.tenant_id = $1 AND i.prefix = v.prefix AND i.key = v.key
    WHERE {LIVE}
){_ranked_page(schema, "near", limit, offset)}"""


def list_namespaces(
    schema: str, conditions: list[str], depth: str | None, limit: str, offset: str
) -> str:
    """Distinct namespaces of live items (cut to ``depth`` labels), in label order."""
    labels = "(string_to_array(i.prefix, '.'))"
    namespace = f"{labels}[1:{depth}::int]" if depth else labels
    where = " AND ".join(["i.tenant_id = $1", LIVE, *conditions])
    return f"""
SELECT DISTINCT {namespace} AS namespace FROM {schema}.langgraph_store_items AS i
WHERE {where}
ORDER BY 1
LIMIT {limit} OFFSET {offset}"""


def label_conditions(
    path: tuple[str, ...], match: str, params: Params, alias: str = "i"
) -> list[str]:
    """Conditions that the namespace starts (``prefix``) or ends (``suffix``) with ``path``.

    ``*`` in ``path`` matches any one label.
    """
    labels = f"(string_to_array({alias}.prefix, '.'))"
    conditions = [f"cardinality({labels}) >= {params.add(len(path))}::int"]
    for position, label in enumerate(path):
        if label == "*":
            continue
        if match == "prefix":
            index = f"{position + 1}"
        else:
            index = f"cardinality({labels}) - {len(path) - position - 1}"
        conditions.append(f"{labels}[{index}] = {params.add(label)}::text")
    return conditions


def sweep_expired(schema: str, tenant_param: str | None) -> str:
    """Delete a batch (``$1`` rows) of expired items, optionally of one tenant; returns count.

    Rows are locked ``SKIP LOCKED`` so several sweepers (and gc) share the work.
    """
    tenant = f"AND tenant_id = {tenant_param}" if tenant_param else ""
    # The outer statement names the tenant too, so Citus routes it to one shard.
    outer = f"tenant_id = {tenant_param} AND" if tenant_param else ""
    return f"""
WITH gone AS (
    DELETE FROM {schema}.langgraph_store_items
    WHERE {outer} (tenant_id, prefix, key) IN (
        SELECT tenant_id, prefix, key FROM {schema}.langgraph_store_items
        WHERE expires_at IS NOT NULL AND expires_at <= now() {tenant}
        ORDER BY expires_at
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    )
    RETURNING 1
)
SELECT count(*) FROM gone"""


def delete_tenant(schema: str) -> str:
    """Delete every store item of tenant ``$1`` (vectors cascade); returns the count."""
    return f"""
WITH gone AS (
    DELETE FROM {schema}.langgraph_store_items WHERE tenant_id = $1 RETURNING 1
)
SELECT count(*) FROM gone"""
