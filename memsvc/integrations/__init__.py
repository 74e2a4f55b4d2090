"""Adapters to agent frameworks (LangGraph, LangChain, MCP).

Each module imports its framework lazily; nothing below them imports them.

May import: the service and the blocking client (their public API), and
``memsvc.langgraph_db`` for the LangGraph tables.
"""
