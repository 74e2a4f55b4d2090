"""Adapters to agent frameworks (LangGraph, LangChain, MCP).

Each module imports its framework lazily; nothing in the core imports them.
"""
