"""Pytest fixtures memsvc ships for applications' own tests (a ``pytest11`` plugin).

Installed with memsvc, they are available in any test suite:

- ``memsvc_service``: an open :class:`memsvc.MemoryService` on a clean, migrated
  database (``memsvc_settings`` / ``memsvc_database_url`` give its settings/DSN);
- ``memsvc_postgres``: the session's PostgreSQL server (``MEMSVC_TEST_DATABASE_URL``,
  testcontainers where Docker answers, or the embedded server);
- ``redis_url``: a private ``redis-server`` (or ``MEMSVC_TEST_REDIS_URL``);
  ``redis_server_factory`` starts servers a test may kill.

May import: anything below the blocking client (it sits beside it).
"""

from memsvc.testing.postgres import (  # noqa: F401
    memsvc_database_url,
    memsvc_postgres,
    memsvc_service,
    memsvc_settings,
    memsvc_template,
)
from memsvc.testing.redis import redis_server_factory, redis_url  # noqa: F401
