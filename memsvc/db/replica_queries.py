"""SQL of read routing: write positions and the clock on the primary, replay state on a replica.

WAL positions travel as bigint (bytes since ``0/0``), so they compare as
plain integers on the client.
"""

# After a write commits, on the same connection: a WAL position at or past
# that commit (the insert position is never behind any committed record).
WRITE_POSITION = "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint"

# On the primary, just before a replica's health is checked: its clock, how
# far its WAL is flushed (what a replica can have received by now), and when
# its newest transaction committed (NULL without track_commit_timestamp).
PRIMARY_STATE = """
SELECT clock_timestamp() AS now,
       (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint AS flushed,
       CASE WHEN current_setting('track_commit_timestamp')::bool
            THEN (pg_last_committed_xact()).timestamp END AS last_commit"""

# On a replica, given the primary's clock ($1), flushed position ($2) and
# newest commit time ($3):
# is it a standby, how far it has replayed, its WAL receiver, and its lag.
#
# - ``receiver``: the receiver's status ('streaming' when WAL flows), NULL
#   when no receiver runs (primary_conninfo empty, or the primary cannot be
#   reached between attempts), 'unknown' when the role may not see the
#   status (it needs pg_read_all_stats; others see only that one runs).
# - ``lag_s``: 0 when the replica has replayed all the primary had flushed
#   a moment ago, or every transaction the primary had committed (WAL with
#   no commit, a checkpoint's or vacuum's, carries no data a read could
#   miss); otherwise the primary's clock minus the commit time (a time the
#   primary wrote) of the last transaction replayed, so the replica's own
#   clock plays no part. NULL when it replayed none yet.
REPLICA_STATE = """
SELECT pg_is_in_recovery() AS standby,
       (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint AS replayed,
       CASE WHEN r.pid IS NOT NULL THEN coalesce(r.status, 'unknown') END AS receiver,
       CASE
           WHEN (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint >= $2::bigint THEN 0
           WHEN pg_last_xact_replay_timestamp() >= $3::timestamptz THEN 0
           ELSE EXTRACT(EPOCH FROM $1::timestamptz - pg_last_xact_replay_timestamp())
       END::float8 AS lag_s
FROM (SELECT 1) AS one
LEFT JOIN pg_stat_wal_receiver AS r ON true"""

# On a replica, while waiting for it to reach a write: its replay position.
REPLAYED = "SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint"
