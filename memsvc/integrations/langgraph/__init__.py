"""LangGraph on memsvc: ``MemsvcSaver`` (checkpointer).

Needs the ``langgraph`` extra (``pip install memsvc[langgraph]``).
"""

from memsvc.integrations.langgraph.saver import MemsvcSaver

__all__ = ["MemsvcSaver"]
