"""``memsvc policy`` and the forgetting part of ``memsvc gc``."""

from __future__ import annotations

import asyncpg
import pytest

from memsvc.cli.policy import format_duration, parse_duration

from .conftest import Cli


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 30 * 86_400), ("12h", 43_200), ("90m", 5_400), ("3600s", 3_600), ("2w", 1_209_600),
     ("45", 45), ("1.5d", 129_600)],
)
def test_durations_read_as_written(text: str, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == seconds
    assert parse_duration(format_duration(parse_duration(text))) == parse_duration(text)


async def test_policy_set_show_list_unset(cli: Cli) -> None:
    result = await cli("policy", "set", "--tenant", "acme", "--half-life", "30d")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("acme: half-life 30d")
    result = await cli("policy", "set", "--tenant", "acme", "--project", "p", "--half-life", "12h")
    assert result.output.startswith("acme/p: half-life 12h")
    shown = await cli("policy", "show", "--tenant", "acme", "--project", "p")
    assert shown.exit_code == 0 and shown.output.startswith("acme/p: half-life 12h")
    listed = await cli("policy", "list")
    assert [line.split(":")[0] for line in listed.output.splitlines()] == ["acme", "acme/p"]
    assert (await cli("policy", "unset", "--tenant", "acme", "--project", "p")).output == (
        "removed\n"
    )
    missing = await cli("policy", "show", "--tenant", "acme", "--project", "p")
    assert missing.exit_code == 1 and "NotFoundError" in missing.output
    bad = await cli("policy", "set", "--tenant", "acme", "--half-life", "soon")
    assert bad.exit_code == 2 and "duration" in bad.output


async def test_gc_forgets_only_once_a_policy_is_set(cli: Cli, db: asyncpg.Connection) -> None:
    await db.execute(
        "INSERT INTO memsvc.memories (tenant_id, id, content, content_hash, importance, "
        "created_at) VALUES ('acme', gen_random_uuid(), 'old and trivial', 'sha256:00', 0.1, "
        "now() - interval '90 days')"
    )
    before = await cli("gc")
    assert before.exit_code == 0 and "memories forgotten" not in before.output
    await cli("policy", "set", "--tenant", "acme", "--half-life", "7d")
    after = await cli("gc")
    assert "memories forgotten: 1" in after.output, after.output
    assert await db.fetchval("SELECT count(*) FROM memsvc.memories WHERE forgotten_at IS NOT NULL")
