"""Export to and import from JSONL (format: :mod:`memsvc.transfer.records`), in constant memory.

Export reads one consistent snapshot (a REPEATABLE READ, read-only
transaction) through server-side cursors, so however many rows there are,
only a cursor's prefetch is held, and assemblies' member ids agree with the
memories written before them. It ends with a trailer line (line count and
checksum, see :mod:`memsvc.transfer.trailer`); an export to a path is
written to a temporary file beside it and renamed onto it only once complete,
so an interrupted export never leaves a file at the target.

Import first checks the trailer and refuses a file without a matching one
(cut short, or exported before trailers existed) unless ``allow_truncated``;
then it reads the file line by line and hands records to a
:class:`memsvc.transfer.loader.Loader`; it is idempotent (ids are kept, conflicts
skipped) and reports every rejected line with its number. An invalid index of
memsvc's (an interrupted build) is rebuilt, see :mod:`memsvc.transfer.index_repair`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Literal

import asyncpg

from memsvc.assemblies.repository import AssemblyRepository
from memsvc.core.errors import ValidationError
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.db.errors import translate_errors
from memsvc.db.sql import Params, scope_condition
from memsvc.memories.scope_indexes import ScopeIndexes
from memsvc.progress import NO_PROGRESS, ProgressReporter
from memsvc.transfer import export_queries as q
from memsvc.transfer import records
from memsvc.transfer.bulk import (
    MEMORY_VECTOR_INDEX,
    VectorIndexRebuild,
    count_new_memories,
    new_rows_needed,
    should_rebuild,
)
from memsvc.transfer.bulk_queries import count_up_to
from memsvc.transfer.index_repair import find_broken_indexes, rebuild_broken_indexes
from memsvc.transfer.loader import Loader, LoadReport, Problem
from memsvc.transfer.trailer import (
    TRAILER_TYPE,
    ExportFileCheck,
    LineSink,
    check_export_file,
    fsync_directory,
)

IndexMode = Literal["auto", "rebuild", "keep"]
CURSOR_PREFETCH = 500


@dataclass(frozen=True, slots=True)
class ExportReport:
    """What an export wrote, and from which scope (None: everything)."""

    memories: int
    assemblies: int
    checkpoints: int
    store_items: int = 0
    scope: Scope | None = None

    @property
    def total(self) -> int:
        """Rows written, all kinds."""
        return self.memories + self.assemblies + self.checkpoints + self.store_items


def _filter(scope: Scope | None) -> tuple[str, list[object]]:
    if scope is None:
        return "true", []
    params = Params()
    return scope_condition(scope, "descendants", params), params.values


def _tenant_filter(scope: Scope | None, values: list[object]) -> str:
    """Which store items an export takes: all, a whole tenant's, or none.

    Store items belong to a tenant, not to a deeper scope. ``values`` are the
    scope filter's parameters, the tenant first.
    """
    if scope is None:
        return "true"
    if scope.depth > 0:
        return "false"
    return f"i.tenant_id = ${values.index(scope.tenant) + 1}"


async def count_export(conn: asyncpg.Connection, schema: str, scope: Scope | None) -> int:
    """How many rows :func:`export_jsonl` would write for ``scope`` (all when None)."""
    filter_sql, values = _filter(scope)
    tenant_sql = _tenant_filter(scope, values)
    with translate_errors():
        total: int = await conn.fetchval(q.count_rows(schema, filter_sql, tenant_sql), *values)
    return total


async def export_jsonl(
    conn: asyncpg.Connection,
    settings: Settings,
    out: IO[str] | IO[bytes],
    *,
    scope: Scope | None = None,
    progress: ProgressReporter = NO_PROGRESS,
) -> ExportReport:
    """Write a header, then memories, assemblies, checkpoints and store items of ``scope``,
    then the trailer (written only once everything before it was).

    Args:
        conn: A connection with memsvc's codecs (from ``svc.pool``), not in a transaction.
        settings: The service settings (schema, vector settings for the header).
        out: A stream to write lines to: text, or binary (a file opened ``"wb"``).
        scope: Only rows of this scope and the scopes under it; None for everything.
        progress: Told the rows to write (counted in the export's snapshot) and each
            batch written.
    """
    schema = settings.db_schema
    filter_sql, values = _filter(scope)
    tenant_sql = _tenant_filter(scope, values)
    counts = {"memory": 0, "assembly": 0, "checkpoint": 0, "store_item": 0}
    statements = [
        ("memory", q.memories(schema, filter_sql), records.memory_line),
        ("assembly", q.assemblies(schema, filter_sql), records.assembly_line),
        ("checkpoint", q.checkpoints(schema, filter_sql), records.checkpoint_line),
    ]
    if tenant_sql != "false":
        statements.append(
            ("store_item", q.store_items(schema, tenant_sql), records.store_item_line)
        )
    with translate_errors():
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            total = None
            if progress is not NO_PROGRESS:
                total = await conn.fetchval(q.count_rows(schema, filter_sql, tenant_sql), *values)
            progress.start("exporting", total=total)
            sink = LineSink(out)
            sink.write_lines([records.header_line(settings, datetime.now(UTC))])
            for kind, sql, render in statements:
                pending: list[str] = []
                async for row in conn.cursor(sql, *values, prefetch=CURSOR_PREFETCH):
                    pending.append(render(row))
                    if len(pending) >= CURSOR_PREFETCH:
                        _write(sink, pending, progress)
                        counts[kind] += len(pending)
                        pending = []
                _write(sink, pending, progress)
                counts[kind] += len(pending)
            sink.write_trailer()
    progress.done()
    return ExportReport(
        counts["memory"],
        counts["assembly"],
        counts["checkpoint"],
        counts["store_item"],
        scope,
    )


def _write(sink: LineSink, lines: list[str], progress: ProgressReporter) -> None:
    if lines:
        sink.write_lines(lines)
        progress.advance(len(lines))


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[IO[bytes]]:
    """A binary file to write an export to, which becomes ``path`` only if the block succeeds.

    It is a temporary file in ``path``'s directory (``.NAME.*.partial``),
    flushed to disk and renamed onto ``path`` when the block ends without
    error: readers of ``path`` see the old file or the complete new one,
    never a part. On any error or interruption it is removed and ``path``
    is left as it was. A new file is readable by its owner only (it holds
    every memory); one replacing an older file keeps that file's mode.
    """
    directory = path.parent
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileNotFoundError):
            os.chmod(temporary, stat.S_IMODE(path.stat().st_mode))
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    fsync_directory(directory)


async def import_jsonl(
    conn: asyncpg.Connection,
    dsn: str,
    settings: Settings,
    assemblies: AssemblyRepository,
    path: Path,
    *,
    index_mode: IndexMode = "auto",
    allow_truncated: bool = False,
    progress: ProgressReporter = NO_PROGRESS,
    scope_indexes: ScopeIndexes | None = None,
) -> LoadReport:
    """Load a JSONL export; see the module docstring.

    Args:
        conn: A connection (from ``svc.pool``) for the bulk decision's row counts.
        dsn: Where the loader and the index rebuild open their own connections.
        settings: The service settings.
        assemblies: The service's assembly repository (recomputes aggregates).
        path: The file to read.
        index_mode: ``auto`` drops and rebuilds the HNSW index when the input
            holds many memories not stored yet, and the table is no larger
            (see :mod:`memsvc.transfer.bulk`), or when the index is invalid or
            missing; ``rebuild`` always does; ``keep`` never drops it (an
            invalid one is rebuilt before the load).
        allow_truncated: Load a file whose trailer is missing or does not
            match (its complete lines; a last line cut mid-way is rejected).
        progress: Told the bytes read, and the index check and rebuild steps.
        scope_indexes: Dropped with the vector index for the load, and
            built again after it (see :mod:`memsvc.transfer.bulk`).

    Raises:
        ValidationError: ``path``: no matching trailer (and not
            ``allow_truncated``); or the header says the file was written
            for other vector settings. Nothing is written then.
    """
    # Reading the whole file to check its trailer: off the event loop.
    check = await asyncio.to_thread(
        check_import_file, path, settings, allow_truncated=allow_truncated
    )
    report = LoadReport()
    if not check.complete:
        report.warn(path.name, "file", f"{check.problem}; loaded as it is (allow_truncated)")
    broken = await find_broken_indexes(conn, settings)
    vector_broken = next((b for b in broken if b.name == MEMORY_VECTOR_INDEX), None)
    rebuild = index_mode == "rebuild"
    if index_mode == "auto" and vector_broken is not None:
        # Dropping it for the load and building it once after costs less
        # than building it first and then inserting into it row by row.
        rebuild = True
        report.index_decision = f"{vector_broken.describe()}: dropped for the load"
    elif index_mode == "auto":
        rebuild = await _worth_rebuilding(conn, settings, path, check.lines, report, progress)
    skip = (MEMORY_VECTOR_INDEX,) if rebuild else ()
    if any(b.name not in skip for b in broken):
        repair = await rebuild_broken_indexes(dsn, settings, progress=progress, skip=skip)
        report.index_repairs = repair.lines()
    async with AsyncExitStack() as stack:
        index = None
        if rebuild:
            index = await stack.enter_async_context(
                VectorIndexRebuild(dsn, settings, progress=progress, scope_indexes=scope_indexes)
            )
        progress.start(f"importing {path.name}", total=path.stat().st_size, unit="bytes")
        async with Loader(dsn, settings, assemblies, report=report) as loader:
            with path.open("rb") as handle:
                for number, raw in enumerate(handle, 1):
                    progress.advance(len(raw))
                    record = _parse_line(raw, number, settings, report)
                    if record is not None:
                        await loader.add(record, f"line {number}")
        report.index_rebuilt = index is not None and index.active
    progress.done()
    if index is not None:
        index.record(report)
    return report


def check_import_file(
    path: Path,
    settings: Settings,
    *,
    allow_truncated: bool = False,
    flag: str = "allow_truncated=True",
) -> ExportFileCheck:
    """Check a file before anything is done: its header, then its trailer.

    Raises:
        ValidationError: the header's (other vector settings); or ``path``:
            the trailer is missing or does not match (unless
            ``allow_truncated``; ``flag`` is how the message tells the user
            to allow it).
    """
    if not isinstance(allow_truncated, bool):
        raise ValidationError("allow_truncated", "must be True or False")
    check_import_header(path, settings)
    check = check_export_file(path)
    if not check.complete and not allow_truncated:
        raise ValidationError(
            "path",
            f"{path.name}: {check.problem}. Nothing was imported. To load its complete "
            f"lines anyway (an export of an older memsvc, a file written by hand), pass {flag}",
        )
    return check


def check_import_header(path: Path, settings: Settings) -> None:
    """Raise the header's ValidationError (other vector settings) before anything is done."""
    with path.open("rb") as handle:
        for raw in handle:
            if raw.strip():
                _parse_line(raw, 1, settings, LoadReport())
                return


async def _worth_rebuilding(
    conn: asyncpg.Connection,
    settings: Settings,
    path: Path,
    incoming: int,
    report: LoadReport,
    progress: ProgressReporter,
) -> bool:
    """Whether the load will insert enough new memories to rebuild the index (``auto``).

    ``incoming``, the file's lines, is an upper bound on the memories; only
    when it is large enough are the ids of the file's memories checked
    against the table.
    """
    with translate_errors():
        existing = await conn.fetchval(count_up_to(settings.db_schema, "memories"), incoming + 1)
    if not should_rebuild(incoming, existing):
        return False

    def ids() -> Iterator[tuple[str, uuid.UUID]]:
        scratch = LoadReport()  # rejected lines are reported by the load itself
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, 1):
                progress.advance(1)
                record = _parse_line(raw, number, settings, scratch)
                if isinstance(record, records.MemoryRecord):
                    yield record.scope.tenant, record.id

    progress.start("counting the memories not stored yet", total=incoming, unit="lines")
    new = await count_new_memories(
        conn, settings.db_schema, ids(), enough=new_rows_needed(existing)
    )
    progress.done()
    rebuild = should_rebuild(new, existing)
    report.index_decision = (
        f"{'at least ' if rebuild else ''}{new} memories not stored yet"
        f" ({existing} stored): vector index "
        + ("dropped for the load" if rebuild else "kept in place")
    )
    return rebuild


def _parse_line(
    raw: bytes, number: int, settings: Settings, report: LoadReport
) -> records.Record | None:
    if not raw.strip():
        return None
    source = f"line {number}"
    fast = records.split_embedding(raw, settings.embedding_dim, settings.distance)
    if fast is not None:
        try:
            obj = json.loads(fast[0])
        except (ValueError, UnicodeDecodeError):
            obj = None
        if isinstance(obj, dict) and obj.get("type") == "memory" and obj["embedding"] is None:
            try:
                record = records.memory_from_json(obj, settings)
            except ValidationError as exc:
                report.reject(source, "memory", f"{exc.field}: {exc.reason}")
                return None
            record.embedding = fast[1]
            return record
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        report.note_rejection(Problem(source, "line", f"not valid JSON ({exc})"))
        return None
    kind = obj.get("type") if isinstance(obj, dict) else None
    if kind == TRAILER_TYPE:
        return None  # checked before the load (check_import_file)
    try:
        return records.record_from_json(obj, settings)
    except ValidationError as exc:
        if kind == "header":
            raise  # the whole file was written for something else: stop here
        report.reject(source, str(kind or "line"), f"{exc.field}: {exc.reason}")
        return None


def open_output(path: str) -> IO[str]:
    """A text stream for an export: the file at ``path`` or stdout for ``-``."""
    if path == "-":
        return os.fdopen(os.dup(1), "w", encoding="utf-8")
    return open(path, "w", encoding="utf-8")
