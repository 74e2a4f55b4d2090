"""SQL of the recall audit (:mod:`memsvc.ops.recall_audit`)."""

from __future__ import annotations

from memsvc.memories.queries import NOT_EXPIRED


def scope_sizes(schema: str) -> str:
    """Every exact scope with the number of live, embedded memories it holds.

    One pass over the table: an audit is an occasional operator command, and
    the bucket a scope falls in must come from its true size, not an estimate.
    """
    return f"""
SELECT tenant_id, project_id, agent_id, session_id, count(*) AS size
FROM {schema}.memories
WHERE embedding IS NOT NULL AND {NOT_EXPIRED}
GROUP BY tenant_id, project_id, agent_id, session_id"""


def sample_embeddings(schema: str, scope_sql: str, limit_param: str, seed_param: str) -> str:
    """Up to ``limit`` embeddings of one exact scope, in an order fixed by the seed.

    Ordering by a seeded hash of the id (rather than ``random()``) makes an
    audit with the same seed on the same data ask the same questions.
    """
    return f"""
SELECT embedding
FROM {schema}.memories
WHERE {scope_sql} AND embedding IS NOT NULL AND {NOT_EXPIRED}
ORDER BY hashtextextended(id::text, {seed_param})
LIMIT {limit_param}"""
