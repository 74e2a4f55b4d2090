"""Redis ACLs per tenant: one tenant's credentials cannot reach another's keys."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis.asyncio

from memsvc.core.errors import WorkingMemoryError
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.testing.redis import RedisServer
from memsvc.working import RedisStore, WorkingMemory
from memsvc.working.keys import session_keys, tenant_key_pattern

TENANTS = ("acme", "acme2", "a*b[c]")  # a prefix of another, and glob characters


async def test_tenant_pattern_matches_exactly_that_tenants_keys(
    redis_server_factory: Callable[[], RedisServer],
) -> None:
    """Redis itself judges the pattern (SCAN MATCH uses the same globbing as ACLs)."""
    server = redis_server_factory()
    client = redis.asyncio.Redis.from_url(server.url, decode_responses=True)
    try:
        keys = {t: session_keys(Scope(t, "p", "a", "s")).value("draft") for t in TENANTS}
        for key in keys.values():
            await client.set(key, "x")
        for tenant in TENANTS:
            matched = [k async for k in client.scan_iter(match=tenant_key_pattern(tenant))]
            assert matched == [keys[tenant]], tenant
    finally:
        await client.aclose()


async def test_a_tenants_credentials_cannot_read_or_write_another_tenants_keys(
    redis_server_factory: Callable[[], RedisServer],
) -> None:
    server = redis_server_factory()
    admin = redis.asyncio.Redis.from_url(server.url)
    try:
        for tenant, user in (("acme", "acme_user"), ("acme2", "other_user")):
            await admin.execute_command(
                "ACL", "SETUSER", user, "on", ">secret", "resetkeys",
                f"~{tenant_key_pattern(tenant)}", "+@all",
            )  # fmt: skip
    finally:
        await admin.aclose()
    settings = Settings(redis_url=server.url)
    url = server.url.replace("redis://", "redis://acme_user:secret@")
    store = RedisStore.from_url(url, settings)
    try:
        own = WorkingMemory(Scope("acme", "p", "a", "s"), store, settings)
        await own.set("draft", {"step": 1})
        await own.append_scratchpad("fine")
        assert await own.get_all() == {"draft": {"step": 1}}

        foreign = WorkingMemory(Scope("acme2", "p", "a", "s"), store, settings)
        with pytest.raises(WorkingMemoryError):
            await foreign.set("draft", {"step": 666})
        with pytest.raises(WorkingMemoryError):
            await foreign.get_all()
        with pytest.raises(WorkingMemoryError):
            await foreign.get("draft")
    finally:
        await store.close()
