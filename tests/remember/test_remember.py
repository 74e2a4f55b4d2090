"""``svc.remember`` against the real database and a real chat completions server."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from langchain_core.messages import AIMessage, HumanMessage

from memsvc import (
    ConflictError,
    ExtractionError,
    MemoryService,
    OpenAIChatExtractor,
    Scope,
    Settings,
    ValidationError,
)
from memsvc.extraction import ADD, NOOP, UPDATE, ExtractionRequest, Message
from memsvc.remember.pipeline import BATCH_MESSAGES
from memsvc.sync import SyncMemoryService
from memsvc.testing.postgres import settings_for_tests
from tests.extraction.fake_chat import (
    FakeChatServer,
    Reply,
    add,
    facts,
    invalidate,
    noop,
    operations,
    serving,
    supersede,
    update,
)

SCOPE = Scope("acme", "bridge", "planner", "s-1")


def said(*texts: str, start: int = 1, role: str = "user") -> list[dict[str, Any]]:
    return [
        {"role": role, "content": text, "id": f"msg-{i}"} for i, text in enumerate(texts, start)
    ]


async def ledger(dsn: str, scope: Scope = SCOPE) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT message_id FROM memsvc.remembered_messages WHERE tenant_id = $1 "
            "AND project_id IS NOT DISTINCT FROM $2 AND agent_id IS NOT DISTINCT FROM $3 "
            "AND session_id IS NOT DISTINCT FROM $4 ORDER BY message_id",
            *scope.levels,
        )
    finally:
        await conn.close()
    return [row["message_id"] for row in rows]


async def contents(service: MemoryService, scope: Scope = SCOPE) -> list[str]:
    return sorted(m.content for m in await service.memories.list(scope, limit=100))


async def test_new_messages_become_memories_that_record_their_provenance(
    service: MemoryService,
    extractor: OpenAIChatExtractor,
    chat: FakeChatServer,
    memsvc_database_url: str,
) -> None:
    result = await service.remember(
        SCOPE, said("I live in Paris. I prefer metric units.", "Hi again!"), extractor=extractor
    )
    assert [type(a.operation) for a in result.applied] == [ADD, ADD, ADD]
    assert result.remembered == ("msg-1", "msg-2") and result.skipped == ()
    assert result.model_calls == 2 and chat.steps() == ["facts", "operations"]
    assert await contents(service) == ["Hi again!", "I live in Paris.", "I prefer metric units."]
    memory = result.applied[0].memory
    assert memory is not None
    provenance = {
        "source_message_ids": ["msg-1", "msg-2"],
        "extractor": "openai-chat",
        "extractor_version": "extract-v2",
        "model": "test-model",
        "operation": "ADD",
    }
    assert memory.metadata == {"provenance": provenance}
    stored = await service.memories.get(memory.id)
    assert stored.metadata == {"provenance": provenance}
    [created] = await service.memories.history(memory.id)
    assert created.kind == "created"
    assert await ledger(memsvc_database_url) == ["msg-1", "msg-2"]


async def test_messages_already_remembered_are_skipped_without_asking_again(
    service: MemoryService, extractor: OpenAIChatExtractor, chat: FakeChatServer
) -> None:
    first = said("I live in Paris.")
    await service.remember(SCOPE, first, extractor=extractor)
    requests = len(chat.requests)
    again = await service.remember(SCOPE, first, extractor=extractor)
    assert again.applied == () and again.remembered == ()
    assert again.already_remembered == ("msg-1",) and again.model_calls == 0
    assert len(chat.requests) == requests
    # Only the new message of a longer history is read.
    more = await service.remember(
        SCOPE, [*first, *said("I prefer tea.", start=2)], extractor=extractor
    )
    assert more.already_remembered == ("msg-1",) and more.remembered == ("msg-2",)
    assert chat.requests[-1].payload["messages"] == [{"role": "user", "content": "I prefer tea."}]
    assert await contents(service) == ["I live in Paris.", "I prefer tea."]
    # Message ids are per exact scope: another session remembers its own.
    other = await service.remember(SCOPE.with_session("s-2"), first, extractor=extractor)
    assert other.remembered == ("msg-1",)


async def test_the_extractor_sees_related_memories_under_handles_and_updates_by_handle(
    service: MemoryService, extractor: OpenAIChatExtractor, chat: FakeChatServer
) -> None:
    paris = await service.memories.add(SCOPE, "The user lives in Paris.", metadata={"kind": "home"})
    elsewhere = await service.memories.add(SCOPE.with_session("s-9"), "The user lives in Paris.")
    chat.then(
        Reply(answer=facts("The user lives in Paris, in the 11th arrondissement.")),
        Reply(answer=operations(update("m1", "The user lives in Paris (11th arrondissement)."))),
    )
    result = await service.remember(
        SCOPE, said("I live in the 11th, in Paris."), extractor=extractor
    )
    shown = chat.requests[-1].payload
    assert shown["facts"] == [
        {"fact": "The user lives in Paris, in the 11th arrondissement.", "related": ["m1"]}
    ]
    assert [m["ref"] for m in shown["memories"]] == ["m1"]
    assert str(paris.id) not in json.dumps(shown)  # handles, never ids
    [applied] = result.applied
    assert applied.operation == UPDATE("m1", "The user lives in Paris (11th arrondissement).")
    assert applied.memory is not None and applied.memory.id == paris.id
    updated = await service.memories.get(paris.id)
    assert updated.content == "The user lives in Paris (11th arrondissement)."
    assert updated.version == 2
    assert updated.metadata["kind"] == "home"
    assert updated.metadata["provenance"]["operation"] == "UPDATE"
    assert updated.metadata["provenance"]["source_message_ids"] == ["msg-1"]
    events = await service.memories.history(paris.id)
    assert [e.kind for e in events] == ["created", "updated"]
    assert (await service.memories.get(elsewhere.id)).version == 1  # another scope's: not shown


async def test_a_hallucinated_ref_touches_no_memory_and_leaves_the_messages_pending(
    service: MemoryService,
    extractor: OpenAIChatExtractor,
    chat: FakeChatServer,
    memsvc_database_url: str,
) -> None:
    known = await service.memories.add(SCOPE, "The user lives in Paris.")
    unseen = await service.memories.add(SCOPE, "Deploys happen on Fridays.")
    chat.then(
        Reply(answer=facts("The user lives in Berlin.")),
        Reply(answer=operations(update("m7", "hijacked"), update(str(unseen.id), "hijacked"))),
    )
    result = await service.remember(SCOPE, said("I moved to Berlin."), extractor=extractor)
    assert result.applied == () and result.remembered == ()
    assert result.pending == ("msg-1",)
    assert [(r.index, r.reason) for r in result.skipped] == [
        (0, "unknown ref 'm7': not a memory shown"),
        (1, f"unknown ref '{unseen.id}': not a memory shown"),
    ]
    for memory in (known, unseen):
        assert (await service.memories.get(memory.id)).version == 1
    assert await ledger(memsvc_database_url) == []
    # Pending messages are asked about again by the next call.
    again = await service.remember(SCOPE, said("I moved to Berlin."), extractor=extractor)
    assert again.remembered == ("msg-1",)
    assert "I moved to Berlin." in await contents(service)


async def test_an_answer_that_is_not_json_applies_nothing(
    service: MemoryService,
    extractor: OpenAIChatExtractor,
    chat: FakeChatServer,
    memsvc_database_url: str,
) -> None:
    chat.then(
        Reply(answer=facts("The user lives in Berlin.")),
        Reply(content="ADD: the user lives in Berlin"),
        Reply(content="ADD: the user lives in Berlin"),  # the tool-call try
    )
    result = await service.remember(SCOPE, said("I moved to Berlin."), extractor=extractor)
    assert result.applied == () and result.pending == ("msg-1",)
    [whole] = result.skipped
    assert whole.index is None and whole.reason.startswith("the answer is not JSON")
    assert await contents(service) == [] and await ledger(memsvc_database_url) == []
    chat.then(Reply(content="nope"), Reply(content="nope"))
    bad_facts = await service.remember(SCOPE, said("I moved to Berlin."), extractor=extractor)
    assert bad_facts.pending == ("msg-1",) and bad_facts.model_calls == 1
    assert bad_facts.skipped[0].stage == "facts"


async def test_bad_operations_are_refused_one_by_one_and_the_rest_applied(
    service: MemoryService, extractor: OpenAIChatExtractor, chat: FakeChatServer
) -> None:
    await service.memories.add(
        SCOPE, "The user lives in Paris.", valid_from=datetime(2024, 1, 1, tzinfo=UTC)
    )
    chat.then(
        Reply(answer=facts("The user lives in Berlin.", "The user likes tea.")),
        Reply(
            answer=operations(
                add("The user likes tea.", importance=0.8,
                    metadata=[{"key": "kind", "value": "preference"}]),
                add("x" * 5000),
                supersede("m1", "The user lives in Berlin.", "2024-06-01"),
                invalidate("m1"),
                {"op": "MERGE"},
                noop(),
            )
        ),
    )
    result = await service.remember(
        SCOPE, said("Moved to Berlin; tea please."), extractor=extractor
    )
    assert [a.index for a in result.applied] == [0, 2, 5]
    tea = result.applied[0].memory
    assert tea is not None and tea.importance == 0.8 and tea.metadata["kind"] == "preference"
    berlin = result.applied[1].memory
    assert berlin is not None and berlin.valid_from == datetime(2024, 6, 1, tzinfo=UTC)
    assert [(r.index, r.reason) for r in result.skipped] == [
        (1, "content: is 5000 characters, over the limit of 2000"),
        (3, "'m1' is already acted on by operation 2"),
        (4, "unknown op 'MERGE': must be one of ADD, UPDATE, SUPERSEDE, INVALIDATE, NOOP"),
    ]
    assert result.remembered == ("msg-1",)
    assert chat.requests[-1].payload["allowed"] == [
        "ADD", "UPDATE", "SUPERSEDE", "INVALIDATE", "NOOP"
    ]


async def test_too_many_operations_refuse_the_answer_whole(
    service: MemoryService, extractor: OpenAIChatExtractor, chat: FakeChatServer
) -> None:
    chat.then(
        Reply(answer=facts("a fact")),
        Reply(answer=operations(*(add(f"fact {i}") for i in range(51)))),
    )
    result = await service.remember(SCOPE, said("many facts"), extractor=extractor)
    assert result.applied == () and result.pending == ("msg-1",)
    assert result.skipped[0].reason == "the answer holds 51 operations, over the limit of 50"
    assert await contents(service) == []


async def test_an_operation_the_store_refuses_is_rolled_back_alone(
    service: MemoryService, extractor: OpenAIChatExtractor, chat: FakeChatServer
) -> None:
    await service.memories.add(SCOPE, "The user lives in Paris.")
    await service.memories.add(SCOPE, "The user lives in Berlin.")
    chat.then(
        Reply(answer=facts("The user lives in Berlin.")),
        # The Berlin memory (m1, the nearest) reworded as the Paris one: the
        # scope's unique content refuses it; the other two go through.
        Reply(
            answer=operations(
                add("The user has a cat."),
                update("m1", "The user lives in Paris."),
                update("m2", "The user lived in Paris before."),
            )
        ),
    )
    result = await service.remember(SCOPE, said("Berlin, with my cat."), extractor=extractor)
    shown = {m["ref"]: m["content"] for m in chat.requests[-1].payload["memories"]}
    assert shown == {"m1": "The user lives in Berlin.", "m2": "The user lives in Paris."}
    assert [a.index for a in result.applied] == [0, 2]
    [refused] = result.skipped
    assert refused.index == 1 and refused.stage == "apply"
    assert refused.reason.startswith("refused by the store:")
    assert await contents(service) == [
        "The user has a cat.", "The user lived in Paris before.", "The user lives in Berlin."
    ]


async def test_messages_stating_nothing_are_recorded_after_one_model_call(
    service: MemoryService,
    extractor: OpenAIChatExtractor,
    chat: FakeChatServer,
    memsvc_database_url: str,
) -> None:
    chat.then(Reply(answer=facts()))
    result = await service.remember(SCOPE, said("ok", role="assistant"), extractor=extractor)
    assert result.model_calls == 1 and result.applied == () and result.remembered == ("msg-1",)
    assert await ledger(memsvc_database_url) == ["msg-1"]


async def test_a_long_conversation_is_read_in_batches_each_applied_on_its_own(
    service: MemoryService, extractor: OpenAIChatExtractor, chat: FakeChatServer
) -> None:
    count = 2 * BATCH_MESSAGES + 5
    result = await service.remember(
        SCOPE, said(*(f"Fact number {i}." for i in range(count))), extractor=extractor
    )
    assert result.model_calls == 6
    assert [len(r.payload["messages"]) for r in chat.requests if r.step == "facts"] == [
        BATCH_MESSAGES, BATCH_MESSAGES, 5
    ]
    assert len(result.remembered) == count and len(result.applied) == count
    assert await service.memories.count(SCOPE) == count


async def test_an_endpoint_failure_applies_nothing_and_a_retry_succeeds(
    service: MemoryService,
    extractor: OpenAIChatExtractor,
    chat: FakeChatServer,
    memsvc_database_url: str,
) -> None:
    chat.then(Reply(answer=facts("The user likes tea.")), *(Reply(status=503) for _ in range(4)))
    with pytest.raises(ExtractionError) as raised:
        await service.remember(SCOPE, said("I like tea."), extractor=extractor)
    assert raised.value.status == 503
    assert await contents(service) == [] and await ledger(memsvc_database_url) == []
    result = await service.remember(SCOPE, said("I like tea."), extractor=extractor)
    assert result.remembered == ("msg-1",) and await contents(service) == ["I like tea."]


async def test_a_tool_call_only_server_works_end_to_end(service: MemoryService) -> None:
    with serving(supports=("tool",)) as chat:
        extractor = OpenAIChatExtractor(chat.base_url, "m", backoff_s=0.01)
        result = await service.remember(SCOPE, said("I like tea."), extractor=extractor)
    assert result.remembered == ("msg-1",) and await contents(service) == ["I like tea."]
    assert [r.way for r in chat.requests] == ["json_schema", "tool", "tool"]


async def test_langchain_messages_are_remembered(
    service: MemoryService, extractor: OpenAIChatExtractor
) -> None:
    result = await service.remember(
        SCOPE,
        [HumanMessage("I live in Oslo.", id="h1"), AIMessage("Nice city.", id="a1")],
        extractor=extractor,
    )
    assert result.remembered == ("h1", "a1") and await contents(service) == ["I live in Oslo."]


async def test_bad_input_is_refused_before_anything_is_asked_or_written(
    service: MemoryService, extractor: OpenAIChatExtractor, chat: FakeChatServer
) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"messages": [{"role": "user", "content": "x"}]}, "messages[0].id"),
        ({"messages": said("x"), "k_candidates": 0}, "k_candidates"),
        ({"messages": said("x"), "k_candidates": 101}, "k_candidates"),
        ({"messages": said("x"), "extractor": object()}, "extractor"),
    ]
    for arguments, field in cases:
        options = {"extractor": extractor, **arguments}
        with pytest.raises(ValidationError) as raised:
            await service.remember(SCOPE, **options)
        assert raised.value.field == field
    with pytest.raises(ValidationError) as raised:
        await service.remember(Scope("acme", ""), said("x"), extractor=extractor)
    with pytest.raises(ValidationError) as raised:
        await service.remember(SCOPE, said("x"))  # no extractor anywhere
    assert raised.value.field == "extractor"
    assert chat.requests == [] and await contents(service) == []
    assert (await service.remember(SCOPE, [], extractor=extractor)).model_calls == 0


async def test_the_default_extractor_comes_from_open_or_from_memsvc_extractor(
    memsvc_database_url: str, chat: FakeChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSVC_EXTRACTOR_BASE_URL", chat.base_url)
    settings = settings_for_tests(memsvc_database_url, extractor="openai:from-settings")
    async with MemoryService.open(settings) as svc:
        assert isinstance(svc.extractor, OpenAIChatExtractor)
        await svc.remember(SCOPE, said("I like tea."))
    assert chat.requests[-1].body["model"] == "from-settings"
    given = OpenAIChatExtractor(chat.base_url, "from-open")
    async with MemoryService.open(settings, extractor=given) as svc:
        assert svc.extractor is given
        await svc.remember(SCOPE, said("I like coffee.", start=2))
    assert chat.requests[-1].body["model"] == "from-open"


class ChangingExtractor:
    """An app's extractor that changes the memory it is about to update, ``times`` times.

    It stands for another writer changing a candidate while the model answers.
    """

    name = "changing"
    version = "1"
    model: str | None = None

    def __init__(self, service: MemoryService, target: uuid.UUID, times: int) -> None:
        self.service, self.target, self.times = service, target, times
        self.requests: list[ExtractionRequest] = []

    async def facts(self, messages: Sequence[Message]) -> object:
        return {"facts": ["The user lives in Berlin."]}

    async def operations(self, request: ExtractionRequest) -> object:
        self.requests.append(request)
        if len(self.requests) <= self.times:
            memory = await self.service.memories.get(self.target)
            await self.service.memories.update(
                self.target, content=f"{memory.content} (edited {len(self.requests)})"
            )
        return [UPDATE("m1", "The user lives in Berlin."), NOOP()]


async def test_a_candidate_changed_meanwhile_is_asked_about_once_more(
    service: MemoryService, memsvc_database_url: str
) -> None:
    paris = await service.memories.add(SCOPE, "The user lives in Paris.")
    extractor = ChangingExtractor(service, paris.id, times=1)
    result = await service.remember(SCOPE, said("I moved to Berlin."), extractor=extractor)
    # Asked again with the memory as it is now, then applied on that version.
    assert len(extractor.requests) == 2 and result.model_calls == 3
    assert extractor.requests[1].candidates[0].content == "The user lives in Paris. (edited 1)"
    memory = await service.memories.get(paris.id)
    assert memory.content == "The user lives in Berlin." and memory.version == 3
    assert memory.metadata["provenance"]["extractor"] == "changing"
    assert await ledger(memsvc_database_url) == ["msg-1"]


async def test_a_candidate_changed_twice_is_a_conflict_with_nothing_applied(
    service: MemoryService, memsvc_database_url: str
) -> None:
    paris = await service.memories.add(SCOPE, "The user lives in Paris.")
    extractor = ChangingExtractor(service, paris.id, times=2)
    with pytest.raises(ConflictError, match="changed again"):
        await service.remember(SCOPE, said("I moved to Berlin."), extractor=extractor)
    memory = await service.memories.get(paris.id)
    assert memory.content == "The user lives in Paris. (edited 1) (edited 2)"
    assert await ledger(memsvc_database_url) == []


def test_the_blocking_client_remembers(settings: Settings, chat: FakeChatServer) -> None:
    extractor = OpenAIChatExtractor(chat.base_url, "m")
    with SyncMemoryService.open(settings, extractor=extractor) as svc:
        result = svc.remember(SCOPE, said("I like tea."))
        assert result.remembered == ("msg-1",)
        assert svc.remember(SCOPE, said("I like tea.")).already_remembered == ("msg-1",)


async def test_facts_all_refused_leave_the_messages_pending(
    service: MemoryService, extractor: OpenAIChatExtractor, chat: FakeChatServer
) -> None:
    chat.then(Reply(answer=facts("", "x" * 3000)))
    result = await service.remember(SCOPE, said("I like tea."), extractor=extractor)
    assert result.pending == ("msg-1",) and result.remembered == ()
    assert [(r.index, r.stage) for r in result.skipped] == [(0, "facts"), (1, "facts")]
    assert chat.steps() == ["facts"]


async def test_a_fact_stated_and_changed_in_one_batch_is_added_then_superseded(
    service: MemoryService, chat: FakeChatServer, extractor: OpenAIChatExtractor
) -> None:
    chat.then(
        Reply(answer=facts("The user lives in Paris.", "The user moved to Berlin.")),
        Reply(answer=operations(
            add("The user lives in Paris.", valid_from="2024-03-01T00:00:00Z"),
            supersede("new1", "The user lives in Berlin.", "2024-06-01T00:00:00Z"),
        )),
    )
    messages = said("I live in Paris.", "Actually, we moved to Berlin in June.")
    result = await service.remember(SCOPE, messages, extractor=extractor)
    assert result.skipped == ()
    paris, berlin = (a.memory for a in result.applied)
    assert paris is not None and berlin is not None
    now = await service.memories.list(SCOPE, limit=10)
    assert [m.content for m in now] == ["The user lives in Berlin."]
    ended = await service.memories.get(paris.id)
    assert ended.valid_to == datetime(2024, 6, 1, tzinfo=UTC) and ended.superseded_by == berlin.id
