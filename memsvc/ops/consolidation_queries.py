"""SQL of :mod:`memsvc.ops.consolidation`: new memories, neighbours, claims, stale clusters.

Similarity is always cosine (``1 - (a <=> b)``), whatever distance the
store searches with: the threshold is a cosine similarity. ``live`` is the
condition a memory meets while it counts as valid now (see
:func:`live_condition`). The JSON ``{"kind": "summary"}`` written into the
text is a constant, never a value from a caller.
"""

from __future__ import annotations

# Summaries are never clustered again (not even by another run's summary).
NOT_SUMMARY = """NOT (m.metadata @> '{"kind": "summary"}'::jsonb)"""
MEMBER_COLUMNS = "m.id, m.version, m.content, m.embedding, m.created_at, m.importance"


def live_condition(alias: str, valid_time: bool, forgetting: bool = False) -> str:
    """The memory ``alias`` is valid now: not expired, not forgotten, not closed."""
    condition = f"({alias}.expires_at IS NULL OR {alias}.expires_at > now())"
    if forgetting:
        condition += f" AND {alias}.forgotten_at IS NULL"
    if valid_time:
        condition += (
            f" AND ({alias}.valid_to IS NULL OR {alias}.valid_to > now())"
            f" AND ({alias}.valid_from IS NULL OR {alias}.valid_from <= now())"
        )
    return condition


def member_columns(valid_time: bool) -> str:
    """The columns a member is read with (``valid_from`` where the store has it)."""
    return MEMBER_COLUMNS + (", m.valid_from" if valid_time else "")


def new_memories(
    schema: str, scope_sql: str, live: str, columns: str, after: str, limit: str
) -> str:
    """Memories of the exact scope no run has considered yet, oldest first, after a cursor.

    ``after`` is a ``(created_at, id)`` row parameter pair: ``$a, $b``.
    """
    return f"""
SELECT {columns}
FROM {schema}.memories AS m
WHERE {scope_sql} AND m.embedding IS NOT NULL AND {live} AND {NOT_SUMMARY}
  AND (m.created_at, m.id) > ({after})
  AND NOT EXISTS (
      SELECT 1 FROM {schema}.consolidation_members AS c
      WHERE c.tenant_id = m.tenant_id AND c.memory_id = m.id)
ORDER BY m.created_at, m.id
LIMIT {limit}"""


def placed(schema: str) -> str:
    """The cluster memory ``$2`` of tenant ``$1`` is in (no row: not in one)."""
    return f"""
SELECT assembly_id FROM {schema}.consolidation_members
WHERE tenant_id = $1 AND memory_id = $2 AND assembly_id IS NOT NULL"""


def nearest_cluster(schema: str, scope_sql: str, vector: str, room: str) -> str:
    """The scope's cluster whose centroid is nearest ``vector``, among those with room."""
    return f"""
SELECT c.assembly_id, 1 - (a.centroid <=> {vector}) AS similarity
FROM {schema}.consolidation_clusters AS c
JOIN {schema}.assemblies AS a ON a.tenant_id = c.tenant_id AND a.id = c.assembly_id
WHERE {scope_sql} AND a.centroid IS NOT NULL AND a.member_count < {room}
ORDER BY a.centroid <=> {vector}
LIMIT 1"""


def neighbours(
    schema: str, scope_sql: str, live: str, columns: str, vector: str, seed: str, limit: str
) -> str:
    """The memories of the scope in no cluster nearest ``vector``, nearest first."""
    return f"""
SELECT {columns}, 1 - (m.embedding <=> {vector}) AS similarity
FROM {schema}.memories AS m
WHERE {scope_sql} AND m.embedding IS NOT NULL AND {live} AND {NOT_SUMMARY}
  AND m.id <> {seed}
  AND NOT EXISTS (
      SELECT 1 FROM {schema}.consolidation_members AS c
      WHERE c.tenant_id = m.tenant_id AND c.memory_id = m.id AND c.assembly_id IS NOT NULL)
ORDER BY m.embedding <=> {vector}
LIMIT {limit}"""


def lock_versions(schema: str, live: str) -> str:
    """Memories ``$2`` (uuid[]) of tenant ``$1`` still valid now, with their versions.

    ``FOR SHARE`` in id order: a change to one waits for the cluster's
    commit (and then makes it stale), and overlapping claims cannot deadlock.
    """
    return f"""
SELECT m.id, m.version FROM {schema}.memories AS m
WHERE m.tenant_id = $1 AND m.id = ANY($2::uuid[]) AND {live}
ORDER BY m.id
FOR SHARE"""


def claim(schema: str) -> str:
    """Put memories ``$3`` (uuid[], versions ``$4`` int[]) of tenant ``$1`` in cluster ``$2``.

    A memory already in a cluster is left where it is (the conditional
    upsert re-reads the row a racing claim committed): only the ids
    returned were claimed, ``inserted`` when no run had considered them
    before. ``$5``: whether the summary is written from them.
    """
    return f"""
INSERT INTO {schema}.consolidation_members AS c
    (tenant_id, memory_id, assembly_id, memory_version, summarized)
SELECT $1, u.id, $2, u.version, $5
FROM unnest($3::uuid[], $4::int[]) AS u(id, version)
ORDER BY u.id
ON CONFLICT (tenant_id, memory_id) DO UPDATE
    SET assembly_id = EXCLUDED.assembly_id,
        memory_version = EXCLUDED.memory_version,
        summarized = EXCLUDED.summarized
    WHERE c.assembly_id IS NULL
RETURNING memory_id, (xmax = 0) AS inserted"""


def considered(schema: str) -> str:
    """Record memory ``$2`` (version ``$3``) of tenant ``$1`` as considered, in no cluster."""
    return f"""
INSERT INTO {schema}.consolidation_members (tenant_id, memory_id, assembly_id, memory_version)
VALUES ($1, $2, NULL, $3)
ON CONFLICT (tenant_id, memory_id) DO NOTHING
RETURNING memory_id"""


def insert_cluster(schema: str) -> str:
    """A new cluster ``$2`` of tenant ``$1`` written by summarizer ``$3`` (model ``$4``)."""
    return f"""
INSERT INTO {schema}.consolidation_clusters (tenant_id, assembly_id, summarizer, model)
VALUES ($1, $2, $3, $4)"""


def lock_cluster(schema: str, share: bool) -> str:
    """Cluster ``$2`` of tenant ``$1``, locked (``share``: against a redo, not other joins)."""
    strength = "FOR KEY SHARE" if share else "FOR UPDATE"
    return f"""
SELECT summary_id, summarized_count FROM {schema}.consolidation_clusters
WHERE tenant_id = $1 AND assembly_id = $2
{strength}"""


def stale_clusters(schema: str, where: str, live: str) -> str:
    """Clusters matching ``where`` (over ``c`` and ``a``) whose summary is out of date.

    ``changed``: a member changed, stopped being valid, or left (deleted or
    erased: its row went with it), or the summary memory is gone.
    ``grown``: members joined since the summary was written.
    """
    members = f"""
        FROM {schema}.consolidation_members AS cm
        WHERE cm.tenant_id = c.tenant_id AND cm.assembly_id = c.assembly_id"""
    return f"""
SELECT assembly_id, changed, grown FROM (
    SELECT c.assembly_id,
        c.summary_id IS NULL
        OR NOT EXISTS (
            SELECT 1 FROM {schema}.memories AS s
            WHERE s.tenant_id = c.tenant_id AND s.id = c.summary_id)
        OR (SELECT count(*) {members} AND cm.summarized) < c.summarized_count
        OR EXISTS (
            SELECT 1 {members}
            AND NOT EXISTS (
                SELECT 1 FROM {schema}.memories AS m
                WHERE m.tenant_id = cm.tenant_id AND m.id = cm.memory_id
                  AND m.version = cm.memory_version AND {live})) AS changed,
        EXISTS (SELECT 1 {members} AND NOT cm.summarized) AS grown
    FROM {schema}.consolidation_clusters AS c
    JOIN {schema}.assemblies AS a ON a.tenant_id = c.tenant_id AND a.id = c.assembly_id
    WHERE {where}
) AS clusters
WHERE changed OR grown
ORDER BY assembly_id"""


def cluster_members(schema: str, live: str, columns: str, lock: bool) -> str:
    """The members of cluster ``$2`` of tenant ``$1``, with whether each is still valid now."""
    return f"""
SELECT {columns}, {live} AS live
FROM {schema}.consolidation_members AS cm
JOIN {schema}.memories AS m ON m.tenant_id = cm.tenant_id AND m.id = cm.memory_id
WHERE cm.tenant_id = $1 AND cm.assembly_id = $2
ORDER BY m.id{' FOR SHARE OF m' if lock else ''}"""


def release(schema: str) -> str:
    """Take memories ``$3`` (uuid[]) out of cluster ``$2`` of tenant ``$1``."""
    return f"""
DELETE FROM {schema}.consolidation_members
WHERE tenant_id = $1 AND assembly_id = $2 AND memory_id = ANY($3::uuid[])"""


def summarized(schema: str) -> str:
    """Members ``$3`` (uuid[], versions ``$4``) of cluster ``$2`` are in its summary now."""
    return f"""
UPDATE {schema}.consolidation_members AS cm
SET summarized = true, memory_version = u.version
FROM unnest($3::uuid[], $4::int[]) AS u(id, version)
WHERE cm.tenant_id = $1 AND cm.assembly_id = $2 AND cm.memory_id = u.id"""


def set_summary(schema: str) -> str:
    """Cluster ``$2`` of tenant ``$1`` is summarized by memory ``$3`` from ``$4`` members."""
    return f"""
UPDATE {schema}.consolidation_clusters
SET summary_id = $3, summarized_count = $4, summarizer = $5, model = $6
WHERE tenant_id = $1 AND assembly_id = $2"""
