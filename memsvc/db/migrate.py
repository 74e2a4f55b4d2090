"""Running the alembic migrations from code and checking where a database stands."""

from __future__ import annotations

import asyncio
import io
from importlib import resources
from typing import Any

import asyncpg
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection

from memsvc.core.errors import SchemaError
from memsvc.core.settings import Settings, env_var
from memsvc.db import partitions
from memsvc.db.embedded import EmbeddedPostgres

# Key of the advisory lock that serialises concurrent `upgrade` runs.
MIGRATION_LOCK_KEY = 0x6D656D737663  # "memsvc"

PGVECTOR_MISSING = (
    "the pgvector extension is not available on this PostgreSQL server. Install it "
    "(Debian/Ubuntu: apt-get install postgresql-<major>-pgvector; Docker: the "
    "pgvector/pgvector image), or leave MEMSVC_DATABASE_URL unset to use the embedded "
    "PostgreSQL that ships with pgvector"
)


def script_location() -> str:
    """Where the migration scripts are (inside the installed package)."""
    return str(resources.files("memsvc.migrations"))


def alembic_config(
    settings: Settings, dsn: str | None = None, *, output: io.StringIO | None = None
) -> Config:
    """An alembic Config carrying memsvc's settings and, optionally, a DSN."""
    config = Config(output_buffer=output)
    config.set_main_option("script_location", script_location())
    config.attributes["settings"] = settings
    if dsn is not None:
        config.attributes["dsn"] = dsn
    return config


def migration_settings(config: Config) -> Settings:
    """The settings a migration run uses (given in code, or from the environment)."""
    settings = config.attributes.get("settings")
    if settings is None:
        settings = Settings()
        config.attributes["settings"] = settings
    assert isinstance(settings, Settings)
    return settings


def to_sqlalchemy_url(dsn: str) -> str:
    """Turn a ``postgresql://`` DSN into SQLAlchemy's asyncpg form."""
    for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
        if dsn.startswith(prefix):
            return "postgresql+asyncpg://" + dsn[len(prefix) :]
    raise SchemaError(f"not a PostgreSQL URL: {dsn.split('://')[0]}://...")


def sqlalchemy_url(config: Config, settings: Settings) -> str:
    """The URL env.py connects to: given DSN, settings, or the embedded server."""
    dsn = config.attributes.get("dsn") or settings.database_url
    if dsn is None:
        if config.attributes.get("embedded") is None:
            embedded = EmbeddedPostgres(settings.data_dir)
            embedded.start()
            config.attributes["embedded"] = embedded
        dsn = config.attributes["embedded"].dsn
    return to_sqlalchemy_url(str(dsn))


def ensure_vector_extension(connection: Connection) -> None:
    """Create pgvector, or fail with a message that names the fix."""
    available = connection.execute(
        text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    ).first()
    if available is None:
        raise SchemaError(PGVECTOR_MISSING)
    connection.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))


def head_revision() -> str:
    """The newest migration's revision id."""
    script = ScriptDirectory(script_location())
    heads = script.get_heads()
    if len(heads) != 1:
        raise SchemaError(f"migrations have {len(heads)} heads, expected one")
    return heads[0]


async def current_revision(conn: asyncpg.Connection, schema: str) -> str | None:
    """The revision a database is at, or None when memsvc was never migrated there."""
    exists = await conn.fetchval("SELECT to_regclass($1)", f"{schema}.alembic_version")
    if exists is None:
        return None
    revision: str | None = await conn.fetchval(f"SELECT version_num FROM {schema}.alembic_version")
    return revision


def _finish(config: Config) -> None:
    embedded = config.attributes.get("embedded")
    if embedded is not None:
        embedded.close()


def upgrade(settings: Settings, dsn: str | None = None, revision: str = "head") -> None:
    """Upgrade the database (blocking; runs alembic's own event loop)."""
    config = alembic_config(settings, dsn)
    try:
        command.upgrade(config, revision)
    finally:
        _finish(config)


def downgrade(settings: Settings, dsn: str | None = None, revision: str = "base") -> None:
    """Downgrade the database (blocking)."""
    config = alembic_config(settings, dsn)
    try:
        command.downgrade(config, revision)
    finally:
        _finish(config)


def render_sql(settings: Settings, revision: str = "head", dsn: str | None = None) -> str:
    """The SQL an upgrade would run, without touching a database."""
    output = io.StringIO()
    config = alembic_config(settings, dsn or "postgresql://render-only/memsvc", output=output)
    command.upgrade(config, revision, sql=True)
    return output.getvalue()


async def upgrade_async(settings: Settings, dsn: str, revision: str = "head") -> None:
    """Upgrade from async code: alembic runs in a worker thread with its own loop."""
    await asyncio.to_thread(upgrade, settings, dsn, revision)


def recorded_settings_mismatch(recorded: dict[str, Any], settings: Settings) -> list[str]:
    """Settings that differ from what the first migration recorded."""
    wanted = {
        "embedding_dim": str(settings.embedding_dim),
        "vector_type": settings.vector_type,
        "distance": settings.distance,
        "text_search_config": settings.text_search_config,
    }
    hints = {
        # The column is rebuilt by migrating it again under the new setting.
        "text_search_config": " (to change it, run `alembic downgrade 0008` then `alembic "
        "upgrade head` with the new setting: that rebuilds the text search column)",
    }
    return [
        f"{name}: database has {recorded.get(name)!r}, settings say {value!r}: set "
        f"{env_var(name)}={recorded.get(name)} to use it"
        + ("" if name != "embedding_dim" else " (`memsvc reembed --dim` changes it)")
        + hints.get(name, "")
        for name, value in wanted.items()
        if recorded.get(name) != value
    ]


def recorded_partitions_mismatch(recorded: dict[str, Any], settings: Settings) -> str | None:
    """Why ``settings.partitions`` cannot open this database, or None when it matches."""
    have = recorded.get(partitions.SETTING_KEY, "0")
    want = str(settings.partition_count)
    if have == want:
        return None
    described = "not partitioned" if have == "0" else f"{have} hash partitions of memories"
    return (
        f"partitions: the database was created with {described}, settings say "
        f"{settings.partitions} (environment variable MEMSVC_PARTITIONS). Partitioning is "
        f"fixed when the schema is created: set MEMSVC_PARTITIONS={have}, or export, "
        "migrate a new db_schema / database with the new setting, and import"
    )


def settings_for_migration() -> Settings:
    """Inside a migration script: the settings of the run (schema, vectors)."""
    from alembic import context

    return migration_settings(context.config)
