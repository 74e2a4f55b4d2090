"""SQL of :class:`memsvc.memories.embedding_space.EmbeddingSpace`.

While an embedding-model migration runs (``memsvc reembed``), memories carry a
second embedding column, :data:`NEXT_COLUMN`, of the new model's dimension.
"""

from __future__ import annotations

# The second embedding column and its HNSW index while a migration runs; at
# the switch they take the names of the first ones.
NEXT_COLUMN = "embedding_next"
NEXT_INDEX = "ix_memories_embedding_next_hnsw"


def latest_migration(schema: str) -> str:
    """The newest embedding migration (in progress, or the last one switched)."""
    return f"""
SELECT id, embedder, dim, started_at, switched_at FROM {schema}.embedding_migrations
ORDER BY id DESC LIMIT 1"""


def hold_migration(schema: str) -> str:
    """Whether migration ``$1`` has switched, holding its row until the transaction ends.

    The switch updates that row first, so a transaction holding it runs
    entirely before the switch or entirely after it.
    """
    return f"""
SELECT switched_at IS NOT NULL AS switched FROM {schema}.embedding_migrations
WHERE id = $1 FOR SHARE"""


def write_next(schema: str, vector_type: str) -> str:
    """Set the new model's embeddings of rows just written (``$1..$4``: parallel arrays).

    Matched on content hash too: a row whose content changed since is left
    for the migration's workers (its trigger cleared the column).
    """
    return f"""
UPDATE {schema}.memories AS m SET {NEXT_COLUMN} = w.vector
FROM unnest($1::text[], $2::uuid[], $3::text[], $4::{vector_type}[])
    AS w(tenant_id, id, content_hash, vector)
WHERE m.tenant_id = w.tenant_id AND m.id = w.id AND m.content_hash = w.content_hash
  AND m.embedding IS NOT NULL"""
