"""Whether the database is a Citus cluster, for the few paths that differ there.

memsvc sends the same statements to one server and to a Citus coordinator;
what cannot work the same way on a cluster (a watermark read from one node,
statements locking rows of every tenant) asks :func:`citus_installed` and
takes its Citus path, or raises :class:`memsvc.CitusUnsupportedError`.
"""

from __future__ import annotations

import asyncpg

from memsvc.db.cluster_queries import CITUS_INSTALLED


async def citus_installed(conn: asyncpg.Connection) -> bool:
    """Whether the citus extension is installed in the connection's database."""
    return bool(await conn.fetchval(CITUS_INSTALLED))
