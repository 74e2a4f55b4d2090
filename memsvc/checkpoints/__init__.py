"""Session checkpoints: the repository behind ``svc.checkpoints``.

May import: ``memsvc.core``, ``memsvc.db``, ``memsvc.changes``, ``memsvc.telemetry``.
"""
