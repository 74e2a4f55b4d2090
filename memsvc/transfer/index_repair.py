"""Rebuilding memsvc's own indexes that an interrupted build left invalid (or missing).

``CREATE INDEX CONCURRENTLY`` stopped half-way (Ctrl-C during an import's
index rebuild, a killed process, a lost connection) leaves its index behind
marked invalid: PostgreSQL keeps updating it on every write but never reads
it, so searches run exact scans from then on, and nothing else would ever
notice. A bulk load stopped between dropping the vector index and building
it again leaves the index missing. Whatever finds such an index rebuilds it
and says so: opening the service (a warning in the log; see
``MemoryService.open``), ``memsvc migrate``, and an import (its report).

Only memsvc's own indexes are touched: those its schema metadata declares,
and, when missing, the two HNSW indexes bulk loads drop. An index that some
session is building right now is invalid too, and is left alone
(``pg_stat_progress_create_index``), and nothing is done while another
process holds the bulk-load lock (a bulk import or ``doctor --repair``
rebuilding indexes: it will finish them). The build itself is
:func:`memsvc.transfer.bulk.build_index`: concurrent (reads and writes go on),
checked valid afterwards.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Literal

import asyncpg

from memsvc.core.errors import MemsvcError
from memsvc.core.settings import Settings
from memsvc.db.errors import translate_errors
from memsvc.db.pool import connect
from memsvc.db.tables import build_metadata
from memsvc.progress import NO_PROGRESS, ProgressReporter
from memsvc.transfer import bulk_queries as q
from memsvc.transfer.bulk import (
    ASSEMBLY_VECTOR_INDEX,
    MEMORY_VECTOR_INDEX,
    build_index,
    metadata_index_definition,
)

log = logging.getLogger(__name__)

# Indexes bulk loads drop for the load: missing without a load running means
# the load was stopped before it built them again.
DROPPED_BY_BULK_LOADS = (MEMORY_VECTOR_INDEX, ASSEMBLY_VECTOR_INDEX)


@dataclass(frozen=True, slots=True)
class BrokenIndex:
    """One of memsvc's indexes that searches cannot use, and how to build it."""

    name: str
    problem: Literal["invalid", "missing"]
    definition: str

    def describe(self) -> str:
        """What is wrong with it, for people."""
        if self.problem == "invalid":
            return f"index {self.name} is invalid (an index build was interrupted)"
        return f"index {self.name} is missing (a bulk load was interrupted)"


@dataclass
class IndexRepairReport:
    """What :func:`rebuild_broken_indexes` did: a line per index, or why it did nothing."""

    rebuilt: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    left_to_another_process: bool = False

    def lines(self) -> list[str]:
        """The report, one line per index."""
        lines = [*self.rebuilt, *self.failed]
        if self.left_to_another_process:
            lines.append(
                "another process (a bulk import or doctor --repair) is rebuilding memsvc's "
                "indexes; left to it"
            )
        return lines


# Index names by the settings the schema metadata reads: every open asks, and
# building the metadata is not free.
_DECLARED: dict[tuple[object, ...], tuple[str, ...]] = {}


def declared_index_names(settings: Settings) -> list[str]:
    """Every index memsvc's schema metadata declares."""
    key = (
        settings.db_schema,
        settings.vector_type,
        settings.embedding_dim,
        settings.distance,
        settings.text_search_config,
        settings.hnsw_m,
        settings.hnsw_ef_construction,
    )
    names = _DECLARED.get(key)
    if names is None:
        if len(_DECLARED) >= 16:
            _DECLARED.clear()
        names = _DECLARED[key] = tuple(
            sorted(
                index.name
                for table in build_metadata(settings).tables.values()
                for index in table.indexes
                if isinstance(index.name, str)
            )
        )
    return list(names)


async def find_broken_indexes(
    conn: asyncpg.Connection, settings: Settings
) -> list[BrokenIndex]:
    """memsvc's indexes that are invalid (and not being built) or, for the vector ones, missing.

    Two catalog reads; the common answer is an empty list.
    """
    schema = settings.db_schema
    with translate_errors():
        invalid = await conn.fetch(q.invalid_indexes(), schema, declared_index_names(settings))
        missing = await conn.fetch(q.missing_indexes(), schema, list(DROPPED_BY_BULK_LOADS))
    broken = [
        BrokenIndex(row["name"], "invalid", row["definition"])
        for row in invalid
        if not row["building"]
    ]
    broken += [
        BrokenIndex(row["name"], "missing", metadata_index_definition(settings, row["name"]))
        for row in missing
    ]
    return broken


async def rebuild_broken_indexes(
    dsn: str,
    settings: Settings,
    *,
    progress: ProgressReporter = NO_PROGRESS,
    skip: tuple[str, ...] = (),
) -> IndexRepairReport:
    """Find and rebuild memsvc's broken indexes (see the module docstring), one at a time.

    Runs on a connection of its own (builds change session settings, and
    ``CONCURRENTLY`` needs autocommit) under the bulk-load lock. ``skip``
    names indexes the caller rebuilds itself (an import that drops the vector
    index for its load anyway). A build that fails is reported in ``failed``
    (the role may not own the tables: ``memsvc doctor --repair`` as the owner
    fixes it), never raised.
    """
    report = IndexRepairReport()
    conn = await connect(dsn, settings)
    try:
        with translate_errors():
            if not await conn.fetchval(q.TRY_LOCK, q.BULK_LOCK_KEY):
                log.warning(
                    "memsvc has broken indexes, and another process (a bulk import or doctor "
                    "--repair) holds the index lock: leaving them to it"
                )
                report.left_to_another_process = True
                return report
        # Looked for under the lock: another process may have just rebuilt them.
        broken = [b for b in await find_broken_indexes(conn, settings) if b.name not in skip]
        rows = 0
        if broken:
            with translate_errors():
                rows = await conn.fetchval(
                    q.count_up_to(settings.db_schema, "memories"), 10_000_000
                )
        for index in broken:
            await _rebuild(conn, settings, index, rows, progress, report)
    finally:
        await conn.close()  # ends the session: the lock goes with it
    return report


async def _rebuild(
    conn: asyncpg.Connection,
    settings: Settings,
    index: BrokenIndex,
    rows: int,
    progress: ProgressReporter,
    report: IndexRepairReport,
) -> None:
    what = index.describe()
    log.warning("%s: rebuilding it (searches use exact scans until it is done)", what)
    started = time.perf_counter()
    try:
        await build_index(
            conn,
            settings,
            index.name,
            index.definition,
            rows=rows,
            progress=progress,
            description=f"{what}: rebuilding it over {rows:,} rows",
        )
    except (MemsvcError, asyncpg.PostgresError) as exc:
        failed = f"{what}; rebuilding it failed: {exc} (run `memsvc doctor --repair`)"
        log.warning("%s", failed)
        report.failed.append(failed)
        return
    done = f"{what}: rebuilt in {time.perf_counter() - started:.1f} s; it is valid"
    log.info("%s", done)
    report.rebuilt.append(done)
