"""Each message is applied exactly once: across crashes, retries and racing calls."""

from __future__ import annotations

import asyncio
import hashlib
import signal
import subprocess
import sys
import textwrap
from typing import Any

import asyncpg
import pytest

from memsvc import MemoryService, OpenAIChatExtractor, Scope, Settings
from tests.extraction.fake_chat import (
    FakeChatServer,
    Reply,
    add,
    facts,
    noop,
    operations,
    rule_answer,
    serving,
    update,
)
from tests.lock_waits import WAITING_FOR_A_LOCK

pytestmark = pytest.mark.timeout(300)

SCOPE = Scope("acme", "bridge", "planner", "s-1")
MESSAGES = [
    {"role": "user", "content": "I live in Paris, France. I like tea. I have a cat.", "id": "u1"},
    {"role": "assistant", "content": "Noted!", "id": "a1"},
]
PARIS = "The user lives in Paris."


def answer_key(step: str, payload: dict[str, Any]) -> Any:
    """A perfect extractor for MESSAGES: reword the Paris memory, add tea and the cat."""
    if step == "facts":
        return facts("The user lives in Paris, France.", "The user likes tea.",
                     "The user has a cat.")
    if step == "operations":
        refs = {m["content"]: m["ref"] for m in payload["memories"]}
        if PARIS not in refs:
            # A racing call asked after another applied these messages (it shows
            # the reworded memory): what it answers must be applied never.
            return operations(
                update(refs["The user lives in Paris, France."], "The user lives in Paris!"),
                add("The user likes tea."),
            )
        return operations(
            update(refs[PARIS], "The user lives in Paris, France."),
            add("The user likes tea."),
            add("The user has a cat."),
        )
    return rule_answer(step, payload)


async def ledger_rows(dsn: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT message_id FROM memsvc.remembered_messages")
    finally:
        await conn.close()
    return sorted(row["message_id"] for row in rows)


async def state(service: MemoryService) -> dict[str, Any]:
    """What the scope holds: contents, and the Paris memory's version and events."""
    memories = await service.memories.list(SCOPE, limit=100)
    paris = [m for m in memories if "Paris" in m.content]
    assert len(paris) == 1
    events = [e.kind for e in await service.memories.history(paris[0].id)]
    return {
        "contents": sorted(m.content for m in memories),
        "paris_version": paris[0].version,
        "paris_events": events,
    }


APPLIED_ONCE = {
    "contents": ["The user has a cat.", "The user likes tea.", "The user lives in Paris, France."],
    "paris_version": 2,
    "paris_events": ["created", "updated"],
}


async def hold_the_cat(admin: asyncpg.Connection) -> None:
    """In the caller's open transaction: an uncommitted memory with the cat's content.

    A batch adding the same content in the scope waits for this transaction
    (the scope's unique content index) after it has written its other
    operations: the moment between the extractor's answer and the commit.
    """
    content = "The user has a cat."
    await admin.execute(
        "INSERT INTO memsvc.memories (tenant_id, project_id, agent_id, session_id, id, content, "
        "content_hash) VALUES ($1, $2, $3, $4, gen_random_uuid(), $5, $6)",
        *SCOPE.levels, content, "sha256:" + hashlib.sha256(content.encode()).hexdigest(),
    )


async def wait_for_a_lock_wait(dsn: str, still_running: Any) -> None:
    # Its own connection: activity statistics are read once per transaction.
    watcher = await asyncpg.connect(dsn)
    try:
        async with asyncio.timeout(120):
            while not await watcher.fetchval(WAITING_FOR_A_LOCK):
                assert still_running(), "remember ended before it reached the held memory"
                await asyncio.sleep(0.05)
    finally:
        await watcher.close()


async def test_a_call_stopped_before_its_commit_applies_nothing_and_a_retry_applies_once(
    service: MemoryService, settings: Settings
) -> None:
    await service.memories.add(SCOPE, PARIS)
    dsn = settings.database_url
    assert dsn is not None
    with serving(answerer=answer_key) as chat:
        extractor = OpenAIChatExtractor(chat.base_url, "m", backoff_s=0.01)
        admin = await asyncpg.connect(dsn)
        try:
            blocker = admin.transaction()
            await blocker.start()
            await hold_the_cat(admin)
            task = asyncio.create_task(service.remember(SCOPE, MESSAGES, extractor=extractor))
            await wait_for_a_lock_wait(dsn, lambda: not task.done())
            task.cancel()  # the caller goes away mid-transaction
            with pytest.raises(asyncio.CancelledError):
                await task
            await blocker.rollback()
        finally:
            await admin.close()
        assert chat.steps() == ["facts", "operations"]
        memories = await service.memories.list(SCOPE, limit=100)
        assert [(m.content, m.version) for m in memories] == [(PARIS, 1)]
        assert await ledger_rows(dsn) == []

        retried = await service.remember(SCOPE, MESSAGES, extractor=extractor)
    assert retried.remembered == ("u1", "a1") and len(retried.applied) == 3
    assert await state(service) == APPLIED_ONCE
    assert await ledger_rows(dsn) == ["a1", "u1"]


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from memsvc import HashingEmbedder, MemoryService, OpenAIChatExtractor, Scope
    from memsvc.testing.postgres import settings_for_tests

    MESSAGES = [
        {"role": "user", "content": "I live in Paris, France. I like tea. I have a cat.",
         "id": "u1"},
        {"role": "assistant", "content": "Noted!", "id": "a1"},
    ]

    async def main():
        settings = settings_for_tests(sys.argv[1])
        extractor = OpenAIChatExtractor(sys.argv[2], "m")
        async with MemoryService.open(settings, embedder=HashingEmbedder(384)) as svc:
            await svc.remember(Scope("acme", "bridge", "planner", "s-1"), MESSAGES,
                               extractor=extractor)
            print("committed", flush=True)
            await asyncio.sleep(3600)  # killed here, its result never seen

    asyncio.run(main())
    """
)


@pytest.mark.slow
async def test_a_process_killed_before_its_commit_leaves_nothing_and_a_retry_applies_once(
    service: MemoryService, settings: Settings
) -> None:
    await service.memories.add(SCOPE, PARIS)
    dsn = settings.database_url
    assert dsn is not None
    with serving(answerer=answer_key) as chat:
        admin = await asyncpg.connect(dsn)
        try:
            blocker = admin.transaction()
            await blocker.start()
            await hold_the_cat(admin)
            child = subprocess.Popen([sys.executable, "-c", CHILD, dsn, chat.base_url])
            try:
                await wait_for_a_lock_wait(dsn, lambda: child.poll() is None)
                child.send_signal(signal.SIGKILL)
                assert await asyncio.to_thread(child.wait) == -signal.SIGKILL
            finally:
                if child.poll() is None:
                    child.kill()
            await blocker.rollback()
        finally:
            await admin.close()
        extractor = OpenAIChatExtractor(chat.base_url, "m", backoff_s=0.01)
        retried = await service.remember(SCOPE, MESSAGES, extractor=extractor)
    assert retried.remembered == ("u1", "a1")
    assert await state(service) == APPLIED_ONCE
    assert await ledger_rows(dsn) == ["a1", "u1"]


@pytest.mark.slow
async def test_a_process_killed_after_its_commit_is_retried_without_applying_twice(
    service: MemoryService, settings: Settings
) -> None:
    await service.memories.add(SCOPE, PARIS)
    dsn = settings.database_url
    assert dsn is not None
    with serving(answerer=answer_key) as chat:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, dsn, chat.base_url], stdout=subprocess.PIPE, text=True
        )
        try:
            assert child.stdout is not None
            line = await asyncio.to_thread(child.stdout.readline)
            assert line.strip() == "committed"
            child.send_signal(signal.SIGKILL)
            assert await asyncio.to_thread(child.wait) == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
        asked = len(chat.requests)
        extractor = OpenAIChatExtractor(chat.base_url, "m", backoff_s=0.01)
        retried = await service.remember(SCOPE, MESSAGES, extractor=extractor)
        assert len(chat.requests) == asked  # nothing left to ask about
    assert retried.applied == () and retried.already_remembered == ("u1", "a1")
    assert await state(service) == APPLIED_ONCE


async def test_a_retry_after_the_commit_applies_nothing_twice(service: MemoryService) -> None:
    await service.memories.add(SCOPE, PARIS)
    with serving(answerer=answer_key) as chat:
        extractor = OpenAIChatExtractor(chat.base_url, "m", backoff_s=0.01)
        await service.remember(SCOPE, MESSAGES, extractor=extractor)  # its result is lost
        retried = await service.remember(SCOPE, MESSAGES, extractor=extractor)
        assert chat.steps() == ["facts", "operations"]
    assert retried.applied == () and retried.already_remembered == ("u1", "a1")
    assert await state(service) == APPLIED_ONCE


async def test_four_racing_calls_with_the_same_messages_apply_them_once(
    service: MemoryService, settings: Settings
) -> None:
    await service.memories.add(SCOPE, PARIS)
    with serving(answerer=answer_key) as chat:
        extractor = OpenAIChatExtractor(chat.base_url, "m", backoff_s=0.01)
        results = await asyncio.gather(
            *(service.remember(SCOPE, MESSAGES, extractor=extractor) for _ in range(4))
        )
    assert sorted(len(r.remembered) for r in results) == [0, 0, 0, 2]
    assert sum(len(r.applied) for r in results) == 3
    assert all(set(r.already_remembered) == {"u1", "a1"} for r in results if not r.remembered)
    assert await state(service) == APPLIED_ONCE
    assert settings.database_url is not None
    assert await ledger_rows(settings.database_url) == ["a1", "u1"]


async def test_naive_control_check_then_update_applies_a_message_more_than_once(
    service: MemoryService,
) -> None:
    """What the ledger prevents: "already applied?" read, then written, by racing callers."""
    paris = await service.memories.add(SCOPE, PARIS)

    async def naive_remember() -> None:
        memory = await service.memories.get(paris.id)
        if "u1" in memory.metadata.get("provenance", {}).get("source_message_ids", []):
            return
        await asyncio.sleep(0.05)  # the model answers
        await service.memories.update(
            paris.id,
            content="The user lives in Paris, France.",
            metadata={"provenance": {"source_message_ids": ["u1"]}},
        )

    await asyncio.gather(*(naive_remember() for _ in range(4)))
    events = [e.kind for e in await service.memories.history(paris.id)]
    assert events.count("updated") > 1


async def test_racing_calls_with_different_messages_all_apply(service: MemoryService) -> None:
    with serving() as chat:
        extractor = OpenAIChatExtractor(chat.base_url, "m", backoff_s=0.01)
        results = await asyncio.gather(
            *(
                service.remember(
                    SCOPE,
                    [{"role": "user", "content": f"Fact number {i}.", "id": f"m{i}"}],
                    extractor=extractor,
                )
                for i in range(4)
            )
        )
    assert sorted(r.remembered for r in results) == [("m0",), ("m1",), ("m2",), ("m3",)]
    assert await service.memories.count(SCOPE) == 4


async def test_an_answer_of_only_noops_still_records_the_messages(
    service: MemoryService, chat: FakeChatServer, extractor: OpenAIChatExtractor
) -> None:
    chat.then(Reply(answer=facts("The user said hi.")), Reply(answer=operations(noop())))
    first = await service.remember(SCOPE, MESSAGES, extractor=extractor)
    assert first.remembered == ("u1", "a1")
    again = await service.remember(SCOPE, MESSAGES, extractor=extractor)
    assert again.already_remembered == ("u1", "a1") and again.model_calls == 0
