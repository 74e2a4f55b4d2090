"""Conversation messages as memsvc takes them: dicts or LangChain messages.

Each message needs an ``id``: remembering is idempotent per message id within
a scope, so a message without one could be remembered twice. LangChain
messages are read by their public attributes (``type``, ``content``, ``id``),
without importing LangChain.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memsvc.core.errors import ValidationError
from memsvc.core.scope import validate_id
from memsvc.core.validation import check_text, validate_sequence

ROLES = ("user", "assistant", "system", "tool")
# Other names for the roles: LangChain's message types and OpenAI's older "function".
_ROLE_ALIASES = {"human": "user", "ai": "assistant", "function": "tool", "developer": "system"}


@dataclass(frozen=True)
class Message:
    """One message of a conversation.

    Attributes:
        id: The app's id of the message, unique within the scope.
        role: ``user``, ``assistant``, ``system`` or ``tool``.
        content: Its text (the text parts of a multi-part message, joined).
        at: When it was said (timezone-aware), if known.
    """

    id: str
    role: str
    content: str
    at: datetime | None = None


def normalize_messages(messages: object, max_content_bytes: int) -> list[Message]:
    """Check ``messages`` (dicts or LangChain messages) and return them as :class:`Message`.

    Raises:
        ValidationError: Naming the message and field (``messages[2].id``).
    """
    items = validate_sequence(messages, "messages")
    result: list[Message] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        message = _one(item, f"messages[{index}]", max_content_bytes)
        if message.id in seen:
            raise ValidationError(
                f"messages[{index}].id", f"repeats the id of messages[{seen[message.id]}]"
            )
        seen[message.id] = index
        result.append(message)
    return result


def _one(item: object, field: str, max_content_bytes: int) -> Message:
    if isinstance(item, Mapping):
        role, content, message_id, at = (
            item.get("role"), item.get("content"), item.get("id"), item.get("at")
        )
    elif hasattr(item, "type") and hasattr(item, "content"):
        # A LangChain message: its type names the role (a ChatMessage carries its own).
        role = getattr(item, "role", None) if item.type == "chat" else item.type
        content, message_id, at = item.content, getattr(item, "id", None), None
    else:
        raise ValidationError(
            field, f"must be a dict or a LangChain message, not {type(item).__name__}"
        )
    return Message(
        id=_message_id(message_id, f"{field}.id"),
        role=_role(role, f"{field}.role"),
        content=_content(content, f"{field}.content", max_content_bytes),
        at=_moment(at, f"{field}.at"),
    )


def _message_id(value: object, field: str) -> str:
    if value is None:
        raise ValidationError(field, "required: remembering is idempotent per message id")
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    return validate_id(field, value)


def _role(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise ValidationError(field, f"must be one of {', '.join(ROLES)}")
    role = _ROLE_ALIASES.get(value.lower(), value.lower())
    if role not in ROLES:
        raise ValidationError(field, f"must be one of {', '.join(ROLES)}, not {value!r}")
    return role


def _content(value: object, field: str, max_bytes: int) -> str:
    if isinstance(value, list):
        # Multi-part content (LangChain, OpenAI): its text parts, in order.
        parts = []
        for part in value:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        value = "\n".join(parts)
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, not {type(value).__name__}")
    check_text(field, value)
    size = len(value.encode("utf-8"))
    if size > max_bytes:
        raise ValidationError(field, f"is {size} bytes, over the limit of {max_bytes}")
    return value


def _moment(value: object, field: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError as exc:
            raise ValidationError(field, "must be an ISO 8601 date and time") from exc
    if not isinstance(value, datetime):
        raise ValidationError(field, "must be a datetime or an ISO 8601 string")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(field, "must be timezone-aware")
    return value


def message_payload(message: Message) -> dict[str, Any]:
    """What an extractor is shown of a message: role, text, and when (never the id)."""
    shown: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.at is not None:
        shown["at"] = message.at.isoformat()
    return shown
