"""The tables of the LangGraph integrations: the saver's and the store's
repositories, shared by ``memsvc.integrations.langgraph`` and erasure.

May import: ``memsvc.core``, ``memsvc.db``, ``memsvc.telemetry``.
"""
