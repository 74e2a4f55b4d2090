"""Alembic environment: settings from memsvc, async engine, one deployer at a time."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import ForeignKeyConstraint, pool, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from memsvc.db.migrate import (
    MIGRATION_LOCK_KEY,
    ensure_vector_extension,
    migration_settings,
    sqlalchemy_url,
)
from memsvc.db.partitions import PARTITION_NAME
from memsvc.db.tables import build_metadata

config = context.config
settings = migration_settings(config)
target_metadata = build_metadata(settings)
schema = settings.db_schema


def _included(name: str | None, type_: str, _parent: object) -> bool:
    # memsvc's schema only; the metadata declares partitioned tables, not
    # their partitions (memsvc.db.partitions).
    if type_ == "schema":
        return name == schema
    return not (type_ == "table" and name is not None and PARTITION_NAME.match(name))


def _included_object(
    item: object, _name: str | None, type_: str, _reflected: bool, _compare_to: object
) -> bool:
    # A foreign key to a partitioned table has one internal copy per
    # partition, which the metadata does not declare.
    if type_ == "foreign_key_constraint" and isinstance(item, ForeignKeyConstraint):
        return not PARTITION_NAME.match(item.referred_table.name)
    return True


def _configure(**kwargs: object) -> None:
    context.configure(
        target_metadata=target_metadata,
        version_table_schema=schema,
        include_schemas=True,
        include_name=_included,
        include_object=_included_object,
        compare_type=True,
        **kwargs,  # type: ignore[arg-type]
    )


def run_migrations_offline() -> None:
    """Render the migrations as SQL (``memsvc migrate --sql``, ``alembic upgrade --sql``)."""
    _configure(url=sqlalchemy_url(config, settings), literal_binds=True)
    with context.begin_transaction():
        context.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        context.execute("CREATE EXTENSION IF NOT EXISTS vector")
        context.run_migrations()


def _run_online(connection: Connection) -> None:
    # A transaction-scoped advisory lock: concurrent deploy pipelines queue
    # here, and the second one finds the schema already at head.
    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    ensure_vector_extension(connection)
    connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {schema}"))
    _configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()


async def run_migrations_online() -> None:
    """Run the migrations on a live database."""
    engine = create_async_engine(sqlalchemy_url(config, settings), poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run_online)
    finally:
        await engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    asyncio.run(run_migrations_online())
