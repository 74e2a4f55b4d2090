"""The ``memsvc`` command: embedded database, migrations, demo, operations."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import click

from memsvc.core.errors import MemsvcError, SchemaError
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.db import migrate as migrations
from memsvc.db.embedded import EmbeddedPostgres, psql_executable, running_postmaster_pid
from memsvc.db.errors import translate_errors
from memsvc.db.pool import connect
from memsvc.embedding import embedder_from_spec
from memsvc.erasure.eraser import MAX_BATCH as ERASE_MAX_BATCH
from memsvc.erasure.receipt import ErasureReceipt
from memsvc.ops.citus import CitusNotInstalled, apply_citus, citus_sql
from memsvc.ops.doctor import Doctor
from memsvc.ops.doctor_report import DoctorReport
from memsvc.ops.gc import MAX_BATCH, GcReport
from memsvc.ops.recall_audit import DEFAULT_SAMPLE, DEFAULT_THRESHOLD, MAX_SAMPLE, RecallReport
from memsvc.ops.reembed import DEFAULT_BATCH as REEMBED_BATCH
from memsvc.ops.reembed import MAX_BATCH as REEMBED_MAX_BATCH
from memsvc.ops.reembed import ReembedReport
from memsvc.ops.render import (
    doctor_lines,
    erasure_lines,
    export_lines,
    gc_lines,
    legacy_lines,
    load_lines,
    recall_lines,
    reembed_lines,
    scope_text,
    stats_lines,
)
from memsvc.ops.roles import DEFAULT_MIGRATION_ROLE, DEFAULT_RUNTIME_ROLE, roles_sql
from memsvc.ops.stats import Stats
from memsvc.progress import NO_PROGRESS, LineProgress, ProgressReporter, RichProgress
from memsvc.service import MemoryService
from memsvc.transfer.export import ExportReport, check_import_file, open_output
from memsvc.transfer.index_repair import IndexRepairReport, rebuild_broken_indexes
from memsvc.transfer.legacy import LegacyReport, import_legacy
from memsvc.transfer.loader import LoadReport


def _settings() -> Settings:
    # A bad setting is a memsvc ValidationError naming it and its variable;
    # the group below turns it into one line.
    return Settings()


def _run(coroutine: Any) -> Any:
    try:
        return asyncio.run(coroutine)
    except MemsvcError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc


class MemsvcGroup(click.Group):
    """A command group where any memsvc error is one line on stderr and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MemsvcError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc


@click.group(cls=MemsvcGroup)
@click.version_option(package_name="memsvc")
def main() -> None:
    """memsvc: PostgreSQL + pgvector memory for AI agents.

    Settings come from MEMSVC_* environment variables (see docs/reference/settings.md). With
    no MEMSVC_DATABASE_URL, commands use the embedded PostgreSQL in
    MEMSVC_DATA_DIR (default ~/.memsvc).
    """


@main.command()
@click.option("--sql", is_flag=True, help="Print the SQL instead of running it.")
@click.option("--revision", default="head", show_default=True, help="Target revision.")
def migrate(sql: bool, revision: str) -> None:
    """Upgrade the schema to the newest migration (same as `alembic upgrade head`).

    At head, it then rebuilds any index of memsvc's that an interrupted build
    left invalid (or a vector index a stopped bulk load left missing), and says so.
    """
    settings = _settings()
    try:
        if sql:
            click.echo(migrations.render_sql(settings, revision, settings.database_url))
            return
        migrations.upgrade(settings, revision=revision)
    except MemsvcError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    click.echo(f"schema {settings.db_schema} is at {revision}")
    if revision not in ("head", migrations.head_revision()):
        return  # indexes are those of head's schema

    async def repair(progress: ProgressReporter) -> IndexRepairReport:
        async with _database_url(settings, progress) as dsn:
            return await rebuild_broken_indexes(dsn, settings, progress=progress)

    with _progress() as progress:
        report: IndexRepairReport = _run(repair(progress))
    _echo(report.lines())
    if report.failed:
        sys.exit(1)


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
    """Start the embedded server and leave it running (until `memsvc db stop`)."""
    server = _embedded()
    dsn = server.start(keep_running=True)
    server.close()  # keep_running: letting go does not stop it
    click.echo(f"embedded PostgreSQL running in {server.data_dir}")
    click.echo(dsn)


@db.command()
@click.option(
    "--force",
    is_flag=True,
    help="Stop it even while other processes use it (they lose their connections).",
)
def stop(force: bool) -> None:
    """Stop the embedded server, whoever started it; forget every holder.

    While other processes use it (see `memsvc db status`) it refuses, naming
    them, unless --force: their calls would fail until they reopen.
    """
    server = _embedded()
    was_running = running_postmaster_pid(server.data_dir) is not None
    holders = server.holders() if was_running and not force else []
    if holders:
        pids = ", ".join(str(holder.pid) for holder in holders)
        raise click.ClickException(
            f"the embedded PostgreSQL is in use by processes {pids}: stop them first, or "
            "pass --force (they lose their connections)"
        )
    server.stop()
    click.echo(f"embedded PostgreSQL {'stopped' if was_running else 'is not running'}")


@db.command()
def status() -> None:
    """Say whether the embedded server runs and who holds it (exit code 1 when it does not)."""
    server = _embedded()
    pid = running_postmaster_pid(server.data_dir)
    if pid is None:
        click.echo(f"not running ({server.data_dir})")
        sys.exit(1)
    holders = server.holders()
    held = ", ".join(str(holder.pid) for holder in holders) or "none"
    click.echo(f"running, pid {pid}, data in {server.data_dir}, held by processes: {held}")


@db.command()
def url() -> None:
    """Print the embedded server's connection URL (starting it, left running, if needed)."""
    server = _embedded()
    dsn = server.start(keep_running=True)
    server.close()
    click.echo(dsn)


@db.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("psql_args", nargs=-1, type=click.UNPROCESSED)
def psql(psql_args: tuple[str, ...]) -> None:
    """Run psql on the embedded server; every argument after `db psql` goes to psql.

    Example: memsvc db psql -c "select 1". psql comes from the wheel, else from
    PATH. While psql runs, it holds the server; if this command started the
    server, it stops again when psql exits.
    """
    if psql_args in (("--help",), ("-h",)):
        click.echo(click.get_current_context().get_help())
        return
    executable = psql_executable()
    server = _embedded()
    dsn = server.start()
    try:
        if executable is None:
            raise click.ClickException("psql not found; connect with: " + dsn)
        sys.exit(_run_child_holding(server, [executable, "-d", dsn, *psql_args]))
    finally:
        server.close()


def _run_child_holding(server: EmbeddedPostgres, argv: list[str]) -> int:
    """Run ``argv`` as a child registered as a holder of ``server``; its exit code."""
    child = subprocess.Popen(argv)
    # psql handles Ctrl-C itself (it cancels the query); this process waits.
    # (Signal handlers can only be changed from the main thread.)
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main_thread else None
    try:
        holder = EmbeddedPostgres(server.data_dir)
        try:
            holder.start(holder_pid=child.pid)
        except MemsvcError:
            pass  # it exited already; this process still holds the server
        try:
            return child.wait()
        finally:
            holder.close()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


@main.command()
def demo() -> None:
    """Store, search, group and checkpoint memories; print what happened."""
    from memsvc.demo import run_demo

    _run(run_demo(_settings(), click.echo))


@main.command()
@click.option("--tenant", required=True, help="The tenant every tool works in.")
@click.option("--project", default=None, help="Confine the tools to this project.")
@click.option("--agent", default=None, help="Confine the tools to this agent.")
@click.option("--transport", type=click.Choice(["stdio", "streamable-http"]), default="stdio",
              show_default=True, help="stdio for a client that starts the server; "
              "streamable-http to listen on --host/--port (path /mcp).")
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP address.")
@click.option("--port", default=8000, show_default=True, help="HTTP port.")
def mcp(
    tenant: str, project: str | None, agent: str | None, transport: str, host: str, port: int
) -> None:
    """Serve memories and working memory to agents as MCP tools.

    The tenant (and project/agent when given) is fixed here: no tool argument
    reaches outside it. Text search uses the embedder MEMSVC_EMBEDDER names.
    """
    try:
        from memsvc.integrations.mcp import serve
    except ImportError as exc:
        raise click.ClickException("the MCP server needs the mcp extra: memsvc[mcp]") from exc

    try:
        scope = Scope(tenant, project, agent)
    except MemsvcError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
    # stdout carries the protocol on stdio: anything for people goes to stderr.
    _run(serve(_settings(), scope, transport=transport, host=host, port=port,  # type: ignore[arg-type]
               on_ready=lambda line: click.echo(line, err=True)))


# --------------------------------------------------------------------- operations


@contextlib.contextmanager
def _progress() -> Iterator[ProgressReporter]:
    """A live display when standard error is a terminal, else timestamped lines.

    Commands enter it only after their arguments are validated: nothing is
    printed before an argument error.
    """
    if sys.stderr.isatty():
        with RichProgress() as live:
            yield live
    else:
        with LineProgress() as lines:
            yield lines


def _starting_server(settings: Settings, progress: ProgressReporter) -> None:
    if settings.database_url is None:
        # An unusable data_dir is an argument error: said before any progress.
        EmbeddedPostgres(settings.data_dir).prepare_directory()
        progress.start(f"starting the embedded PostgreSQL in {settings.data_dir}", total=None)


@contextlib.asynccontextmanager
async def _database_url(
    settings: Settings, progress: ProgressReporter = NO_PROGRESS
) -> AsyncIterator[str]:
    """The DSN to work on: the configured one, or the embedded server's (started here)."""
    if settings.database_url is not None:
        yield settings.database_url
        return
    embedded = EmbeddedPostgres(settings.data_dir)
    _starting_server(settings, progress)
    dsn = await asyncio.to_thread(embedded.start)
    progress.done()
    try:
        yield dsn
    finally:
        await asyncio.to_thread(embedded.close)


@contextlib.asynccontextmanager
async def _service(
    progress: ProgressReporter = NO_PROGRESS, settings: Settings | None = None
) -> AsyncIterator[MemoryService]:
    settings = settings or _settings()
    _starting_server(settings, progress)
    # Opening rebuilds an index an interrupted build left invalid: the
    # progress display says so while it runs.
    async with MemoryService.open(settings, progress=progress) as svc:
        progress.done()
        yield svc


def _echo(lines: list[str], *, err: bool = False) -> None:
    for line in lines:
        click.echo(line, err=err)


def _scope_option(
    tenant: str | None, project: str | None, agent: str | None, session: str | None
) -> Scope | None:
    if tenant is None and project is None and agent is None and session is None:
        return None
    return Scope(tenant or "default", project, agent, session)


@main.command()
@click.option("--tenant", help="Only this tenant.")
def stats(tenant: str | None) -> None:
    """Rows per tenant and scope level, table and index sizes, gc backlog, checkpoints."""

    async def run(progress: ProgressReporter) -> Stats:
        async with _service(progress) as svc:  # shows the embedded server starting
            return await svc.maintenance.stats(tenant=tenant)

    with _progress() as progress:
        report = _run(run(progress))
    _echo(stats_lines(report))


@main.command()
@click.option(
    "--repair", is_flag=True, help="Fix what can be fixed, each fix in its own transaction."
)
@click.option("--recall", is_flag=True,
              help="Also audit search recall against an exact scan, per scope-size bucket.")
@click.option("--sample", default=DEFAULT_SAMPLE, show_default=True,
              type=click.IntRange(1, MAX_SAMPLE), help="Recall audit: queries per bucket.")
@click.option("--threshold", default=DEFAULT_THRESHOLD, show_default=True,
              type=click.FloatRange(0, 1), help="Recall audit: fail below this recall@10.")
def doctor(repair: bool, recall: bool, sample: int, threshold: float) -> None:
    """Check pgvector, migrations, vector settings, indexes, assembly counts and history.

    With --recall, also run sampled searches through the normal path and an exact
    scan and report recall@10 per scope size. Exit code 1 when problems remain or
    recall in any bucket is below the threshold.
    """

    settings = _settings()

    async def run(progress: ProgressReporter) -> tuple[DoctorReport, RecallReport | None]:
        async with _database_url(settings, progress) as dsn:
            # The doctor never migrates: a schema behind head is one of its findings.
            checked = settings.model_copy(update={"database_url": dsn, "auto_migrate": False})
            try:
                # The doctor reports broken indexes; only --repair rebuilds them.
                async with MemoryService.open(checked, rebuild_invalid_indexes=False) as svc:
                    report = await svc.maintenance.doctor(repair=repair, progress=progress)
                    audit = None
                    if recall:
                        audit = await svc.maintenance.recall_audit(
                            sample=sample, threshold=threshold, progress=progress
                        )
                    return report, audit
            except SchemaError:
                return await Doctor(checked, dsn).run(repair=repair, progress=progress), None

    with _progress() as progress:
        report, audit = _run(run(progress))
    _echo(doctor_lines(report))
    if audit is not None:
        _echo(["", *recall_lines(audit)])
    if not report.ok or (audit is not None and not audit.ok):
        sys.exit(1)


@main.command()
@click.option("--batch-size", default=500, show_default=True,
              type=click.IntRange(1, MAX_BATCH), help="Rows per transaction.")
@click.option(
    "--idle-days",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Also remove sessions with no activity for this many days (default: never).",
)
@click.option("--max-batches", type=click.IntRange(min=1), default=None,
              help="Stop after this many batches.")
def gc(batch_size: int, idle_days: float | None, max_batches: int | None) -> None:
    """Delete expired memories, prune checkpoints past retention, remove idle sessions.

    When a half-life policy is set (memsvc policy set), also forget the memories
    whose strength fell below forget_below, and delete those forgotten longer
    than forget_grace_days. Several gc processes may run at once: each takes
    rows the others do not hold.
    """

    async def run(progress: ProgressReporter) -> GcReport:
        async with _service(progress) as svc:
            return await svc.maintenance.gc(
                batch_size=batch_size,
                idle_session_days=idle_days,
                max_batches=max_batches,
                progress=progress,
            )

    with _progress() as progress:
        report = _run(run(progress))
    _echo(gc_lines(report))


@main.command()
@click.option("--embedder", "spec", required=True,
              help="The new model, as MEMSVC_EMBEDDER: hashing, openai:<model>, local:<path>.")
@click.option("--dim", type=click.IntRange(1, 16_000), default=None,
              help="Its dimension (default: the current MEMSVC_EMBEDDING_DIM).")
@click.option("--batch-size", default=REEMBED_BATCH, show_default=True,
              type=click.IntRange(1, REEMBED_MAX_BATCH), help="Rows embedded per transaction.")
def reembed(spec: str, dim: int | None, batch_size: int) -> None:
    """Move every memory to another embedding model while the service keeps running.

    Fills a second embedding column in batches, builds its HNSW index
    concurrently, then switches searches to it in one transaction and drops the
    old column; returns after the switch. Run it from several processes or
    hosts at once to share the work; run it again after a crash to resume.
    Runs DDL: use the role that owns the memsvc tables (the migration role).
    Services must be given the new embedder (next_embedder) before the switch.
    """
    settings = _settings()
    new_dim = settings.embedding_dim if dim is None else dim
    embedder = embedder_from_spec(spec, new_dim)  # a bad spec is an argument error

    async def run(progress: ProgressReporter) -> ReembedReport:
        async with _service(progress, settings) as svc:
            return await svc.maintenance.reembed(
                embedder, dim=new_dim, spec=spec.strip(), batch_size=batch_size,
                progress=progress,
            )

    with _progress() as progress:
        report = _run(run(progress))
    _echo(reembed_lines(report))


@main.command()
@click.option("--tenant", required=True, help="The tenant to erase (or that holds the scope).")
@click.option("--project", help="Only this project (and what is under it).")
@click.option("--agent", help="Only this agent (and its sessions).")
@click.option("--session", help="Only this session.")
@click.option("--batch-size", default=500, show_default=True,
              type=click.IntRange(1, ERASE_MAX_BATCH), help="Rows per transaction.")
@click.option("--yes", is_flag=True, help="Really erase (required: erasure cannot be undone).")
@click.option("--vacuum", "vacuum", flag_value=True, default=False,
              help="VACUUM the tables the erasure changed, afterwards.")
@click.option("--vacuum-full", "vacuum", flag_value="full",
              help="VACUUM FULL them instead (rewrites each table under an exclusive lock).")
def erase(
    tenant: str,
    project: str | None,
    agent: str | None,
    session: str | None,
    batch_size: int,
    yes: bool,
    vacuum: bool | str,
) -> None:
    """Erase a scope and everything under it, leaving no content behind (cannot be undone).

    Removes memories with their whole history (one content-free 'erased' event
    stays per memory), assemblies, checkpoints, working memory, and LangGraph
    checkpoints and store items when only --tenant is given; then checks that
    nothing remains and prints the receipt: what it checked, and what still
    identifies the scope (ids below the one named become pseudonyms). Exit
    code 1 when the check found something (written during the erasure: run
    it again), or when Redis is configured and does not answer (nothing is
    erased then).
    """
    scope = _scope_option(tenant, project, agent, session)
    assert scope is not None
    if not yes:
        raise click.UsageError(
            "erasing cannot be undone: add --yes to erase " + scope_text(scope)
        )

    async def run(progress: ProgressReporter) -> ErasureReceipt:
        async with _service(progress) as svc:
            return await svc.erase(
                scope, batch_size=batch_size, progress=progress,
                vacuum="full" if vacuum == "full" else bool(vacuum),
            )

    with _progress() as progress:
        receipt = _run(run(progress))
    _echo(erasure_lines(receipt))
    if not receipt.verified:
        sys.exit(1)


@main.command(name="export")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--tenant", help="Only this tenant.")
@click.option("--project", help="Only this project (and what is under it).")
@click.option("--agent", help="Only this agent (and its sessions).")
@click.option("--session", help="Only this session.")
def export_command(
    file: str, tenant: str | None, project: str | None, agent: str | None, session: str | None
) -> None:
    """Write memories, assemblies and checkpoints to FILE as JSONL ('-': stdout).

    With scope options, only that scope and the scopes under it (tenant
    "default" unless --tenant is given). Says which scope was selected and
    how many rows were written, and warns when the selection matched nothing.
    The last line is a trailer (line count and checksum) that `memsvc import`
    checks. FILE is written under a temporary name beside it and renamed only
    once complete: an interrupted export leaves FILE as it was.
    """
    try:
        scope = _scope_option(tenant, project, agent, session)
    except MemsvcError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc

    async def run(progress: ProgressReporter) -> ExportReport:
        async with _service(progress) as svc:
            if file != "-":
                return await svc.maintenance.export(Path(file), scope=scope, progress=progress)
            with open_output(file) as out:
                return await svc.maintenance.export(out, scope=scope, progress=progress)

    try:
        with _progress() as progress:
            report = _run(run(progress))
    except OSError as exc:
        raise click.ClickException(f"cannot write {file}: {exc.strerror}") from exc
    _echo(export_lines(report, file), err=file == "-")


INDEX_MODE = click.Choice(["auto", "rebuild", "keep"])
INDEX_HELP = (
    "auto: for large inputs into an empty or small table, drop the vector index and "
    "rebuild it after loading; rebuild: always; keep: never."
)


@main.command(name="import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--index", "index_mode", type=INDEX_MODE, default="auto", show_default=True,
              help=INDEX_HELP)
@click.option("--allow-truncated", is_flag=True,
              help="Load a file whose trailer (line count and checksum) is missing or does not "
                   "match: an export cut short, or one written by hand or by a memsvc older "
                   "than trailers. Only its complete lines load.")
def import_command(file: str, index_mode: str, allow_truncated: bool) -> None:
    """Load a JSONL export. Idempotent: rows already stored are skipped.

    A file without a matching trailer (cut short, or exported before trailers
    existed) is refused before anything is written, unless --allow-truncated.
    Rejected lines are listed with their line number and reason (exit code 1).
    """
    settings = _settings()
    try:
        check_import_file(
            Path(file), settings, allow_truncated=allow_truncated, flag="--allow-truncated"
        )
    except MemsvcError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc

    async def run(progress: ProgressReporter) -> LoadReport:
        async with _service(progress, settings) as svc:
            return await svc.maintenance.import_file(
                file,
                index_mode=index_mode,  # type: ignore[arg-type]
                allow_truncated=allow_truncated,
                progress=progress,
            )

    with _progress() as progress:
        report: LoadReport = _run(run(progress))
    _echo(load_lines(report))
    if not report.ok:
        sys.exit(1)


@main.command(name="import-legacy")
@click.argument("path", type=click.Path(exists=True))
@click.option("--tenant", default="default", show_default=True, help="Tenant to import into.")
@click.option("--dry-run", is_flag=True,
              help="Read and check everything, count what would be loaded; write nothing.")
@click.option("--strip-nul", is_flag=True,
              help="Remove NUL characters from text (reported per file) instead of "
                   "rejecting it.")
@click.option("--index", "index_mode", type=INDEX_MODE, default="auto", show_default=True,
              help=INDEX_HELP)
def import_legacy_command(
    path: str, tenant: str, dry_run: bool, strip_nul: bool, index_mode: str
) -> None:
    """Import a file-based memory store: a directory with memory_index.json, memories/ and
    assemblies/, or one JSON file per session (a file, or a directory of them).

    Unreadable files are listed with their path and skipped (exit code 1).
    Re-running is idempotent.
    """
    settings = _settings()
    try:
        Scope(tenant)
    except MemsvcError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc

    async def run(progress: ProgressReporter) -> LegacyReport:
        if dry_run:
            return await import_legacy(None, None, settings, None, Path(path), tenant=tenant,
                                       dry_run=True, strip_nul=strip_nul, progress=progress)
        async with _service(progress, settings) as svc:
            return await svc.maintenance.import_legacy(
                path, tenant=tenant, index_mode=index_mode,  # type: ignore[arg-type]
                strip_nul=strip_nul, progress=progress,
            )

    with _progress() as progress:
        report: LegacyReport = _run(run(progress))
    _echo(legacy_lines(report))
    if not report.ok:
        sys.exit(1)


@main.command()
@click.option("--print-sql", is_flag=True, help="Print the SQL script (required).")
@click.option("--schema", default=None, help="Schema (default: MEMSVC_DB_SCHEMA or memsvc).")
@click.option("--migration-role", default=DEFAULT_MIGRATION_ROLE, show_default=True,
              help="Role that owns the schema and runs migrations.")
@click.option("--runtime-role", default=DEFAULT_RUNTIME_ROLE, show_default=True,
              help="Role the app connects as: rows only, no DDL, no TRUNCATE.")
def roles(print_sql: bool, schema: str | None, migration_role: str, runtime_role: str) -> None:
    """SQL creating a migration role and a least-privilege runtime role.

    Review it, then run it as a superuser (psql -f). memsvc never runs it itself.
    """
    if not print_sql:
        raise click.ClickException("pass --print-sql: review the script, then run it with psql")
    try:
        script = roles_sql(
            schema or _settings().db_schema,
            migration_role=migration_role,
            runtime_role=runtime_role,
        )
    except MemsvcError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(script, nl=False)


@main.group(invoke_without_command=True)
@click.option("--print-sql", is_flag=True, help="Print the SQL script.")
@click.option("--schema", default=None, help="Schema (default: MEMSVC_DB_SCHEMA or memsvc).")
@click.pass_context
def citus(ctx: click.Context, print_sql: bool, schema: str | None) -> None:
    """Distribute the tables with Citus: tenant tables by tenant_id, co-located.

    `memsvc citus --print-sql` prints the script to review and run on the
    coordinator after `memsvc migrate` (psql -f); `memsvc citus apply` runs it.
    Both are one transaction and idempotent.
    """
    if ctx.invoked_subcommand is not None:
        ctx.obj = schema
        return
    if not print_sql:
        raise click.ClickException(
            "pass --print-sql to print the script (review it, then run it with psql), "
            "or run `memsvc citus apply`"
        )
    # Settings validate the schema name (it is interpolated into the script).
    settings = _settings() if schema is None else Settings(db_schema=schema)
    click.echo(citus_sql(settings), nl=False)


@citus.command("apply")
@click.pass_obj
def citus_apply(schema: str | None) -> None:
    """Run the distribution script on the coordinator (MEMSVC_DATABASE_URL)."""
    settings = _settings() if schema is None else Settings(db_schema=schema)
    if settings.database_url is None:
        raise click.ClickException("set MEMSVC_DATABASE_URL to the Citus coordinator")
    dsn = settings.database_url

    async def apply() -> list[str]:
        conn = await connect(dsn, settings)
        try:
            with translate_errors():
                return await apply_citus(conn, settings)
        finally:
            await conn.close()

    try:
        placed = _run(apply())
    except CitusNotInstalled as exc:
        raise click.ClickException(str(exc)) from exc
    if placed:
        click.echo(f"schema {settings.db_schema}: distributed {', '.join(placed)}")
    else:
        click.echo(f"schema {settings.db_schema}: every table was already distributed")


if __name__ == "__main__":
    main()
