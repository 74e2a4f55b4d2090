"""Issue 31, item 7: row-level security on a distributed schema.

Under a runtime role (no superuser, no BYPASSRLS) with
``row_level_security`` on, each tenant sees and changes its own rows and
nothing of another's. The policies run on the workers, which must see the
transaction's ``memsvc.tenant``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import numpy as np
import pytest

from memsvc import (
    MemoryService,
    NotFoundError,
    Scope,
    Settings,
    ValidationError,
)
from memsvc.embedding import HashingEmbedder
from memsvc.memories import queries as memory_queries
from memsvc.testing.citus import CitusCluster, CitusSchema
from memsvc.testing.postgres import settings_for_tests
from tests.citus.helpers import own_schema


def as_user(dsn: str, user: str) -> str:
    parts = urlsplit(dsn)
    host = parts.netloc.split("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}"))


@pytest.fixture
async def rls_schema(citus_cluster: CitusCluster) -> AsyncIterator[tuple[CitusSchema, str]]:
    """A distributed schema migrated with row_level_security on, and a runtime role's DSN."""
    role = f"memsvc_rt_{uuid.uuid4().hex[:8]}"
    async with own_schema(citus_cluster, row_level_security=True) as schema:
        admin = await asyncpg.connect(citus_cluster.dsn)
        try:
            await admin.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS")
            await admin.execute(f"GRANT USAGE ON SCHEMA {schema.schema} TO {role}")
            await admin.execute(
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema.schema} "
                f"TO {role}"
            )
            await admin.execute(
                f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema.schema} TO {role}"
            )
        finally:
            await admin.close()
        try:
            yield schema, as_user(citus_cluster.dsn, role)
        finally:
            admin = await asyncpg.connect(citus_cluster.dsn)
            try:
                await admin.execute(f"DROP OWNED BY {role}")
                await admin.execute(f"DROP ROLE {role}")
            finally:
                await admin.close()


def runtime(rls_schema: tuple[CitusSchema, str]) -> Settings:
    """Settings of the runtime role, row-level security on."""
    schema, runtime_dsn = rls_schema
    return settings_for_tests(runtime_dsn, row_level_security=True, db_schema=schema.schema)


async def seed(settings: Settings) -> dict[str, list[uuid.UUID]]:
    """Each tenant's memories, keyed memory, assembly and checkpoint (as ``settings`` say)."""
    vector = np.ones(settings.embedding_dim, dtype=np.float32)
    mine: dict[str, list[uuid.UUID]] = {}
    async with MemoryService.open(settings, embedder=HashingEmbedder()) as svc:
        for tenant in ("alpha", "beta"):
            scope = Scope(tenant, "p", "a", "s")
            memories = [
                await svc.memories.add(scope, f"{tenant} secret {i}", embedding=vector)
                for i in range(3)
            ]
            await svc.memories.put(scope, "key", f"{tenant} keyed", embedding=vector)
            await svc.assemblies.create(scope, "group", memory_ids=[m.id for m in memories])
            await svc.checkpoints.create(scope, {"tenant": tenant})
            mine[tenant] = [m.id for m in memories]
    return mine


async def test_tenants_never_see_or_change_each_others_rows(
    rls_schema: tuple[CitusSchema, str],
) -> None:
    """The single-node adversarial cases, on worker connections that served both tenants."""
    settings = runtime(rls_schema)
    mine = await seed(settings)  # written under row-level security, as the runtime role
    vector = np.ones(settings.embedding_dim, dtype=np.float32)
    async with MemoryService.open(settings, embedder=HashingEmbedder()) as svc:
        alpha_id = mine["alpha"][0]
        for _ in range(3):  # worker connections that served one tenant serve the other
            for tenant in ("alpha", "beta"):
                found = await svc.memories.get(mine[tenant][0], tenant=tenant)
                assert found.content == f"{tenant} secret 0"
                listed = await svc.memories.list(Scope(tenant), include="descendants", limit=50)
                assert {m.scope.tenant for m in listed} == {tenant} and len(listed) == 4
        with pytest.raises(NotFoundError):
            await svc.memories.get(alpha_id, tenant="beta")
        assert await svc.memories.get_many(mine["alpha"], tenant="beta") == []
        hits = await svc.memories.search(Scope("beta"), vector, k=50, include="descendants")
        assert hits and {h.memory.scope.tenant for h in hits} == {"beta"}
        assert await svc.memories.history(alpha_id, tenant="beta") == []
        found_assemblies = await svc.assemblies.search(
            Scope("beta"), vector, k=10, include="descendants"
        )
        assert {h.assembly.scope.tenant for h in found_assemblies} == {"beta"}
        # update / delete, aimed from beta at alpha's rows
        with pytest.raises(NotFoundError):
            await svc.memories.update(alpha_id, content="stolen", tenant="beta")
        with pytest.raises(NotFoundError):
            await svc.memories.patch_metadata(alpha_id, {"x": 1}, tenant="beta")
        assert await svc.memories.delete(alpha_id, tenant="beta") is False
        # an id alone names no tenant: refused rather than guessed
        with pytest.raises(ValidationError):
            await svc.memories.get(alpha_id)
        alpha = await svc.memories.get(alpha_id, tenant="alpha")
        assert alpha.content == "alpha secret 0" and alpha.version == 1
        assert await svc.memories.count(Scope("alpha", "p", "a", "s")) == 4


async def test_without_a_tenant_the_runtime_role_sees_nothing_on_any_node(
    rls_schema: tuple[CitusSchema, str],
) -> None:
    schema, runtime_dsn = rls_schema
    await seed(schema.settings)
    conn = await asyncpg.connect(runtime_dsn)
    try:
        seen = await conn.fetchval(f"SELECT count(*) FROM {schema.schema}.memories")
        with pytest.raises(asyncpg.PostgresError):
            await conn.execute(
                f"INSERT INTO {schema.schema}.memories (tenant_id, id, content, content_hash) "
                "VALUES ('alpha', gen_random_uuid(), 'x', 'sha256:x')"
            )
    finally:
        await conn.close()
    assert seen == 0


async def kinds(svc: MemoryService, memory_id: uuid.UUID, tenant: str) -> list[str]:
    return [e.kind for e in await svc.memories.history(memory_id, tenant=tenant)]


async def test_every_memory_write_runs_under_rls_with_its_history(
    rls_schema: tuple[CitusSchema, str],
) -> None:
    """Each write and its history event, in one statement, as the runtime role."""
    schema, _ = rls_schema
    vector = np.ones(384, dtype=np.float32)
    scope = Scope("alpha", "p", "a", "s")
    async with MemoryService.open(runtime(rls_schema), embedder=HashingEmbedder()) as svc:
        first = await svc.memories.add(scope, "the office is in Paris", embedding=vector)
        batch = await svc.memories.add_many(scope, ["one", "two", "three"])
        keyed = await svc.memories.put(scope, "city", "Paris")
        await svc.memories.put(scope, "city", "Rome")
        await svc.memories.update(first.id, content="the office is in Lyon", tenant="alpha")
        await svc.memories.patch_metadata(first.id, {"floor": 3}, tenant="alpha")
        merged = await svc.memories.add(
            scope, "the office is in Lyon", dedupe="semantic"
        )
        assert merged.merged and merged.id == first.id
        newer = await svc.memories.supersede(first.id, "the office is in Nice", tenant="alpha")
        await svc.memories.invalidate(batch[0].id, tenant="alpha")
        assert await svc.memories.delete(batch[1].id, tenant="alpha") is True
        assembly = await svc.assemblies.create(scope, "office", memory_ids=[newer.id])
        await svc.assemblies.add_members(assembly.id, [batch[2].id], tenant="alpha")
        await svc.checkpoints.create(scope, {"step": 1})

        assert await kinds(svc, first.id, "alpha") == [
            "created", "updated", "updated", "updated", "superseded",
        ]  # fmt: skip
        events = await svc.memories.history(first.id, tenant="alpha")
        assert events[3].prior is not None and "merged" in events[3].prior
        assert events[1].prior is not None and events[1].prior["content"] == (
            "the office is in Paris"
        )
        assert await kinds(svc, newer.id, "alpha") == ["created"]
        assert await kinds(svc, keyed.id, "alpha") == ["created", "updated"]
        assert await kinds(svc, batch[0].id, "alpha") == ["created", "invalidated"]
        assert await kinds(svc, batch[1].id, "alpha") == ["created", "deleted"]
        assert (await svc.memories.get(keyed.id, tenant="alpha")).content == "Rome"
        # (deleting a member of an assembly is a known limit on Citus)
        assert await svc.assemblies.delete(assembly.id, tenant="alpha") is True
        assert await svc.memories.delete_scope(Scope("alpha", "p")) == 5
        assert await svc.memories.count(Scope("alpha"), include="descendants") == 0
    admin = await asyncpg.connect(schema.cluster.dsn)
    try:
        rows = await admin.fetch(
            f"SELECT tenant_id, kind, count(*) FROM {schema.schema}.memory_events "
            "GROUP BY 1, 2 ORDER BY 1, 2"
        )
    finally:
        await admin.close()
    # 6 memories created; 6 deleted (one alone, five by scope); 6 updates.
    assert [(r["tenant_id"], r["kind"], r["count"]) for r in rows] == [
        ("alpha", "created", 6), ("alpha", "deleted", 6), ("alpha", "invalidated", 1),
        ("alpha", "superseded", 1), ("alpha", "updated", 4),
    ]  # fmt: skip


async def test_writes_aimed_at_another_tenant_change_nothing(
    rls_schema: tuple[CitusSchema, str],
) -> None:
    """The single-node valid-time and write cases, from beta at alpha's rows, on the cluster."""
    schema, _ = rls_schema
    march = datetime(2024, 3, 1, tzinfo=UTC)
    async with MemoryService.open(runtime(rls_schema), embedder=HashingEmbedder()) as svc:
        alpha = await svc.memories.add(
            Scope("alpha", "p"), "alpha lives in Paris", valid_from=march
        )
        await svc.memories.put(Scope("alpha", "p"), "home", "alpha home")
        beta = await svc.memories.add(Scope("beta", "p"), "beta lives in Paris", valid_from=march)
        with pytest.raises(NotFoundError):
            await svc.memories.supersede(alpha.id, "stolen", tenant="beta")
        with pytest.raises(NotFoundError):
            await svc.memories.invalidate(alpha.id, tenant="beta")
        with pytest.raises(NotFoundError):
            await svc.memories.add(Scope("beta", "p"), "stolen", supersedes=[alpha.id])
        with pytest.raises(NotFoundError):
            await svc.memories.update(alpha.id, content="stolen", tenant="beta")
        with pytest.raises(NotFoundError):
            await svc.memories.patch_metadata(alpha.id, {"x": 1}, tenant="beta")
        assert await svc.memories.delete(alpha.id, tenant="beta") is False
        # alpha's id and key, written by beta: beta's own rows, alpha's untouched
        mirror = await svc.memories.add(Scope("beta", "p"), "beta's own", id=alpha.id)
        assert mirror.scope.tenant == "beta" and mirror.content == "beta's own"
        beta_home = await svc.memories.put(Scope("beta", "p"), "home", "beta home")
        assert beta_home.scope.tenant == "beta" and beta_home.version == 1
        new = await svc.memories.supersede(beta.id, "beta lives in Rome", tenant="beta")
        assert new.scope.tenant == "beta"
        assert await svc.memories.delete_scope(Scope("beta")) == 4

        kept = await svc.memories.get(alpha.id, tenant="alpha")
        assert (kept.content, kept.version, kept.valid_to) == ("alpha lives in Paris", 1, None)
        assert await kinds(svc, alpha.id, "alpha") == ["created"]
        home = await svc.memories.get_by_key(Scope("alpha", "p"), "home")
        assert home is not None and (home.content, home.version) == ("alpha home", 1)
    admin = await asyncpg.connect(schema.cluster.dsn)
    try:
        alpha_events = await admin.fetchval(
            f"SELECT count(*) FROM {schema.schema}.memory_events WHERE tenant_id = 'alpha'"
        )
    finally:
        await admin.close()
    assert alpha_events == 2


async def test_a_history_event_for_another_tenant_is_refused_on_the_workers(
    rls_schema: tuple[CitusSchema, str],
) -> None:
    """The path events take (a CTE arm with RETURNING) is checked by the policies.

    A statement shaped like memsvc's writes, run as beta, that would record
    its event under alpha: the workers refuse the event, and with it the
    write.
    """
    schema, runtime_dsn = rls_schema
    statement = memory_queries.insert_memory(schema.schema).replace(
        "SELECT tenant_id, $2, $3, $4, id, 'created'", "SELECT 'alpha', $2, $3, $4, id, 'created'"
    )
    assert "'alpha'" in statement
    conn = await asyncpg.connect(runtime_dsn)
    try:
        for tenant, refused in (("beta", True), ("alpha", False)):
            args = [tenant, "p", "a", "s", uuid.uuid4(), "forged", f"sha256:{uuid.uuid4().hex}"]
            args += ["{}", None, 0.5, None, None, None, False, True]
            async with conn.transaction():
                await conn.execute(f"SET LOCAL memsvc.tenant = '{tenant}'")
                if not refused:
                    assert len(await conn.fetch(statement, *args)) == 1
                    continue
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.fetch(statement, *args)
    finally:
        await conn.close()
    admin = await asyncpg.connect(schema.cluster.dsn)
    try:
        rows = await admin.fetch(
            f"SELECT tenant_id, count(*) FROM {schema.schema}.memories GROUP BY 1"
        )
    finally:
        await admin.close()
    assert [(r["tenant_id"], r["count"]) for r in rows] == [("alpha", 1)]


async def test_a_tenant_id_with_quotes_and_backslashes_writes_as_it_is(
    rls_schema: tuple[CitusSchema, str],
) -> None:
    odd, plain = "o'brien\\' OR true --", "o"
    async with MemoryService.open(runtime(rls_schema), embedder=HashingEmbedder()) as svc:
        mine = await svc.memories.add(Scope(odd, "p"), "odd tenant's")
        theirs = await svc.memories.add(Scope(plain, "p"), "plain tenant's")
        await svc.memories.update(mine.id, content="odd tenant's, revised", tenant=odd)
        assert await kinds(svc, mine.id, odd) == ["created", "updated"]
        listed = await svc.memories.list(Scope(odd), include="descendants")
        assert [m.content for m in listed] == ["odd tenant's, revised"]
        with pytest.raises(NotFoundError):
            await svc.memories.update(theirs.id, content="x", tenant=odd)


async def test_as_of_reads_stay_within_the_tenant(rls_schema: tuple[CitusSchema, str]) -> None:
    """The single-node as-of case, on the cluster, written and read as the runtime role."""
    async with MemoryService.open(runtime(rls_schema), embedder=HashingEmbedder()) as svc:
        alpha, beta = Scope("alpha", "p", "a", "s"), Scope("beta", "p", "a", "s")
        secret = await svc.memories.add(alpha, "alpha secret")
        await svc.memories.add(beta, "beta note")
        then = datetime.now(UTC)
        await svc.memories.delete(secret.id, tenant="alpha")
        # The deleted memory comes back from history for its tenant only.
        found = await svc.memories.get(secret.id, tenant="alpha", as_of=then)
        assert found.content == "alpha secret"
        with pytest.raises(NotFoundError):
            await svc.memories.get(secret.id, tenant="beta", as_of=then)
        assert await svc.memories.get_many([secret.id], tenant="beta", as_of=then) == []
        seen = await svc.memories.list(Scope("beta"), include="descendants", as_of=then)
        assert [m.content for m in seen] == ["beta note"]
        assert await svc.memories.count(Scope("alpha"), include="descendants", as_of=then) == 1
        # an id alone names no tenant: refused, as every read under row-level security
        with pytest.raises(ValidationError):
            await svc.memories.get(secret.id, as_of=then)
