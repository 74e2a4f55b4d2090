"""Health checks of a memsvc database, and repairs of what can be repaired.

Checked, in order (later checks need the earlier ones to pass):

1. ``pgvector``: installed, and its version (0.8+ for iterative index scans);
2. ``migrations``: the schema is at the newest revision;
3. ``partitions`` and ``vector settings``: the configured partition count,
   dimension, vector type and distance match what the migrations recorded
   in ``schema_info``, and the vector columns' declared types;
4. ``indexes``: both HNSW indexes exist with the distance's operator class,
   and no index of the schema is invalid (``pg_index.indisvalid``: what a
   failed ``CREATE INDEX CONCURRENTLY`` leaves behind);
5. ``assemblies``: ``member_count``, ``embedded_count`` and the centroid
   agree with the member rows, recomputed in SQL;
6. ``content hashes``: memories whose stored ``content_hash`` is not the
   hash of their content (content edited in SQL): dedupe and import
   idempotency rely on it; ``time ranges``: stored times Python cannot read
   (see :mod:`memsvc.ops.doctor_times`, which also repairs them);
7. ``history``: memories that vanished without a ``deleted`` event, or exist
   without any event (rows changed behind memsvc's back; reported only);
8. ``gc backlog``: expired memories and sessions over checkpoint retention
   (reported; ``memsvc gc`` deletes them);
9. ``replica <name>``, for each of ``replica_urls``: reachable, a standby,
   at the same migration, and how far its replay lags (reads skip a replica
   that fails any of these, so none of it loses a read; see
   :mod:`memsvc.db.replicas`).
10. ``embedding migration``: one in progress (``memsvc reembed``), with how
   many rows still lack the new embedding and the state of its index
   (reported as a warning; running ``memsvc reembed`` again finishes it).
11. ``citus``, on a Citus coordinator: how the tables are placed (tables,
   shards per worker, co-location), a problem if a table memsvc distributes
   is still local (see :mod:`memsvc.ops.citus`).
12. ``change feed epoch`` and ``change feed``: the database still lives in
   the cluster its feed epoch was recorded in, and no open transaction holds
   the feed back (see :mod:`memsvc.ops.doctor_feed`).

With ``repair``, each fix runs in its own transaction and is reported:
assemblies are recomputed by :meth:`AssemblyRepository.recompute` (which
locks the assembly row ``FOR UPDATE``), an invalid index is rebuilt with
``REINDEX INDEX CONCURRENTLY``, a missing HNSW index is built with ``CREATE
INDEX CONCURRENTLY`` from the schema metadata (unless a bulk load holds the
index lock: it is rebuilding it), a stale ``content_hash`` is recomputed
unless the new hash is already another memory's in the same scope (that
would be a duplicate: it is reported, not repaired), a database restored
into another cluster gets its new change feed epoch.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg

from memsvc.assemblies.repository import AssemblyRepository
from memsvc.core.errors import MemsvcError
from memsvc.core.settings import Settings
from memsvc.db import migrate, replica_queries
from memsvc.db.errors import translate_errors
from memsvc.db.pool import connect
from memsvc.db.replicas import freshness, primary_state, replica_name
from memsvc.db.tables import OPCLASSES
from memsvc.memories.asof_queries import SHOW_TRACKING
from memsvc.ops import doctor_queries as q
from memsvc.ops import doctor_times
from memsvc.ops.citus import check_distribution
from memsvc.ops.doctor_feed import check_feed_epoch, check_feed_stall
from memsvc.ops.doctor_report import Check, DoctorReport
from memsvc.ops.reembed import migration_progress
from memsvc.progress import NO_PROGRESS, ProgressReporter
from memsvc.transfer import bulk_queries
from memsvc.transfer.bulk import (
    ASSEMBLY_VECTOR_INDEX,
    MEMORY_VECTOR_INDEX,
    build_index,
    index_state,
    metadata_index_definition,
)

# Relative L2 error tolerated between a stored centroid and the recomputed mean.
CENTROID_TOLERANCE = {"vector": 1e-4, "halfvec": 2e-3}
MAX_ASSEMBLY_REPAIRS = 10_000
MAX_HASH_REPAIRS = 10_000
MIN_PGVECTOR = (0, 8, 0)


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


class Doctor:
    """Runs the checks on a connection of its own; see the module docstring.

    Without ``assemblies`` (a schema the service could not open), assembly
    repairs are skipped.
    """

    def __init__(
        self, settings: Settings, dsn: str, *, assemblies: AssemblyRepository | None = None
    ) -> None:
        self._settings = settings
        self._schema = settings.db_schema
        self._dsn = dsn
        self._assemblies = assemblies
        self._progress: ProgressReporter = NO_PROGRESS

    async def run(
        self, *, repair: bool = False, progress: ProgressReporter = NO_PROGRESS
    ) -> DoctorReport:
        """Run every check (and, with ``repair``, fix what can be fixed).

        ``progress`` is told each check as a step (and repairs as they happen).
        """
        self._progress = progress
        report = DoctorReport(repair=repair)
        conn = await connect(self._dsn, self._settings)
        try:
            with translate_errors():
                if not await self._base_checks(conn, report):
                    report.add("further checks", "warning", "skipped until the above is fixed")
                    return report
                progress.start("doctor: checking indexes")
                await self._check_indexes(conn, report, repair)
                progress.start("doctor: checking assemblies")
                await self._check_assemblies(conn, report, repair)
                progress.start("doctor: checking content hashes")
                await self._check_content_hashes(conn, report, repair)
                progress.start("doctor: checking time ranges")
                await self._check_time_ranges(conn, report, repair)
                progress.start("doctor: checking history and gc backlog")
                await self._check_history(conn, report)
                await self._check_commit_timestamps(conn, report)
                await self._check_backlog(conn, report)
                if self._settings.replica_urls:
                    progress.start("doctor: checking replicas")
                    for url in self._settings.replica_urls:
                        await self._check_replica(conn, url, report)
                await self._check_embedding_migration(conn, report)
                await check_distribution(conn, self._settings, report)
                progress.start("doctor: checking the change feed")
                await check_feed_epoch(conn, self._schema, report, repair)
                await check_feed_stall(conn, self._settings, report)
                progress.done()
        finally:
            await conn.close()
        return report

    # ------------------------------------------------------------ schema

    async def _base_checks(self, conn: asyncpg.Connection, report: DoctorReport) -> bool:
        version = await conn.fetchval(q.PGVECTOR_VERSION)
        if version is None:
            available = await conn.fetchval(q.PGVECTOR_AVAILABLE)
            detail = (
                migrate.PGVECTOR_MISSING
                if available is None
                else f"available ({available}) but not created in this database: "
                "run `memsvc migrate`, which creates it"
            )
            report.add("pgvector", "problem", detail, repairable=False)
            return False
        if _version(version) < MIN_PGVECTOR:
            report.add(
                "pgvector",
                "warning",
                f"version {version}: 0.8+ is needed for iterative index scans (filtered "
                "searches then fall back to exact scans more often)",
            )
        else:
            report.add("pgvector", "ok", f"version {version}")
        head = migrate.head_revision()
        current = await migrate.current_revision(conn, self._schema)
        if current != head:
            report.add(
                "migrations",
                "problem",
                f"schema {self._schema} is at {current or 'no revision'}, head is {head}: "
                "run `memsvc migrate`",
                repairable=False,
            )
            return False
        report.add("migrations", "ok", f"at head ({head})")
        recorded = {r["key"]: r["value"] for r in await conn.fetch(q.schema_info(self._schema))}
        partitioning = migrate.recorded_partitions_mismatch(recorded, self._settings)
        if partitioning is not None:
            report.add("partitions", "problem", partitioning, repairable=False)
            return False
        count = self._settings.partition_count
        report.add(
            "partitions",
            "ok",
            f"memories in {count} hash partitions by tenant" if count else "not partitioned",
        )
        mismatches = migrate.recorded_settings_mismatch(recorded, self._settings)
        expected_type = f"{self._settings.vector_type}({self._settings.embedding_dim})"
        for row in await conn.fetch(q.embedding_column_types(), self._schema):
            if row["type"] != expected_type:
                mismatches.append(
                    f"{row['table_name']}.{row['column_name']} is {row['type']}, "
                    f"settings say {expected_type}"
                )
        if mismatches:
            report.add("vector settings", "problem", "; ".join(mismatches), repairable=False)
            return False
        report.add(
            "vector settings",
            "ok",
            f"{expected_type}, distance {self._settings.distance} (as recorded in schema_info)",
        )
        return True

    # ------------------------------------------------------------ replicas

    async def _check_replica(
        self, primary: asyncpg.Connection, url: str, report: DoctorReport
    ) -> None:
        name = f"replica {replica_name(url)}"
        try:
            conn = await connect(url, self._settings)
        except MemsvcError as exc:
            report.add(name, "warning", f"unreachable, reads go elsewhere: {exc}")
            return
        try:
            with translate_errors():
                state = await conn.fetchrow(
                    replica_queries.REPLICA_STATE, *await primary_state(primary)
                )
                revision = await migrate.current_revision(conn, self._schema)
        finally:
            await conn.close()
        head = migrate.head_revision()
        max_lag = self._settings.replica_max_lag_s
        verdict = freshness(state, max_lag)
        lag = "unknown (no transaction replayed yet)" if state["lag_s"] is None else (
            f"{state['lag_s']:.1f} s"
        )
        if verdict == "not a standby":
            report.add(
                name, "problem", "not a standby (promoted?): it is never read from",
                repairable=False,
            )
        elif revision != head:
            report.add(
                name, "problem", f"schema at {revision or 'no revision'}, head is {head}",
                repairable=False,
            )
        elif verdict == "not receiving":
            receiver = state["receiver"]
            report.add(
                name,
                "warning",
                "not receiving WAL: "
                + (
                    "no WAL receiver runs (primary_conninfo is empty, or the primary cannot "
                    "be reached from the replica; see its log)"
                    if receiver is None
                    else f"its WAL receiver is {receiver}, not streaming (check "
                    "primary_conninfo and the replica's log)"
                )
                + f"; its data stops at what it replayed (lag {lag} on the primary's "
                "clock), so reads go to the primary until it streams again",
            )
        elif verdict == "lagging":
            report.add(
                name,
                "warning",
                f"replay lags {lag} on the primary's clock (over replica_max_lag_s="
                f"{max_lag:g}): skipped until it catches up",
            )
        else:
            report.add(name, "ok", f"streaming standby, replay lag {lag}")

    # ------------------------------------------------------------ indexes

    async def _check_indexes(
        self, conn: asyncpg.Connection, report: DoctorReport, repair: bool
    ) -> None:
        found = {row["name"]: row for row in await conn.fetch(q.indexes(), self._schema)}
        opclass = OPCLASSES[(self._settings.vector_type, self._settings.distance)]
        issues: list[tuple[str, str]] = []  # (index, what is wrong)
        for name in (MEMORY_VECTOR_INDEX, ASSEMBLY_VECTOR_INDEX):
            row = found.get(name)
            if row is None:
                issues.append((name, "missing"))
            elif opclass not in row["definition"]:
                issues.append((name, f"does not use {opclass}"))
        for name, row in found.items():
            if not row["valid"]:
                issues.append((name, "invalid"))
        if not issues:
            report.add("indexes", "ok", f"{len(found)} indexes valid, HNSW with {opclass}")
            return
        check = report.add(
            "indexes", "problem", "; ".join(f"{name} {what}" for name, what in issues)
        )
        if repair:
            await self._repair_indexes(conn, check, issues)

    async def _repair_indexes(
        self, conn: asyncpg.Connection, check: Check, issues: list[tuple[str, str]]
    ) -> None:
        # Holding the bulk-load lock: no bulk import drops an index meanwhile,
        # and if one is running we leave its index to it.
        if not await conn.fetchval(bulk_queries.TRY_LOCK, bulk_queries.BULK_LOCK_KEY):
            check.status = "warning"
            check.detail += " (a bulk import is rebuilding the vector index; check again later)"
            return
        remaining = []
        try:
            await conn.execute(bulk_queries.build_settings(256))
            for name, what in issues:
                try:
                    state = await index_state(conn, self._schema, name)
                    if what == "invalid" and state is not None and state.partitioned:
                        # A partitioned index is invalid while a partition's index
                        # is missing or not attached: build those and attach them.
                        await build_index(
                            conn, self._settings, name, state.definition, rows=0,
                            progress=self._progress,
                        )
                        check.fixes.append(
                            f"rebuilt invalid index {name} (each partition's index built "
                            "concurrently and attached)"
                        )
                    elif what == "invalid":
                        self._progress.start(f"doctor: rebuilding invalid index {name}")
                        await conn.execute(q.reindex_concurrently(self._schema, name))
                        check.fixes.append(f"rebuilt invalid index {name} (REINDEX CONCURRENTLY)")
                    elif what == "missing":
                        definition = metadata_index_definition(self._settings, name)
                        rows = await conn.fetchval(
                            bulk_queries.count_up_to(self._schema, "memories"), 10_000_000
                        )
                        await build_index(
                            conn, self._settings, name, definition, rows=rows,
                            progress=self._progress,
                        )
                        check.fixes.append(
                            f"built missing index {name} (CREATE INDEX CONCURRENTLY)"
                        )
                    else:
                        remaining.append(f"{name} {what}: drop it and run `memsvc doctor --repair`")
                except (MemsvcError, asyncpg.PostgresError) as exc:
                    remaining.append(f"{name} {what}: repair failed: {exc}")
        finally:
            await conn.fetchval(bulk_queries.UNLOCK, bulk_queries.BULK_LOCK_KEY)
        check.status = "problem" if remaining else "repaired"
        if remaining:
            check.detail = "; ".join(remaining)

    # ------------------------------------------------------------ assemblies

    async def _check_assemblies(
        self, conn: asyncpg.Connection, report: DoctorReport, repair: bool
    ) -> None:
        tolerance = CENTROID_TOLERANCE[self._settings.vector_type]
        rows = await conn.fetch(
            q.assembly_mismatches(self._schema), tolerance, MAX_ASSEMBLY_REPAIRS
        )
        if not rows:
            report.add("assemblies", "ok", "member counts and centroids match their members")
            return
        described = [
            f"{row['id']} ({row['name']}): member_count {row['member_count']} vs "
            f"{row['members']} members, embedded_count {row['embedded_count']} vs "
            f"{row['embedded']}, centroid error {row['centroid_error']:.3g}"
            for row in rows
        ]
        shown = "; ".join(described[:10])
        more = f" and {len(rows) - 10} more" if len(rows) > 10 else ""
        check = report.add(
            "assemblies", "problem", f"{len(rows)} inconsistent: {shown}{more}"
        )
        if not repair:
            return
        if self._assemblies is None:
            check.detail += " (repair needs a database the service can open)"
            return
        failed = 0
        for row in rows:
            try:
                # Its own transaction, under the assembly row lock.
                await self._assemblies.recompute(row["id"], tenant=row["tenant_id"])
                check.fixes.append(f"recomputed assembly {row['id']} ({row['name']})")
            except MemsvcError as exc:
                failed += 1
                check.fixes.append(f"assembly {row['id']}: repair failed: {exc}")
        check.status = "problem" if failed else "repaired"

    # ------------------------------------------------------------ content hashes

    async def _check_content_hashes(
        self, conn: asyncpg.Connection, report: DoctorReport, repair: bool
    ) -> None:
        rows = await conn.fetch(q.stale_content_hashes(self._schema), MAX_HASH_REPAIRS)
        if not rows:
            report.add("content hashes", "ok", "every content_hash matches its content")
            return
        shown = ", ".join(str(row["id"]) for row in rows[:10])
        more = f" and {len(rows) - 10} more" if len(rows) > 10 else ""
        check = report.add(
            "content hashes",
            "problem",
            f"{len(rows)} memories whose content_hash does not match their content "
            f"(edited outside memsvc): {shown}{more}",
        )
        if not repair:
            return
        self._progress.start("doctor: recomputing content hashes", total=len(rows))
        remaining = []
        for row in rows:
            self._progress.advance(1)
            if row["clash"] is not None:
                remaining.append(
                    f"memory {row['id']}: its content is now that of memory {row['clash']} "
                    "in the same scope; not recomputed (it would be a duplicate: "
                    "edit or delete one of them)"
                )
                continue
            try:
                fixed = await conn.fetchval(
                    q.fix_content_hash(self._schema), row["tenant_id"], row["id"], row["actual"]
                )
            except asyncpg.UniqueViolationError:
                # A memory with this content arrived since the check.
                remaining.append(
                    f"memory {row['id']}: its content is now another memory's in the same "
                    "scope; not recomputed"
                )
                continue
            if fixed is not None:
                check.fixes.append(f"recomputed the content_hash of memory {row['id']}")
        check.status = "problem" if remaining else "repaired"
        if remaining:
            check.detail = "; ".join(remaining)

    # ------------------------------------------------------------ time ranges

    async def _check_time_ranges(
        self, conn: asyncpg.Connection, report: DoctorReport, repair: bool
    ) -> None:
        found = await doctor_times.find_out_of_range(conn, self._schema)
        constraints = await doctor_times.unvalidated(conn, self._schema)
        if not found and not constraints:
            report.add(doctor_times.CHECK_NAME, "ok", "every stored time is within range")
            return
        check = report.add(
            doctor_times.CHECK_NAME,
            "problem" if found else "warning",
            doctor_times.describe(found, constraints),
        )
        if not repair:
            return
        self._progress.start("doctor: bringing times into range")
        fixes, failures = await doctor_times.repair(conn, self._schema, found, constraints)
        check.fixes += fixes
        check.status = "problem" if failures else "repaired"
        if failures:
            check.detail = "; ".join(failures)

    # ------------------------------------------------------------ history, backlog

    async def _check_history(self, conn: asyncpg.Connection, report: DoctorReport) -> None:
        orphaned = await conn.fetchval(q.orphaned_history(self._schema))
        retention = self._settings.change_retention_days
        kept_since = None if retention is None else datetime.now(UTC) - timedelta(days=retention)
        silent = await conn.fetchval(q.memories_without_history(self._schema), kept_since)
        if orphaned or silent:
            report.add(
                "history",
                "warning",
                f"{orphaned} memories vanished without a deleted event, {silent} memories have "
                "no event: rows were changed outside memsvc (reported only)",
            )
        else:
            report.add("history", "ok", "every memory has history; no deletion went unrecorded")

    async def _check_commit_timestamps(
        self, conn: asyncpg.Connection, report: DoctorReport
    ) -> None:
        if not await conn.fetchval(SHOW_TRACKING):
            report.add(
                "commit timestamps",
                "warning",
                "track_commit_timestamp is off: as-of reads are refused until it is set in "
                "postgresql.conf and the server restarted",
            )
            return
        waiting = await conn.fetchval(q.commit_times_waiting(self._schema))
        report.add(
            "commit timestamps",
            "ok",
            f"tracked; {waiting} history events wait for gc to persist their commit time",
        )

    async def _check_embedding_migration(
        self, conn: asyncpg.Connection, report: DoctorReport
    ) -> None:
        running = await migration_progress(conn, self._schema)
        if running is None:
            return
        done = ""
        if running["total"] is not None:
            embedded = running["total"] - running["remaining"]
            share = 100.0 * embedded / running["total"] if running["total"] else 100.0
            done = f"{embedded} of {running['total']} rows embedded ({share:.0f}%), "
        report.add(
            "embedding migration",
            "warning",
            f"migration {running['id']} to {running['embedder']!r} ({running['dim']} "
            f"dimensions) in progress since {running['started_at']:%Y-%m-%d %H:%M:%S %Z}: "
            f"{done}new index {running['index']}; `memsvc reembed --embedder "
            f"{running['embedder']} --dim {running['dim']}` finishes it",
        )

    async def _check_backlog(self, conn: asyncpg.Connection, report: DoctorReport) -> None:
        expired = await conn.fetchval(q.expired_waiting(self._schema))
        over = await conn.fetchval(
            q.sessions_over_retention(self._schema), self._settings.checkpoint_keep_last
        )
        detail = (
            f"{expired} expired memories waiting for gc; {over} sessions over "
            f"checkpoint_keep_last={self._settings.checkpoint_keep_last}"
        )
        report.add("gc backlog", "warning" if over else "ok", detail)
