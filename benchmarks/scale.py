"""Growth curve benchmark: memsvc against raw asyncpg as the store grows.

    python -m benchmarks.scale                          # 10,000 -> 100,000 -> 1,000,000 rows
    python -m benchmarks.scale --sizes 10000,50000      # a few minutes
    # the plot (extra `bench`):
    python -m benchmarks.scale --out benchmarks/scale.json --plot docs/assets/scale.png

One embedded PostgreSQL (or ``--database-url``), given a quarter of the
machine's memory as ``shared_buffers`` (``--shared-buffers``), holds
memsvc's store and an identical raw table (``CREATE TABLE ... (LIKE
memories INCLUDING ALL)``: same columns, checks and indexes, HNSW
included). Both grow through the sizes the
same way: every row (same id, scope, content, metadata and vector) goes into
memsvc with its bulk import (``import_file``, the vector index dropped
first) and into the raw table with COPY, each in a child process of its own,
then each side's HNSW index is built (timed apart, not part of any measured
operation). Rows are real MiniLM embeddings from ``--data`` and perturbed
copies of them (see :class:`benchmarks.bulk_load.VectorSource`), spread over
many tenants with heavy-tailed sizes; a tenant ``big`` holds about 30% of the
store (projects, agents and sessions under it), and fixed scopes are
measured: ``small/p200`` (200 rows), ``big/p10k`` (10,000 rows, from the first
size of at least 30,000) and ``big`` as a whole (a ``descendants`` search).

Recall is reported on two sets. The noisy-copy set: ``big``'s ``descendants``
search, where all but 10,000 of the tenant's rows are perturbed copies, so
each real embedding has a few dozen near-duplicates a little noise apart,
and the exact top 10 is decided by that noise. The real set: a tenant
``real`` holding the data set's 20,000 real embeddings once each, in
projects that are the data set's own scopes (loaded with the first size),
searched tenant-wide and in its largest project (4,689 rows), with the same
real held-out queries; the 200-row and 10,000-row scopes also hold real
embeddings.

At each size, both sides measured in the same run, in alternating order:

- ``get`` p50 of random stored rows;
- ``search`` k=10 p50/p99 per scope against the same statement raw, recall@10
  (tie-aware) of both against an exact scan, and short pages of memsvc
  (a search returning fewer hits than the scope has, plain and filtered
  by metadata);
- single ``add`` ops/s (interleaved in chunks) and ``add_many`` vs COPY, the
  HNSW index in place;
- ``delete_scope`` of a 10,000-row scope (loaded with the growth) vs raw
  batched deletes, and ``gc`` of 10,000 expired rows vs raw batched deletes;
- ``export`` of the whole store vs a raw cursor writing the same JSON lines,
  and the growth's ``import`` vs raw COPY, each with the child process's
  peak RSS (``ru_maxrss``): the client's own memory, not the server's.

Prints each size's table with ratios and targets (throughput >= 0.8x raw,
latency <= 1.25x, recall >= 0.95, 0 short pages, client RSS < 300 MB) and
writes all figures as JSON with ``--out``; ``--plot FILE.png`` draws the
curve (matplotlib, the ``bench`` extra).

For other benchmarks (partitioned tables, say): :class:`StoreBench` measures
one size given a service, connections and the raw table's name, once both
stores hold the rows of a :class:`Layout`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from benchmarks.bulk_load import VectorSource
from benchmarks.memories import DEFAULT_DATA, bytes_connection, bytes_pool
from memsvc import MemoryService, Scope, Settings
from memsvc.db.codecs import vector_bytes
from memsvc.db.embedded import EmbeddedPostgres
from memsvc.memories.queries import MEMORY_COLUMNS, MEMORY_COLUMNS_NO_EMBEDDING
from memsvc.memories.repository import content_hash
from memsvc.ops.maintenance import DEFAULT_BATCH as GC_BATCH
from memsvc.transfer import records
from memsvc.transfer.bulk_queries import BULK_LOCK_KEY
from memsvc.transfer.trailer import LineSink

DIM = 384
ROOT = Path(__file__).resolve().parents[1]
RAW_TABLE = "public.bench_scale_raw"
SMALL_SCOPE = Scope("small", "p200")
MID_SCOPE = Scope("big", "p10k")
TENANT_SCOPE = Scope("big")
MID_ROWS = 10_000
# The 10,000-row scope appears once it is at most a third of the store.
MID_FROM_SIZE = 30_000
BIG_SHARE = 0.3
DELETE_ROWS = 10_000
GC_ROWS = 10_000
GC_TTL_S = 86_400.0
DELETE_BATCH = 1_000  # delete_scope's default batch
ID_PREFIX = 0x5CA1E << 64
REAL_ID_PREFIX = 0x5EA1 << 64
REAL_TENANT = "real"
DELETE_ID_PREFIX = 0xDE1E7E << 64
COPY_BATCH = 5_000
RSS_LIMIT_MB = 300
COPY_COLUMNS = [
    "tenant_id", "project_id", "agent_id", "session_id", "id", "key", "content",
    "content_hash", "metadata", "embedding", "importance",
]


# ---------------------------------------------------------------------- layout


ScopeKey = tuple[str, str | None, str | None, str | None]


class Layout:
    """Which scope each row of the growing store lives in (deterministic per run).

    Row ``n`` always has the same id, content, metadata (``{"n": n, "b": n %
    4}``) and vector, so both sides hold the same rows. Counts per exact
    scope and per tenant are kept for the short-page check.
    """

    def __init__(self, seed: int = 7) -> None:
        self.rng = np.random.default_rng(seed)
        self.size = 0
        self.tenants: list[str] = []
        self.scope_rows: dict[ScopeKey, list[int]] = {}  # [rows, rows with b == 1]
        self.tenant_rows: dict[str, list[int]] = {}
        self.has_mid = False
        self.real_project: str | None = None  # the real tenant's largest project

    def add_real(self, scope_ids: np.ndarray) -> list[ScopeKey]:
        """Scopes of the real tenant's rows (row ``i``: the data set's row ``i``)."""
        scopes: list[ScopeKey] = [(REAL_TENANT, f"s{s}", None, None) for s in scope_ids]
        for i, key in enumerate(scopes):
            b1 = int(i % 4 == 1)
            for counts in (self.scope_rows.setdefault(key, [0, 0]),
                           self.tenant_rows.setdefault(REAL_TENANT, [0, 0])):
                counts[0] += 1
                counts[1] += b1
        largest = np.bincount(scope_ids).argmax()
        self.real_project = f"s{largest}"
        return scopes

    def grow(self, end: int) -> list[ScopeKey]:
        """Scopes of rows ``size`` .. ``end - 1`` (and record them)."""
        start, scopes = self.size, []
        if start == 0:
            scopes += [SMALL_SCOPE.levels] * min(200, end)
        if not self.has_mid and end >= MID_FROM_SIZE:
            scopes += [MID_SCOPE.levels] * MID_ROWS
            self.has_mid = True
        rest = end - start - len(scopes)
        # Tenants t0, t1, ... with Zipf sizes (a few large, a long tail of small
        # ones), more of them as the store grows; ``big`` takes BIG_SHARE.
        tenant_count = max(20, end // 500)
        big = self.rng.random(rest) < BIG_SHARE
        tenant_ids = (self.rng.zipf(1.3, rest) - 1) % tenant_count
        projects = (self.rng.zipf(1.5, rest) - 1) % 50
        agents = self.rng.integers(0, 8, rest)
        sessions = self.rng.integers(0, 40, rest)
        for i in range(rest):
            tenant = "big" if big[i] else f"t{tenant_ids[i]}"
            agent = None if agents[i] >= 5 else f"a{agents[i]}"
            session = None if agent is None or sessions[i] >= 20 else f"s{sessions[i]}"
            scopes.append((tenant, f"p{projects[i]}", agent, session))
        for offset, key in enumerate(scopes):
            b1 = int((start + offset) % 4 == 1)
            counts = self.scope_rows.setdefault(key, [0, 0])
            counts[0] += 1
            counts[1] += b1
            tenant_counts = self.tenant_rows.setdefault(key[0], [0, 0])
            tenant_counts[0] += 1
            tenant_counts[1] += b1
            self.tenants.append(key[0])
        self.size = end
        return scopes

    def rows_in(self, scope: Scope, include: str) -> tuple[int, int]:
        """Rows of a measured scope, and those with ``b == 1``."""
        if include == "descendants" and scope.depth == 0:
            found = self.tenant_rows.get(scope.tenant, [0, 0])
        else:
            found = self.scope_rows.get(scope.levels, [0, 0])
        return found[0], found[1]


def row_id(n: int) -> uuid.UUID:
    return uuid.UUID(int=ID_PREFIX | n)


_VECTOR_FORMAT = ",".join(["%.7g"] * DIM)


def memory_line(
    memory_id: uuid.UUID, scope: ScopeKey, content: str, metadata: dict[str, int], vector: Any
) -> str:
    """An import line (the export format), the embedding last as exports write it."""
    tenant, project, agent, session = scope
    head = json.dumps(
        {
            "type": "memory", "id": str(memory_id), "tenant": tenant, "project": project,
            "agent": agent, "session": session, "content": content,
            "content_hash": content_hash(content), "metadata": metadata, "importance": 0.5,
        },
        separators=(",", ":"),
    )
    return f'{head[:-1]},"embedding":[{_VECTOR_FORMAT % tuple(vector.tolist())}]}}'


def write_growth(
    path: Path, settings: Settings, layout: Layout, source: VectorSource, end: int, stage: int,
    real_scopes: np.ndarray | None = None,
) -> int:
    """The rows taking the store to ``end``, plus a fresh 10,000-row scope to delete.

    With ``real_scopes`` (the first size, when the data set is there), the
    real tenant's rows too.
    """
    start = layout.size
    scopes = layout.grow(end)
    rng = np.random.default_rng(1000 + stage)
    real_rows = 0
    with path.open("w", encoding="utf-8") as out:
        sink = LineSink(out)  # ends the file with a trailer, as an export does
        sink.write_lines([records.header_line(settings, datetime.now(UTC))])
        if real_scopes is not None and source.real is not None:
            real = source.real / np.linalg.norm(source.real, axis=1, keepdims=True)
            keys = layout.add_real(real_scopes)
            sink.write_lines([
                memory_line(uuid.UUID(int=REAL_ID_PREFIX | i), key, f"real {i}",
                            {"n": i, "b": i % 4}, real[i])
                for i, key in enumerate(keys)
            ])
            real_rows = len(keys)
        for chunk in range(start, end, COPY_BATCH):
            count = min(COPY_BATCH, end - chunk)
            vectors = source.vectors(rng, chunk, count)
            lines = []
            for i in range(count):
                n = chunk + i
                scope = scopes[n - start]
                lines.append(memory_line(
                    row_id(n), scope, f"memory {n} of {'/'.join(filter(None, scope))}",
                    {"n": n, "b": n % 4}, vectors[i],
                ))
            sink.write_lines(lines)
        vectors = source.vectors(rng, end, DELETE_ROWS)
        doomed = delete_scope_of(stage).levels
        sink.write_lines([
            memory_line(uuid.UUID(int=DELETE_ID_PREFIX | (stage << 32) | i), doomed,
                        f"to delete {stage} {i}", {"n": i, "b": i % 4}, vectors[i])
            for i in range(DELETE_ROWS)
        ])
        sink.write_trailer()
    return end - start + DELETE_ROWS + real_rows


def delete_scope_of(stage: int) -> Scope:
    return Scope("doomed", f"stage{stage}")


# ---------------------------------------------------------------------- results


@dataclass
class Result:
    """One figure at one size: memsvc's value, raw's, and the target it is held to."""

    size: int
    name: str
    unit: str
    memsvc: float
    raw: float | None
    kind: str  # throughput | latency | recall | count | rss | info
    ratio: float | None = None
    target: str = ""
    ok: bool | None = None
    read_round: int = 1  # which round of the read figures (--read-rounds)

    def __post_init__(self) -> None:
        if self.raw:
            self.ratio = self.memsvc / self.raw
        if self.kind == "throughput" and self.ratio is not None:
            self.target, self.ok = ">= 0.8x", self.ratio >= 0.8
        elif self.kind == "latency" and self.ratio is not None:
            self.target, self.ok = "<= 1.25x", self.ratio <= 1.25
        elif self.kind == "recall":
            self.target, self.ok = ">= 0.95", self.memsvc >= 0.95
        elif self.kind == "count":
            self.target, self.ok = "0", self.memsvc == 0
        elif self.kind == "rss":
            self.target, self.ok = f"< {RSS_LIMIT_MB} MB", self.memsvc < RSS_LIMIT_MB

    def line(self) -> str:
        def number(value: float | None) -> str:
            if value is None:
                return "-"
            return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"

        ratio = "" if self.ratio is None else f"{self.ratio:.2f}x"
        verdict = "" if self.ok is None else ("ok" if self.ok else "MISSED")
        return (f"  {self.name:<44} {self.unit:<7} {number(self.memsvc):>10} "
                f"{number(self.raw):>10} {ratio:>7}  {self.target:<9} {verdict}")


def header() -> str:
    return (f"  {'figure':<44} {'unit':<7} {'memsvc':>10} {'raw':>10} {'ratio':>7}  "
            f"{'target':<9} verdict")


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def percentile(values: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(values), p))


# ---------------------------------------------------------------------- one size


@dataclass
class SearchScope:
    label: str
    scope: Scope
    include: str
    raw_where: str  # after $1 (the vector): the scope's parameters from $2
    raw_args: tuple[str, ...]


def measured_scopes(layout: Layout) -> list[SearchScope]:
    exact = "tenant_id = $2 AND project_id = $3 AND agent_id IS NULL AND session_id IS NULL"
    found = [SearchScope("200-row scope", SMALL_SCOPE, "exact", exact,
                         (SMALL_SCOPE.tenant, str(SMALL_SCOPE.project)))]
    if layout.has_mid:
        found.append(SearchScope("10,000-row scope", MID_SCOPE, "exact", exact,
                                 (MID_SCOPE.tenant, str(MID_SCOPE.project))))
    rows = layout.rows_in(TENANT_SCOPE, "descendants")[0]
    found.append(SearchScope(f"tenant-wide descendants ({rows:,} rows)", TENANT_SCOPE,
                             "descendants", "tenant_id = $2", (TENANT_SCOPE.tenant,)))
    if layout.real_project is not None:
        real = Scope(REAL_TENANT)
        rows = layout.rows_in(real, "descendants")[0]
        found.append(SearchScope(f"real tenant, descendants ({rows:,} real rows)", real,
                                 "descendants", "tenant_id = $2", (REAL_TENANT,)))
        project = Scope(REAL_TENANT, layout.real_project)
        rows = layout.rows_in(project, "exact")[0]
        found.append(SearchScope(f"real tenant's largest project ({rows:,} real rows)",
                                 project, "exact", exact, (REAL_TENANT, layout.real_project)))
    return found


@dataclass
class StoreBench:
    """Measures one size: memsvc's store against ``raw_table`` holding the same rows.

    ``admin`` runs set-up (fills, truth scans) so neither measured side's
    connection does; ``raw`` is the raw side's pool, or connection (vectors
    as bytes, memsvc's search settings): a pool the size of memsvc's is the
    fair match, since memsvc acquires and releases a pooled connection per
    call. ``raw_conn``, if given, is one dedicated connection ``get`` is also
    timed on (an info figure: raw without a pool's acquire and release).
    """

    svc: MemoryService
    admin: asyncpg.Connection
    raw: asyncpg.Connection | asyncpg.Pool
    raw_table: str
    layout: Layout
    queries: np.ndarray
    source: VectorSource
    ops: int = 200
    batch: int = 1_000
    gets: int = 300
    raw_conn: asyncpg.Connection | None = None
    results: list[Result] = field(default_factory=list)

    def report(self, result: Result) -> None:
        self.results.append(result)
        print(result.line(), flush=True)

    async def measure(self, size: int, stage: int) -> list[Result]:
        """Every figure but export/import at this size (each pair in alternating order)."""
        self.results = []
        memsvc_first = stage % 2 == 0
        await self.reads(size, memsvc_first)
        # The searches above walk raw's table graph but memsvc's scope
        # graphs: memsvc's table graph, which every write updates, went cold
        # meanwhile (and the machine may have dropped its pages). Both read in
        # again, the writes time the code, not which side's pages were evicted.
        warmed = await warm_table_graphs(
            self.admin, [f"{self.svc.settings.db_schema}.memories", self.raw_table]
        )
        print(f"  (before the writes, both table graphs read into the page cache: {warmed})",
              flush=True)
        await self.single_adds(size, stage, Scope("adds", f"single{stage}"), "add (single)")
        # Into the big tenant, whose subtree has an index of its own on memsvc's side.
        await self.single_adds(size, stage, Scope(TENANT_SCOPE.tenant, f"adds{stage}"),
                               "add (single), into tenant big")
        await self.add_many(size, stage, memsvc_first)
        await self.delete_scope(size, stage, memsvc_first)
        await self.gc(size, stage, memsvc_first)
        return self.results

    async def measure_reads(self, size: int, read_round: int) -> list[Result]:
        """The read figures again (get, searches), memsvc first in every other round."""
        self.results = []
        await self.reads(size, memsvc_first=read_round % 2 == 1)
        for result in self.results:
            result.read_round = read_round
        return self.results

    async def reads(self, size: int, memsvc_first: bool) -> None:
        """get, and the searches of every measured scope."""
        await self.gets_p50(size, memsvc_first)
        for scope in measured_scopes(self.layout):
            await self.searches(size, scope, memsvc_first)

    async def paired(
        self, memsvc_first: bool, mine: Callable[[], Awaitable[Any]],
        theirs: Callable[[], Awaitable[Any]],
    ) -> tuple[float, float]:
        """Seconds of memsvc's call and of raw's, in the given order."""
        timed: dict[str, float] = {}
        for side in ("memsvc", "raw") if memsvc_first else ("raw", "memsvc"):
            started = time.perf_counter()
            await (mine() if side == "memsvc" else theirs())
            timed[side] = time.perf_counter() - started
        return timed["memsvc"], timed["raw"]

    async def gets_p50(self, size: int, memsvc_first: bool) -> None:
        rng = np.random.default_rng(size)
        rows = rng.integers(0, self.layout.size, self.gets)
        sql = (f"SELECT {MEMORY_COLUMNS} FROM {self.raw_table} WHERE id = $1 AND tenant_id = $2 "
               "AND (expires_at IS NULL OR expires_at > now())")
        mine: list[float] = []
        theirs: list[float] = []
        dedicated: list[float] = []
        for i, n in enumerate(rows):
            memory_id, tenant = row_id(int(n)), self.layout.tenants[int(n)]
            m, r = await self.paired(
                memsvc_first == (i % 2 == 0),
                lambda memory_id=memory_id, tenant=tenant: self.svc.memories.get(
                    memory_id, tenant=tenant
                ),
                lambda memory_id=memory_id, tenant=tenant: self.raw.fetchrow(
                    sql, memory_id, tenant
                ),
            )
            mine.append(m)
            theirs.append(r)
            if self.raw_conn is not None:
                started = time.perf_counter()
                await self.raw_conn.fetchrow(sql, memory_id, tenant)
                dedicated.append(time.perf_counter() - started)
        self.report(Result(size, "get p50", "ms", percentile(mine, 50) * 1000,
                           percentile(theirs, 50) * 1000, "latency"))
        if dedicated:
            self.report(Result(size, "get p50 vs one raw connection (no pool)", "ms",
                               percentile(mine, 50) * 1000, percentile(dedicated, 50) * 1000,
                               "info"))

    async def searches(self, size: int, where: SearchScope, memsvc_first: bool) -> None:
        scope, include = where.scope, where.include
        columns = f"{MEMORY_COLUMNS_NO_EMBEDDING}, embedding <=> $1 AS distance"
        live = "embedding IS NOT NULL AND (expires_at IS NULL OR expires_at > now())"
        raw_sql = (f"SELECT {columns} FROM {self.raw_table} WHERE {where.raw_where} AND {live} "
                   "ORDER BY embedding <=> $1 LIMIT 10")
        # ``+ 0`` is not the index's operator: the planner scans exactly.
        truth_sql = (f"SELECT id, embedding <=> $1 AS distance FROM {self.raw_table} "
                     f"WHERE {where.raw_where} AND {live} ORDER BY (embedding <=> $1) + 0, id "
                     "LIMIT 10")
        rows, b1_rows = self.layout.rows_in(scope, include)
        for query in self.queries[:10]:  # warm both sides' index pages
            await self.svc.memories.search(scope, query, k=10, include=include)  # type: ignore[arg-type]
            await self.raw.fetch(raw_sql, vector_bytes(query), *where.raw_args)
        mine: list[float] = []
        theirs: list[float] = []
        recalls: list[float] = []
        raw_recalls: list[float] = []
        short = 0
        for i, query in enumerate(self.queries):
            wire = vector_bytes(query)
            hits: list[Any] = []
            raw_rows: list[Any] = []

            async def memsvc_search(query: np.ndarray = query, hits: list[Any] = hits) -> None:
                hits[:] = await self.svc.memories.search(
                    scope, query, k=10, include=include  # type: ignore[arg-type]
                )

            async def raw_search(wire: bytes = wire, raw_rows: list[Any] = raw_rows) -> None:
                raw_rows[:] = await self.raw.fetch(raw_sql, wire, *where.raw_args)

            m, r = await self.paired(memsvc_first == (i % 2 == 0), memsvc_search, raw_search)
            mine.append(m)
            theirs.append(r)
            truth = await self.admin.fetch(truth_sql, wire, *where.raw_args)
            recalls.append(tie_aware_recall(
                [(h.memory.id, 1.0 - (h.similarity or 0.0)) for h in hits], truth))
            raw_recalls.append(tie_aware_recall([(x["id"], x["distance"]) for x in raw_rows],
                                                truth))
            filtered = await self.svc.memories.search(
                scope, query, k=10, include=include, where={"b": 1}  # type: ignore[arg-type]
            )
            short += len(hits) < min(10, rows)
            short += len(filtered) < min(10, b1_rows)
        label = where.label
        self.report(Result(size, f"search p50, {label}", "ms", percentile(mine, 50) * 1000,
                           percentile(theirs, 50) * 1000, "latency"))
        self.report(Result(size, f"search p99, {label}", "ms", percentile(mine, 99) * 1000,
                           percentile(theirs, 99) * 1000, "latency"))
        self.report(Result(size, f"recall@10, {label}", "", statistics.mean(recalls),
                           statistics.mean(raw_recalls), "recall"))
        self.report(Result(size, f"short pages of {2 * len(self.queries)}, {label}", "",
                           short, None, "count"))

    async def single_adds(self, size: int, stage: int, scope: Scope, label: str) -> None:
        rng = np.random.default_rng(50 + stage + 1000 * (scope.tenant == TENANT_SCOPE.tenant))
        vectors = self.source.vectors(rng, self.layout.size, 2 * self.ops)
        sql = (f"INSERT INTO {self.raw_table} (tenant_id, project_id, agent_id, session_id, id, "
               "key, content, content_hash, metadata, embedding, importance, expires_at) "
               "VALUES ($1, $2, NULL, NULL, $3, NULL, $4, $5, $6::jsonb, $7, $8, NULL)")
        mine = theirs = 0.0
        # Chunks of 25 in turn, so both sides see the same machine noise.
        for chunk in range(0, self.ops, 25):
            end = min(self.ops, chunk + 25)

            async def memsvc_adds(chunk: int = chunk, end: int = end) -> None:
                for i in range(chunk, end):
                    await self.svc.memories.add(scope, f"single {stage} {i}",
                                                embedding=vectors[i])

            async def raw_adds(chunk: int = chunk, end: int = end) -> None:
                for i in range(chunk, end):
                    content = f"single {stage} {i}"
                    await self.raw.execute(
                        sql, scope.tenant, scope.project, uuid.uuid4(), content,
                        content_hash(content), "{}", vector_bytes(vectors[self.ops + i]), 0.5,
                    )

            m, r = await self.paired((chunk // 25) % 2 == 0, memsvc_adds, raw_adds)
            mine += m
            theirs += r
        self.report(Result(size, label, "ops/s", self.ops / mine, self.ops / theirs,
                           "throughput"))

    async def add_many(self, size: int, stage: int, memsvc_first: bool) -> None:
        scope = Scope("adds", f"many{stage}")
        rng = np.random.default_rng(70 + stage)
        vectors = self.source.vectors(rng, self.layout.size, self.batch)
        items = [{"content": f"many {stage} {i}", "embedding": v} for i, v in enumerate(vectors)]
        copy_rows = [
            (scope.tenant, scope.project, None, None, uuid.uuid4(), None, f"many {stage} {i}",
             content_hash(f"many {stage} {i}"), "{}", vector_bytes(v), 0.5)
            for i, v in enumerate(vectors)
        ]
        m, r = await self.paired(
            memsvc_first,
            lambda: self.svc.memories.add_many(scope, items),
            lambda: self.raw.copy_records_to_table(
                self.raw_table.split(".")[1], schema_name=self.raw_table.split(".")[0],
                records=copy_rows, columns=COPY_COLUMNS,
            ),
        )
        self.report(Result(size, f"add_many ({self.batch:,} items) vs COPY", "items/s",
                           self.batch / m, self.batch / r, "throughput"))

    async def batched_delete(
        self, condition: str, order: str, args: tuple[Any, ...], batch: int
    ) -> int:
        """Raw: lock a batch, delete it, commit; until nothing is left."""
        sql = (f"WITH batch AS (SELECT tenant_id, id FROM {self.raw_table} WHERE {condition} "
               f"ORDER BY {order} LIMIT {batch} FOR UPDATE SKIP LOCKED) "
               f"DELETE FROM {self.raw_table} AS r USING batch "
               "WHERE r.tenant_id = batch.tenant_id AND r.id = batch.id")
        total = 0
        while True:
            status = await self.raw.execute(sql, *args)
            deleted = int(status.split()[-1])
            total += deleted
            if deleted == 0:
                return total

    async def delete_scope(self, size: int, stage: int, memsvc_first: bool) -> None:
        scope = delete_scope_of(stage)
        deleted: dict[str, int] = {}

        async def mine() -> None:
            deleted["memsvc"] = await self.svc.memories.delete_scope(scope)

        async def theirs() -> None:
            deleted["raw"] = await self.batched_delete(
                "tenant_id = $1 AND project_id = $2", "tenant_id, id",
                (scope.tenant, scope.project), DELETE_BATCH,
            )

        m, r = await self.paired(memsvc_first, mine, theirs)
        if deleted != {"memsvc": DELETE_ROWS, "raw": DELETE_ROWS}:
            raise SystemExit(f"delete_scope removed {deleted}, expected {DELETE_ROWS} each")
        self.report(Result(size, f"delete_scope ({DELETE_ROWS:,} rows)", "rows/s",
                           DELETE_ROWS / m, DELETE_ROWS / r, "throughput"))

    async def gc(self, size: int, stage: int, memsvc_first: bool) -> None:
        # Text-only rows (a heap delete does not touch the HNSW index, and
        # loading 10,000 vectors per side with the index in place would take
        # longer than the gc measured).
        scope = Scope("expiring", f"stage{stage}")
        # A TTL far longer than any load and set-up takes, so no row expires
        # early (a short one let rows vanish in the untimed gc below on a
        # loaded machine); expiry is then forced on both sides at once.
        for start in range(0, GC_ROWS, 1_000):
            await self.svc.memories.add_many(scope, [
                {"content": f"expiring {stage} {i}", "ttl": GC_TTL_S}
                for i in range(start, start + 1_000)
            ])
        # Set-up, untimed: gc also copies the commit times of every history
        # event written since its last run (the growth's import, the adds
        # above). Run it now so the measured run does the work of these
        # rows' expiry only: deleting them and their tombstones' commit times.
        await self.svc.maintenance.gc()
        later = datetime.now(UTC) + timedelta(seconds=GC_TTL_S)
        await self.admin.copy_records_to_table(
            self.raw_table.split(".")[1], schema_name=self.raw_table.split(".")[0],
            records=[
                (scope.tenant, scope.project, None, None, uuid.uuid4(), None,
                 f"expiring {stage} {i}", content_hash(f"expiring {stage} {i}"), "{}", None,
                 0.5, later)
                for i in range(GC_ROWS)
            ],
            columns=[*COPY_COLUMNS, "expires_at"],
        )
        # Time passes: the same update on both sides (memsvc keeps no history
        # of expires_at changes made in SQL), then each holds exactly GC_ROWS
        # expired rows, whatever the machine's speed.
        memsvc_table = f"{self.svc.settings.db_schema}.memories"
        for table in (memsvc_table, self.raw_table):
            await self.admin.execute(
                f"UPDATE {table} SET expires_at = now() - interval '1 second' "
                "WHERE tenant_id = $1 AND project_id = $2",
                scope.tenant, scope.project,
            )
            expired = await self.admin.fetchval(
                f"SELECT count(*) FROM {table} WHERE expires_at <= now()"
            )
            if expired != GC_ROWS:
                raise SystemExit(f"{table} holds {expired} expired rows, expected {GC_ROWS}")
        removed: dict[str, int] = {}

        async def mine() -> None:
            report = await self.svc.maintenance.gc()
            removed["memsvc"] = report.expired_deleted
            print(f"  (gc: {report.commit_times_persisted:,} commit times persisted, "
                  f"{report.batches} batches)", flush=True)

        async def theirs() -> None:
            removed["raw"] = await self.batched_delete(
                "expires_at IS NOT NULL AND expires_at <= now()", "expires_at", (), GC_BATCH
            )

        m, r = await self.paired(memsvc_first, mine, theirs)
        if removed != {"memsvc": GC_ROWS, "raw": GC_ROWS}:
            raise SystemExit(f"gc removed {removed}, expected {GC_ROWS} each")
        self.report(Result(size, f"gc ({GC_ROWS:,} expired rows)", "rows/s", GC_ROWS / m,
                           GC_ROWS / r, "throughput"))


def tie_aware_recall(got: list[tuple[Any, float]], truth: list[Any]) -> float:
    """Share of the exact top 10 found; a hit tying the 10th distance counts too."""
    if not truth:
        return 1.0
    wanted = {row["id"] for row in truth}
    worst = max(row["distance"] for row in truth) + 1e-6
    found = sum(1 for memory_id, distance in got if memory_id in wanted or distance <= worst)
    return min(1.0, found / len(truth))


# ---------------------------------------------------------------------- child processes


def peak_rss_mb() -> float:
    """This process's peak resident memory (MB) since it started running this program.

    ``VmHWM`` belongs to the address space the program was exec'd into;
    ``ru_maxrss`` would carry over the parent's peak from before the fork.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def child(args: argparse.Namespace) -> None:
    """Run one export or import in this process and print seconds, rows and peak RSS."""
    started_rss = peak_rss_mb()
    path = Path(args.file)
    rows = 0
    if args.child in ("import", "export"):
        settings = Settings(database_url=args.dsn, auto_migrate=False, statement_timeout_ms=0)
        # The benchmark dropped the vector index on purpose (it builds it
        # after, timed apart): the service must not rebuild it on opening.
        async with MemoryService.open(settings, rebuild_invalid_indexes=False) as svc:
            started = time.perf_counter()
            if args.child == "import":
                # The benchmark dropped the index (built after, timed apart).
                report = await svc.maintenance.import_file(path, index_mode="keep")
                if not report.ok:
                    raise SystemExit(f"import rejected lines: {report.rejected[:3]}")
                rows = report.memories.inserted
            else:
                with path.open("w", encoding="utf-8") as out:
                    rows = (await svc.maintenance.export(out)).memories
            seconds = time.perf_counter() - started
    else:
        conn = await bytes_connection(args.dsn, {})
        try:
            started = time.perf_counter()
            if args.child == "raw-import":
                rows = await raw_import(conn, path)
            else:
                rows = await raw_export(conn, path)
            seconds = time.perf_counter() - started
        finally:
            await conn.close()
    peak = peak_rss_mb()
    print(json.dumps({"seconds": seconds, "rows": rows, "rss_mb": peak,
                      "rss_start_mb": started_rss}))


async def raw_import(conn: asyncpg.Connection, path: Path) -> int:
    """Raw: parse each JSON line, COPY in batches (the table's vector index dropped)."""
    schema, table = RAW_TABLE.split(".")
    rows = 0
    pending: list[tuple[Any, ...]] = []
    with path.open("rb") as handle:
        for line in handle:
            obj = json.loads(line)
            if obj["type"] != "memory":
                continue
            pending.append((
                obj["tenant"], obj["project"], obj["agent"], obj["session"],
                uuid.UUID(obj["id"]), None, obj["content"], obj["content_hash"],
                json.dumps(obj["metadata"]),
                vector_bytes(np.asarray(obj["embedding"], dtype=np.float32)), obj["importance"],
            ))
            if len(pending) >= COPY_BATCH:
                await conn.copy_records_to_table(table, schema_name=schema, records=pending,
                                                 columns=COPY_COLUMNS)
                rows += len(pending)
                pending = []
    if pending:
        await conn.copy_records_to_table(table, schema_name=schema, records=pending,
                                         columns=COPY_COLUMNS)
        rows += len(pending)
    return rows


async def raw_export(conn: asyncpg.Connection, path: Path) -> int:
    """Raw: one snapshot, a server-side cursor, the same JSON line per row as memsvc writes."""
    rows = 0
    with path.open("w", encoding="utf-8") as out:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            pending: list[str] = []
            async for row in conn.cursor(f"SELECT * FROM {RAW_TABLE}", prefetch=500):
                head = json.dumps({
                    "type": "memory", "id": str(row["id"]), "tenant": row["tenant_id"],
                    "project": row["project_id"], "agent": row["agent_id"],
                    "session": row["session_id"], "key": row["key"], "content": row["content"],
                    "content_hash": row["content_hash"], "metadata": json.loads(row["metadata"]),
                    "importance": row["importance"], "version": row["version"],
                    "created_at": row["created_at"].isoformat(),
                    "updated_at": row["updated_at"].isoformat(),
                    "expires_at": row["expires_at"] and row["expires_at"].isoformat(),
                    "access_count": row["access_count"],
                    "last_accessed_at": row["last_accessed_at"]
                    and row["last_accessed_at"].isoformat(),
                }, ensure_ascii=False, separators=(",", ":"))
                embedding = row["embedding"]
                vector = "null"
                if embedding is not None:
                    values = np.frombuffer(embedding, dtype=">f4", offset=4).tolist()
                    vector = "[" + ",".join(f"{x:.9g}" for x in values) + "]"
                pending.append(f'{head[:-1]},"embedding":{vector}}}')
                if len(pending) >= 500:
                    out.write("\n".join(pending) + "\n")
                    rows += len(pending)
                    pending = []
            if pending:
                out.write("\n".join(pending) + "\n")
                rows += len(pending)
    return rows


async def run_child(kind: str, dsn: str, path: Path) -> dict[str, float]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.scale", "--child", kind, "--dsn", dsn,
        "--file", str(path), cwd=ROOT, stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"child {kind} failed ({proc.returncode})")
    result: dict[str, float] = json.loads(out.decode().strip().splitlines()[-1])
    return result


# ---------------------------------------------------------------------- growth


async def vector_index(admin: asyncpg.Connection, table: str) -> tuple[str, str]:
    """The HNSW index of all of ``table``'s rows: its name and definition.

    Not a scope's partial index (memsvc's table has those too, once gc or
    ``index_scopes`` built them).
    """
    row = await admin.fetchrow(
        "SELECT c.oid::regclass::text AS name, pg_get_indexdef(c.oid) AS definition "
        "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam "
        "WHERE i.indrelid = $1::regclass AND a.amname = 'hnsw' AND i.indpred IS NULL",
        table,
    )
    if row is None:
        raise SystemExit(f"no HNSW index on {table}")
    return row["name"], row["definition"]


async def warm_table_graphs(admin: asyncpg.Connection, tables: list[str]) -> str:
    """Read each table's HNSW graph files into the OS page cache; what was read.

    Only where the server's files are readable here (the embedded server).
    """
    try:
        data_directory = Path(await admin.fetchval("SHOW data_directory"))
    except asyncpg.PostgresError:
        return "not done (data_directory not readable)"
    read = 0
    for table in tables:
        name, _ = await vector_index(admin, table)
        relative = await admin.fetchval("SELECT pg_relation_filepath($1::regclass)", name)
        first = data_directory / relative
        if not first.exists():
            return "not done (the server's files are elsewhere)"
        for segment in [first, *first.parent.glob(f"{first.name}.[0-9]*")]:
            read += await asyncio.to_thread(read_through, segment)
    return f"{read / 2**20:,.0f} MiB"


def read_through(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(len(chunk) for chunk in iter(lambda: handle.read(8 * 2**20), b""))


async def build_indexes(
    admin: asyncpg.Connection, definitions: dict[str, str], rows: int
) -> dict[str, float]:
    """Build each side's HNSW index, in turn, with the graph in memory; seconds each."""
    # The graph of ``rows`` 384-d vectors held in memory (pgvector builds much
    # slower once it spills), and one parallel worker besides the leader:
    # two processes on two cores.
    memory_mb = min(6_144, max(256, int(rows * (DIM * 4 + 16 * 2 * 10 + 160) * 1.4 / 2**20)))
    await admin.execute(f"SET maintenance_work_mem = '{memory_mb}MB'")
    await admin.execute("SET max_parallel_maintenance_workers = 1")
    seconds = {}
    for side, definition in definitions.items():
        started = time.perf_counter()
        await admin.execute(definition)
        seconds[side] = time.perf_counter() - started
    await admin.execute("RESET maintenance_work_mem")
    return seconds


async def grow(
    admin: asyncpg.Connection, dsn: str, svc: MemoryService, layout: Layout,
    source: VectorSource, workdir: Path, size: int, stage: int, source_data: Path,
) -> list[Result]:
    """Bring both stores to ``size`` rows (plus a scope to delete); import figures.

    As a bulk import that drops the vector index does, the scope indexes go
    too, and are built again after it (:func:`index_scopes`).
    """
    settings = svc.settings
    path = workdir / f"growth{stage}.jsonl"
    started = time.perf_counter()
    real_scopes = None
    corpus_scopes = source_data / "corpus_scopes.npy"
    if stage == 0 and source.real is not None and corpus_scopes.exists():
        real_scopes = np.load(corpus_scopes)
    lines = write_growth(path, settings, layout, source, size, stage, real_scopes)
    print(f"  wrote {lines:,} rows ({path.stat().st_size / 2**20:,.0f} MiB) in "
          f"{time.perf_counter() - started:.0f} s", flush=True)
    definitions = {}
    for side, table in (("memsvc", f"{settings.db_schema}.memories"), ("raw", RAW_TABLE)):
        name, definitions[side] = await vector_index(admin, table)
        await admin.execute(f"DROP INDEX {name}")
    await svc.memories.scope_indexes.drop_all()
    sides = ["import", "raw-import"] if stage % 2 == 0 else ["raw-import", "import"]
    # The bulk-load lock, as a load that dropped the index holds it: the
    # import must not rebuild the missing index itself (it is built below,
    # timed apart).
    await admin.fetchval("SELECT pg_advisory_lock($1)", BULK_LOCK_KEY)
    try:
        loads = {kind: await run_child(kind, dsn, path) for kind in sides}
    finally:
        await admin.fetchval("SELECT pg_advisory_unlock($1)", BULK_LOCK_KEY)
    for kind, load in loads.items():
        print(f"  ({kind}: {load['seconds']:.0f} s, client RSS {load['rss_start_mb']:.0f} MB "
              "at start)", flush=True)
    path.unlink()
    for table in (f"{settings.db_schema}.memories", RAW_TABLE):
        await admin.execute(f"ANALYZE {table}")
    stored = layout.size + DELETE_ROWS + layout.rows_in(Scope(REAL_TENANT), "descendants")[0]
    builds = await build_indexes(admin, definitions, stored)
    mine, theirs = loads["import"], loads["raw-import"]
    if mine["rows"] != lines or theirs["rows"] != lines:
        raise SystemExit(f"imported {mine['rows']} / {theirs['rows']} of {lines} rows")
    return [
        Result(size, f"import ({lines:,} rows, index dropped)", "rows/s",
               lines / mine["seconds"], lines / theirs["seconds"], "throughput"),
        Result(size, "import: client peak RSS", "MB", mine["rss_mb"], theirs["rss_mb"], "rss"),
        Result(size, f"HNSW build over {stored:,} rows (not in the ops)", "s",
               builds["memsvc"], builds["raw"], "info"),
    ]


async def index_scopes(svc: MemoryService, size: int) -> list[Result]:
    """Build memsvc's scope indexes of the big scopes (as gc would), timed apart."""
    started = time.perf_counter()
    report = await svc.maintenance.index_scopes()
    seconds = time.perf_counter() - started
    built = len(report.built) + len(report.subtrees_built)
    print(f"  scope indexes: {len(report.built)} of scopes and {len(report.subtrees_built)} of "
          f"subtrees built, {report.dropped} dropped ({report.skipped or 'done'})", flush=True)
    return [Result(size, f"scope index builds ({built}, not in the ops)", "s",
                   seconds, None, "info")]


async def export(dsn: str, workdir: Path, size: int, stage: int) -> list[Result]:
    """Export the whole store on both sides (files removed after)."""
    results = {}
    for kind in ("export", "raw-export") if stage % 2 == 0 else ("raw-export", "export"):
        path = workdir / f"{kind}.jsonl"
        results[kind] = await run_child(kind, dsn, path)
        print(f"  ({kind}: {path.stat().st_size / 2**20:,.0f} MiB, client RSS "
              f"{results[kind]['rss_start_mb']:.0f} MB at start)", flush=True)
        path.unlink()
    mine, theirs = results["export"], results["raw-export"]
    return [
        Result(size, f"export (whole store, {mine['rows']:,.0f} rows)", "rows/s",
               mine["rows"] / mine["seconds"], theirs["rows"] / theirs["seconds"], "throughput"),
        Result(size, "export: client peak RSS", "MB", mine["rss_mb"], theirs["rss_mb"], "rss"),
    ]


# ---------------------------------------------------------------------- output


def plot(results: list[Result], path: Path) -> None:
    """Ratios to raw, search latencies and client RSS against the store size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [r for r in results if r.read_round == 1]
    sizes = sorted({r.size for r in results})
    fig, axes = plt.subplots(2, 2, figsize=(12, 9))

    def draw(ax: Any, lines: dict[str, list[Any]], title: str, ylabel: str) -> None:
        for label, points in lines.items():
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o", label=label)
        ax.set_xscale("log")
        ax.set_xticks(sizes, [f"{s:,}" for s in sizes])
        ax.minorticks_off()
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.set_xlabel("store size (rows)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)

    throughput = {}
    latency = {}
    for r in results:
        if r.ratio is None:
            continue
        # Without the sizes in parentheses, which change from stage to stage.
        label = re.sub(r" \([^)]*\d[^)]*\)", "", r.name)
        if r.kind == "throughput":
            throughput.setdefault(label, []).append((r.size, r.ratio))
        elif r.kind == "latency":
            latency.setdefault(r.name.split(" (")[0], []).append((r.size, r.ratio))
    draw(axes[0][0], throughput, "throughput, memsvc / raw (target >= 0.8)", "ratio")
    axes[0][0].axhline(0.8, color="red", linestyle="--")
    draw(axes[0][1], latency, "latency, memsvc / raw (target <= 1.25)", "ratio")
    axes[0][1].axhline(1.25, color="red", linestyle="--")
    p50 = {}
    for r in results:
        if r.name.startswith("search p50"):
            label = r.name.removeprefix("search p50, ").split(" (")[0]
            p50.setdefault(f"memsvc, {label}", []).append((r.size, r.memsvc))
            p50.setdefault(f"raw, {label}", []).append((r.size, r.raw))
    draw(axes[1][0], p50, "search k=10 p50", "ms")
    rss = {}
    for r in results:
        if r.kind == "rss":
            what = r.name.split(":")[0]
            rss.setdefault(f"memsvc {what}", []).append((r.size, r.memsvc))
            rss.setdefault(f"raw {what}", []).append((r.size, r.raw))
    draw(axes[1][1], rss, f"client peak RSS (target < {RSS_LIMIT_MB} MB)", "MB")
    axes[1][1].axhline(RSS_LIMIT_MB, color="red", linestyle="--")
    axes[1][1].set_ylim(bottom=0)
    fig.suptitle("memsvc growth curve (python -m benchmarks.scale), same-run ratios to raw asyncpg")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot written to {path}")


def medians(results: list[Result]) -> None:
    """Per read figure measured in several rounds: memsvc's median, raw's, and their ratio."""
    rounds: dict[tuple[int, str], list[Result]] = {}
    for r in results:
        if r.kind in ("latency", "recall", "count"):
            rounds.setdefault((r.size, r.name), []).append(r)
    repeated = {key: found for key, found in rounds.items() if len(found) > 1}
    if not repeated:
        return
    print(f"\nmedians of {max(len(found) for found in repeated.values())} read rounds")
    print(header())
    for (size, name), found in repeated.items():
        raw = [r.raw for r in found if r.raw is not None]
        print(Result(size, f"{name} (median)", found[0].unit,
                     float(np.median([r.memsvc for r in found])),
                     float(np.median(raw)) if raw else None, found[0].kind).line())


def summary(results: list[Result]) -> None:
    medians(results)
    results = [r for r in results if r.read_round == 1]
    missed = [r for r in results if r.ok is False]
    print(f"\n{len([r for r in results if r.ok])} figures on target, {len(missed)} missed")
    for r in missed:
        print(f"  missed at {r.size:,}: {r.name} ({r.target})")


# ---------------------------------------------------------------------- main


def shared_buffers_mb(given: str) -> int | None:
    """``--shared-buffers``: megabytes, or None to keep the server's setting.

    ``auto`` is a quarter of the machine's memory, PostgreSQL's documented
    starting point for a dedicated server.
    """
    if given == "server":
        return None
    if given == "auto":
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4 // 2**20
    return int(given)


async def start_embedded(embedded: EmbeddedPostgres, buffers_mb: int | None) -> str:
    """Start the embedded server, with ``buffers_mb`` of shared buffers if given; its DSN.

    The embedded server starts with initdb's 128 MB, sized for a laptop;
    a server holding a million rows is given its share of the machine, as
    a production one would be. Both sides share the server: the setting
    favours neither.
    """
    dsn = await asyncio.to_thread(embedded.start)
    if buffers_mb is None:
        return dsn
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"ALTER SYSTEM SET shared_buffers = '{int(buffers_mb)}MB'")
    finally:
        await conn.close()
    # shared_buffers is read at server start.
    await asyncio.to_thread(embedded.close)
    dsn = await asyncio.to_thread(embedded.start)
    conn = await asyncpg.connect(dsn)
    try:
        print(f"shared_buffers: {await conn.fetchval('SHOW shared_buffers')}", flush=True)
    finally:
        await conn.close()
    return dsn


async def run(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    if sizes != sorted(set(sizes)) or sizes[0] < 1_000:
        raise SystemExit("--sizes must increase, from at least 1,000")
    workdir = Path(tempfile.mkdtemp(prefix="memsvc-scale-"))
    embedded = None
    dsn = args.database_url
    if dsn is None:
        embedded = EmbeddedPostgres(workdir / "data")
        dsn = await start_embedded(embedded, shared_buffers_mb(args.shared_buffers))
    # No statement timeout: at 1,000,000 rows on a loaded 2-core machine an
    # add_many of 1,000 vectors into the HNSW index can approach the default.
    settings = Settings(database_url=dsn, auto_migrate=True, pool_max_size=4,
                        statement_timeout_ms=0)
    source = VectorSource(args.data)
    queries_path = args.data / "queries.f16.npy"
    if queries_path.exists():
        queries = np.load(queries_path).astype(np.float32)[: args.queries]
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    else:
        queries = source.vectors(np.random.default_rng(99), 10**7, args.queries)
    print(f"vectors: {source.label}; {len(queries)} queries per scope; sizes {sizes}", flush=True)
    svc = await MemoryService.open(settings)
    admin = await bytes_connection(dsn, {})
    raw_settings = {
        "hnsw.ef_search": str(settings.hnsw_ef_search), "hnsw.iterative_scan": "relaxed_order",
        "hnsw.max_scan_tuples": str(settings.hnsw_max_scan_tuples),
    }
    # memsvc takes a pooled connection per call: raw does too, from a pool
    # of the same size.
    raw = await bytes_pool(dsn, raw_settings, min_size=settings.pool_min_size,
                           max_size=settings.pool_max_size)
    raw_conn = await bytes_connection(dsn, raw_settings)
    results: list[Result] = []
    loads: dict[int, list[str]] = {}
    layout = Layout()

    def save(results: list[Result]) -> None:
        if args.out:
            write_json(args.out, sizes, results, loads, source.label)

    bench = StoreBench(svc, admin, raw, RAW_TABLE, layout, queries, source, ops=args.ops,
                       batch=args.batch, raw_conn=raw_conn)
    try:
        await admin.execute(f"DROP TABLE IF EXISTS {RAW_TABLE}")
        await admin.execute(
            f"CREATE TABLE {RAW_TABLE} (LIKE {settings.db_schema}.memories INCLUDING ALL)"
        )
        for stage, size in enumerate(sizes):
            loads[size] = [loadavg()]
            print(f"\n== {size:,} rows (load average {loads[size][0]}) ==", flush=True)
            started = time.perf_counter()
            grown = await grow(admin, dsn, svc, layout, source, workdir, size, stage,
                               args.data)
            grown += await index_scopes(svc, size)
            print(f"  grown in {time.perf_counter() - started:.0f} s", flush=True)
            print(header())
            for result in grown:
                print(result.line(), flush=True)
            results += grown
            # Figures are saved after each part: a long run stopped late keeps them.
            save(results)
            results += await bench.measure(size, stage)
            for read_round in range(2, args.read_rounds + 1):
                print(f"  read round {read_round} of {args.read_rounds}", flush=True)
                results += await bench.measure_reads(size, read_round)
            save(results)
            exported = await export(dsn, workdir, size, stage)
            for result in exported:
                print(result.line(), flush=True)
            results += exported
            loads[size].append(loadavg())
            print(f"  load average at the end: {loads[size][1]}", flush=True)
            save(results)
    finally:
        await raw_conn.close()
        await raw.close()
        await admin.close()
        await svc.close()
        if embedded is not None:
            await asyncio.to_thread(embedded.close)
            await asyncio.to_thread(
                lambda: __import__("shutil").rmtree(workdir, ignore_errors=True)
            )
    summary(results)
    if args.out:
        print(f"results written to {args.out}")
    if args.plot:
        plot(results, args.plot)


def write_json(
    path: Path, sizes: list[int], results: list[Result], loads: dict[int, list[str]], label: str
) -> None:
    path.write_text(json.dumps({
        "sizes": sizes, "vectors": label, "cpus": os.cpu_count(),
        "load_average": {str(k): v for k, v in loads.items()},
        "results": [asdict(r) for r in results],
    }, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000",
                        help="store sizes to grow through (comma-separated)")
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="embeddings-small dir")
    parser.add_argument("--queries", type=int, default=200, help="searches per scope and size")
    parser.add_argument("--ops", type=int, default=200, help="single adds per size")
    parser.add_argument("--batch", type=int, default=1_000, help="add_many items per size")
    parser.add_argument("--read-rounds", type=int, default=1,
                        help="measure get and the searches this many times per size (medians "
                        "printed at the end)")
    parser.add_argument("--shared-buffers", default="auto",
                        help="the embedded server's shared_buffers in MB; auto: a quarter of "
                        "the machine's memory; server: initdb's default")
    parser.add_argument("--out", type=Path, help="write the figures as JSON")
    parser.add_argument("--plot", type=Path, help="draw the curve to this PNG (matplotlib)")
    parser.add_argument("--plot-from", type=Path,
                        help="only draw --plot from a JSON file written by --out")
    parser.add_argument("--child", choices=["import", "export", "raw-import", "raw-export"],
                        help=argparse.SUPPRESS)
    parser.add_argument("--dsn", help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plot_from:
        if not args.plot:
            parser.error("--plot-from needs --plot")
        saved = json.loads(args.plot_from.read_text())
        plot([Result(**r) for r in saved["results"]], args.plot)
        return
    asyncio.run(child(args) if args.child else run(args))


if __name__ == "__main__":
    main()
