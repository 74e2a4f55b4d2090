"""``svc.remember`` applying SUPERSEDE and INVALIDATE through valid time."""

from __future__ import annotations

from datetime import UTC, datetime

from memsvc import MemoryService, OpenAIChatExtractor, Scope
from tests.extraction.fake_chat import (
    FakeChatServer,
    Reply,
    add,
    facts,
    invalidate,
    operations,
    supersede,
)

SCOPE = Scope("acme", "bridge", "planner", "s-1")
JANUARY = datetime(2024, 1, 1, tzinfo=UTC)


async def test_supersede_and_invalidate_close_validity_in_the_batch(
    service: MemoryService, chat: FakeChatServer, extractor: OpenAIChatExtractor
) -> None:
    paris = await service.memories.add(SCOPE, "The user lives in Paris.", valid_from=JANUARY)
    cat = await service.memories.add(SCOPE, "The user has a cat called Tom.", valid_from=JANUARY)
    chat.then(
        Reply(answer=facts("The user lives in Berlin.", "The user's cat Tom died.")),
        Reply(
            answer=operations(
                {**supersede("m1", "The user lives in Berlin.", "2024-06-01"),
                 "metadata": [{"key": "slot", "value": "home"}]},
                invalidate("m2", "2024-07-01T00:00:00Z"),
                add("The user misses Tom."),
            )
        ),
    )
    messages = [{"role": "user", "content": "We moved to Berlin; Tom died.", "id": "u1"}]
    result = await service.remember(SCOPE, messages, extractor=extractor)
    assert chat.requests[-1].payload["allowed"] == [
        "ADD", "UPDATE", "SUPERSEDE", "INVALIDATE", "NOOP"
    ]
    shown = {m["ref"]: m for m in chat.requests[-1].payload["memories"]}
    assert shown["m1"]["content"] == paris.content and shown["m2"]["content"] == cat.content
    assert result.skipped == () and [a.operation.op for a in result.applied] == [
        "SUPERSEDE", "INVALIDATE", "ADD"
    ]
    berlin = result.applied[0].memory
    assert berlin is not None and berlin.content == "The user lives in Berlin."
    assert berlin.metadata["provenance"]["operation"] == "SUPERSEDE"
    assert berlin.metadata["slot"] == "home"  # a supersede's metadata, as an add's
    assert berlin.supersedes == (paris.id,)
    june = datetime(2024, 6, 1, tzinfo=UTC)
    old = await service.memories.get(paris.id)
    assert old.valid_to == june and old.superseded_by == berlin.id
    assert (await service.memories.get(cat.id)).valid_to == datetime(2024, 7, 1, tzinfo=UTC)
    now = sorted(m.content for m in await service.memories.list(SCOPE, limit=10))
    assert now == ["The user lives in Berlin.", "The user misses Tom."]


async def test_a_supersede_the_store_refuses_is_rolled_back_alone(
    service: MemoryService, chat: FakeChatServer, extractor: OpenAIChatExtractor
) -> None:
    # Paris holds from June 2024: a supersession dated March 2024 comes before it.
    await service.memories.add(
        SCOPE, "The user lives in Paris.", valid_from=datetime(2024, 6, 1, tzinfo=UTC)
    )
    chat.then(
        Reply(answer=facts("The user lives in Berlin.")),
        Reply(answer=operations(supersede("m1", "The user lives in Berlin.", "2024-03-01"),
                                add("The user likes tea."))),
    )
    messages = [{"role": "user", "content": "Berlin. Tea.", "id": "u1"}]
    result = await service.remember(SCOPE, messages, extractor=extractor)
    assert [a.operation.op for a in result.applied] == ["ADD"]
    [refused] = result.skipped
    assert refused.index == 0 and refused.stage == "apply"
    assert "must be after the valid_from" in refused.reason
    contents = sorted(m.content for m in await service.memories.list(SCOPE, valid="all"))
    assert contents == ["The user likes tea.", "The user lives in Paris."]
