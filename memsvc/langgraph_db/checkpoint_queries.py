"""SQL of :class:`memsvc.langgraph_db.checkpoints.LangGraphCheckpointRepository`.

Each function returns the text of one statement for a schema name (a
validated identifier); values are always ``$n`` parameters. Three tables:
``langgraph_checkpoints`` (one row per checkpoint, its channel versions as two
parallel text arrays), ``langgraph_checkpoint_blobs`` (one channel value per
channel version, shared by every checkpoint at that version) and
``langgraph_checkpoint_writes`` (pending writes per checkpoint). Every
statement is one round trip and sees one snapshot, so a read returns one
whole checkpoint: its row, the blobs of its versions and its writes.

"Newest" is the greatest ``checkpoint_id``: LangGraph's ids are time-ordered
(uuid6), a child's after its parent's.
"""

from __future__ import annotations

from collections.abc import Sequence

CP = "langgraph_checkpoints"
# Metadata keys LangGraph leaves on checkpoints of threads with a DeltaChannel.
DELTA_MARKERS = "array['counters_since_delta_snapshot', 'delta_writes_versioned']"
BLOBS = "langgraph_checkpoint_blobs"
WRITES = "langgraph_checkpoint_writes"

# Parameters of put(): $1 tenant, $2 thread, $3 ns, $4 checkpoint id, $5 parent id,
# $6 checkpoint type, $7 checkpoint bytes, $8 channels, $9 versions, $10 metadata,
# $11 run id, then the new blobs as parallel arrays: $12 channels, $13 versions,
# $14 types, $15 values.
_PUT_CTES = """
WITH new_blobs AS (
    INSERT INTO {schema}.{blobs}
        (tenant_id, thread_id, checkpoint_ns, channel, version, blob_type, blob)
    SELECT $1, $2, $3, b.channel, b.version, b.blob_type, b.blob
    FROM unnest($12::text[], $13::text[], $14::text[], $15::bytea[])
        AS b(channel, version, blob_type, blob)
    ON CONFLICT (tenant_id, thread_id, checkpoint_ns, channel, version) DO NOTHING
), new_checkpoint AS (
    INSERT INTO {schema}.{cp}
        (tenant_id, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
         checkpoint_type, checkpoint, channels, versions, metadata, run_id)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8::text[], $9::text[], $10::jsonb, $11)
    ON CONFLICT (tenant_id, thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
        parent_checkpoint_id = EXCLUDED.parent_checkpoint_id,
        checkpoint_type = EXCLUDED.checkpoint_type,
        checkpoint = EXCLUDED.checkpoint,
        channels = EXCLUDED.channels,
        versions = EXCLUDED.versions,
        metadata = EXCLUDED.metadata,
        run_id = EXCLUDED.run_id
    RETURNING checkpoint_id
)"""


def put(schema: str) -> str:
    """Store a checkpoint and the blobs of its new channel versions (one statement).

    A blob already stored for a (channel, version) is kept: versions carry a
    random suffix, so two forks never share a version with different values.
    A checkpoint stored again under its id replaces the earlier row, as in
    LangGraph's own savers.
    """
    return _PUT_CTES.format(schema=schema, blobs=BLOBS, cp=CP) + "\nSELECT 1 FROM new_checkpoint"


def put_and_retain(schema: str) -> str:
    """:func:`put`, then keep only the newest ``$16`` checkpoints of the thread's namespace.

    Runs under the thread's lock, after every earlier put of the thread
    committed. The statement's snapshot does not show the new row, so the
    ranking adds its id by hand; if the new checkpoint is itself older than
    ``$16`` others it is kept anyway (nothing deletes what a put just wrote).
    Checkpoints past the newest N go with their writes, and blobs no kept
    checkpoint (nor the new one) refers to go too. Because a child's id sorts
    after its parent's, the kept set holds every descendant of each kept
    checkpoint: each kept chain is whole from its oldest kept member on.
    Also kept: root checkpoints a subgraph's checkpoint started from
    (``metadata.parents['']``), and every checkpoint of a namespace whose
    graph uses a ``DeltaChannel`` (see :func:`delta_threads`).
    """
    return (
        _PUT_CTES.format(schema=schema, blobs=BLOBS, cp=CP)
        + f""", ranked AS (
    SELECT checkpoint_id,
        row_number() OVER (ORDER BY checkpoint_id DESC) AS position
    FROM (
        SELECT checkpoint_id FROM {schema}.{CP}
        WHERE tenant_id = $1 AND thread_id = $2 AND checkpoint_ns = $3 AND checkpoint_id <> $4
        UNION ALL SELECT $4
    ) AS ids
), doomed AS (
    SELECT checkpoint_id FROM ranked
    WHERE position > $16 AND checkpoint_id <> $4
    AND NOT ($10::jsonb ?| {DELTA_MARKERS})
    AND NOT EXISTS (
        SELECT 1 FROM {schema}.{CP}
        WHERE tenant_id = $1 AND thread_id = $2 AND checkpoint_ns = $3
        AND metadata ?| {DELTA_MARKERS}
    )
    AND checkpoint_id NOT IN (
        SELECT metadata -> 'parents' ->> '' FROM {schema}.{CP}
        WHERE tenant_id = $1 AND thread_id = $2 AND checkpoint_ns <> $3
        AND metadata -> 'parents' ? ''
    )
), dropped_checkpoints AS (
    DELETE FROM {schema}.{CP}
    WHERE tenant_id = $1 AND thread_id = $2 AND checkpoint_ns = $3
    AND checkpoint_id IN (SELECT checkpoint_id FROM doomed)
), dropped_writes AS (
    DELETE FROM {schema}.{WRITES}
    WHERE tenant_id = $1 AND thread_id = $2 AND checkpoint_ns = $3
    AND checkpoint_id IN (SELECT checkpoint_id FROM doomed)
), referenced AS (
    SELECT v.channel, v.version
    FROM {schema}.{CP} AS c, unnest(c.channels, c.versions) AS v(channel, version)
    WHERE c.tenant_id = $1 AND c.thread_id = $2 AND c.checkpoint_ns = $3
    AND c.checkpoint_id NOT IN (SELECT checkpoint_id FROM doomed)
    UNION SELECT * FROM unnest($8::text[], $9::text[])
), dropped_blobs AS (
    DELETE FROM {schema}.{BLOBS} AS b
    WHERE b.tenant_id = $1 AND b.thread_id = $2 AND b.checkpoint_ns = $3
    AND EXISTS (SELECT 1 FROM doomed)
    AND NOT EXISTS (
        SELECT 1 FROM referenced AS r WHERE r.channel = b.channel AND r.version = b.version
    )
)
SELECT 1 FROM new_checkpoint"""
    )


def put_writes(schema: str, *, replace: bool) -> str:
    """Store a task's pending writes for a checkpoint.

    ``replace``: the writes are all special channels (error, interrupt, ...),
    which LangGraph lets a later call overwrite; regular writes are
    idempotent (a retried task's writes are kept as first stored).
    Parameters: $1-$4 tenant, thread, ns, checkpoint id; $5 task id; $6 task
    path; then parallel arrays $7 idx, $8 channels, $9 types, $10 values.
    """
    conflict = (
        "DO UPDATE SET channel = EXCLUDED.channel, value_type = EXCLUDED.value_type, "
        "value = EXCLUDED.value, task_path = EXCLUDED.task_path"
        if replace
        else "DO NOTHING"
    )
    return f"""
INSERT INTO {schema}.{WRITES}
    (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, task_path,
     idx, channel, value_type, value)
SELECT $1, $2, $3, $4, $5, $6, w.idx, w.channel, w.value_type, w.value
FROM unnest($7::int[], $8::text[], $9::text[], $10::bytea[]) AS w(idx, channel, value_type, value)
ON CONFLICT (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx) {conflict}"""


# A checkpoint's blobs and writes come back as parallel arrays of plain
# types, one lateral aggregate per table, rather than arrays of records:
# Citus passes each result column between nodes as text and cannot read an
# anonymous record back ("input of anonymous composite types is not
# implemented"). Empty arrays come back as NULL (an aggregate of no rows).
BLOB_ARRAYS = ("blob_channels", "blob_types", "blob_values")
WRITE_ARRAYS = ("write_task_ids", "write_channels", "write_types", "write_values")
_WRITE_ORDER = "ORDER BY w.task_path, w.task_id, w.idx"


def _blobs_of(schema: str, row: str, channels: str = "") -> str:
    """A lateral aggregate of the stored values of ``row``'s channel versions.

    LATERAL changes nothing for PostgreSQL (the function reads only the
    outer row); Citus wraps a function of FROM that is not LATERAL in a
    subquery without adjusting its references to the outer row, which then
    fails ("invalid attnum", recursive_planning.c, TransformFunctionRTE).
    """
    return f"""CROSS JOIN LATERAL (
    SELECT array_agg(b.channel) AS blob_channels, array_agg(b.blob_type) AS blob_types,
        array_agg(b.blob) AS blob_values
    FROM LATERAL unnest({row}.channels, {row}.versions) AS v(channel, version)
    JOIN {schema}.{BLOBS} AS b
        ON b.tenant_id = $1 AND b.thread_id = {row}.thread_id
        AND b.checkpoint_ns = {row}.checkpoint_ns
        AND b.channel = v.channel AND b.version = v.version
    WHERE b.blob_type <> 'empty' {channels}
) AS bl"""


def _writes_of(schema: str, row: str, channels: str = "") -> str:
    """A lateral aggregate of ``row``'s pending writes, in (task_path, task_id, idx) order."""
    return f"""CROSS JOIN LATERAL (
    SELECT array_agg(w.task_id {_WRITE_ORDER}) AS write_task_ids,
        array_agg(w.channel {_WRITE_ORDER}) AS write_channels,
        array_agg(w.value_type {_WRITE_ORDER}) AS write_types,
        array_agg(w.value {_WRITE_ORDER}) AS write_values
    FROM {schema}.{WRITES} AS w
    WHERE w.tenant_id = $1 AND w.thread_id = {row}.thread_id
    AND w.checkpoint_ns = {row}.checkpoint_ns AND w.checkpoint_id = {row}.checkpoint_id
    {channels}
) AS wr"""


def _whole_checkpoints(schema: str, chosen: str, order: str) -> str:
    """The checkpoints the statement ``chosen`` selects (tenant $1), each whole.

    ``chosen`` filters, orders and limits the rows first, so only those
    returned have their blobs and writes read; ``order`` is its ORDER BY
    again (a join does not promise to keep the order of its input), or
    nothing when it selects one row.
    """
    return f"""
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
    c.checkpoint_type, c.checkpoint, c.metadata,
    {", ".join(BLOB_ARRAYS)}, {", ".join(WRITE_ARRAYS)}
FROM ({chosen}) AS c
{_blobs_of(schema, "c")}
{_writes_of(schema, "c")}
{order}"""


def get_tuple(schema: str, *, by_id: bool) -> str:
    """One checkpoint whole: by id ($4), or the newest of the thread's namespace.

    Parameters: $1 tenant, $2 thread, $3 ns (, $4 checkpoint id).
    """
    by = "AND c.checkpoint_id = $4" if by_id else ""
    chosen = f"""
    SELECT * FROM {schema}.{CP} AS c
    WHERE c.tenant_id = $1 AND c.thread_id = $2 AND c.checkpoint_ns = $3 {by}
    ORDER BY c.checkpoint_id DESC
    LIMIT 1"""
    return _whole_checkpoints(schema, chosen, "")  # one row: no order to keep


# Filters of list_checkpoints, in the order their values are passed; each
# placeholder ``{}`` takes one value.
LIST_FILTERS = {
    "thread_id": "c.thread_id = {}",
    "checkpoint_ns": "c.checkpoint_ns = {}",
    "checkpoint_id": "c.checkpoint_id = {}",
    "metadata": "c.metadata @> {}::jsonb",
    "before": "c.checkpoint_id < {}",
    "after": "(c.checkpoint_id, c.thread_id, c.checkpoint_ns) < ({}, {}, {})",
}


def list_checkpoints(schema: str, filters: Sequence[str], *, limited: bool) -> str:
    """A page of a tenant's ($1) checkpoints, newest first, matching ``filters``.

    ``filters`` names entries of LIST_FILTERS, whose values follow $1 in
    LIST_FILTERS order, then the page size if ``limited``. ``after`` is the
    keyset cursor: the (checkpoint_id, thread_id, checkpoint_ns) of the
    previous page's last row (ids alone can repeat across threads).
    """
    conditions = ["c.tenant_id = $1"]
    number = 1
    for name, template in LIST_FILTERS.items():
        if name not in filters:
            continue
        slots = template.count("{}")
        conditions.append(template.format(*(f"${number + i + 1}" for i in range(slots))))
        number += slots
    limit = f"LIMIT ${number + 1}" if limited else ""
    order = "ORDER BY c.checkpoint_id DESC, c.thread_id DESC, c.checkpoint_ns DESC"
    chosen = f"""
    SELECT * FROM {schema}.{CP} AS c
    WHERE {" AND ".join(conditions)}
    {order}
    {limit}"""
    return _whole_checkpoints(schema, chosen, order)


def delta_threads(schema: str) -> str:
    """Which of the threads $2 (tenant $1) use a LangGraph ``DeltaChannel``.

    Such a channel's value is rebuilt from the writes of every checkpoint
    back to its last snapshot, so dropping older checkpoints would lose it.
    LangGraph marks these threads' metadata.
    """
    return f"""
SELECT DISTINCT thread_id FROM {schema}.{CP}
WHERE tenant_id = $1 AND thread_id = ANY($2::text[]) AND metadata ?| {DELTA_MARKERS}
ORDER BY thread_id"""


def lock_thread() -> str:
    """Serialize a thread's retention, pruning and deletes until the transaction ends."""
    return "SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))"


def lock_threads() -> str:
    """:func:`lock_thread` for the keys $1, taken in one order by every caller (no deadlock)."""
    return """
SELECT count(pg_advisory_xact_lock(hashtextextended(k.key, 0)))
FROM (SELECT DISTINCT key FROM unnest($1::text[]) AS u(key) ORDER BY key) AS k"""


def delete_threads(schema: str) -> str:
    """Delete every checkpoint, blob and write of the threads $2 (tenant $1)."""
    return f"""
WITH dropped_checkpoints AS (
    DELETE FROM {schema}.{CP} WHERE tenant_id = $1 AND thread_id = ANY($2::text[])
), dropped_blobs AS (
    DELETE FROM {schema}.{BLOBS} WHERE tenant_id = $1 AND thread_id = ANY($2::text[])
)
DELETE FROM {schema}.{WRITES} WHERE tenant_id = $1 AND thread_id = ANY($2::text[])"""


def tenant_threads(schema: str) -> str:
    """Up to ``$2`` thread ids of tenant ``$1`` holding any checkpoint, blob or write."""
    return f"""
SELECT thread_id FROM (
    SELECT thread_id FROM {schema}.{CP} WHERE tenant_id = $1
    UNION SELECT thread_id FROM {schema}.{BLOBS} WHERE tenant_id = $1
    UNION SELECT thread_id FROM {schema}.{WRITES} WHERE tenant_id = $1
) AS t
ORDER BY thread_id
LIMIT $2"""


def erase_threads(schema: str) -> str:
    """Delete every row of the threads $2 (tenant $1); returns the count per table."""
    return f"""
WITH dropped_checkpoints AS (
    DELETE FROM {schema}.{CP} WHERE tenant_id = $1 AND thread_id = ANY($2::text[]) RETURNING 1
), dropped_blobs AS (
    DELETE FROM {schema}.{BLOBS} WHERE tenant_id = $1 AND thread_id = ANY($2::text[]) RETURNING 1
), dropped_writes AS (
    DELETE FROM {schema}.{WRITES} WHERE tenant_id = $1 AND thread_id = ANY($2::text[]) RETURNING 1
)
SELECT (SELECT count(*) FROM dropped_checkpoints) AS {CP},
       (SELECT count(*) FROM dropped_blobs) AS {BLOBS},
       (SELECT count(*) FROM dropped_writes) AS {WRITES}"""


def _drop(schema: str, doomed: str, threads: str) -> str:
    """CTEs deleting the ``doomed`` checkpoints (CTE with thread_id, checkpoint_ns,
    checkpoint_id), their writes, and the blobs of ``threads`` no survivor refers to."""
    return f""", dropped_checkpoints AS (
    DELETE FROM {schema}.{CP} AS c USING {doomed} AS d
    WHERE c.tenant_id = $1 AND c.thread_id = d.thread_id
    AND c.checkpoint_ns = d.checkpoint_ns AND c.checkpoint_id = d.checkpoint_id
    RETURNING 1
), dropped_writes AS (
    DELETE FROM {schema}.{WRITES} AS w USING {doomed} AS d
    WHERE w.tenant_id = $1 AND w.thread_id = d.thread_id
    AND w.checkpoint_ns = d.checkpoint_ns AND w.checkpoint_id = d.checkpoint_id
), referenced AS (
    SELECT c.thread_id, c.checkpoint_ns, v.channel, v.version
    FROM {schema}.{CP} AS c, unnest(c.channels, c.versions) AS v(channel, version)
    WHERE c.tenant_id = $1 AND c.thread_id = ANY({threads})
    AND NOT EXISTS (
        SELECT 1 FROM {doomed} AS d WHERE d.thread_id = c.thread_id
        AND d.checkpoint_ns = c.checkpoint_ns AND d.checkpoint_id = c.checkpoint_id
    )
), dropped_blobs AS (
    DELETE FROM {schema}.{BLOBS} AS b
    WHERE b.tenant_id = $1 AND b.thread_id = ANY({threads})
    AND EXISTS (SELECT 1 FROM {doomed})
    AND NOT EXISTS (
        SELECT 1 FROM referenced AS r
        WHERE r.thread_id = b.thread_id AND r.checkpoint_ns = b.checkpoint_ns
        AND r.channel = b.channel AND r.version = b.version
    )
)
SELECT count(*) FROM dropped_checkpoints"""


def keep_newest(schema: str) -> str:
    """Keep the newest $3 checkpoints of each namespace of the threads $2; count the rest.

    A root checkpoint a kept subgraph checkpoint started from
    (``metadata.parents['']``) is kept too, as LangGraph's own saver does.
    """
    doomed = f"""
WITH ranked AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id,
        row_number() OVER (
            PARTITION BY thread_id, checkpoint_ns ORDER BY checkpoint_id DESC
        ) AS position
    FROM {schema}.{CP}
    WHERE tenant_id = $1 AND thread_id = ANY($2::text[])
), doomed AS (
    SELECT r.thread_id, r.checkpoint_ns, r.checkpoint_id FROM ranked AS r
    WHERE r.position > $3 AND NOT EXISTS (
        SELECT 1 FROM ranked AS k
        JOIN {schema}.{CP} AS c
            ON c.tenant_id = $1 AND c.thread_id = k.thread_id
            AND c.checkpoint_ns = k.checkpoint_ns AND c.checkpoint_id = k.checkpoint_id
        WHERE k.position <= $3 AND k.thread_id = r.thread_id
        AND k.checkpoint_ns <> r.checkpoint_ns
        AND c.metadata -> 'parents' ->> '' = r.checkpoint_id
    )
)"""
    return doomed + _drop(schema, "doomed", "$2::text[]")


def delete_for_runs(schema: str) -> str:
    """Delete the checkpoints whose metadata run_id is in $2, with their writes."""
    doomed = f"""
WITH doomed AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id FROM {schema}.{CP}
    WHERE tenant_id = $1 AND run_id = ANY($2::text[])
)"""
    return doomed + _drop(schema, "doomed", "ARRAY(SELECT DISTINCT thread_id FROM doomed)")


def copy_thread(schema: str) -> str:
    """Copy every checkpoint, blob and write of thread $2 to thread $3 (tenant $1).

    Rows the target already has under the same keys are left as they are.
    """
    return f"""
WITH copied_blobs AS (
    INSERT INTO {schema}.{BLOBS}
        (tenant_id, thread_id, checkpoint_ns, channel, version, blob_type, blob)
    SELECT tenant_id, $3, checkpoint_ns, channel, version, blob_type, blob
    FROM {schema}.{BLOBS} WHERE tenant_id = $1 AND thread_id = $2
    ON CONFLICT DO NOTHING
), copied_writes AS (
    INSERT INTO {schema}.{WRITES}
        (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, task_path,
         idx, channel, value_type, value)
    SELECT tenant_id, $3, checkpoint_ns, checkpoint_id, task_id, task_path,
        idx, channel, value_type, value
    FROM {schema}.{WRITES} WHERE tenant_id = $1 AND thread_id = $2
    ON CONFLICT DO NOTHING
)
INSERT INTO {schema}.{CP}
    (tenant_id, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
     checkpoint_type, checkpoint, channels, versions, metadata, run_id)
SELECT tenant_id, $3, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
    checkpoint_type, checkpoint, channels, versions, metadata, run_id
FROM {schema}.{CP} WHERE tenant_id = $1 AND thread_id = $2
ON CONFLICT DO NOTHING"""


def ancestors(schema: str, *, by_id: bool) -> str:
    """Up to $6 ancestors of checkpoint $4 (nearest first), with what a DeltaChannel needs.

    The walk follows ``parent_checkpoint_id`` within the thread ($2) and
    namespace ($3) of tenant $1, starting at the parent of $4 (the newest
    checkpoint without ``by_id``, $4 then being unused). Per ancestor: the stored, non-empty values
    of the channels $5 at the ancestor's versions, and its writes to those
    channels in ``(task_path, task_id, idx)`` order.
    """
    return f"""
WITH RECURSIVE target AS (
    SELECT parent_checkpoint_id FROM {schema}.{CP}
    WHERE tenant_id = $1 AND thread_id = $2 AND checkpoint_ns = $3
    AND {"checkpoint_id = $4" if by_id else "$4::text IS NULL"}
    ORDER BY checkpoint_id DESC
    LIMIT 1
), chain AS (
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
        c.channels, c.versions, 1 AS depth
    FROM {schema}.{CP} AS c, target
    WHERE c.tenant_id = $1 AND c.thread_id = $2 AND c.checkpoint_ns = $3
    AND c.checkpoint_id = target.parent_checkpoint_id
    UNION ALL
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
        c.channels, c.versions, chain.depth + 1
    FROM chain JOIN {schema}.{CP} AS c
        ON c.tenant_id = $1 AND c.thread_id = $2 AND c.checkpoint_ns = $3
        AND c.checkpoint_id = chain.parent_checkpoint_id
    WHERE chain.depth < $6
)
SELECT chain.checkpoint_id, chain.parent_checkpoint_id, chain.depth,
    {", ".join(BLOB_ARRAYS)}, {", ".join(WRITE_ARRAYS)}
FROM chain
{_blobs_of(schema, "chain", "AND v.channel = ANY($5::text[])")}
{_writes_of(schema, "chain", "AND w.channel = ANY($5::text[])")}
ORDER BY chain.depth"""
