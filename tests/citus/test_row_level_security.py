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
import pytest

from memsvc import MemoryService, NotFoundError, Scope
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


async def test_each_tenant_reads_and_writes_its_own_rows_only(
    rls_schema: tuple[CitusSchema, str],
) -> None:
    schema, runtime_dsn = rls_schema
    settings = settings_for_tests(
        runtime_dsn, row_level_security=True, db_schema=schema.schema
    )
    async with MemoryService.open(settings, embedder=HashingEmbedder()) as svc:
        ids = {}
        for tenant in ("alpha", "beta"):
            scope = Scope(tenant, "p", "a", "s")
            memory = await svc.memories.add(scope, f"{tenant} secret")
            ids[tenant] = memory.id
        # Several reads, so worker connections that served one tenant serve the other.
        for _ in range(3):
            for tenant in ("alpha", "beta"):
                found = await svc.memories.get(ids[tenant], tenant=tenant)
                assert found.content == f"{tenant} secret"
                listed = await svc.memories.list(Scope(tenant), include="descendants")
                assert [m.id for m in listed] == [ids[tenant]]
        with pytest.raises(NotFoundError):
            await svc.memories.get(ids["alpha"], tenant="beta")
        assert await svc.memories.delete(ids["alpha"], tenant="beta") is False
        assert (await svc.memories.get(ids["alpha"], tenant="alpha")).version == 1
