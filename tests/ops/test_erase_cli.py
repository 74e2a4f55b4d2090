"""``memsvc erase``: refuses without --yes, prints the receipt, erases only the scope."""

from __future__ import annotations

import asyncio
from typing import Any

from click.testing import CliRunner

from memsvc import Scope
from memsvc.cli import main

from .conftest import Cli, open_service


async def test_erase_refuses_without_yes_and_erases_with_it(
    cli: Cli, memsvc_database_url: str
) -> None:
    svc = await open_service(memsvc_database_url)
    try:
        gone = await svc.memories.add(Scope("acme", "p", "a", "s"), "erase me")
        kept = await svc.memories.add(Scope("acme", "q", "a", "s"), "keep me")
    finally:
        await svc.close()

    refused = await cli("erase", "--tenant", "acme", "--project", "p")
    assert refused.exit_code == 2 and "--yes" in refused.output

    svc = await open_service(memsvc_database_url)
    try:
        assert (await svc.memories.get(gone.id)).content == "erase me"
    finally:
        await svc.close()

    done = await cli("erase", "--tenant", "acme", "--project", "p", "--yes")
    assert done.exit_code == 0, done.output
    assert "erased: tenant 'acme', project 'p'" in done.output
    assert "verified: nothing of the scope" in done.output
    lines = {line.split()[0]: line.split()[-1] for line in done.output.splitlines() if line}
    assert lines["memories"] == "1" and lines["tombstones"] == "1"

    svc = await open_service(memsvc_database_url)
    try:
        assert await svc.memories.get_many([gone.id, kept.id]) == [
            await svc.memories.get(kept.id)
        ]
        assert [e.kind for e in await svc.memories.history(gone.id)] == ["erased"]
    finally:
        await svc.close()

    missing = await cli("erase", "--project", "p", "--yes")
    assert missing.exit_code == 2 and "--tenant" in missing.output


async def test_erase_fails_naming_redis_when_it_cannot_reach_it(
    memsvc_database_url: str, redis_server_factory: Any
) -> None:
    server = redis_server_factory()
    url = server.url
    server.kill()
    svc = await open_service(memsvc_database_url)
    try:
        kept = await svc.memories.add(Scope("acme", "p", "a", "s"), "not erased yet")
    finally:
        await svc.close()
    env = {"MEMSVC_DATABASE_URL": memsvc_database_url, "MEMSVC_AUTO_MIGRATE": "false",
           "MEMSVC_REDIS_URL": url, "MEMSVC_REDIS_TIMEOUT_S": "0.2"}

    result = await asyncio.to_thread(
        CliRunner().invoke, main, ["erase", "--tenant", "acme", "--yes"], env=env
    )

    assert result.exit_code == 1
    assert f"RedisUnavailableError: Redis at {url}" in result.output
    assert "verified" not in result.output
    svc = await open_service(memsvc_database_url)
    try:
        assert (await svc.memories.get(kept.id)).content == "not erased yet"
    finally:
        await svc.close()


async def test_erase_vacuum_vacuums_the_tables_it_changed_and_says_so(
    cli: Cli, memsvc_database_url: str
) -> None:
    svc = await open_service(memsvc_database_url)
    try:
        await svc.memories.add(Scope("acme", "p", "a", "s"), "erase me")
    finally:
        await svc.close()

    done = await cli("erase", "--tenant", "acme", "--project", "p", "--yes", "--vacuum")

    assert done.exit_code == 0, done.output
    assert "vacuumed: assemblies, assembly_members, entity_events, memories, memory_events, " \
        "memory_policies, remembered_messages, session_checkpoints" in done.output
