"""SQL text of :mod:`memsvc.ops.roles`: the least-privilege role script.

Identifiers are checked by the caller (lower-case identifiers only), so they
are interpolated as they are.
"""

from __future__ import annotations

ROLE_SCRIPT = """\
-- memsvc: least-privilege roles for schema {schema}.
-- Run once per database as a superuser (or a role with CREATEROLE that owns
-- the database), e.g. `psql "$ADMIN_URL" -f roles.sql`. Re-running is safe.
BEGIN;

-- Login roles; give them passwords (or use your auth method) afterwards:
--   ALTER ROLE {migration} PASSWORD '...';
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{migration}') THEN
        CREATE ROLE {migration} LOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{runtime}') THEN
        CREATE ROLE {runtime} LOGIN;
    END IF;
END
$$;

-- pgvector needs a superuser to install; the migrations then find it.
CREATE EXTENSION IF NOT EXISTS vector;

-- The migration role owns the schema: it creates, alters and drops
-- everything in it (`memsvc migrate` / `alembic upgrade head` run as it).
CREATE SCHEMA IF NOT EXISTS {schema} AUTHORIZATION {migration};
ALTER SCHEMA {schema} OWNER TO {migration};
DO $$
BEGIN
    -- Migrations run CREATE SCHEMA IF NOT EXISTS, which checks this right first.
    EXECUTE format('GRANT CREATE ON DATABASE %I TO {migration}', current_database());
END
$$;
REVOKE ALL ON SCHEMA {schema} FROM PUBLIC;

-- The runtime role (the app's MemoryService): rows only. No CREATE on the
-- schema (no DDL), no TRUNCATE, no ownership of anything.
GRANT USAGE ON SCHEMA {schema} TO {runtime};
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {runtime};
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {runtime};

-- Tables, views and sequences the migration role creates later get the same
-- grants (views: SELECT is what matters; they are not updatable).
ALTER DEFAULT PRIVILEGES FOR ROLE {migration} IN SCHEMA {schema}
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {runtime};
ALTER DEFAULT PRIVILEGES FOR ROLE {migration} IN SCHEMA {schema}
    GRANT USAGE, SELECT ON SEQUENCES TO {runtime};

COMMIT;
"""
