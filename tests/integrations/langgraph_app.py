"""A small LangGraph agent on memsvc, run as a separate process by the tests.

No model: the nodes are deterministic. ``remember`` writes a fact to the store
under the user's namespace; ``recall`` reads what earlier threads stored;
``approve`` interrupts for a human decision, so the graph stops there and a
later process resumes it from its checkpoint in PostgreSQL.

Usage: ``python -m tests.integrations.langgraph_app start|resume THREAD USER TEXT``;
prints one JSON line with the final state's messages.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt

from memsvc import MemoryService, Settings
from memsvc.integrations.langgraph import MemsvcSaver, MemsvcStore


async def recall(state: MessagesState, runtime: Runtime[dict[str, str]]) -> dict[str, Any]:
    user = runtime.context["user"]
    assert runtime.store is not None
    items = await runtime.store.asearch(("facts", user))
    known = sorted(item.value["text"] for item in items)
    return {"messages": [AIMessage(content="known: " + "; ".join(known))]}


async def remember(state: MessagesState, runtime: Runtime[dict[str, str]]) -> dict[str, Any]:
    user = runtime.context["user"]
    assert runtime.store is not None
    text = str(state["messages"][0].content)
    key = "fact-" + hashlib.sha256(text.encode()).hexdigest()[:12]
    await runtime.store.aput(("facts", user), key, {"text": text})
    return {"messages": [AIMessage(content=f"stored: {text}")]}


def approve(state: MessagesState) -> dict[str, Any]:
    decision = interrupt({"question": "keep this fact?"})
    return {"messages": [AIMessage(content=f"decision: {decision}")]}


def build(saver: MemsvcSaver, store: MemsvcStore) -> Any:
    graph = StateGraph(MessagesState, context_schema=dict)
    graph.add_node("recall", recall)
    graph.add_node("remember", remember)
    graph.add_node("approve", approve)
    graph.add_edge(START, "recall")
    graph.add_edge("recall", "remember")
    graph.add_edge("remember", "approve")
    graph.add_edge("approve", END)
    return graph.compile(checkpointer=saver, store=store)


async def main(action: str, thread: str, user: str, text: str) -> None:
    async with MemoryService.open(Settings()) as svc:
        saver = MemsvcSaver(svc, tenant="app")
        store = MemsvcStore(svc, tenant="app")
        app = build(saver, store)
        config: dict[str, Any] = {"configurable": {"thread_id": thread}}
        if action == "start":
            result = await app.ainvoke(
                {"messages": [HumanMessage(content=text)]}, config, context={"user": user}
            )
        else:
            result = await app.ainvoke(Command(resume=text), config, context={"user": user})
        snapshot = await app.aget_state(config)
        print(
            json.dumps(
                {
                    "messages": [str(m.content) for m in result["messages"]],
                    "interrupted": bool(snapshot.interrupts),
                    "next": list(snapshot.next),
                }
            )
        )


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
