"""Messages are taken as dicts or LangChain messages, each checked and named when bad."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from langchain_core.messages import AIMessage, ChatMessage, HumanMessage, SystemMessage, ToolMessage

from memsvc import ValidationError
from memsvc.extraction import Message
from memsvc.extraction.messages import message_payload, normalize_messages

LIMIT = 1000


def test_dicts_become_messages_with_roles_and_times() -> None:
    at = datetime(2024, 6, 1, 9, 30, tzinfo=UTC)
    messages = normalize_messages(
        [
            {"role": "user", "content": "I moved to Berlin.", "id": "u1", "at": at},
            {"role": "assistant", "content": "Noted.", "id": 2, "at": "2024-06-01T09:31:00Z"},
            {"role": "human", "content": "Thanks", "id": "u3"},
        ],
        LIMIT,
    )
    assert messages == [
        Message("u1", "user", "I moved to Berlin.", at),
        Message("2", "assistant", "Noted.", datetime(2024, 6, 1, 9, 31, tzinfo=UTC)),
        Message("u3", "user", "Thanks"),
    ]
    assert message_payload(messages[0]) == {
        "role": "user", "content": "I moved to Berlin.", "at": "2024-06-01T09:30:00+00:00"
    }


def test_langchain_messages_are_read_by_their_public_attributes() -> None:
    messages = normalize_messages(
        [
            SystemMessage("Be brief.", id="s"),
            HumanMessage([{"type": "text", "text": "I live in"}, "Paris."], id="h"),
            AIMessage("Got it.", id="a"),
            ToolMessage("42", tool_call_id="c1", id="t"),
            ChatMessage("hi", role="user", id="c"),
        ],
        LIMIT,
    )
    assert [(m.id, m.role, m.content) for m in messages] == [
        ("s", "system", "Be brief."),
        ("h", "user", "I live in\nParis."),
        ("a", "assistant", "Got it."),
        ("t", "tool", "42"),
        ("c", "user", "hi"),
    ]


@pytest.mark.parametrize(
    ("messages", "field", "reason"),
    [
        ([{"role": "user", "content": "x"}], "messages[0].id", "required"),
        ([HumanMessage("no id")], "messages[0].id", "required"),
        (
            [
                {"role": "user", "content": "a", "id": "1"},
                {"role": "user", "content": "b", "id": "1"},
            ],
            "messages[1].id",
            "repeats the id of messages[0]",
        ),
        ([{"role": "robot", "content": "x", "id": "1"}], "messages[0].role", "must be one of"),
        ([{"role": "user", "content": 5, "id": "1"}], "messages[0].content", "must be a string"),
        ([{"role": "user", "content": "a\x00b", "id": "1"}], "messages[0].content", "NUL"),
        ([{"role": "user", "content": "x" * 1001, "id": "1"}], "messages[0].content", "limit"),
        (
            [{"role": "user", "content": "x", "id": "1", "at": datetime(2024, 1, 1)}],
            "messages[0].at",
            "timezone-aware",
        ),
        ([{"role": "user", "content": "x", "id": "1", "at": "soon"}], "messages[0].at", "ISO"),
        ([{"role": "user", "content": "x", "id": ""}], "messages[0].id", "empty"),
        (["just text"], "messages[0]", "must be a dict or a LangChain message"),
        ("not a list", "messages", ""),
    ],
)
def test_a_bad_message_is_a_validation_error_naming_it(
    messages: object, field: str, reason: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        normalize_messages(messages, LIMIT)
    assert raised.value.field == field
    assert reason in raised.value.reason
