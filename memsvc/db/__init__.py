"""PostgreSQL plumbing every feature runs on.

The schema (``tables``), migrations, the asyncpg pool and its codecs, the
embedded server, read replicas, error translation by SQLSTATE, the base
every repository shares (connections, transactions, retries, tenancy), and
``sql`` (bound parameters, scope predicates, the one quoting helper).

May import: ``memsvc.core``, ``memsvc.telemetry``, ``memsvc.progress``.
"""
