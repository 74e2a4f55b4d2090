"""Which tenant a repository call acts for (row-level security).

With ``Settings.row_level_security`` on, PostgreSQL policies show and accept
only rows whose ``tenant_id`` equals the transaction's ``memsvc.tenant``
setting. Every repository method passes the tenant its statements act for
(its ``scope``'s, or its ``tenant=`` argument) down to the connection helpers
of :class:`memsvc.db.repository.Repository` as a required argument; they set
it with ``set_config(..., true)`` at the start of the transaction the
statements run in, so it lasts exactly one transaction and a pooled
connection never carries one tenant's context into another's request. A
call that names no tenant (None) is refused under row-level security.
"""

from __future__ import annotations

SET_TENANT = "SELECT set_config('memsvc.tenant', $1, true)"
