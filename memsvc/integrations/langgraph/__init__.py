"""LangGraph on memsvc: ``MemsvcSaver`` (checkpointer), ``MemsvcStore`` (long-term store),
and ``remember_node`` (a node remembering a thread's new messages after each turn).

Needs the ``langgraph`` extra (``pip install memsvc[langgraph]``).
"""

from memsvc.integrations.langgraph.remember import remember_node
from memsvc.integrations.langgraph.saver import MemsvcSaver
from memsvc.integrations.langgraph.store import MemsvcStore

__all__ = ["MemsvcSaver", "MemsvcStore", "remember_node"]
