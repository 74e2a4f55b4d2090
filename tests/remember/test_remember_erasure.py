"""Erasure and row-level security cover the ledger of remembered messages."""

from __future__ import annotations

import asyncpg
import pytest

from memsvc import MemoryService, OpenAIChatExtractor, Scope, ValidationError
from memsvc.testing.postgres import settings_for_tests
from tests.extraction.fake_chat import FakeChatServer
from tests.test_row_level_security import rls_database  # noqa: F401

TARGET = Scope("acme", "bridge", "planner", "s-1")
SIBLING = Scope("acme", "bridge", "critic", "s-1")


def said(message_id: str, text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text, "id": message_id}]


async def ledger(dsn: str) -> list[tuple[str | None, str]]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT agent_id, message_id FROM memsvc.remembered_messages ORDER BY 1, 2"
        )
    finally:
        await conn.close()
    return [(row["agent_id"], row["message_id"]) for row in rows]


async def test_erase_removes_the_scopes_remembered_message_ids_and_keeps_the_others(
    service: MemoryService, extractor: OpenAIChatExtractor, memsvc_database_url: str
) -> None:
    await service.remember(TARGET, said("user-secret-42", "I live in Paris."), extractor=extractor)
    await service.remember(
        TARGET.with_session("s-2"), said("user-secret-43", "I like tea."), extractor=extractor
    )
    await service.remember(SIBLING, said("user-secret-42", "I live in Oslo."), extractor=extractor)
    receipt = await service.erase(Scope("acme", "bridge", "planner"))
    assert receipt.verified, receipt.remaining
    assert receipt.removed["remembered_messages"] == 2
    assert await ledger(memsvc_database_url) == [("critic", "user-secret-42")]
    # Erased messages are new again: a later conversation may restate them.
    again = await service.remember(
        TARGET, said("user-secret-42", "I live in Paris."), extractor=extractor
    )
    assert again.remembered == ("user-secret-42",)


async def test_the_ledger_is_tenant_isolated_under_row_level_security(
    rls_database: tuple[str, str],  # noqa: F811
    chat: FakeChatServer,
) -> None:
    owner_dsn, runtime_dsn = rls_database
    settings = settings_for_tests(runtime_dsn, row_level_security=True)
    extractor = OpenAIChatExtractor(chat.base_url, "m")
    async with MemoryService.open(settings, extractor=extractor) as svc:
        alpha, beta = Scope("alpha", "p", "a", "s"), Scope("beta", "p", "a", "s")
        assert (await svc.remember(alpha, said("m1", "I like tea."))).remembered == ("m1",)
        # The same message id in another tenant is that tenant's own.
        assert (await svc.remember(beta, said("m1", "I like tea."))).remembered == ("m1",)
        assert (await svc.remember(alpha, said("m1", "I like tea."))).already_remembered == (
            "m1",
        )
        assert await svc.memories.count(alpha) == 1 and await svc.memories.count(beta) == 1
    runtime = await asyncpg.connect(runtime_dsn)
    try:
        # Without a tenant set, the runtime role sees no ledger row at all.
        assert await runtime.fetchval("SELECT count(*) FROM memsvc.remembered_messages") == 0
        async with runtime.transaction():
            await runtime.execute("SELECT set_config('memsvc.tenant', 'alpha', true)")
            assert await runtime.fetchval("SELECT count(*) FROM memsvc.remembered_messages") == 1
    finally:
        await runtime.close()
    assert sorted(await ledger(owner_dsn)) == [("a", "m1"), ("a", "m1")]


async def test_remember_under_row_level_security_needs_no_tenant_beyond_the_scope(
    rls_database: tuple[str, str],  # noqa: F811
    chat: FakeChatServer,
) -> None:
    _, runtime_dsn = rls_database
    settings = settings_for_tests(runtime_dsn, row_level_security=True)
    async with MemoryService.open(settings) as svc:
        extractor = OpenAIChatExtractor(chat.base_url, "m")
        paris = await svc.memories.add(Scope("alpha", "p"), "The user lives in Paris.")
        chat.then()
        result = await svc.remember(
            Scope("alpha", "p"), said("m1", "The user lives in Paris."), extractor=extractor
        )
        assert result.remembered == ("m1",)
        assert [a.operation.op for a in result.applied] == ["NOOP"]
        assert (await svc.memories.get(paris.id, tenant="alpha")).version == 1
        with pytest.raises(ValidationError):
            await svc.memories.get(paris.id)
