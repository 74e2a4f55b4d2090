"""Moving data in and out: export, import, bulk loads, legacy stores.

May import: the feature packages, ``memsvc.db``, ``memsvc.core``.
"""
