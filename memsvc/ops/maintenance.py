"""``svc.maintenance``: gc, stats, doctor, export/import and legacy import on an open service."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from datetime import datetime
from pathlib import Path
from typing import IO

import asyncpg

from memsvc.assemblies.repository import AssemblyRepository
from memsvc.checkpoints.repository import CheckpointRepository
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.db.replicas import ReadRouter
from memsvc.embedding import Embedder, embedder_from_spec
from memsvc.extraction.protocols import Summarizer
from memsvc.memories.embedding_space import EmbeddingSpace
from memsvc.memories.repository import MemoryRepository
from memsvc.memories.scope_indexes import ScopeIndexReport
from memsvc.memories.semantic import Dedupe, validate_dedupe
from memsvc.ops.consolidation import CLUSTER_THRESHOLD, Consolidation, ConsolidationReport
from memsvc.ops.dedupe import DEFAULT_BATCH as DEFAULT_DEDUPE_BATCH
from memsvc.ops.dedupe import DedupeReport, Deduplication
from memsvc.ops.doctor import Doctor
from memsvc.ops.doctor_report import DoctorReport
from memsvc.ops.forget import DEFAULT_BATCH as DEFAULT_FORGET_BATCH
from memsvc.ops.forget import ForgetReport, Forgetting
from memsvc.ops.gc import DEFAULT_BATCH, GarbageCollector, GcReport
from memsvc.ops.recall_audit import (
    DEFAULT_K,
    DEFAULT_SAMPLE,
    DEFAULT_THRESHOLD,
    RecallReport,
    recall_audit,
)
from memsvc.ops.reembed import DEFAULT_BATCH as DEFAULT_REEMBED_BATCH
from memsvc.ops.reembed import Reembedder, ReembedReport
from memsvc.ops.stats import Stats, collect_stats
from memsvc.progress import NO_PROGRESS, ProgressReporter
from memsvc.telemetry import count_gc, count_import, traced_operations
from memsvc.transfer.export import (
    ExportReport,
    IndexMode,
    count_export,
    export_jsonl,
    import_jsonl,
    replacing,
)
from memsvc.transfer.legacy import LegacyReport, import_legacy
from memsvc.transfer.loader import LoadReport

log = logging.getLogger(__name__)


def _count_gc(report: GcReport) -> None:
    count_gc(
        {
            "expired_memories": report.expired_deleted,
            "pruned_checkpoints": report.checkpoints_pruned,
            "idle_memories": report.idle_memories_deleted,
            "idle_assemblies": report.idle_assemblies_deleted,
            "idle_checkpoints": report.idle_checkpoints_deleted,
            "change_events": report.change_events_removed,
            "forgotten_memories": report.forgotten_deleted,
        }
    )


def _count_load(report: LoadReport | LegacyReport) -> None:
    if isinstance(report, LegacyReport):
        if report.dry_run:
            return
        report = report.load
    count_import(
        {
            kind: {
                "inserted": counts.inserted,
                "already_present": counts.already_present,
                "rejected": counts.rejected,
            }
            for kind, counts in (
                ("memories", report.memories),
                ("assemblies", report.assemblies),
                ("checkpoints", report.checkpoints),
            )
        }
    )


@traced_operations(
    "memsvc.maintenance",
    exclude=["close", "stop_background_gc"],
    on_result={"gc": _count_gc, "import_file": _count_load, "import_legacy": _count_load},
)
class Maintenance:
    """Operations on the service's database (``svc.maintenance``).

    The same work as the ``memsvc`` commands ``gc``, ``stats``, ``doctor``,
    ``export``, ``import`` and ``import-legacy``, for apps and workers that
    hold a service, plus an optional background gc task that the service
    stops when it closes.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: Settings,
        *,
        dsn: str,
        assemblies: AssemblyRepository,
        checkpoints: CheckpointRepository,
        memories: MemoryRepository,
        reads: ReadRouter | None = None,
        space: EmbeddingSpace | None = None,
    ) -> None:
        self._pool = pool
        # Reads after maintenance writes wait for them on replicas too.
        self._reads = reads
        self._settings = settings
        self._dsn = dsn
        self._assemblies = assemblies
        self._memories = memories
        self._forgetting = Forgetting(pool, settings, memories=memories, reads=reads)
        self._deduplication = Deduplication(pool, settings, memories=memories, reads=reads)
        self._gc = GarbageCollector(
            pool,
            settings,
            memories=memories,
            checkpoints=checkpoints,
            forgetting=self._forgetting,
        )
        self._background: asyncio.Task[None] | None = None
        self._consolidation = Consolidation(
            pool, settings, memories=memories, assemblies=assemblies, space=space, reads=reads
        )

    # ------------------------------------------------------------ consolidation

    async def consolidate(
        self,
        scope: Scope,
        *,
        summarizer: Summarizer | None = None,
        min_cluster: int = 3,
        threshold: float = CLUSTER_THRESHOLD,
    ) -> ConsolidationReport:
        """Group the scope's related memories into clusters, each under a summary memory.

        Memories valid now in the exact ``scope`` whose embeddings are at
        least ``threshold`` cosine-similar are clustered (nearest neighbours,
        clusters of ``min_cluster`` or more); each cluster is an assembly
        with a summary memory (``metadata["kind"] == "summary"``,
        ``metadata["derived_from"]``: its members' ids) valid from its
        newest member's fact. Members stay, and ``rank="recall"`` ranks them
        below their summary. Incremental: only memories added since the
        last run are clustered, joining existing clusters where they fit;
        a cluster whose member changed, stopped being valid or was deleted
        is redone. Safe to run from several processes at once and to run
        again after a crash: every memory is in at most one cluster, and a
        cluster has one summary. See docs/how-to/consolidation.md.

        Args:
            scope: The exact scope to consolidate.
            summarizer: Writes each summary; default: the one
                ``Settings.summarizer`` names (``ExtractiveSummarizer``, no model).
            min_cluster: Fewest memories a cluster holds (2-64).
            threshold: Cosine similarity in (0, 1] at which memories belong together.

        Raises:
            ValidationError: A bad argument, or a summarizer that returned no text.
            ExtractionError: A model-backed summarizer's endpoint failed
                (clusters committed before it stay).
        """
        return await self._consolidation.consolidate(
            scope, summarizer=summarizer, min_cluster=min_cluster, threshold=threshold
        )

    # ------------------------------------------------------------ gc

    async def gc(
        self,
        *,
        batch_size: int = DEFAULT_BATCH,
        idle_session_days: float | None = None,
        max_batches: int | None = None,
        progress: ProgressReporter = NO_PROGRESS,
    ) -> GcReport:
        """Delete expired memories, prune checkpoints past retention, remove idle sessions,
        and remove change events (memory history included) older than
        ``Settings.change_retention_days`` when it is set.

        Safe to run from several workers at once (rows are taken ``FOR
        UPDATE SKIP LOCKED``); see :mod:`memsvc.ops.gc`.

        Args:
            batch_size: Rows per transaction.
            idle_session_days: Also remove sessions idle this many days; None: never.
            max_batches: Cap on expired-memory batches this run.
            progress: Told each pass and what it deletes (see :mod:`memsvc.progress`).
        """
        try:
            return await self._gc.run(
                batch_size=batch_size,
                idle_session_days=idle_session_days,
                max_batches=max_batches,
                progress=progress,
            )
        finally:
            self._wrote()

    async def index_scopes(self) -> ScopeIndexReport:
        """Give big exact scopes their own HNSW index now, rather than at the next gc.

        Scopes holding at least ``Settings.scope_index_from`` live vectors,
        biggest first, while fewer than ``Settings.scope_indexes_max`` exist;
        invalid and shrunken ones are dropped first (invalid ones of big
        scopes built again). Built concurrently: writes go on. Skipped (the
        report says why) under row-level security, on Citus or partitioned
        tables, behind pgbouncer, or while other index DDL runs. See
        :mod:`memsvc.memories.scope_indexes` and docs/how-to/scope-indexes.md.
        """
        return await self._memories.scope_indexes.maintain()

    async def forget(
        self,
        scope: Scope | None = None,
        *,
        below: float = 0.05,
        dry_run: bool = False,
        now: datetime | None = None,
        assembly_members: bool = False,
        batch_size: int = DEFAULT_FORGET_BATCH,
    ) -> ForgetReport:
        """Forget the memories whose strength is below ``below``: out of every read at once.

        Only memories under a half-life policy (``svc.policies``) decay;
        keyed (``put``) and pinned memories are never forgotten, nor members
        of an assembly unless ``assembly_members=True``. A forgotten memory is
        still returned by ``get`` (with ``forgotten_at``) and comes back with
        ``svc.memories.restore`` within ``Settings.forget_grace_days``; then
        gc deletes it. See docs/how-to/forgetting.md.

        Args:
            scope: This scope and those under it; None: every scope (every
                tenant: not under row-level security, which needs a scope).
            below: The strength floor, in [0, 1].
            dry_run: Only report what would be forgotten.
            now: The moment strength is reckoned at; default the database's
                ``now()``. For tests and replays: ``forgotten_at`` is always
                the real time of the pass.
            assembly_members: Forget members of assemblies too.
            batch_size: Memories per transaction.
        """
        try:
            return await self._forgetting.forget(
                scope,
                below=below,
                dry_run=dry_run,
                now=now,
                assembly_members=assembly_members,
                batch_size=batch_size,
            )
        finally:
            self._wrote()

    async def dedupe(
        self,
        scope: Scope,
        threshold: float | None = None,
        *,
        batch_size: int = DEFAULT_DEDUPE_BATCH,
    ) -> DedupeReport:
        """Merge the near-duplicates already stored in ``scope`` and the scopes under it.

        The rule of ``add(..., dedupe="semantic")``, after the fact: in each
        exact scope, in write order, a memory at least ``threshold``
        (default ``Settings.semantic_dedupe_threshold``) similar to an older
        one valid now, with the same identifier-like tokens, is merged into
        it (the older one reinforced, the newer deleted). Never across scopes
        or keys. Batched, each batch its own transaction under the scope's
        lock; run it again to resume. See docs/how-to/deduplication.md.
        """
        try:
            return await self._deduplication.run(scope, threshold, batch_size=batch_size)
        finally:
            self._wrote()

    def start_background_gc(
        self,
        interval_s: float = 300.0,
        *,
        batch_size: int = DEFAULT_BATCH,
        idle_session_days: float | None = None,
    ) -> asyncio.Task[None]:
        """Run :meth:`gc` every ``interval_s`` seconds until the service closes.

        A failed run is logged and retried at the next interval; it never
        ends the task. Starting it twice is an error.
        """
        if self._background is not None and not self._background.done():
            raise RuntimeError("background gc is already running")
        if not interval_s > 0:
            raise ValueError("interval_s must be positive")

        async def loop() -> None:
            while True:
                try:
                    report = await self.gc(
                        batch_size=batch_size, idle_session_days=idle_session_days
                    )
                    if report.total:
                        log.info("background gc deleted %d rows: %s", report.total, report)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("background gc failed; retrying in %.0f s", interval_s)
                await asyncio.sleep(interval_s)

        self._background = asyncio.get_running_loop().create_task(loop(), name="memsvc-gc")
        return self._background

    async def stop_background_gc(self) -> None:
        """Stop the background gc task (waiting for a batch in flight to roll back)."""
        task, self._background = self._background, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def close(self) -> None:
        """Stop background work (the service calls this when it closes)."""
        await self.stop_background_gc()

    # ------------------------------------------------------------ inspection

    async def stats(self, *, tenant: str | None = None) -> Stats:
        """Row counts per tenant and scope level, sizes, gc backlog, checkpoint totals."""
        async with self._pool.acquire() as conn:
            return await collect_stats(conn, self._settings.db_schema, tenant)

    async def doctor(
        self, *, repair: bool = False, progress: ProgressReporter = NO_PROGRESS
    ) -> DoctorReport:
        """Check the database; with ``repair`` fix what can be (see :mod:`memsvc.ops.doctor`)."""
        return await Doctor(self._settings, self._dsn, assemblies=self._assemblies).run(
            repair=repair, progress=progress
        )

    async def reembed(
        self,
        embedder: Embedder | str,
        *,
        dim: int | None = None,
        spec: str | None = None,
        batch_size: int = DEFAULT_REEMBED_BATCH,
        progress: ProgressReporter = NO_PROGRESS,
    ) -> ReembedReport:
        """Move every memory to another embedding model, online; returns after the switch.

        Adds a second embedding column of ``dim`` dimensions (default: the
        current one), fills it in batches (several processes may run this at
        once and share the rows; a crashed run resumes where it stopped),
        builds its HNSW index concurrently, then switches searches to it in
        one transaction and drops the old column. Runs DDL: the database role
        must own the memsvc tables. See docs/how-to/reembedding.md.

        Args:
            embedder: The new model: an :class:`~memsvc.embedding.Embedder`, or
                a spec as ``MEMSVC_EMBEDDER`` takes (``hashing``,
                ``openai:<model>``, ``local:<path>``).
            dim: Its dimension.
            spec: The name recorded for the migration (default: the spec
                given, else the embedder's class name); every worker of one
                migration must give the same.
            batch_size: Rows embedded per transaction.
        """
        dim = self._settings.embedding_dim if dim is None else dim
        if isinstance(embedder, str):
            spec = spec or embedder
            embedder = embedder_from_spec(embedder, dim)
        elif spec is None:
            spec = type(embedder).__name__
        worker = Reembedder(
            self._pool,
            self._settings,
            self._dsn,
            embedder,
            spec=spec,
            dim=dim,
            batch_size=batch_size,
            progress=progress,
        )
        return await worker.run()

    async def recall_audit(
        self,
        *,
        sample: int = DEFAULT_SAMPLE,
        threshold: float = DEFAULT_THRESHOLD,
        k: int = DEFAULT_K,
        perturb: float = 0.0,
        seed: int = 0,
        progress: ProgressReporter = NO_PROGRESS,
    ) -> RecallReport:
        """Recall@k of the normal search path against an exact scan, per scope-size bucket.

        Samples up to ``sample`` stored embeddings per bucket (scopes of 1-99,
        100-999, 1,000-9,999 and 10,000+ rows) as queries; ``report.ok`` is
        False when a bucket's mean recall is below ``threshold``. See
        :mod:`memsvc.ops.recall_audit`.
        """
        return await recall_audit(
            self._pool,
            self._settings,
            self._memories,
            sample=sample,
            threshold=threshold,
            k=k,
            perturb=perturb,
            seed=seed,
            progress=progress,
        )

    # ------------------------------------------------------------ export / import

    async def count_export(self, scope: Scope | None = None) -> int:
        """How many rows :meth:`export` would write."""
        async with self._pool.acquire() as conn:
            return await count_export(conn, self._settings.db_schema, scope)

    async def export(
        self,
        out: IO[str] | IO[bytes] | str | os.PathLike[str],
        *,
        scope: Scope | None = None,
        progress: ProgressReporter = NO_PROGRESS,
    ) -> ExportReport:
        """Write every memory, assembly and checkpoint of ``scope`` and below (all when None)
        as JSONL, ending with a trailer (line count and checksum).

        See :mod:`memsvc.transfer.export`.

        Args:
            out: A path: the export is written to a temporary file beside it and
                renamed onto it once complete, so an interrupted export leaves
                the path as it was. Or a stream (text or binary) to write to; it
                gets the trailer last, and making its target appear complete or
                not at all is then the caller's business.
            scope: Only this scope and the scopes under it.
            progress: Told the rows to write and each batch written.
        """
        async with self._pool.acquire() as conn:
            if isinstance(out, str | os.PathLike):
                with replacing(Path(out)) as handle:
                    return await export_jsonl(
                        conn, self._settings, handle, scope=scope, progress=progress
                    )
            return await export_jsonl(conn, self._settings, out, scope=scope, progress=progress)

    async def import_file(
        self,
        path: Path | str,
        *,
        index_mode: IndexMode = "auto",
        allow_truncated: bool = False,
        dedupe: Dedupe | None = None,
        progress: ProgressReporter = NO_PROGRESS,
    ) -> LoadReport:
        """Load a JSONL export, idempotently; rejected lines are in the report.

        A file whose trailer is missing or does not match what precedes it (an
        export cut short, one written by a memsvc older than trailers, or by
        hand) is refused with a ValidationError naming ``path`` and what is
        missing, before anything is written, unless ``allow_truncated``: then
        its complete lines are loaded and the report carries a warning. An
        invalid index of memsvc's is rebuilt (the report says so).
        ``progress`` is told the bytes read, and the index check and rebuild steps.

        ``dedupe`` (default ``Settings.dedupe``): ``semantic`` merges the
        near-duplicates of each scope the file loaded into after the load
        (as :meth:`dedupe` does; ``report.merged`` counts them). The load
        itself keeps every line: an export is a copy, its rows are not writes.
        """
        mode = validate_dedupe(self._settings.dedupe if dedupe is None else dedupe)
        try:
            async with self._pool.acquire() as conn:
                report = await import_jsonl(
                    conn,
                    self._dsn,
                    self._settings,
                    self._assemblies,
                    Path(path),
                    index_mode=index_mode,
                    allow_truncated=allow_truncated,
                    progress=progress,
                    scope_indexes=self._memories.scope_indexes,
                )
            if mode == "semantic":
                for scope in sorted(report.memory_scopes, key=lambda s: s.depth):
                    report.merged += (await self._deduplication.run(scope)).merged
            return report
        finally:
            self._wrote()

    async def import_legacy(
        self,
        path: Path | str,
        *,
        tenant: str = "default",
        dry_run: bool = False,
        index_mode: IndexMode = "auto",
        strip_nul: bool = False,
        progress: ProgressReporter = NO_PROGRESS,
    ) -> LegacyReport:
        """Import a file-based legacy store; see :mod:`memsvc.transfer.legacy`.

        ``progress`` is told the records read, and the index rebuild step.
        """
        try:
            async with self._pool.acquire() as conn:
                return await import_legacy(
                    conn,
                    self._dsn,
                    self._settings,
                    self._assemblies,
                    Path(path),
                    tenant=tenant,
                    dry_run=dry_run,
                    index_mode=index_mode,
                    strip_nul=strip_nul,
                    progress=progress,
                    scope_indexes=self._memories.scope_indexes,
                )
        finally:
            self._wrote()

    def _wrote(self) -> None:
        if self._reads is not None:
            self._reads.wrote_elsewhere()
