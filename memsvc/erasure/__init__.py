"""Erasure (``svc.erase``, ``memsvc erase``): removes a scope and proves it.

May import: the feature packages, ``memsvc.working``, ``memsvc.db``, ``memsvc.core``.
"""
