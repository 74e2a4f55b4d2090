"""SQL of read routing: write positions on the primary, replay state on a replica.

WAL positions travel as bigint (bytes since ``0/0``), so they compare as
plain integers on the client.
"""

# After a write commits, on the same connection: a WAL position at or past
# that commit (the insert position is never behind any committed record).
WRITE_POSITION = "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint"

# On a replica: is it a standby, how far it has replayed, and how far behind
# it is. Lag counts only while WAL is received but not yet replayed (an idle
# primary sends nothing, and then an old last-replay timestamp means no lag).
REPLICA_STATE = """
SELECT pg_is_in_recovery() AS standby,
       (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint AS replayed,
       CASE
           WHEN pg_last_wal_receive_lsn() IS NULL
                OR pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn() THEN 0
           ELSE COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()), 0)
       END::float8 AS lag_s
"""

# On a replica, while waiting for it to reach a write: its replay position.
REPLAYED = "SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint"
