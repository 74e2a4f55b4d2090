"""The change feed (``svc.changes``): its reader, wake-ups, epochs and stall reports.

May import: ``memsvc.core``, ``memsvc.db``, ``memsvc.telemetry``.
"""
