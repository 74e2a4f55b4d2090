"""Which tenant a repository call acts for (row-level security).

With ``Settings.row_level_security`` on, PostgreSQL policies show and accept
only rows whose ``tenant_id`` equals the transaction's ``memsvc.tenant``
setting. Every repository method passes the tenant its statements act for
(its ``scope``'s, or its ``tenant=`` argument) down to the connection helpers
of :class:`memsvc.db.repository.Repository` as a required argument; they set
it with ``SET LOCAL`` (:func:`set_tenant`) at the start of the transaction the
statements run in, so it lasts exactly one transaction and a pooled
connection never carries one tenant's context into another's request. A
call that names no tenant (None) is refused under row-level security.

``SET LOCAL``, not ``set_config(..., true)``: on Citus the policies run on
the workers, and Citus passes a ``SET LOCAL`` on to the worker connections
of the transaction (with ``citus.propagate_set_commands = 'local'``, which
``memsvc citus apply`` makes the database's default), never a function
call. ``SET`` takes no bound parameter, so the tenant is written as a quoted
literal; it must be the statement's only command (Citus forwards the text).
"""

from __future__ import annotations

from memsvc.db.sql import quote_literal


def set_tenant(tenant: str) -> str:
    """The statement making ``tenant`` the transaction's tenant (run it on its own)."""
    return f"SET LOCAL memsvc.tenant = {quote_literal(tenant)}"
