"""Assemblies (named groups of memories): the repository behind ``svc.assemblies``.

May import: ``memsvc.core``, ``memsvc.db``, ``memsvc.changes``, ``memsvc.memories``,
``memsvc.telemetry``.
"""
