"""Long-term memories: the repository behind ``svc.memories`` and its search.

May import: ``memsvc.core``, ``memsvc.db``, ``memsvc.changes``, ``memsvc.embedding``,
``memsvc.telemetry``.
"""
