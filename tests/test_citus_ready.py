"""Citus-ready: the migrated schema and every statement memsvc sends can be distributed by tenant.

Citus cannot run here, so this proves what distribution by ``tenant_id``
needs: every key and foreign key of a tenant table includes ``tenant_id``,
row-level-security policies key only on it, and every statement memsvc
issues against a tenant table filters by it. The statements are the ones a
real server logged (``log_statement = 'all'``) while a broad workload ran;
cross-tenant maintenance statements are listed below with their reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from click.testing import CliRunner
from pglast import fingerprint

from memsvc import MemoryService, Scope, Settings
from memsvc.cli import main as cli
from memsvc.db import migrate
from memsvc.db.embedded import EmbeddedPostgres, pgdata_path
from memsvc.embedding import HashingEmbedder
from memsvc.ops import doctor_queries, gc_queries, recall_audit_queries, stats_queries
from memsvc.ops import export_queries
from memsvc.ops.citus import ANCHOR, citus_sql
from memsvc.repositories import langgraph_store_queries
from memsvc.service import TENANT_TABLES
from memsvc.testing.postgres import run_in_own_loop, settings_for_tests, with_database
from tests.citus_checks import (
    key_problems,
    policy_problems,
    statement_problems,
    tables_with_tenant_column,
)

SCHEMA = "memsvc"
DATABASE = "citus_ready"
# Log lines of the workload's database start with this (set in log_line_prefix).
LOG_MARK = "<memsvc-statement-log %d> "
LOG_RECORD = re.compile(r"^<memsvc-statement-log (\w*)> ", re.MULTILINE)
LOGGED_STATEMENT = re.compile(
    r"^LOG:  (?:statement|execute [^:]+): (.*)\Z", re.DOTALL
)


def _cross_tenant() -> dict[str, str]:
    """Statements that read or change every tenant's rows on purpose, by fingerprint.

    On Citus each runs on every shard in parallel (a multi-shard statement);
    see the README's "Citus" section.
    """
    s = SCHEMA
    reasons = {
        gc_queries.lock_expired(s): "gc: expired memories of every tenant, oldest first",
        gc_queries.sessions_over_retention(s): "gc: sessions over checkpoint retention, "
        "all tenants",
        langgraph_store_queries.sweep_expired(s, None): "gc: expired LangGraph store items "
        "of every tenant",
        doctor_queries.assembly_mismatches(s): "doctor: assembly counters of every tenant",
        doctor_queries.orphaned_history(s): "doctor: history rows without a memory",
        doctor_queries.memories_without_history(s): "doctor: memories without history",
        doctor_queries.expired_waiting(s): "doctor: expired memories waiting for gc",
        doctor_queries.sessions_over_retention(s): "doctor: sessions over retention",
        doctor_queries.stale_content_hashes(s): "doctor: content hashes to recompute",
        stats_queries.memories_per_tenant(s, False): "stats of every tenant",
        stats_queries.assemblies_per_tenant(s, False): "stats of every tenant",
        stats_queries.checkpoints_per_tenant(s, False): "stats of every tenant",
        stats_queries.store_items_per_tenant(s, False): "stats of every tenant",
        recall_audit_queries.scope_sizes(s): "recall audit: scope sizes of every tenant",
        export_queries.memories(s, "true"): "export of everything",
        export_queries.assemblies(s, "true"): "export of everything",
        export_queries.checkpoints(s, "true"): "export of everything",
        export_queries.store_items(s, "true"): "export of everything",
        export_queries.count_rows(s, "true", "true"): "export of everything: row count",
    }
    return {fingerprint(sql): reason for sql, reason in reasons.items()}


CROSS_TENANT = _cross_tenant()


# ------------------------------------------------------------------ the server


@dataclass
class LoggedServer:
    """A private PostgreSQL that logs every statement sent to the workload's database."""

    admin_dsn: str
    dsn: str
    log_path: Path

    def log_size(self) -> int:
        return self.log_path.stat().st_size

    def statements_since(self, offset: int) -> list[str]:
        """The statements logged for the workload's database after byte ``offset``."""
        text = self.log_path.read_bytes()[offset:].decode("utf-8", errors="replace")
        marks = list(LOG_RECORD.finditer(text))
        statements = []
        for mark, following in zip(marks, [*marks[1:], None], strict=True):
            if mark.group(1) != DATABASE:
                continue
            end = following.start() if following else len(text)
            match = LOGGED_STATEMENT.match(text[mark.end() : end].rstrip("\n"))
            if match:
                statements.append(match.group(1))
        return statements


async def _prepare(server: EmbeddedPostgres, dsn: str) -> LoggedServer:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"ALTER SYSTEM SET log_line_prefix = '{LOG_MARK}'")
        await conn.execute("SELECT pg_reload_conf()")
        await conn.execute(f"CREATE DATABASE {DATABASE}")
    finally:
        await conn.close()
    database_dsn = with_database(dsn, DATABASE)
    await asyncio.to_thread(migrate.upgrade, settings_for_tests(database_dsn), database_dsn)
    conn = await asyncpg.connect(dsn)
    try:
        # Only connections opened from now on log: the migration above does not.
        await conn.execute(f"ALTER DATABASE {DATABASE} SET log_statement = 'all'")
    finally:
        await conn.close()
    return LoggedServer(dsn, database_dsn, pgdata_path(server.data_dir) / "log")


@pytest.fixture(scope="module")
def logged_server() -> Iterator[LoggedServer]:
    """Its own embedded server: the suite's shared one may be remote, or log elsewhere."""
    directory = Path(tempfile.mkdtemp(prefix="memsvc-citus-"))
    server = EmbeddedPostgres(directory)
    try:
        dsn = server.start()
        yield run_in_own_loop(_prepare(server, dsn))
    finally:
        server.close()
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.asynccontextmanager
async def _service(server: LoggedServer) -> AsyncIterator[MemoryService]:
    settings = settings_for_tests(server.dsn, pool_max_size=4)
    embedder = HashingEmbedder(settings.embedding_dim)
    async with MemoryService.open(settings, embedder=embedder) as svc:
        yield svc


# ------------------------------------------------------------------ the schema


async def _catalog_problems(server: LoggedServer, plant: str | None = None) -> list[str]:
    conn = await asyncpg.connect(server.dsn)
    try:
        async with contextlib.AsyncExitStack() as stack:
            if plant is not None:
                transaction = conn.transaction()
                await transaction.start()
                stack.push_async_callback(transaction.rollback)
                await conn.execute(plant)
            return await key_problems(conn, SCHEMA, TENANT_TABLES) + await policy_problems(
                conn, SCHEMA, TENANT_TABLES
            )
    finally:
        await conn.close()


def test_tenant_tables_are_the_tables_with_a_tenant_id(logged_server: LoggedServer) -> None:
    async def run() -> list[str]:
        conn = await asyncpg.connect(logged_server.dsn)
        try:
            return await tables_with_tenant_column(conn, SCHEMA)
        finally:
            await conn.close()

    assert sorted(run_in_own_loop(run())) == sorted(TENANT_TABLES)


def test_keys_foreign_keys_and_policies_all_key_on_tenant_id(
    logged_server: LoggedServer,
) -> None:
    assert run_in_own_loop(_catalog_problems(logged_server)) == []


@pytest.mark.parametrize(
    ("plant", "expected"),
    [
        (f"CREATE UNIQUE INDEX uq_bad ON {SCHEMA}.memories (id)", "uq_bad: unique index (id)"),
        (
            f"ALTER TABLE {SCHEMA}.session_checkpoints ADD CONSTRAINT uq_bad UNIQUE (id)",
            "session_checkpoints.uq_bad: key (id) lacks tenant_id",
        ),
        (
            f"CREATE UNIQUE INDEX uq_id ON {SCHEMA}.memories (id); "
            f"ALTER TABLE {SCHEMA}.memory_events ADD CONSTRAINT fk_bad "
            f"FOREIGN KEY (memory_id) REFERENCES {SCHEMA}.memories (id)",
            "memory_events.fk_bad: key (memory_id) lacks tenant_id",
        ),
        (
            f"CREATE POLICY by_agent ON {SCHEMA}.memories "
            "USING (agent_id = current_setting('memsvc.agent', true))",
            "memories.by_agent: policy reads ['agent_id']",
        ),
    ],
    ids=["unique-index", "unique-constraint", "foreign-key", "policy"],
)
def test_schema_check_catches_a_planted_problem(
    logged_server: LoggedServer, plant: str, expected: str
) -> None:
    problems = run_in_own_loop(_catalog_problems(logged_server, plant))
    assert problems, plant
    assert any(expected in problem for problem in problems), problems
