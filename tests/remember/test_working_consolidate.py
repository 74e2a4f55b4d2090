"""``svc.working(scope).consolidate()``: the scratchpad into long-term memory, each entry once."""

from __future__ import annotations

import asyncio
import hashlib
import textwrap
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg
import pytest

from memsvc import (
    ExtractionError,
    HashingEmbedder,
    MemoryService,
    OpenAIChatExtractor,
    Scope,
    Settings,
    ValidationError,
)
from memsvc.extraction import ExtractionRequest, Message
from memsvc.remember.session import entry_messages
from tests.extraction.fake_chat import FakeChatServer, Reply
from tests.lock_waits import kill_when_it_waits_for_a_lock

pytestmark = pytest.mark.timeout(300)

NOTES = ["The user lives in Lisbon.", "The user's dog is called Rex.", "The user starts at nine."]


@pytest.fixture(params=["redis", "local"])
async def svc(
    request: pytest.FixtureRequest, settings: Settings
) -> AsyncIterator[MemoryService]:
    """A service whose working memory is on a real Redis, or in process."""
    if request.param == "redis":
        settings = settings.model_copy(update={"redis_url": request.getfixturevalue("redis_url")})
    async with MemoryService.open(settings, embedder=HashingEmbedder(384)) as service:
        assert service.working_store.backend == request.param
        yield service


@pytest.fixture
def scope() -> Scope:
    # The Redis server is shared by the suite: a session of this test's own.
    return Scope("acme", "bridge", "planner", f"s-{uuid.uuid4().hex[:8]}")


async def contents(svc: MemoryService, scope: Scope) -> list[str]:
    return sorted(m.content for m in await svc.memories.list(scope, limit=100))


async def test_consolidate_remembers_the_scratchpad_and_clears_it(
    svc: MemoryService, scope: Scope, extractor: OpenAIChatExtractor
) -> None:
    wm = svc.working(scope)
    for note in NOTES:
        await wm.append_scratchpad(note)
    done = await wm.consolidate(extractor=extractor)
    assert (done.cleared, done.kept, len(done.result.applied)) == (3, 0, 3)
    assert await contents(svc, scope) == sorted(NOTES)
    assert await wm.get_scratchpad() == []
    memory = (await svc.memories.list(scope, limit=1))[0]
    assert memory.metadata["provenance"]["source_message_ids"][0].startswith("scratchpad:")
    again = await wm.consolidate(extractor=extractor)
    assert (again.cleared, again.kept, again.result.model_calls) == (0, 0, 0)


class AppendingExtractor:
    """The server's extractor, with a note appended to the scratchpad while it answers."""

    def __init__(self, inner: OpenAIChatExtractor, svc: MemoryService, scope: Scope) -> None:
        self.inner, self.svc, self.scope = inner, svc, scope
        self.name, self.version, self.model = inner.name, inner.version, inner.model

    async def facts(self, messages: Sequence[Message]) -> object:
        await self.svc.working(self.scope).append_scratchpad("The user likes figs.")
        return await self.inner.facts(messages)

    async def operations(self, request: ExtractionRequest) -> object:
        return await self.inner.operations(request)


async def test_an_entry_appended_while_the_model_answers_stays_in_the_scratchpad(
    svc: MemoryService, scope: Scope, extractor: OpenAIChatExtractor
) -> None:
    wm = svc.working(scope)
    for note in NOTES:
        await wm.append_scratchpad(note)
    done = await wm.consolidate(extractor=AppendingExtractor(extractor, svc, scope))
    assert done.cleared == 3
    assert await wm.get_scratchpad() == ["The user likes figs."]
    assert await contents(svc, scope) == sorted(NOTES)


async def test_naive_control_read_remember_then_clear_loses_an_entry_appended_meanwhile(
    svc: MemoryService, scope: Scope, extractor: OpenAIChatExtractor
) -> None:
    """What removing only the consumed entries prevents: clear() takes the newcomer too."""
    wm = svc.working(scope)
    for note in NOTES:
        await wm.append_scratchpad(note)
    entries = await wm.get_scratchpad_with_timestamps()
    await wm.append_scratchpad("The user likes figs.")  # while the model answers
    messages = [
        {"role": "user", "content": e["content"], "id": f"n{i}"} for i, e in enumerate(entries)
    ]
    await svc.remember(scope, messages, extractor=extractor)
    await wm.clear_scratchpad()
    assert "The user likes figs." not in await contents(svc, scope)
    assert await wm.get_scratchpad() == []  # neither remembered nor kept: lost


async def test_an_extractor_failure_leaves_every_entry_in_the_scratchpad(
    svc: MemoryService, scope: Scope, chat: FakeChatServer
) -> None:
    wm = svc.working(scope)
    for note in NOTES:
        await wm.append_scratchpad(note)
    failing = OpenAIChatExtractor(chat.base_url, "m", max_retries=0, backoff_s=0.01)
    chat.then(Reply(status=500))
    with pytest.raises(ExtractionError):
        await wm.consolidate(extractor=failing)
    assert await wm.get_scratchpad() == NOTES
    assert await contents(svc, scope) == []
    done = await wm.consolidate(extractor=failing)
    assert done.cleared == 3 and await contents(svc, scope) == sorted(NOTES)


async def test_entries_remembered_before_a_crash_are_cleared_without_applying_them_twice(
    svc: MemoryService, scope: Scope, chat: FakeChatServer, extractor: OpenAIChatExtractor
) -> None:
    """The state a crash between the commit and the clearing leaves, then a retry."""
    wm = svc.working(scope)
    for note in NOTES:
        await wm.append_scratchpad(note)
    messages, _ = entry_messages(await svc.working_store.get_scratchpad(scope), "user")
    first = await svc.remember(scope, messages, extractor=extractor)
    assert len(first.applied) == 3
    asked = len(chat.requests)
    done = await wm.consolidate(extractor=extractor)
    assert len(chat.requests) == asked  # nothing asked again
    assert done.result.applied == () and len(done.result.already_remembered) == 3
    assert done.cleared == 3 and await wm.get_scratchpad() == []
    history = [await svc.memories.history(m.id) for m in await svc.memories.list(scope)]
    assert all([e.kind for e in events] == ["created"] for events in history)


async def test_four_racing_consolidations_apply_each_entry_once_and_keep_newcomers(
    svc: MemoryService, scope: Scope, extractor: OpenAIChatExtractor
) -> None:
    wm = svc.working(scope)
    notes = [f"The user's fact number {i} is true." for i in range(8)]
    for note in notes[:6]:
        await wm.append_scratchpad(note)

    async def append_late() -> None:
        for note in notes[6:]:
            await asyncio.sleep(0.01)
            await wm.append_scratchpad(note)

    results: list[Any] = await asyncio.gather(
        *(svc.working(scope).consolidate(extractor=extractor) for _ in range(4)), append_late()
    )
    done = results[:4]
    applied = [a.operation.content for d in done for a in d.result.applied]
    assert sorted(applied) == sorted(set(applied))  # no entry applied twice
    remembered = set(await contents(svc, scope))
    left = set(await wm.get_scratchpad())
    assert remembered | left == set(notes)  # nothing lost
    assert remembered == set(applied) and not remembered & left
    assert sum(d.cleared for d in done) == len(remembered)


async def test_a_bad_role_is_refused_with_nothing_done(
    svc: MemoryService, scope: Scope, extractor: OpenAIChatExtractor
) -> None:
    wm = svc.working(scope)
    await wm.append_scratchpad(NOTES[0])
    with pytest.raises(ValidationError) as raised:
        await wm.consolidate(extractor=extractor, role="narrator")
    assert raised.value.field == "role"
    assert await wm.get_scratchpad() == [NOTES[0]]


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from memsvc import HashingEmbedder, MemoryService, OpenAIChatExtractor, Scope
    from memsvc.testing.postgres import settings_for_tests

    async def main():
        settings = settings_for_tests(sys.argv[1]).model_copy(update={"redis_url": sys.argv[2]})
        extractor = OpenAIChatExtractor(sys.argv[3], "m")
        async with MemoryService.open(settings, embedder=HashingEmbedder(384)) as svc:
            scope = Scope("acme", "bridge", "planner", sys.argv[4])
            await svc.working(scope).consolidate(extractor=extractor)

    asyncio.run(main())
    """
)


@pytest.mark.slow
async def test_a_process_killed_before_the_commit_leaves_every_entry_in_the_scratchpad(
    settings: Settings, redis_url: str, chat: FakeChatServer, extractor: OpenAIChatExtractor
) -> None:
    dsn = settings.database_url
    assert dsn is not None
    scope = Scope("acme", "bridge", "planner", f"s-{uuid.uuid4().hex[:8]}")
    redis_settings = settings.model_copy(update={"redis_url": redis_url})
    async with MemoryService.open(redis_settings, embedder=HashingEmbedder(384)) as svc:
        wm = svc.working(scope)
        for note in NOTES:
            await wm.append_scratchpad(note)
        admin = await asyncpg.connect(dsn)
        watcher = await asyncpg.connect(dsn)
        try:
            holding = admin.transaction()
            await holding.start()
            # An uncommitted memory with a note's text: the child's batch waits for it.
            content = NOTES[-1]
            await admin.execute(
                "INSERT INTO memsvc.memories (tenant_id, project_id, agent_id, session_id, id, "
                "content, content_hash) VALUES ($1, $2, $3, $4, gen_random_uuid(), $5, $6)",
                *scope.levels, content, "sha256:" + hashlib.sha256(content.encode()).hexdigest(),
            )
            await kill_when_it_waits_for_a_lock(
                watcher, CHILD, dsn, redis_url, chat.base_url, scope.session or "",
                what="consolidate",
            )
            await holding.rollback()
        finally:
            await admin.close()
            await watcher.close()
        assert await wm.get_scratchpad() == NOTES
        assert await contents(svc, scope) == []
        done = await wm.consolidate(extractor=extractor)
        assert done.cleared == 3 and len(done.result.applied) == 3
        assert await contents(svc, scope) == sorted(NOTES)
        assert await wm.get_scratchpad() == []
