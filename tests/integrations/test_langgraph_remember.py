"""``remember_node`` in a compiled LangGraph graph: each turn's new messages remembered once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("langgraph", reason="the langgraph extra is not installed")

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph

from memsvc import MemoryService, OpenAIChatExtractor, Scope
from memsvc.integrations.langgraph import MemsvcSaver, remember_node
from memsvc.sync import SyncMemoryService
from tests.extraction.fake_chat import serving

pytestmark = pytest.mark.timeout(300)


def user_scope(config: RunnableConfig) -> Scope:
    return Scope("acme", project=config["configurable"]["user_id"])


def answer(state: MessagesState) -> dict[str, Any]:
    """A deterministic assistant (the fake extractor takes no facts from it)."""
    return {"messages": [AIMessage(content="Noted. Anything else?")]}


def build(svc: Any, extractor: OpenAIChatExtractor) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("agent", answer)
    graph.add_node("remember", remember_node(svc, user_scope, extractor=extractor))
    graph.add_edge(START, "agent")
    graph.add_edge("agent", "remember")
    graph.add_edge("remember", END)
    return graph.compile(checkpointer=MemsvcSaver(svc, tenant="acme"))


async def test_each_turns_new_messages_are_remembered_once(service: MemoryService) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": "t-1", "user_id": "ana"}}
    with serving() as chat:
        extractor = OpenAIChatExtractor(chat.base_url, "m", backoff_s=0.01)
        graph = build(service, extractor)
        await graph.ainvoke({"messages": [("user", "I live in Porto. I have a dog.")]}, config)
        assert chat.steps() == ["facts", "operations"]
        await graph.ainvoke({"messages": [("user", "My dog is called Rex.")]}, config)
        # The second turn showed the model only its own two messages.
        asked = chat.requests[2].payload["messages"]
        assert [m["content"] for m in asked] == ["My dog is called Rex.", "Noted. Anything else?"]
        # Every turn: one facts and one operations request, about that turn only.
        await graph.ainvoke({"messages": [("user", "Thanks.")]}, config)
        assert chat.steps()[4:] == ["facts", "operations"]
    memories = await service.memories.list(Scope("acme", project="ana"), limit=100)
    assert sorted(m.content for m in memories) == [
        "I have a dog.", "I live in Porto.", "My dog is called Rex.", "Thanks."
    ]
    history = [await service.memories.history(m.id) for m in memories]
    assert all([e.kind for e in events] == ["created"] for events in history)
    # The thread's messages came back from the checkpointer, remembered once each.
    state = await graph.aget_state(config)
    assert len(state.values["messages"]) == 6


def test_a_graph_run_from_blocking_code_on_a_sync_service(memsvc_settings: Any) -> None:
    with serving() as chat, SyncMemoryService.open(memsvc_settings) as svc:
        extractor = OpenAIChatExtractor(chat.base_url, "m", backoff_s=0.01)
        graph = build(svc, extractor)
        config: RunnableConfig = {"configurable": {"thread_id": "t-2", "user_id": "bo"}}
        asyncio.run(graph.ainvoke({"messages": [("user", "I play chess.")]}, config))
        memories = svc.memories.list(Scope("acme", project="bo"))
    assert [m.content for m in memories] == ["I play chess."]
