"""A LangGraph node that remembers a thread's new messages after each turn.

Put it after the node that answers (``agent -> remember -> END``): each
turn it hands the thread's messages to ``svc.remember``, whose ledger
skips the ones already remembered in the scope without asking the model,
so only the turn's new messages reach the extractor, each exactly once
(a turn retried, or a thread resumed from its checkpoint, adds nothing
twice). The node changes no state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig

from memsvc.core.errors import ValidationError
from memsvc.core.scope import Scope
from memsvc.extraction.protocols import Extractor
from memsvc.integrations.loop_bridge import async_service, on_service_loop
from memsvc.service import MemoryService
from memsvc.sync import SyncMemoryService

ScopeOf = Callable[[RunnableConfig], Scope]
# What the extractor reads: what the user and the assistant said.
SAID = ("human", "ai", "user", "assistant")


def _said(message: Any) -> bool:
    """A user's or assistant's message with text (not a tool call without words)."""
    kind = message.get("role") if isinstance(message, Mapping) else getattr(message, "type", None)
    content = (
        message.get("content") if isinstance(message, Mapping)
        else getattr(message, "content", None)
    )
    if isinstance(content, list):
        content = "".join(
            part if isinstance(part, str) else str(part.get("text", ""))
            for part in content if isinstance(part, str | Mapping)
        )
    return kind in SAID and isinstance(content, str) and bool(content.strip())


def remember_node(
    svc: MemoryService | SyncMemoryService,
    scope: Scope | ScopeOf,
    *,
    extractor: Extractor | None = None,
    messages_key: str = "messages",
    k_candidates: int = 10,
) -> Callable[[Any, RunnableConfig], Awaitable[dict[str, Any]]]:
    """A graph node remembering the thread's new messages into ``scope``'s memories.

    Args:
        svc: An open service (its loop runs the work, whichever loop runs the graph).
        scope: Where the memories go: a Scope, or a function of the run's
            config returning one (e.g. the user's scope from
            ``config["configurable"]["user_id"]``).
        extractor: As for ``svc.remember`` (default: the service's).
        messages_key: The state's key holding the messages (LangGraph's
            ``MessagesState`` uses ``messages``); messages need ids, which
            LangGraph's ``add_messages`` gives them.
        k_candidates: As for ``svc.remember``.

    Returns:
        An async node ``(state, config) -> {}`` for ``StateGraph.add_node``.
    """
    opened = async_service(svc, "remember_node")
    service = on_service_loop(opened, opened)
    if not isinstance(messages_key, str) or not messages_key:
        raise ValidationError("messages_key", "must be a non-empty string")

    async def remember(state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages = (
            state.get(messages_key) if isinstance(state, Mapping)
            else getattr(state, messages_key, None)
        )
        said = [m for m in messages or () if _said(m)]
        target = scope(config) if callable(scope) else scope
        if said:
            await service.remember(target, said, extractor=extractor, k_candidates=k_candidates)
        return {}

    return remember
