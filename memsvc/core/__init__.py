"""Core values every layer uses: scopes, models, errors, settings, validation, ids.

May import: the standard library and third-party packages only (never another memsvc package).
"""
