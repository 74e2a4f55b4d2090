"""LangGraph on memsvc: ``MemsvcSaver`` (checkpointer) and ``MemsvcStore`` (long-term store).

Needs the ``langgraph`` extra (``pip install memsvc[langgraph]``).
"""

from memsvc.integrations.langgraph.saver import MemsvcSaver
from memsvc.integrations.langgraph.store import MemsvcStore

__all__ = ["MemsvcSaver", "MemsvcStore"]
