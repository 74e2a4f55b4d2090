"""``memsvc erase``: refuses without --yes, prints the receipt, erases only the scope."""

from __future__ import annotations

from memsvc import Scope

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
