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
from pglast import fingerprint, parse_sql

from memsvc import MemoryService, Scope, Settings
from memsvc.changes import queries as change_queries
from memsvc.cli import main as cli
from memsvc.db import migrate
from memsvc.db.embedded import EmbeddedPostgres, pgdata_path
from memsvc.db.tables import build_metadata
from memsvc.db.time_checks import TIME_COLUMNS
from memsvc.embedding import HashingEmbedder
from memsvc.langgraph_db import store_index_queries as langgraph_store_index_queries
from memsvc.langgraph_db import store_queries as langgraph_store_queries
from memsvc.memories import scope_index_queries
from memsvc.ops import (
    doctor_queries,
    forget_queries,
    gc_queries,
    recall_audit_queries,
    stats_queries,
)
from memsvc.ops.citus import ANCHOR, citus_sql
from memsvc.service import TENANT_TABLES
from memsvc.testing.postgres import run_in_own_loop, settings_for_tests, with_database
from memsvc.transfer import bulk_queries, export_queries, loader_queries
from tests.changes.helpers import take
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
        gc_queries.idle_sessions(s): "gc: sessions idle past the cutoff, all tenants",
        gc_queries.persist_commit_times(s): "gc: commit times of every tenant's history "
        "events, copied before the server forgets them",
        forget_queries.ANY_POLICY.format(schema=s): "gc: is a half-life policy set anywhere",
        forget_queries.forget_batch(
            s, "TRUE", "coalesce($1::timestamptz, now())", "$2::float8", "$3", False,
            forget_queries.ALL_TENANTS,
        ): "gc: forget the weak memories of every tenant under a policy",
        forget_queries.lock_forgotten(s): "gc: memories of every tenant forgotten past "
        "their grace period",
        bulk_queries.count_up_to(s, "memories"): "import / doctor: rows in the table (up to "
        "a cap), to size an HNSW index build",
        loader_queries.direct_copy_possible(s): "import: is the table empty (then COPY "
        "straight in without checking each batch's ids first)",
        langgraph_store_queries.sweep_expired(s, None): "gc: expired LangGraph store items "
        "of every tenant",
        langgraph_store_index_queries.every_claim(s): "gc: the LangGraph store's namespace "
        "index catalog, every tenant's (to drop indexes of emptied namespaces)",
        scope_index_queries.every_row(s): "searches (every few seconds per process) and "
        "gc: which scopes of every tenant have their own index (a catalog of at most "
        "scope_indexes_max rows)",
        scope_index_queries.worth_an_index(s): "gc: exact scopes and tenant and project "
        "subtrees of every tenant past scope_index_from, to give them their own index",
        doctor_queries.assembly_mismatches(s): "doctor: assembly counters of every tenant",
        doctor_queries.orphaned_history(s): "doctor: history rows without a memory",
        doctor_queries.memories_without_history(s): "doctor: memories without history",
        doctor_queries.expired_waiting(s): "doctor: expired memories waiting for gc",
        doctor_queries.commit_times_waiting(s): "doctor: history events waiting for gc to "
        "persist their commit time",
        doctor_queries.sessions_over_retention(s): "doctor: sessions over retention",
        doctor_queries.stale_content_hashes(s): "doctor: content hashes to recompute",
        change_queries.watermark_holder(s): "doctor / a stalled change feed: events of "
        "every tenant held back behind the transaction holding the feed's watermark",
        **{
            doctor_queries.times_out_of_range(s, table, columns): "doctor: times out of "
            "range, in every tenant's rows"
            for table, columns in TIME_COLUMNS.items()
        },
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


# -------------------------------------------------------------- the statements


def _embedder_function(dim: int) -> Any:
    embedder = HashingEmbedder(dim)

    def embed(texts: list[str]) -> list[list[float]]:
        return [embedder.embed_one(text).tolist() for text in texts]

    return embed


async def _memories_and_assemblies(svc: MemoryService, scope: Scope) -> None:
    tenant = scope.tenant
    first = await svc.memories.add(scope, "the user prefers metric units", importance=0.8,
                                   metadata={"kind": "preference"})
    await svc.memories.add(Scope(tenant=tenant, project=scope.project), "ships on fridays")
    batch = await svc.memories.add_many(
        scope, ["ENG-4312 retry budget", {"content": "deploys freeze in december",
                                          "metadata": {"kind": "policy"}}]
    )
    await svc.memories.put(scope, "units", "metric")
    await svc.memories.put(scope, "units", "imperial")
    await svc.memories.get_by_key(scope, "units")
    await svc.memories.get(first.id, tenant=tenant)
    await svc.memories.get_many([m.id for m in batch], tenant=tenant)
    await svc.memories.update(first.id, content="the user prefers SI units", tenant=tenant,
                              expected_version=first.version)
    await svc.memories.patch_metadata(first.id, {"checked": True}, tenant=tenant)
    await svc.memories.list(scope, limit=2)
    await svc.memories.count(scope, include="ancestors")
    await svc.memories.history(first.id, tenant=tenant)
    then = datetime.now(UTC)
    await svc.memories.get(first.id, tenant=tenant, as_of=then)
    await svc.memories.get_many([m.id for m in batch], tenant=tenant, as_of=then)
    await svc.memories.get_by_key(scope, "units", as_of=then)
    await svc.memories.list(scope, limit=2, include="descendants", as_of=then)
    await svc.memories.count(scope, include="ancestors", as_of=then)
    for include in ("exact", "ancestors", "descendants"):
        await svc.memories.search(scope, "units", k=3, include=include)  # type: ignore[arg-type]
    await svc.memories.search(scope, "units", k=3, where={"kind": "preference"},
                              min_importance=0.1, rank="recall")
    await svc.memories.search(scope, "ENG-4312", k=3, mode="text")
    await svc.memories.search(scope, "retry budget", k=3, mode="hybrid", diversity=0.5)
    await svc.memories.search(scope, "units", k=3, plan="index", with_embeddings=True)
    await svc.memories.search(scope, "units", k=3, plan="exact",
                              created_after=datetime.now(UTC) - timedelta(days=1))

    group = await svc.assemblies.create(scope, "units", memory_ids=[first.id])
    await svc.assemblies.add_members(group.id, [m.id for m in batch], tenant=tenant)
    await svc.assemblies.remove_members(group.id, [batch[0].id], tenant=tenant)
    await svc.assemblies.get(group.id, tenant=tenant)
    await svc.assemblies.get_by_name(scope, "units")
    await svc.assemblies.list(scope, include="descendants")
    await svc.assemblies.members(group.id, tenant=tenant)
    await svc.assemblies.memberships(first.id, tenant=tenant)
    await svc.assemblies.search(scope, HashingEmbedder(svc.settings.embedding_dim)
                                .embed_one("units"), k=2)
    await svc.assemblies.update(group.id, description="unit choices", tenant=tenant)
    await svc.assemblies.recompute(group.id, tenant=tenant)
    # An embedding change moves the centroids of the memory's assemblies.
    await svc.memories.update(first.id, content="metric, always", tenant=tenant)
    await svc.memories.delete(batch[1].id, tenant=tenant)
    await svc.assemblies.delete(group.id, tenant=tenant)


async def _checkpoints_and_working_memory(svc: MemoryService, scope: Scope) -> None:
    tenant = scope.tenant
    checkpoint = await svc.checkpoints.create(scope, {"step": 1}, description="start")
    await svc.checkpoints.create(scope, {"step": 2})
    await svc.checkpoints.get(checkpoint.id, tenant=tenant)
    await svc.checkpoints.latest(scope)
    await svc.checkpoints.list(scope, with_data=True)
    await svc.checkpoints.prune(scope, keep_last=1)
    working = svc.working(scope)
    await working.set("draft", {"step": 3})
    saved = await working.create_checkpoint("before edit")
    await working.restore_checkpoint(saved)
    await working.list_checkpoints()
    await working.delete_checkpoint(saved)
    await svc.checkpoints.delete((await svc.checkpoints.latest(scope)).id, tenant=tenant)


async def _langgraph(svc: MemoryService, tenant: str) -> None:
    from langchain_core.messages import HumanMessage
    from langgraph.types import Command

    from memsvc.integrations.langgraph import MemsvcSaver, MemsvcStore
    from tests.integrations.langgraph_app import build

    dim = svc.settings.embedding_dim
    saver = MemsvcSaver(svc, tenant=tenant)
    store = MemsvcStore(
        svc,
        index={"dims": dim, "embed": _embedder_function(dim), "fields": ["text"]},
        ttl={"default_ttl": 60.0, "refresh_on_read": True},
        tenant=tenant,
    )
    app = build(saver, store)
    config: dict[str, Any] = {"configurable": {"thread_id": "t-1"}}
    context = {"user": "ada"}
    await app.ainvoke({"messages": [HumanMessage(content="metric units")]}, config,
                      context=context)
    await app.ainvoke(Command(resume="yes"), config, context=context)
    await app.aget_state(config)
    [entry async for entry in saver.alist(config, limit=3)]
    [entry async for entry in saver.alist(None, filter={"source": "loop"}, limit=3)]
    await saver.acopy_thread("t-1", "t-2")
    await saver.aprune(["t-2"])
    await saver.adelete_for_runs(["no-such-run"])
    await saver.adelete_thread("t-2")

    await store.aput(("facts", "ada"), "f1", {"text": "likes tea"})
    await store.aput(("facts", "ada"), "f2", {"text": "likes maps"}, index=False)
    await store.aget(("facts", "ada"), "f1")
    await store.asearch(("facts",), query="tea", limit=2)
    await store.asearch(("facts",), filter={"text": "likes maps"}, limit=2)
    await store.alist_namespaces(prefix=("facts",))
    await store.adelete(("facts", "ada"), "f2")
    await store.asweep_ttl()


async def _operations(svc: MemoryService, scope: Scope, workdir: Path) -> None:
    tenant_scope = Scope(tenant=scope.tenant)
    await svc.memories.add(scope, "expires soon", ttl=0.001)
    await asyncio.sleep(0.01)
    await svc.policies.set(tenant_scope, half_life=3600)
    await svc.policies.get(tenant_scope)
    await svc.policies.list(tenant=scope.tenant)
    weak = await svc.memories.add(scope, "weak and soon forgotten", importance=0.0)
    await svc.maintenance.forget(tenant_scope, dry_run=True)
    await svc.maintenance.forget(tenant_scope)
    await svc.memories.restore(weak.id, tenant=scope.tenant)
    await svc.memories.add(scope, "weak and soon forgotten.", dedupe="semantic")
    await svc.memories.add_many(scope, ["weak, soon forgotten"], dedupe="semantic")
    await svc.maintenance.dedupe(scope, 0.5)
    await svc.maintenance.gc(batch_size=10, idle_session_days=30)
    await svc.memories.search(scope, "weak", k=3, rank="recall")
    await svc.policies.delete(tenant_scope)
    await svc.maintenance.stats(tenant=scope.tenant)
    await svc.maintenance.stats()
    await svc.maintenance.doctor()
    await svc.maintenance.recall_audit(sample=2)
    await svc.maintenance.consolidate(scope, min_cluster=2, threshold=0.1)
    await svc.maintenance.count_export(tenant_scope)
    await svc.maintenance.count_export()
    export = workdir / "tenant.jsonl"
    with export.open("w") as out:
        await svc.maintenance.export(out, scope=tenant_scope)
    await svc.maintenance.export(io.StringIO())
    await svc.memories.delete_scope(tenant_scope)
    await svc.maintenance.import_file(export)
    await svc.erase(Scope(scope.tenant, scope.project))
    await svc.erase(Scope(tenant="globex"))  # a whole tenant: its LangGraph rows too


async def _workload(svc: MemoryService, workdir: Path) -> None:
    """Every kind of statement memsvc sends, for two tenants (so none hides another)."""
    for tenant in ("acme", "globex"):
        scope = Scope(tenant=tenant, project="bridge", agent="planner", session="s-42")
        await _memories_and_assemblies(svc, scope)
        await _checkpoints_and_working_memory(svc, scope)
        await _langgraph(svc, tenant)
        await take(svc.changes(scope, with_values=True), 1)  # the change feed's reads
    await _operations(svc, Scope(tenant="acme", project="bridge", agent="planner",
                                 session="s-42"), workdir)


@dataclass
class Capture:
    """The statements the server logged during the workload."""

    statements: list[str]


@pytest.fixture(scope="module")
def captured(logged_server: LoggedServer, tmp_path_factory: pytest.TempPathFactory) -> Capture:
    workdir = tmp_path_factory.mktemp("citus-workload")

    async def run() -> list[str]:
        offset = logged_server.log_size()
        async with _service(logged_server) as svc:
            await _workload(svc, workdir)
        return logged_server.statements_since(offset)

    return Capture(run_in_own_loop(run()))


def _touches_tenant_table(sql: str) -> bool:
    pattern = r"\b" + re.escape(SCHEMA) + r"\.(" + "|".join(TENANT_TABLES) + r")\b"
    return re.search(pattern, sql) is not None


def test_the_workload_reaches_every_tenant_table(captured: Capture) -> None:
    seen = {
        table
        for sql in captured.statements
        for table in TENANT_TABLES
        if re.search(rf"\b{SCHEMA}\.{table}\b", sql)
    }
    assert seen == set(TENANT_TABLES)
    assert sum(_touches_tenant_table(sql) for sql in captured.statements) > 100


def test_the_workload_includes_erasure(captured: Capture) -> None:
    erasing = [sql for sql in captured.statements if "'erased'" in sql]
    assert len(erasing) >= 2  # live memories' and deleted memories' histories


def test_every_statement_on_a_tenant_table_filters_by_tenant(captured: Capture) -> None:
    unconfined = {}
    for sql in captured.statements:  # all of them: a table may be named without its schema
        if fingerprint(sql) in CROSS_TENANT:
            continue
        problems = statement_problems(sql, SCHEMA, TENANT_TABLES)
        if problems:
            unconfined[" ".join(sql.split())[:300]] = problems
    assert not unconfined, "\n".join(f"{sql}\n  -> {why}" for sql, why in unconfined.items())


def test_every_listed_cross_tenant_statement_is_still_sent(captured: Capture) -> None:
    # A stale entry would let a future statement with the same shape through unseen.
    sent = {fingerprint(sql) for sql in captured.statements if _touches_tenant_table(sql)}
    assert {reason for key, reason in CROSS_TENANT.items() if key not in sent} == set()


def test_the_statement_check_catches_a_planted_query(logged_server: LoggedServer) -> None:
    planted = f"SELECT content FROM {SCHEMA}.memories WHERE id = $1"
    hidden = (
        f"SELECT m.content FROM {SCHEMA}.memories AS m JOIN {SCHEMA}.assembly_members AS am "
        "ON am.memory_id = m.id WHERE m.tenant_id = $1"
    )
    optional = (
        f"UPDATE {SCHEMA}.memories SET importance = 1 "
        "WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2::text)"
    )

    async def run() -> list[str]:
        offset = logged_server.log_size()
        async with _service(logged_server) as svc, svc.pool.acquire() as conn:
            await conn.fetch(planted, uuid.uuid4())
            await conn.fetch(hidden, "acme")
            await conn.execute(optional, uuid.uuid4(), None)
        return logged_server.statements_since(offset)

    logged = [sql for sql in run_in_own_loop(run()) if _touches_tenant_table(sql)]
    assert logged == [planted, hidden, optional]
    assert [statement_problems(sql, SCHEMA, TENANT_TABLES) for sql in logged] == [
        ["memories (as memories) is not confined by tenant_id"],
        ["assembly_members (as am) is not confined by tenant_id"],
        ["memories (as memories) is not confined by tenant_id"],
    ]


S = SCHEMA


@pytest.mark.parametrize(
    "sql",
    [
        f"SELECT * FROM {S}.memories WHERE tenant_id = $1 AND id = $2",
        f"SELECT * FROM {S}.memories AS m WHERE m.tenant_id = ANY($1::text[])",
        f"SELECT * FROM {S}.memories WHERE (tenant_id, id) IN (SELECT $1::text, $2::uuid)",
        f"SELECT * FROM {S}.memories WHERE tenant_id = $1 AND (project_id = $2 OR agent_id = $3)",
        f"SELECT * FROM {S}.memories AS m JOIN {S}.assembly_members AS am "
        "ON am.tenant_id = m.tenant_id AND am.memory_id = m.id WHERE m.tenant_id = $1",
        f"SELECT a.id, ARRAY(SELECT am.memory_id FROM {S}.assembly_members AS am "
        f"WHERE am.tenant_id = a.tenant_id) FROM {S}.assemblies AS a WHERE a.tenant_id = $1",
        f"INSERT INTO {S}.memory_events (tenant_id, memory_id, kind, version) "
        "VALUES ($1, $2, 'created', 1)",
        f"COPY {S}.memories FROM STDIN",
        f"DELETE FROM {S}.memories WHERE tenant_id = $1 AND id = $2",
        "SELECT count(*) FROM pg_class",
    ],
)
def test_the_statement_check_accepts_tenant_confined_sql(sql: str) -> None:
    assert statement_problems(sql, SCHEMA, TENANT_TABLES) == []


@pytest.mark.parametrize(
    "sql",
    [
        f"SELECT * FROM {S}.memories WHERE id = $1",
        f"SELECT * FROM {S}.memories WHERE id = $1 OR tenant_id = $2",
        f"SELECT * FROM {S}.memories WHERE NOT (tenant_id <> $1)",
        f"SELECT * FROM {S}.memories WHERE tenant_id <> $1",
        f"SELECT * FROM {S}.memories AS m WHERE m.tenant_id = m.tenant_id",
        f"SELECT * FROM {S}.memories AS m JOIN {S}.memory_events AS e ON e.memory_id = m.id "
        "WHERE m.tenant_id = $1",
        f"SELECT * FROM {S}.memories WHERE tenant_id = $1 "
        f"UNION ALL SELECT * FROM {S}.memories WHERE id = $2",
        f"WITH x AS (SELECT id FROM {S}.memories) SELECT * FROM x",
        f"UPDATE {S}.memories SET importance = 1 WHERE id = $1",
        f"DELETE FROM {S}.session_checkpoints WHERE created_at < now()",
        f"INSERT INTO {S}.memories (id, content) VALUES ($1, $2)",
        f"COPY {S}.memories (id, content) FROM STDIN",
        f"COPY {S}.memories TO STDOUT",
        f"TRUNCATE {S}.memories",
        "SELECT * FROM memories WHERE id = $1",  # unqualified: still the tenant table
    ],
)
def test_the_statement_check_rejects_sql_that_can_read_other_tenants(sql: str) -> None:
    assert statement_problems(sql, SCHEMA, TENANT_TABLES) != []


# ---------------------------------------------------------- the Citus script


def test_print_sql_distributes_every_tenant_table_colocated() -> None:
    result = CliRunner().invoke(cli, ["citus", "--print-sql", "--schema", "tenants"])
    assert result.exit_code == 0, result.output
    calls = re.findall(r"SELECT (create_\w+)\('([\w.]+)'(.*?)\)\s+WHERE", result.output, re.DOTALL)
    distributed = [(table, rest) for call, table, rest in calls
                   if call == "create_distributed_table"]
    references = [table for call, table, _ in calls if call == "create_reference_table"]
    assert sorted(references) == ["tenants.embedding_migrations", "tenants.schema_info"]
    assert sorted(table for table, _ in distributed) == sorted(
        f"tenants.{table}" for table in TENANT_TABLES
    )
    anchor, *others = distributed
    assert anchor == (f"tenants.{ANCHOR}", ", 'tenant_id', colocate_with => 'none'")
    for table, rest in others:
        assert " ".join(rest.split()) == (
            f", 'tenant_id', colocate_with => 'tenants.{ANCHOR}'"
        ), table
    # The database's defaults, which Citus propagates to the workers itself
    # (run_command_on_workers of an ALTER DATABASE fails on a worker).
    for setting in ("hnsw.ef_search", "hnsw.iterative_scan", "hnsw.max_scan_tuples",
                    "citus.propagate_set_commands"):
        assert re.search(rf"format\('ALTER DATABASE %I SET {setting}", result.output), setting
    assert "run_command_on_workers" not in result.output
    # One transaction, triggers allowed, every placement skipped once done.
    statements = [line for line in result.output.splitlines() if line and not line.startswith("--")]
    assert statements[0] == "BEGIN;" and statements[-1] == "COMMIT;"
    assert "SET LOCAL citus.enable_unsafe_triggers = on;" in statements
    assert result.output.count("WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition") == len(calls)


def test_print_sql_lists_parents_before_the_tables_referencing_them() -> None:
    script = citus_sql(Settings(database_url="postgresql://unused/db"))
    parse_sql(script)  # PostgreSQL's parser accepts the whole script
    order = re.findall(r"create_\w+\('memsvc\.(\w+)'", script)
    references = {
        (table.name, key.referred_table.name)
        for table in build_metadata(Settings(database_url="postgresql://unused/db")).tables.values()
        for key in table.foreign_key_constraints
    }
    assert references >= {("assembly_members", "memories"), ("assembly_members", "assemblies"),
                          ("langgraph_store_vectors", "langgraph_store_items")}
    for table, parent in references:
        assert order.index(parent) < order.index(table), (table, parent)


def test_citus_without_print_sql_refuses() -> None:
    result = CliRunner().invoke(cli, ["citus"])
    assert result.exit_code != 0
    assert "--print-sql" in result.output and "citus apply" in result.output


def test_citus_rejects_a_bad_schema_name() -> None:
    result = CliRunner().invoke(cli, ["citus", "--print-sql", "--schema", "x; DROP"])
    assert result.exit_code != 0
    assert "db_schema" in result.output
