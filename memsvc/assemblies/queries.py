"""SQL of :class:`memsvc.assemblies.repository.AssemblyRepository`.

Each function returns the text of one statement for a given schema name (a
validated identifier). Values are always ``$n`` parameters.

Locks are always taken in one global order, the one memory deletes use:
memory rows first, then assembly rows, each set in ``(tenant_id, id)`` order.
Statements that must see the state *after* a lock was granted run as their
own statement after the locking one: under READ COMMITTED a statement's
snapshot is taken when it starts, so rows committed while it waited for a
lock would be invisible to the rest of it.
"""

from __future__ import annotations

from memsvc.db.sql import INSERT_ARM_RETURNING, tenant_or_any
from memsvc.memories.queries import (
    DISTANCE_OPERATORS,
    MEMORY_COLUMNS,
    NOT_EXPIRED,
    SIMILARITY,
    qualified,
)

ASSEMBLY_COLUMNS = (
    "tenant_id, project_id, agent_id, session_id, id, name, description, metadata, "
    "member_count, centroid, version, created_at, updated_at"
)

# What membership arithmetic needs on top of the public columns.
LOCKED_COLUMNS = f"{ASSEMBLY_COLUMNS}, embedded_count, embedding_sum"


def _tenant(param: str | None, alias: str = "") -> str:
    prefix = f"{alias}." if alias else ""
    return f"AND {prefix}tenant_id = {param}" if param else ""


def insert_assembly(schema: str) -> str:
    """Insert an assembly with its initial members and aggregates, in one statement.

    Parameters: $1-$4 scope, $5 id, $6 name, $7 description, $8 metadata,
    $9 member count, $10 embedded count, $11 embedding sum, $12 centroid,
    $13 member ids. The members' foreign key checks run at the end of the
    statement, when the new assembly row is visible to them.
    """
    return f"""
WITH ins AS (
    INSERT INTO {schema}.assemblies
        (tenant_id, project_id, agent_id, session_id, id, name, description, metadata,
         member_count, embedded_count, embedding_sum, centroid)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10, $11::float8[], $12)
    RETURNING {ASSEMBLY_COLUMNS}
), members AS (
    INSERT INTO {schema}.assembly_members (tenant_id, assembly_id, memory_id)
    SELECT ins.tenant_id, ins.id, m.id FROM ins, unnest($13::uuid[]) AS m(id)
    {INSERT_ARM_RETURNING}
)
SELECT * FROM ins"""


def lock_memories(schema: str) -> str:
    """Lock memories of one tenant FOR KEY SHARE, in id order, for a new assembly.

    KEY SHARE keeps them from being deleted (a delete needs FOR UPDATE) until
    we commit, without blocking other adders.
    """
    return f"""
SELECT project_id, agent_id, session_id, id, embedding, {NOT_EXPIRED} AS live
FROM {schema}.memories
WHERE tenant_id = $1 AND id = ANY($2::uuid[])
ORDER BY tenant_id, id
FOR KEY SHARE"""


def lock_memories_for_assembly(schema: str, tenant_param: str | None) -> str:
    """Lock memories FOR KEY SHARE (id order) in an existing assembly's tenant.

    The assembly row is only read here (its scope never changes); it is locked
    by the next statement, after the memories, to keep the global lock order.
    Parameters: $1 assembly id, $2 memory ids, $3 tenant (optional).
    """
    return f"""
SELECT a.tenant_id, a.project_id AS a_project_id, a.agent_id AS a_agent_id,
       a.session_id AS a_session_id,
       m.project_id, m.agent_id, m.session_id, m.id, m.embedding,
       {NOT_EXPIRED.replace("expires_at", "m.expires_at")} AS live
FROM {schema}.assemblies AS a
JOIN {schema}.memories AS m ON m.tenant_id = a.tenant_id
WHERE a.id = $1 {_tenant(tenant_param, "a")} AND m.id = ANY($2::uuid[])
ORDER BY m.tenant_id, m.id
FOR KEY SHARE OF m"""


def lock_and_insert_members(schema: str) -> str:
    """Lock the assembly FOR UPDATE, then insert members; returns the row and what was new.

    ``a`` returns the latest committed row (READ COMMITTED re-reads a row it
    had to wait for), and ``ON CONFLICT DO NOTHING`` checks the index itself,
    not the snapshot, so ``added`` is exactly the rows this call inserted.
    Parameters: $1 tenant, $2 assembly id, $3 memory ids.
    """
    return f"""
WITH a AS (
    SELECT {LOCKED_COLUMNS} FROM {schema}.assemblies
    WHERE tenant_id = $1 AND id = $2
    FOR UPDATE
), ins AS (
    INSERT INTO {schema}.assembly_members (tenant_id, assembly_id, memory_id)
    SELECT a.tenant_id, a.id, m.id FROM a, unnest($3::uuid[]) AS m(id)
    ON CONFLICT DO NOTHING
    RETURNING memory_id
)
SELECT a.*, ARRAY(SELECT memory_id FROM ins) AS added FROM a"""


def lock_assembly(schema: str, tenant_param: str | None) -> str:
    """Lock one assembly row FOR UPDATE (by id, optionally within a tenant)."""
    return f"""
SELECT {LOCKED_COLUMNS} FROM {schema}.assemblies
WHERE id = $1 {_tenant(tenant_param)}
ORDER BY tenant_id
FOR UPDATE"""


def delete_members(schema: str) -> str:
    """Delete members of a (locked) assembly; returns each removed member's embedding.

    Parameters: $1 tenant, $2 assembly id, $3 memory ids.
    """
    return f"""
WITH del AS (
    DELETE FROM {schema}.assembly_members
    WHERE tenant_id = $1 AND assembly_id = $2 AND memory_id = ANY($3::uuid[])
    RETURNING tenant_id, memory_id
)
SELECT del.memory_id, m.embedding
FROM del JOIN {schema}.memories AS m ON m.tenant_id = del.tenant_id AND m.id = del.memory_id"""


def set_aggregates(schema: str) -> str:
    """Store new member aggregates of a locked assembly and bump its version.

    Parameters: $1 tenant, $2 id, $3 member count, $4 embedded count, $5 sum,
    $6 centroid.
    """
    return f"""
UPDATE {schema}.assemblies
SET member_count = $3, embedded_count = $4, embedding_sum = $5::float8[], centroid = $6,
    version = version + 1, updated_at = now()
WHERE tenant_id = $1 AND id = $2
RETURNING {ASSEMBLY_COLUMNS}"""


def assemblies_of_memories(schema: str) -> str:
    """Assemblies having any of the given memories (tenant/id arrays) as members."""
    return f"""
SELECT DISTINCT am.tenant_id, am.assembly_id
FROM {schema}.assembly_members AS am
JOIN unnest($1::text[], $2::uuid[]) AS d(tenant_id, memory_id)
  ON am.tenant_id = d.tenant_id AND am.memory_id = d.memory_id"""


def lock_assemblies(schema: str) -> str:
    """Lock assemblies ``$2`` (uuid[]) of tenant ``$1`` FOR UPDATE in id order.

    One tenant per statement: Citus locks rows only by a statement it can
    route to one shard, which takes the tenant by equality. Callers lock
    tenant after tenant in name order, so every locker takes (tenant, id)
    locks in one order.
    """
    return f"""
SELECT {LOCKED_COLUMNS} FROM {schema}.assemblies
WHERE tenant_id = $1 AND id = ANY($2::uuid[])
ORDER BY id
FOR UPDATE"""


def lock_every_assembly(schema: str) -> str:
    """Lock every assembly FOR UPDATE in (tenant_id, id) order; returns their keys."""
    return f"""
SELECT tenant_id, id FROM {schema}.assemblies ORDER BY tenant_id, id FOR UPDATE"""


def detach_members(schema: str) -> str:
    """Delete every membership of the given memories; returns what each assembly lost."""
    return f"""
WITH del AS (
    DELETE FROM {schema}.assembly_members AS am
    USING unnest($1::text[], $2::uuid[]) AS d(tenant_id, memory_id)
    WHERE am.tenant_id = d.tenant_id AND am.memory_id = d.memory_id
    RETURNING am.tenant_id, am.assembly_id, am.memory_id
)
SELECT del.tenant_id, del.assembly_id, m.embedding
FROM del JOIN {schema}.memories AS m ON m.tenant_id = del.tenant_id AND m.id = del.memory_id"""


def set_aggregates_many(schema: str) -> str:
    """Like :func:`set_aggregates`, returning nothing (for ``executemany``)."""
    return f"""
UPDATE {schema}.assemblies
SET member_count = $3, embedded_count = $4, embedding_sum = $5::float8[], centroid = $6,
    version = version + 1, updated_at = now()
WHERE tenant_id = $1 AND id = $2"""


def recompute(schema: str, vector_type: str, *, one_tenant: bool = True) -> str:
    """Recompute counts, sum and centroid of locked assemblies from their members.

    The sum is taken per dimension in double precision (``unnest ... WITH
    ORDINALITY``), like the incremental path keeps it. Parameters: ``$1`` the
    tenant, ``$2`` the assemblies' ids (uuid[]); every table is filtered by
    the tenant, so Citus runs the statement on the tenant's shard. Not
    ``one_tenant`` (an embedding-model switch, on one node): ``$1``/``$2``
    are tenant/id arrays.
    """
    if one_tenant:
        target = "SELECT $1::text AS tenant_id, id FROM unnest($2::uuid[]) AS t(id)"
        tenant = "$1"
    else:
        target = "SELECT * FROM unnest($1::text[], $2::uuid[]) AS t(tenant_id, id)"
        tenant = "t.tenant_id"
    return f"""
WITH target AS (
    {target}
), counts AS (
    SELECT t.tenant_id, t.id,
           count(am.memory_id)::int AS member_count,
           count(m.embedding)::int AS embedded_count
    FROM target AS t
    LEFT JOIN {schema}.assembly_members AS am
      ON am.tenant_id = {tenant} AND am.assembly_id = t.id
    LEFT JOIN {schema}.memories AS m ON m.tenant_id = {tenant} AND m.id = am.memory_id
    GROUP BY t.tenant_id, t.id
), dims AS (
    SELECT am.tenant_id, am.assembly_id AS id, u.i, sum(u.x::float8) AS total
    FROM target AS t
    JOIN {schema}.assembly_members AS am
      ON am.tenant_id = {tenant} AND am.assembly_id = t.id
    JOIN {schema}.memories AS m ON m.tenant_id = {tenant} AND m.id = am.memory_id
    CROSS JOIN LATERAL unnest(m.embedding::real[]) WITH ORDINALITY AS u(x, i)
    WHERE m.embedding IS NOT NULL
    GROUP BY am.tenant_id, am.assembly_id, u.i
), sums AS (
    SELECT tenant_id, id, array_agg(total ORDER BY i) AS total FROM dims GROUP BY tenant_id, id
)
UPDATE {schema}.assemblies AS a
SET member_count = c.member_count,
    embedded_count = c.embedded_count,
    embedding_sum = s.total,
    centroid = CASE WHEN c.embedded_count > 0 THEN
        ARRAY(SELECT (u.x / c.embedded_count)::real
              FROM unnest(s.total) WITH ORDINALITY AS u(x, i) ORDER BY u.i)::{vector_type}
    END,
    version = a.version + 1,
    updated_at = now()
FROM counts AS c LEFT JOIN sums AS s ON s.tenant_id = c.tenant_id AND s.id = c.id
WHERE a.tenant_id = {'$1' if one_tenant else 'c.tenant_id'} AND a.id = c.id
RETURNING {qualified(ASSEMBLY_COLUMNS, "a")}"""


def select_by_id(schema: str, tenant_param: str | None) -> str:
    """One assembly by id (optionally within a tenant)."""
    return f"""
SELECT {ASSEMBLY_COLUMNS} FROM {schema}.assemblies
WHERE id = $1 {_tenant(tenant_param)}"""


def select_by_name(schema: str, scope_sql: str, name_param: str) -> str:
    """The assembly with a name in an exact scope."""
    return f"""
SELECT {ASSEMBLY_COLUMNS} FROM {schema}.assemblies
WHERE {scope_sql} AND name = {name_param}"""


def list_page(schema: str, scope_sql: str, after_param: str | None, limit_param: str) -> str:
    """One page of a scope's assemblies in id (creation) order."""
    after = f"AND id > {after_param}" if after_param else ""
    return f"""
SELECT {ASSEMBLY_COLUMNS} FROM {schema}.assemblies
WHERE {scope_sql} {after}
ORDER BY id
LIMIT {limit_param}"""


def members_page(schema: str, tenant_param: str | None) -> str:
    """One page of an assembly's live member memories in memory id order (not forgotten).

    The assembly's tenant is looked up first so the members' primary key
    (tenant_id, assembly_id, memory_id) serves both the filter and the order.
    Parameters: $1 assembly id, $2 after (or NULL), $3 limit, $4 tenant (optional).
    """
    return f"""
SELECT {qualified(MEMORY_COLUMNS, "m")}
FROM {schema}.assembly_members AS am
JOIN {schema}.memories AS m ON m.tenant_id = am.tenant_id AND m.id = am.memory_id
WHERE (am.tenant_id, am.assembly_id) IN (
        SELECT tenant_id, id FROM {schema}.assemblies WHERE id = $1 {_tenant(tenant_param)})
  AND ($2::uuid IS NULL OR am.memory_id > $2::uuid)
  AND {NOT_EXPIRED.replace("expires_at", "m.expires_at")} AND m.forgotten_at IS NULL
ORDER BY am.memory_id
LIMIT $3"""


def count_by_id(schema: str, tenant_param: str | None) -> str:
    """How many assemblies have this id (0 = missing, >1 = ambiguous across tenants)."""
    return f"SELECT count(*) FROM {schema}.assemblies WHERE id = $1 {_tenant(tenant_param)}"


def memberships(schema: str, tenant_param: str | None) -> str:
    """The assemblies a memory belongs to, in id order.

    The memory's tenant is looked up through the memories' id index first, so
    the members' (tenant_id, memory_id) index applies.
    """
    return f"""
SELECT {qualified(ASSEMBLY_COLUMNS, "a")}
FROM {schema}.assembly_members AS am
JOIN {schema}.assemblies AS a ON a.tenant_id = am.tenant_id AND a.id = am.assembly_id
WHERE (am.tenant_id, am.memory_id) IN (
        SELECT tenant_id, id FROM {schema}.memories WHERE id = $1 {_tenant(tenant_param)})
ORDER BY a.tenant_id, a.id"""


def update_assembly(schema: str, tenant_filter: bool) -> str:
    """Change name/description/metadata under a row lock, checking the expected version.

    Parameters: $1 id, $2 tenant (NULL without ``tenant_filter``; then a
    plain ``$2 IS NULL`` keeps it typed), $3 expected version or NULL,
    $4 name, $5 description, $6 metadata (each NULL to keep). Returns the
    prior version and the number of rows found so the caller can tell a
    stale version from a missing row.
    """
    return f"""
WITH old AS (
    SELECT tenant_id, id, version FROM {schema}.assemblies
    WHERE id = $1 AND {tenant_or_any("$2", tenant_filter)}
    FOR UPDATE
), upd AS (
    UPDATE {schema}.assemblies AS a
    SET name = coalesce($4::text, a.name),
        description = coalesce($5::text, a.description),
        metadata = coalesce($6::jsonb, a.metadata),
        version = a.version + 1,
        updated_at = now()
    FROM old
    WHERE a.tenant_id = old.tenant_id AND a.id = old.id
      AND ($3::int IS NULL OR old.version = $3::int)
    RETURNING {qualified(ASSEMBLY_COLUMNS, "a")}
)
SELECT upd.*, (SELECT version FROM old) AS prior_version, (SELECT count(*) FROM old) AS found
FROM (SELECT 1) AS one LEFT JOIN upd ON true"""


def delete_assembly(schema: str, tenant_param: str | None) -> str:
    """Delete an assembly; its member rows go with it (the memories stay)."""
    return f"""
DELETE FROM {schema}.assemblies WHERE id = $1 {_tenant(tenant_param)}
RETURNING tenant_id"""


def search(
    schema: str,
    *,
    distance: str,
    scope_sql: str,
    query_param: str,
    k_param: str,
    threshold_param: str,
    mode: str,
) -> str:
    """Assemblies whose centroid is nearest to a query, within a scope, in one statement.

    Like memory search: ``exact`` scans the scope (``+ 0`` hides the ordering
    from the planner so the approximate index cannot serve it), ``index`` uses
    the HNSW index on ``centroid`` with the connection's iterative scan
    settings, and ``auto`` runs exactly one of the two, chosen by a one-time
    filter on the scope's size (counted up to the threshold). Iterative scans
    return rows in relaxed order, so the k found are sorted again outside.
    """
    op = DISTANCE_OPERATORS[distance]
    where = f"{scope_sql} AND centroid IS NOT NULL"
    exact = f"""
    SELECT {ASSEMBLY_COLUMNS}, (centroid {op} {query_param}) + 0 AS distance, true AS via_exact
    FROM {schema}.assemblies
    WHERE {{gate}} {where}
    ORDER BY (centroid {op} {query_param}) + 0
    LIMIT {k_param}"""
    indexed = f"""
    SELECT {ASSEMBLY_COLUMNS}, centroid {op} {query_param} AS distance, false AS via_exact
    FROM {schema}.assemblies
    WHERE {{gate}} {where}
    ORDER BY centroid {op} {query_param}
    LIMIT {k_param}"""
    prefix = ""
    if mode == "exact":
        body = exact.format(gate="")
    elif mode == "index":
        body = indexed.format(gate="")
    else:
        prefix = (
            f"WITH scope_size AS MATERIALIZED (SELECT count(*) < {threshold_param} AS small "
            f"FROM (SELECT 1 FROM {schema}.assemblies WHERE {scope_sql} "
            f"LIMIT {threshold_param}) AS s)"
        )
        small = "(SELECT small FROM scope_size)"
        body = (
            f"({exact.format(gate=small + ' AND')})\nUNION ALL\n"
            f"({indexed.format(gate='NOT ' + small + ' AND')})"
        )
    similarity = SIMILARITY[distance].format(d="distance")
    return f"""{prefix}
SELECT *, {similarity} AS similarity FROM ({body}) AS hits
ORDER BY distance"""
