"""SQL of :mod:`memsvc.remember`: the ledger of remembered messages, and the candidates' locks."""

from __future__ import annotations

from memsvc.memories import queries as q

LEDGER_COLUMNS = (
    "tenant_id, project_id, agent_id, session_id, message_id, batch_id, extractor, model"
)


def remembered_and_held(schema: str, scope_sql: str, ids: str, most: int) -> str:
    """Which of the message ids ``ids`` (text[]) the exact scope remembered, and its size.

    ``remembered``: those ids in the ledger. ``held``: how many rows the
    scope holds (live or not), counted up to ``most + 1``; the scope's
    btree index answers it without reading a row. One round trip for both:
    every batch asks the first before the extractor and needs the second
    for its candidate search.
    """
    return f"""
SELECT ARRAY(
           SELECT message_id FROM {schema}.remembered_messages
           WHERE {scope_sql} AND message_id = ANY({ids}::text[])
       ) AS remembered,
       (SELECT count(*) FROM (
           SELECT 1 FROM {schema}.memories WHERE {scope_sql} LIMIT {int(most) + 1}
       ) AS rows) AS held"""


def record(schema: str) -> str:
    """Record messages ``$5`` (text[]) of scope ``$1``-``$4`` as applied by batch ``$6``.

    Returns the ids recorded: one already there (a concurrent batch committed
    it first; the unique index made this insert wait for its commit) is not.
    """
    return f"""
INSERT INTO {schema}.remembered_messages ({LEDGER_COLUMNS})
SELECT $1, $2, $3, $4, message_id, $6, $7, $8 FROM unnest($5::text[]) AS message_id
ON CONFLICT DO NOTHING
RETURNING message_id"""


def lock_candidates(schema: str, scope_sql: str, ids: str) -> str:
    """Lock the memories ``ids`` (uuid[]) still in the exact scope and not expired.

    In id order, so batches locking overlapping candidates cannot deadlock.
    """
    return f"""
SELECT id, version FROM {schema}.memories
WHERE {scope_sql} AND id = ANY({ids}::uuid[])
  AND (expires_at IS NULL OR expires_at > now())
ORDER BY id
FOR UPDATE"""


def related_memories(
    schema: str,
    *,
    vector_type: str,
    distance: str,
    config: str,
    scope_sql: str,
    tenant: str,
    shared_scan: int = 0,
) -> str:
    """Each fact's ``$5`` nearest memories valid now in the exact scope, by hybrid search.

    One statement for a batch's facts: ``$1`` their query vectors
    (``vector_type[]``), ``$2``/``$3`` the text arm's required and ranked
    texts, ``$4`` whether a fact's text holds identifiers, ``$6`` each arm's
    candidates. Each fact runs the hybrid search of ``svc.memories.search``
    (see :func:`memsvc.memories.queries.search`): the vector arm and the text
    arm fused by reciprocal rank, identifier matches first. Rows come in fact
    order (``fact`` counts from 1), best first. ``tenant`` is the scope's
    tenant again, for the hits' read-back: Citus routes a statement to one
    shard only when every read of a table names the tenant.

    ``shared_scan``: the number of facts, when the scope's rows are to be
    read once for them all and each fact's arms run over them (exact): for a
    small scope, where reading its rows would be most of each fact's cost.
    A row's text-search vector is kept only if it matches some fact, so each
    fact's text arm tests only those. 0: each fact's arms are planned on
    their own (an HNSW walk, the scope's own index when ``scope_sql`` names
    its levels, or an exact scan).
    """
    op = q.DISTANCE_OPERATORS[distance]
    where = f"{scope_sql} AND {q.VALID_NOW} AND {q.LIVE}"
    columns = q.qualified(q.MEMORY_COLUMNS_NO_EMBEDDING, "m").replace(
        "m.NULL AS embedding", "NULL AS embedding"
    )
    vector_rows = text_rows = f"{schema}.memories"
    vector_where, text_where = f"{where} AND embedding IS NOT NULL", where
    shared = ""
    if shared_scan:
        any_fact = " || ".join(
            q.text_query(config, f"($2::text[])[{n}]") for n in range(1, shared_scan + 1)
        )
        # The facts' text queries are parsed once (an InitPlan), not per row;
        # subvector() copies each vector whole, so one kept out of its row
        # (TOAST) is fetched once, not once per fact. The rows some fact's
        # text matches are set apart, so each text arm reads only those.
        shared = f"""
WITH scoped AS MATERIALIZED (
    SELECT tenant_id, id,
           CASE WHEN content_tsv @@ (SELECT {any_fact}) THEN content_tsv END AS content_tsv,
           subvector(embedding, 1, vector_dims(embedding)) AS embedding
    FROM {schema}.memories WHERE {where}
), texts AS MATERIALIZED (
    SELECT tenant_id, id, content_tsv FROM scoped WHERE content_tsv IS NOT NULL
)"""
        vector_rows, vector_where = "scoped", "embedding IS NOT NULL"
        text_rows, text_where = "texts", "true"
    return f"""{shared}
SELECT f.fact, h.*
FROM unnest($1::{vector_type}[], $2::text[], $3::text[], $4::bool[]) WITH ORDINALITY
    AS f(query, required, ranked, identifiers, fact)
CROSS JOIN LATERAL (
    SELECT {columns}, fused.fused_score, fused.vector_rank, fused.text_rank
    FROM (
        SELECT coalesce(v.tenant_id, t.tenant_id) AS tenant_id, coalesce(v.id, t.id) AS id,
               v.vector_rank, t.text_rank,
               coalesce(1.0::float8 / ({q.RRF_K} + v.vector_rank), 0)
                 + coalesce(1.0::float8 / ({q.RRF_K} + t.text_rank), 0)
                 + CASE WHEN f.identifiers AND t.id IS NOT NULL
                        THEN {q.IDENTIFIER_BONUS!r}::float8 ELSE 0 END AS fused_score
        FROM (
            SELECT tenant_id, id, row_number() OVER (ORDER BY distance) AS vector_rank
            FROM (
                SELECT tenant_id, id, embedding {op} f.query AS distance
                FROM {vector_rows} WHERE {vector_where}
                ORDER BY embedding {op} f.query
                LIMIT $6
            ) AS nearest
        ) AS v
        FULL JOIN (
            SELECT tenant_id, id, row_number() OVER (ORDER BY text_score DESC, id) AS text_rank
            FROM (
                SELECT tenant_id, id, ts_rank_cd(content_tsv, rq) AS text_score
                FROM {q.text_query(config, "f.required")} AS mq,
                     {q.text_query(config, "f.ranked")} AS rq,
                     LATERAL (
                         SELECT tenant_id, id, content_tsv FROM {text_rows}
                         WHERE {text_where} AND content_tsv @@ mq
                     ) AS matched
                ORDER BY text_score DESC, id
                LIMIT $6
            ) AS matching
        ) AS t ON t.tenant_id = v.tenant_id AND t.id = v.id
        ORDER BY fused_score DESC, v.vector_rank NULLS LAST, t.text_rank NULLS LAST
        LIMIT $5
    ) AS fused
    JOIN {schema}.memories AS m ON m.tenant_id = {tenant} AND m.id = fused.id
) AS h
ORDER BY f.fact, h.fused_score DESC, h.vector_rank NULLS LAST, h.text_rank NULLS LAST"""
