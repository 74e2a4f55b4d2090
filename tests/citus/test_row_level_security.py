"""Issue 31, item 7: row-level security on a distributed schema.

Under a runtime role (no superuser, no BYPASSRLS) with
``row_level_security`` on, each tenant sees and changes its own rows and
nothing of another's. The policies run on the workers, which must see the
transaction's ``memsvc.tenant``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import numpy as np
import pytest

from memsvc import (
    CitusUnsupportedError,
    MemoryService,
    NotFoundError,
    Scope,
    Settings,
    ValidationError,
)
from memsvc.embedding import HashingEmbedder
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


async def seed(settings: Settings) -> dict[str, list[uuid.UUID]]:
    """Each tenant's memories, keyed memory, assembly and checkpoint (as the schema's owner)."""
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
    schema, runtime_dsn = rls_schema
    mine = await seed(schema.settings)
    settings = settings_for_tests(runtime_dsn, row_level_security=True, db_schema=schema.schema)
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


async def test_writes_that_record_history_are_refused_by_name_under_rls(
    rls_schema: tuple[CitusSchema, str],
) -> None:
    """A known limit: their history rows reach the shards by COPY, refused under RLS."""
    schema, runtime_dsn = rls_schema
    mine = await seed(schema.settings)
    settings = settings_for_tests(runtime_dsn, row_level_security=True, db_schema=schema.schema)
    async with MemoryService.open(settings, embedder=HashingEmbedder()) as svc:
        with pytest.raises(CitusUnsupportedError) as refused:
            await svc.memories.add(Scope("alpha", "p"), "new")
        assert refused.value.operation == "memories.add"
        with pytest.raises(CitusUnsupportedError) as refused:
            await svc.memories.update(mine["alpha"][0], content="changed", tenant="alpha")
        assert refused.value.operation == "memories.update"
        assert (await svc.memories.get(mine["alpha"][0], tenant="alpha")).version == 1
