"""Row-level security: under a runtime role, no tenant reads or writes another's rows."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import numpy as np
import pytest

from memsvc import MemoryService, NotFoundError, Scope, ValidationError
from memsvc.db import migrate
from memsvc.langgraph_db.checkpoints import LangGraphCheckpointRepository
from memsvc.langgraph_db.store import LangGraphStoreRepository
from memsvc.service import TENANT_TABLES
from memsvc.testing.postgres import TestPostgres, settings_for_tests


def as_user(dsn: str, user: str) -> str:
    parts = urlsplit(dsn)
    host = parts.netloc.split("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}:@{host}"))


@pytest.fixture
async def rls_database(memsvc_postgres: TestPostgres) -> tuple[str, str]:
    """A database migrated with row_level_security on, plus a runtime role's DSN.

    The role is a plain login role: not the owner, not a superuser, no
    BYPASSRLS; it may read and write rows and nothing else.
    """
    suffix = uuid.uuid4().hex[:10]
    name, role = f"memsvc_rls_{suffix}", f"memsvc_rt_{suffix}"
    dsn = await memsvc_postgres.create_database(name)
    await asyncio.to_thread(
        migrate.upgrade, settings_for_tests(dsn, row_level_security=True), dsn
    )
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS")
        await admin.execute(f"GRANT USAGE ON SCHEMA memsvc TO {role}")
        await admin.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA memsvc TO {role}"
        )
        await admin.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA memsvc TO {role}")
    finally:
        await admin.close()
    yield dsn, as_user(dsn, role)  # type: ignore[misc]
    await memsvc_postgres.drop_database(name)
    admin = await asyncpg.connect(memsvc_postgres.dsn)
    try:
        await admin.execute(f"DROP ROLE IF EXISTS {role}")
    finally:
        await admin.close()


async def test_rls_is_enabled_and_forced_on_every_tenant_table(
    rls_database: tuple[str, str],
) -> None:
    owner_dsn, _ = rls_database
    conn = await asyncpg.connect(owner_dsn)
    try:
        rows = await conn.fetch(
            "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'memsvc' AND c.relname = ANY($1::text[])",
            list(TENANT_TABLES),
        )
    finally:
        await conn.close()
    assert {r["relname"] for r in rows} == set(TENANT_TABLES)
    assert all(r["relrowsecurity"] and r["relforcerowsecurity"] for r in rows)


async def test_tenants_never_see_or_change_each_others_rows(
    rls_database: tuple[str, str],
) -> None:
    _, runtime_dsn = rls_database
    settings = settings_for_tests(runtime_dsn, row_level_security=True)
    vector = np.ones(384, dtype=np.float32)
    async with MemoryService.open(settings) as svc:
        mine: dict[str, list[uuid.UUID]] = {}
        for tenant in ("alpha", "beta"):
            scope = Scope(tenant, "p", "a", "s")
            memories = [
                await svc.memories.add(scope, f"{tenant} secret {i}", embedding=vector)
                for i in range(3)
            ]
            await svc.memories.put(scope, "key", f"{tenant} keyed", embedding=vector)
            await svc.assemblies.create(scope, "group", memory_ids=[m.id for m in memories])
            await svc.checkpoints.create(scope, {"tenant": tenant})
            await svc.working(scope).create_checkpoint("wm")
            mine[tenant] = [m.id for m in memories]

        alpha_id = mine["alpha"][0]
        # select / search / list / count, seen from beta
        with pytest.raises(NotFoundError):
            await svc.memories.get(alpha_id, tenant="beta")
        assert await svc.memories.get_many(mine["alpha"], tenant="beta") == []
        hits = await svc.memories.search(Scope("beta"), vector, k=50, include="descendants")
        assert hits and {h.memory.scope.tenant for h in hits} == {"beta"}
        listed = await svc.memories.list(Scope("alpha"), include="descendants", limit=50)
        assert {m.scope.tenant for m in listed} == {"alpha"}
        assert await svc.memories.history(alpha_id, tenant="beta") == []
        found = await svc.assemblies.search(Scope("beta"), vector, k=10, include="descendants")
        assert {h.assembly.scope.tenant for h in found} == {"beta"}
        # update / delete, aimed from beta at alpha's rows
        with pytest.raises(NotFoundError):
            await svc.memories.update(alpha_id, content="stolen", tenant="beta")
        with pytest.raises(NotFoundError):
            await svc.memories.patch_metadata(alpha_id, {"x": 1}, tenant="beta")
        assert await svc.memories.delete(alpha_id, tenant="beta") is False
        # an id alone names no tenant: refused rather than guessed
        with pytest.raises(ValidationError) as raised:
            await svc.memories.get(alpha_id)
        assert raised.value.field == "tenant"
        # alpha's rows are intact
        alpha = await svc.memories.get(alpha_id, tenant="alpha")
        assert alpha.content == "alpha secret 0" and alpha.version == 1
        assert await svc.memories.count(Scope("alpha", "p", "a", "s")) == 4


async def test_valid_time_writes_and_reads_stay_within_the_tenant(
    rls_database: tuple[str, str],
) -> None:
    _, runtime_dsn = rls_database
    settings = settings_for_tests(runtime_dsn, row_level_security=True)
    march = datetime(2024, 3, 1, tzinfo=UTC)
    async with MemoryService.open(settings) as svc:
        alpha = await svc.memories.add(Scope("alpha"), "alpha lives in Paris", valid_from=march)
        beta = await svc.memories.add(Scope("beta"), "beta lives in Paris", valid_from=march)
        # another tenant's memory cannot be superseded, invalidated, or linked
        with pytest.raises(NotFoundError):
            await svc.memories.supersede(alpha.id, "stolen", tenant="beta")
        with pytest.raises(NotFoundError):
            await svc.memories.invalidate(alpha.id, tenant="beta")
        with pytest.raises(NotFoundError):
            await svc.memories.add(Scope("beta"), "stolen", supersedes=[alpha.id])
        new = await svc.memories.supersede(beta.id, "beta lives in Rome", tenant="beta")
        hits = await svc.memories.search(Scope("beta"), "lives", mode="text", k=10)
        assert [h.memory.id for h in hits] == [new.id]
        past = await svc.memories.list(Scope("beta"), valid_at=datetime(2024, 4, 1, tzinfo=UTC))
        assert [m.id for m in past] == [beta.id]
        assert (await svc.memories.get(alpha.id, tenant="alpha")).valid_to is None


async def test_without_a_tenant_the_runtime_role_sees_nothing(
    rls_database: tuple[str, str],
) -> None:
    _, runtime_dsn = rls_database
    settings = settings_for_tests(runtime_dsn, row_level_security=True)
    async with MemoryService.open(settings) as svc:
        await svc.memories.add(Scope("alpha"), "alpha only")
    conn = await asyncpg.connect(runtime_dsn)
    try:
        assert await conn.fetchval("SELECT count(*) FROM memsvc.memories") == 0
        async with conn.transaction():
            await conn.execute("SELECT set_config('memsvc.tenant', 'beta', true)")
            assert await conn.fetchval("SELECT count(*) FROM memsvc.memories") == 0
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(
                    "INSERT INTO memsvc.memories (tenant_id, id, content, content_hash) "
                    "VALUES ('alpha', gen_random_uuid(), 'forged', 'sha256:00')"
                )
        async with conn.transaction():
            await conn.execute("SELECT set_config('memsvc.tenant', 'alpha', true)")
            assert await conn.fetchval("SELECT count(*) FROM memsvc.memories") == 1
        # the setting was transaction-local: gone again
        assert await conn.fetchval("SELECT count(*) FROM memsvc.memories") == 0
    finally:
        await conn.close()


async def test_runtime_role_cannot_run_ddl_or_truncate(rls_database: tuple[str, str]) -> None:
    _, runtime_dsn = rls_database
    conn = await asyncpg.connect(runtime_dsn)
    try:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("CREATE TABLE memsvc.intruder (i int)")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("TRUNCATE memsvc.memories")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("ALTER TABLE memsvc.memories DISABLE ROW LEVEL SECURITY")
    finally:
        await conn.close()


async def test_open_refuses_rls_setting_on_a_schema_without_enforcement(
    memsvc_database_url: str,
) -> None:
    from memsvc import SchemaError

    with pytest.raises(SchemaError, match="do not enforce it"):
        await MemoryService.open(settings_for_tests(memsvc_database_url, row_level_security=True))


async def test_as_of_reads_stay_within_the_tenant(rls_database: tuple[str, str]) -> None:
    _, runtime_dsn = rls_database
    settings = settings_for_tests(runtime_dsn, row_level_security=True)
    async with MemoryService.open(settings) as svc:
        alpha, beta = Scope("alpha", "p", "a", "s"), Scope("beta", "p", "a", "s")
        secret = await svc.memories.add(alpha, "alpha secret")
        await svc.memories.add(beta, "beta note")
        then = datetime.now(UTC)
        await svc.memories.delete(secret.id, tenant="alpha")
        # The deleted memory comes back from history for its tenant only.
        assert (await svc.memories.get(secret.id, tenant="alpha", as_of=then)).content == (
            "alpha secret"
        )
        with pytest.raises(NotFoundError):
            await svc.memories.get(secret.id, tenant="beta", as_of=then)
        seen = await svc.memories.list(Scope("beta"), include="descendants", as_of=then)
        assert [m.content for m in seen] == ["beta note"]
        assert await svc.memories.count(Scope("alpha"), include="descendants", as_of=then) == 1


async def test_the_change_feed_shows_a_tenant_only_its_own_changes(
    rls_database: tuple[str, str],
) -> None:
    from tests.changes.helpers import take

    _, runtime_dsn = rls_database
    settings = settings_for_tests(runtime_dsn, row_level_security=True)
    async with MemoryService.open(settings) as svc:
        ids = {}
        for tenant in ("alpha", "beta"):
            scope = Scope(tenant, "p", "a", "s")
            m = await svc.memories.add(scope, f"{tenant} secret")
            cp = await svc.checkpoints.create(scope, {"tenant": tenant})
            ids[tenant] = {m.id, cp.id}
        # The feed reads as the scope's tenant (set in each read's
        # transaction); without a scope it has no tenant and is refused.
        changes = await take(svc.changes(Scope("alpha")), 2)
        assert {c.entity_id for c in changes} == ids["alpha"]
        assert {c.scope.tenant for c in changes} == {"alpha"}
        with pytest.raises(ValidationError) as raised:
            svc.changes()
        assert raised.value.field == "scope"


async def test_erase_vacuum_as_the_runtime_role_says_which_tables_it_could_not_vacuum(
    rls_database: tuple[str, str],
) -> None:
    _, runtime_dsn = rls_database
    settings = settings_for_tests(runtime_dsn, row_level_security=True)
    async with MemoryService.open(settings) as svc:
        await svc.memories.add(Scope("alpha", "p", "a", "s"), "erase me")
        receipt = await svc.erase(Scope("alpha", "p"), vacuum=True)
    assert receipt.verified, receipt.remaining
    assert receipt.removed["memories"] == 1
    assert set(receipt.vacuum) >= {"memories", "memory_events"}
    assert all(outcome.startswith("skipped: this role does not own the table")
               for outcome in receipt.vacuum.values())


async def test_erase_works_for_the_runtime_role_and_only_in_its_tenant(
    rls_database: tuple[str, str],
) -> None:
    owner_dsn, runtime_dsn = rls_database
    settings = settings_for_tests(runtime_dsn, row_level_security=True)
    async with MemoryService.open(settings) as svc:
        ids = {}
        for tenant in ("alpha", "beta"):
            scope = Scope(tenant, "p", "a", "s")
            memory = await svc.memories.add(scope, "identical secret words")
            await svc.memories.update(memory.id, content="identical revised words", tenant=tenant)
            await svc.checkpoints.create(scope, {"note": "identical secret words"})
            ids[tenant] = memory.id
        receipt = await svc.erase(Scope("alpha", "p"))
        assert receipt.verified, receipt.remaining
        assert receipt.removed["memories"] == 1 and receipt.removed["session_checkpoints"] == 1
        events = await svc.memories.history(ids["alpha"], tenant="alpha")
        assert [(e.kind, e.prior) for e in events] == [("erased", None)]
        beta = await svc.memories.get(ids["beta"], tenant="beta")
        assert beta.content == "identical revised words"
        assert [e.kind for e in await svc.memories.history(ids["beta"], tenant="beta")] == [
            "created", "updated",
        ]
    conn = await asyncpg.connect(owner_dsn)  # a superuser: the policies do not bind it
    try:
        rows = await conn.fetch(
            "SELECT tenant_id, count(*) FROM memsvc.memory_events "
            "WHERE prior::text LIKE '%identical secret%' GROUP BY tenant_id"
        )
        assert [(r["tenant_id"], r["count"]) for r in rows] == [("beta", 1)]
    finally:
        await conn.close()


# Sample arguments, by parameter name, for calling id-based methods below.
SAMPLE_ARGUMENTS = {
    "id": lambda: uuid.uuid4(),
    "memory_id": lambda: uuid.uuid4(),
    "ids": lambda: [uuid.uuid4()],
    "memory_ids": lambda: [uuid.uuid4()],
    "patch": lambda: {"k": 1},
    "old_id": lambda: uuid.uuid4(),
    "content": lambda: "a new version",
}


def _tenant_optional_methods(svc: MemoryService) -> list[tuple[str, object]]:
    """Every public coroutine method of the service's repositories that may omit its tenant."""
    repositories = {
        "memories": svc.memories,
        "assemblies": svc.assemblies,
        "checkpoints": svc.checkpoints,
        "langgraph store": LangGraphStoreRepository(svc.pool, svc.settings),
        "langgraph saver": LangGraphCheckpointRepository(svc.pool, svc.settings),
    }
    found = []
    for label, repository in repositories.items():
        for name, method in inspect.getmembers(repository, inspect.iscoroutinefunction):
            parameters = inspect.signature(method).parameters
            tenant = parameters.get("tenant")
            if name.startswith("_") or tenant is None or tenant.default is not None:
                continue
            found.append((f"{label}.{name}", method))
    return found


async def test_no_repository_method_runs_without_a_tenant_under_row_level_security(
    rls_database: tuple[str, str],
) -> None:
    # Every method whose tenant may be omitted (the id-based ones) is called
    # without one: under row-level security each must refuse, naming the
    # tenant, rather than run with whatever tenant a connection or an outer
    # call might carry. A new such method fails here until it is listed.
    _, runtime_dsn = rls_database
    settings = settings_for_tests(runtime_dsn, row_level_security=True)
    async with MemoryService.open(settings) as svc:
        methods = _tenant_optional_methods(svc)
        assert len(methods) >= 17
        for label, method in methods:
            parameters = inspect.signature(method).parameters  # type: ignore[arg-type]
            required = [
                name for name, parameter in parameters.items()
                if parameter.default is inspect.Parameter.empty
                and parameter.kind is not inspect.Parameter.VAR_KEYWORD
            ]
            missing = [name for name in required if name not in SAMPLE_ARGUMENTS]
            assert not missing, f"{label}: add sample arguments for {missing}"
            arguments = {name: SAMPLE_ARGUMENTS[name]() for name in required}
            with pytest.raises(ValidationError) as refused:
                await method(**arguments)  # type: ignore[operator]
            assert refused.value.field == "tenant", label


async def test_a_tenant_id_with_quotes_and_backslashes_is_set_as_it_is(
    rls_database: tuple[str, str],
) -> None:
    """The tenant is written into ``SET LOCAL`` as a literal: quoting must keep it exact."""
    _, runtime_dsn = rls_database
    settings = settings_for_tests(runtime_dsn, row_level_security=True)
    odd, plain = "o'brien\\' OR true --", "o"
    async with MemoryService.open(settings) as svc:
        mine = await svc.memories.add(Scope(odd, "p"), "odd tenant's")
        theirs = await svc.memories.add(Scope(plain, "p"), "plain tenant's")
        assert (await svc.memories.get(mine.id, tenant=odd)).content == "odd tenant's"
        listed = await svc.memories.list(Scope(odd), include="descendants")
        assert [m.id for m in listed] == [mine.id]
        with pytest.raises(NotFoundError):
            await svc.memories.get(theirs.id, tenant=odd)
