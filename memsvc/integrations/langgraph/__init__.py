"""LangGraph on memsvc: a store (and checkpoint saver) on an open MemoryService.

Needs the ``langgraph`` extra (``pip install memsvc[langgraph]``).
"""

from memsvc.integrations.langgraph.store import MemsvcStore

__all__ = ["MemsvcStore"]
