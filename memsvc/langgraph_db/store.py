"""Rows of LangGraph stores: items and the embeddings of their indexed fields.

The repository behind :class:`memsvc.integrations.langgraph.MemsvcStore`; it
knows tables and statements, not LangGraph's types. A namespace arrives
already encoded as its ``prefix`` text (labels joined with ``.``), a filter as
a list of (path, operator, operand) conditions.

Writes of one batch run in one transaction, in (prefix, key) order so two
batches touching the same items lock them in the same order (no deadlock).
An item and its vectors change together: readers see the old item with its
old vectors or the new one with its new vectors.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import json
import logging
import math
import time
from collections import Counter
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from memsvc.core.errors import ConcurrencyError, MemsvcError
from memsvc.core.settings import Settings
from memsvc.db.codecs import vector_bytes
from memsvc.db.hnsw_walks import OWN_GRAPH_EF_MIN, own_graph_ef
from memsvc.db.repository import Repository
from memsvc.db.sql import Params
from memsvc.db.tables import OPCLASSES, store_vector_index_expression
from memsvc.langgraph_db import store_index_queries as iq
from memsvc.langgraph_db import store_queries as q
from memsvc.langgraph_db.store_indexes import NamespaceIndexes

# How many vectors a query search reads per wanted item at first (an item has
# one vector per indexed field); it reads further when fields crowd the scan.
# Every further candidate the HNSW walk must find in a namespace costs pages
# read: 1.5 keeps recall where 2 had it for less time, and 1 cost recall.
SCAN_FACTOR = 1.5
MAX_SCAN = 100_000
# Unfiltered searches in a namespace of more than EXACT_UP_TO vectors may rank
# the namespace's sign bits (an index-only scan of n rows) instead of walking
# the HNSW graph, which steps over every other namespace's vectors: about
# k * N / n of them for a namespace of n among N. The scan costs ~n, the walk
# ~N / n; on 384-d real embeddings both took the same time at n = 10,000 of
# N = 100,000, so bits are ranked when n * n / N <= QUANTIZED_BALANCE (and n
# <= QUANTIZED_UP_TO). The nearest RERANK_FACTOR vectors per wanted item (at
# least RERANK_MIN) are then ranked exactly: at that size they find as many of
# the true neighbours as the walk does.
QUANTIZED_BALANCE = 250.0
QUANTIZED_UP_TO = 50_000
RERANK_FACTOR = 20
RERANK_MIN = 200
# Sign bits stand for the angle between vectors; l2 searches always walk the graph.
QUANTIZED_DISTANCES = frozenset({"cosine", "ip"})
# A namespace of at least NAMESPACE_INDEX_FROM vectors holding at most
# NAMESPACE_INDEX_SHARE of the table gets an HNSW index of its own (a partial
# index, built in the background as soon as a search or this store's writes
# find it so; see memsvc.langgraph_db.store_indexes): its searches walk a graph of its
# own vectors, small enough to stay in the server's buffers, instead of the
# table's, where the walk steps over every other namespace's vectors. At
# most NAMESPACE_INDEXES_MAX per table: every index costs each write of the
# table a predicate check, and each of the namespace's writes a second HNSW
# insert: a namespace holding more of the table than NAMESPACE_INDEX_SHARE
# is walked in the table's graph instead, where most steps find its vectors.
# Figures: the store's benchmark docs.
NAMESPACE_INDEX_FROM = 2_000
NAMESPACE_INDEX_SHARE = 0.25
NAMESPACE_INDEXES_MAX = 32
# The walk of a namespace's own index keeps as many candidates as a walk of a
# memories scope's own graph (memsvc.db.hnsw_walks.own_graph_ef).
# A walk of the table's graph for a namespace holding a share s of it keeps
# TABLE_EF_FACTOR * scan / s candidates (at least OWN_GRAPH_EF_MIN, at most
# hnsw_ef_search): about as many of the namespace's own vectors as a walk of
# its own index keeps, rather than a fixed number sized for the smallest
# shares (iterative scans read further when those are too few).
TABLE_EF_FACTOR = 2
# A namespace's size is counted again after this many seconds (a stale size
# only picks the slower of two correct plans: a walk that comes up short is
# checked exactly), and at most this many are kept.
SIZE_SECONDS = 30.0
SIZES_KEPT = 4096
# A namespace counted above EXACT_UP_TO vectors that the planner estimates at
# less than half that is unknown to the table's statistics (an app just
# imported it): the planner would read it whole and sort it rather than walk
# the graph. The store then gathers them (ANALYZE, in the background), at
# most every ANALYZE_SECONDS.
ANALYZE_SECONDS = 5.0
# This store counts a namespace again once its writes added WRITES_PER_COUNT
# vectors, or would take it past NAMESPACE_INDEX_FROM: a namespace an app
# fills gets its index (and the table its statistics) while it is filled,
# before the first search.
WRITES_PER_COUNT = 500

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NamespaceSize:
    """What a search plan is chosen from: a namespace's size as counted at ``when``."""

    when: float
    vectors: int | None  # None: not counted (its own index serves it)
    table: float
    estimated: float | None  # the planner's estimate of its vectors (None: not asked)
    usable: bool  # its own index is built
    indexes: int  # namespace indexes of the table
    # Whether table and estimated weigh the namespace: not on Citus, whose
    # coordinator holds none of the rows its statistics would count (the
    # shards on the workers do). Unweighed, a search takes the plans that
    # need no weighing: the table's graph with the configured ef_search, no
    # namespace index built, no statistics gathered.
    weighed: bool = True


@dataclass(frozen=True)
class StoreRow:
    """One item as read: where it is, its value, its times, and a search score."""

    prefix: str
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    score: float | None = None
    has_ttl: bool = False


@dataclass(frozen=True)
class ItemWrite:
    """A put (``value`` is JSON text) or, with ``value`` None, a delete."""

    prefix: str
    key: str
    value: str | None
    ttl_minutes: float | None = None


@dataclass(frozen=True)
class FieldVector:
    """The embedding of one indexed field of an item."""

    prefix: str
    key: str
    field: str
    embedding: Sequence[float]


Condition = tuple[list[str], str, Any]


def _row(row: Any, score: float | None = None) -> StoreRow:
    return StoreRow(
        prefix=row["prefix"],
        key=row["key"],
        value=row["value"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        score=score,
        has_ttl=row["ttl_minutes"] is not None,
    )


class LangGraphStoreRepository(Repository):
    """Items of LangGraph stores, per tenant (see the module docstring)."""

    def __init__(self, pool: asyncpg.Pool, settings: Settings) -> None:
        super().__init__(pool, settings)
        self._sizes: dict[tuple[str, str], NamespaceSize] = {}
        self._indexes = NamespaceIndexes(pool, settings)
        # The namespace index being built (one at a time), and whether builds
        # are off (one failed: e.g. the role does not own the table; behind
        # pgbouncer no session lock can guard them).
        self._building: asyncio.Task[None] | None = None
        self._indexing_off = settings.pgbouncer
        # Background work: builds, counts after writes, drops of emptied namespaces.
        self._background: set[asyncio.Task[Any]] = set()
        # Per namespace written: (vectors as last counted or estimated, vectors written since).
        self._written: dict[tuple[str, str], tuple[int, int]] = {}
        self._analyzed = -ANALYZE_SECONDS  # when this store last gathered statistics

    async def write(
        self,
        tenant: str,
        writes: Sequence[ItemWrite],
        vectors: Sequence[FieldVector],
        *,
        conn: asyncpg.Connection | None = None,
    ) -> None:
        """Apply puts and deletes in one transaction; puts replace all the item's vectors."""
        ordered = sorted(writes, key=lambda w: (w.prefix, w.key))
        puts = [w for w in ordered if w.value is not None]
        deletes = [w for w in ordered if w.value is None]
        schema = self._schema
        vector_type = self._settings.vector_type

        put_sql = q.put_items(schema, vector_type)
        put_args = [
            tenant,
            [w.prefix for w in puts],
            [w.key for w in puts],
            [w.value for w in puts],
            [w.ttl_minutes for w in puts],
            [v.prefix for v in vectors],
            [v.key for v in vectors],
            [v.field for v in vectors],
            [vector_bytes(v.embedding, vector_type) for v in vectors],
        ]

        if puts and not deletes and conn is None and not self._settings.row_level_security:
            # One statement is its own transaction: no begin and commit round trips.
            async def put_only() -> None:
                async with self._connection(tenant=tenant) as active:
                    await active.execute(put_sql, *put_args)

            await self._retrying(put_only, owns_transaction=True)
            self._count_writes(tenant, vectors)
            return

        async def attempt() -> builtins.list[str]:
            emptied: builtins.list[str] = []
            async with self._transaction(conn, tenant=tenant) as active:
                if deletes:
                    await active.execute(
                        q.delete_items(schema),
                        tenant,
                        [w.prefix for w in deletes],
                        [w.key for w in deletes],
                    )
                if puts:
                    await active.execute(put_sql, *put_args)
                if deletes and conn is None:
                    # (In a caller's transaction, which may still roll back, gc drops them.)
                    emptied = await self._indexes.emptied(
                        tenant, _with_ancestors(w.prefix for w in deletes), active
                    )
            return emptied

        emptied = await self._retrying(attempt, owns_transaction=conn is None)
        self._count_writes(tenant, vectors)
        if emptied:
            for prefix in emptied:
                self._sizes.pop((tenant, prefix), None)
            self._start(self._indexes.drop_emptied(tenant, emptied))

    def _count_writes(self, tenant: str, vectors: Sequence[FieldVector]) -> None:
        """Count a namespace again when this store's writes may have taken it past the mark."""
        if not vectors:
            return
        step = WRITES_PER_COUNT
        if len(self._written) >= SIZES_KEPT:
            self._written.clear()
        for prefix, added in Counter(v.prefix for v in vectors).items():
            where = (tenant, prefix)
            counted, since = self._written.get(where, (0, 0))
            since += added
            if since >= step or counted < NAMESPACE_INDEX_FROM <= counted + since:
                self._written[where] = (counted + since, 0)
                self._start(self._count(tenant, prefix, None))
            else:
                self._written[where] = (counted, since)

    def _start(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run ``work`` in the background; failures are logged (searches keep their plans)."""

        async def logged() -> None:
            try:
                await work
            except MemsvcError as exc:
                log.warning("LangGraph store namespace index work failed: %s", exc)

        task = asyncio.create_task(logged())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def get(
        self,
        tenant: str,
        wanted: Sequence[tuple[str, str, bool]],
        *,
        conn: asyncpg.Connection | None = None,
    ) -> dict[tuple[str, str], StoreRow]:
        """Live items by (prefix, key, refresh TTL?), keyed by (prefix, key).

        Items found with a TTL and flagged are refreshed by a second statement;
        reads of items without one write nothing.
        """
        sql = q.get_items(self._schema)
        unique = {(w[0], w[1]): w[2] for w in wanted}
        prefixes, keys = [k[0] for k in unique], [k[1] for k in unique]
        rows = await self._read(
            conn, functools.partial(self._fetch, sql, [tenant, prefixes, keys]), tenant=tenant
        )
        found = {(row["prefix"], row["key"]): _row(row) for row in rows}
        refresh = [row for where, row in found.items() if unique[where]]
        await self._refresh_found(tenant, refresh, True, conn)
        return found

    async def list(
        self,
        tenant: str,
        prefix: str | None,
        conditions: Sequence[Condition],
        *,
        limit: int,
        offset: int,
        refresh: bool = False,
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[StoreRow]:
        """A page of live items under a namespace prefix, most recently put first."""
        params = Params(tenant)
        namespace_sql = q.namespace_condition(prefix, params)
        filter_sql = q.filter_condition(list(conditions), params)
        sql = q.list_items(
            self._schema, namespace_sql, filter_sql, params.add(limit), params.add(offset)
        )
        rows = await self._read(
            conn, lambda active: active.fetch(sql, *params.values), tenant=tenant
        )
        found = [_row(row) for row in rows]
        await self._refresh_found(tenant, found, refresh, conn)
        return found

    async def search(
        self,
        tenant: str,
        prefix: str | None,
        conditions: Sequence[Condition],
        query: Sequence[float],
        *,
        limit: int,
        offset: int,
        refresh: bool = False,
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[StoreRow]:
        """A page of live items nearest ``query`` (by their nearest indexed field).

        Scores follow the configured distance: ``1 - distance`` for cosine,
        the inner product for ip, ``-distance`` for l2 (higher is nearer).
        """
        distance = self._settings.distance
        vector = vector_bytes(query, self._settings.vector_type)
        size = None if prefix is None else await self._size(tenant, prefix, conn)
        if not conditions and size is not None and self._quantized_fits(size):
            rows = await self._search_quantized(tenant, prefix, vector, limit, offset, conn)
        else:
            rows = await self._search_graph(
                tenant, prefix, conditions, vector, limit, offset, conn, size
            )
        found = [_row(row, _score(distance, row["distance"])) for row in rows if row["key"]]
        await self._refresh_found(tenant, found, refresh, conn)
        return found

    async def _size(
        self, tenant: str, prefix: str, conn: asyncpg.Connection | None
    ) -> NamespaceSize:
        """The namespace's size as counted lately (see :meth:`_count`)."""
        where = (tenant, prefix)
        known = self._sizes.get(where)
        if known is None or time.monotonic() - known.when > SIZE_SECONDS:
            if len(self._sizes) >= SIZES_KEPT:
                self._sizes.clear()
            known = self._sizes[where] = await self._count(tenant, prefix, conn)
        return known

    async def _count(
        self, tenant: str, prefix: str, conn: asyncpg.Connection | None
    ) -> NamespaceSize:
        """The namespace's size now; starts building its own index when it fits."""
        name = iq.namespace_index_name(tenant, prefix)
        sql = q.namespace_size(
            self._schema, q.namespace_range_condition(prefix), QUANTIZED_UP_TO + 1, name
        )
        row = await self._read(
            conn, lambda active: active.fetchrow(sql, tenant), tenant=tenant
        )
        vectors = row["vectors"]
        estimated = None
        weighed = not await self._on_citus()
        if weighed and vectors is not None and vectors > q.EXACT_UP_TO:
            estimate_sql = q.namespace_estimate(
                self._schema, q.namespace_literal_condition(prefix, "v")
            )
            plan = await self._read(
                conn, lambda active: active.fetchval(estimate_sql, tenant), tenant=tenant
            )
            estimated = float(json.loads(plan)[0]["Plan"]["Plan Rows"])
        size = NamespaceSize(
            time.monotonic(),
            None if vectors is None else int(vectors),
            float(row["table_vectors"]),
            estimated,
            bool(row["usable"]),
            int(row["namespace_indexes"]),
            weighed,
        )
        if vectors is not None and (tenant, prefix) in self._written:
            self._written[(tenant, prefix)] = (int(vectors), 0)
        if self._statistics_may_miss(size) and size.when - self._analyzed >= ANALYZE_SECONDS:
            self._analyzed = size.when
            self._start(self._gather_statistics())
        if self._wants_index(size):
            self._building = asyncio.create_task(self._build_index(tenant, prefix))
            self._background.add(self._building)
            self._building.add_done_callback(self._background.discard)
        return size

    async def _gather_statistics(self) -> None:
        if await self._indexes.analyze():
            self._sizes.clear()  # counted again: searches plan as usual

    @staticmethod
    def _statistics_may_miss(size: NamespaceSize) -> bool:
        """Whether the table's statistics may predate most of the namespace (ANALYZE_SECONDS)."""
        vectors, estimated = size.vectors, size.estimated
        return vectors is not None and estimated is not None and estimated * 2 < vectors

    def _wants_index(self, size: NamespaceSize) -> bool:
        # The count stops at QUANTIZED_UP_TO + 1: a namespace beyond it is big
        # enough; whether it is a small enough share is the table's estimate's say.
        return (
            size.weighed
            and not size.usable
            and size.vectors is not None
            and not self._indexing_off
            and self._building is None
            and size.indexes < NAMESPACE_INDEXES_MAX
            and size.vectors >= NAMESPACE_INDEX_FROM
            and size.vectors <= NAMESPACE_INDEX_SHARE * max(size.table, size.vectors)
        )

    async def _build_index(self, tenant: str, prefix: str) -> None:
        """Build the namespace's own HNSW index without blocking writers (minutes when large).

        See :meth:`NamespaceIndexes.build`: under the schema's index lock,
        and only if the namespace still holds enough vectors. A failure (the
        role may not own the table) turns builds off for this store, except
        a deadlock (another session's DDL or ANALYZE of the table): searches
        keep their other plans.
        """
        settings = self._settings
        sql = iq.create_index(
            self._schema,
            iq.namespace_index_name(tenant, prefix),
            tenant,
            prefix,
            store_vector_index_expression(settings),
            OPCLASSES[("halfvec", settings.distance)],
            settings.hnsw_m,
            settings.hnsw_ef_construction,
        )
        try:
            await self._indexes.build(
                tenant, prefix, sql, minimum=NAMESPACE_INDEX_FROM, most=NAMESPACE_INDEXES_MAX
            )
        except ConcurrencyError as exc:
            # E.g. a manual ANALYZE of the table while it ran: the next count tries again.
            log.warning("namespace index for a LangGraph store namespace not built: %s", exc)
        except MemsvcError as exc:
            self._indexing_off = True
            log.warning("namespace index for a LangGraph store namespace not built: %s", exc)
        finally:
            self._building = None
            # The next search counts again and sees the index.
            self._sizes.pop((tenant, prefix), None)

    async def wait_for_index_builds(self) -> None:
        """Wait until this store's background index work (builds, counts, drops) is done."""
        while self._background:
            await asyncio.gather(*(asyncio.shield(task) for task in list(self._background)))

    async def cancel_index_build(self) -> None:
        """Cancel this store's background index work and wait until it stopped.

        A cancelled build leaves an invalid index (and its claim) that the
        next build of the namespace, or gc, replaces.
        """
        while self._background:
            tasks = list(self._background)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _quantized_fits(self, size: NamespaceSize) -> bool:
        """Whether the namespace's size (as counted lately) suits a search by sign bits."""
        if self._settings.distance not in QUANTIZED_DISTANCES:
            return False
        vectors = size.vectors
        if size.usable or vectors is None or not size.weighed:
            return False  # its own index serves it, or its share is unknown
        if not q.EXACT_UP_TO < vectors <= QUANTIZED_UP_TO:
            return False
        # The table's estimate can lag behind a namespace that grew since.
        return vectors * vectors <= QUANTIZED_BALANCE * max(size.table, vectors)

    async def _search_quantized(
        self,
        tenant: str,
        prefix: str | None,
        vector: bytes,
        limit: int,
        offset: int,
        conn: asyncpg.Connection | None,
    ) -> Any:
        wanted = offset + limit
        candidates = max(wanted * RERANK_FACTOR, RERANK_MIN)
        while True:
            params = Params(tenant)
            sql = q.search_items_quantized(
                self._schema,
                q.namespace_range_condition(prefix),
                self._settings.distance,
                params.add(vector),
                self._settings.vector_type,
                self._settings.embedding_dim,
                candidates,
                params.add(limit),
                params.add(offset),
            )
            rows = await self._read(
                conn, functools.partial(self._fetch, sql, params.values), tenant=tenant
            )
            head = rows[0]
            # Expired items or fields of the same items filled the candidates: read further.
            if head["scanned"] < candidates or head["found"] >= wanted or candidates >= MAX_SCAN:
                return rows
            candidates = min(candidates * 4, MAX_SCAN)

    async def _search_graph(
        self,
        tenant: str,
        prefix: str | None,
        conditions: Sequence[Condition],
        vector: bytes,
        limit: int,
        offset: int,
        conn: asyncpg.Connection | None,
        size: NamespaceSize | None,
    ) -> Any:
        """A walk of the namespace's own graph (if usable) or the table's; exact if it fell short.

        A walk gives up after ``hnsw_max_scan_tuples`` tuples (and returns
        what it saw on the way): in a big table, or under a filter that
        rejects most candidates, or when the namespace's own index was
        dropped since its size was counted, that can be fewer items than the
        namespace holds. Then the search runs again exactly, so a page is
        never short because of an index.
        """
        rows = await self._walk(tenant, prefix, conditions, vector, limit, offset, conn, size)
        head = rows[0]
        walked_all = (
            size is not None
            and size.vectors is not None
            and not conditions
            and head["scanned"] >= size.vectors
        )
        if head["exact"] or head["found"] >= offset + limit or walked_all:
            return rows
        if head["scanned"] >= MAX_SCAN:
            return rows  # fields of the same items filled the longest scan
        return await self._walk(
            tenant, prefix, conditions, vector, limit, offset, conn, size, exact=True
        )

    async def _walk(
        self,
        tenant: str,
        prefix: str | None,
        conditions: Sequence[Condition],
        vector: bytes,
        limit: int,
        offset: int,
        conn: asyncpg.Connection | None,
        size: NamespaceSize | None,
        *,
        exact: bool = False,
    ) -> Any:
        distance = self._settings.distance
        # The index holds half-precision copies of full-precision vectors.
        half_dims = self._settings.embedding_dim if self._settings.vector_type == "vector" else None
        own_index = size is not None and size.usable and not exact
        wanted = offset + limit
        scan = max(int(wanted * SCAN_FACTOR), 10)
        while True:
            # Set by the statement, for its own transaction (see search_items).
            ef_search = None if conn is not None or exact else self._ef_search(size, scan)
            params = Params(tenant)
            namespace_sql = q.namespace_literal_condition(prefix)
            filter_sql = q.filter_condition(list(conditions), params)
            sql = q.search_items(
                self._schema,
                namespace_sql,
                filter_sql,
                distance,
                params.add(vector),
                scan,
                params.add(limit),
                params.add(offset),
                half_dims=half_dims,
                # The namespace's own index: the tenant written in, as its predicate has it.
                tenant=tenant if own_index else None,
                ef_search=ef_search,
                exact=exact,
            )
            scan_rows = self._scan_walking if self._forces_walk(size, conn, exact) else self._scan
            rows = await self._read(
                conn, functools.partial(scan_rows, sql, params.values), tenant=tenant
            )
            head = rows[0]
            # Fields of the same items filled the scan: read further.
            if head["scanned"] < scan or head["found"] >= wanted or scan >= MAX_SCAN:
                return rows
            scan = min(scan * 4, MAX_SCAN)

    @staticmethod
    def _forces_walk(
        size: NamespaceSize | None, conn: asyncpg.Connection | None, exact: bool
    ) -> bool:
        """Whether the table walk is planned without sorts, in a transaction of its own.

        While the statistics may not know the namespace (until the ANALYZE
        its count started ends), the planner estimates it at a few rows and
        reads it whole to sort it; when it is big enough that walking beats
        reading it whole (the sign bits' balance: an exact read costs more
        per vector than their index-only scan), the walk is forced. Three
        more round trips, for the searches of that moment only.
        """
        if conn is not None or exact or size is None or size.usable or size.vectors is None:
            return False
        vectors = size.vectors
        return LangGraphStoreRepository._statistics_may_miss(size) and (
            vectors * vectors > QUANTIZED_BALANCE * max(size.table, vectors)
        )

    def _ef_search(self, size: NamespaceSize | None, scan: int) -> int | None:
        """Candidates a walk keeps, when fewer than the connection's ``hnsw_ef_search``."""
        configured = self._settings.hnsw_ef_search
        if size is None:
            return None
        if size.usable:
            return own_graph_ef(scan, configured)
        if size.vectors and size.weighed:
            share = size.vectors / max(size.table, size.vectors)
            wanted = math.ceil(TABLE_EF_FACTOR * scan / share)
        else:
            return None
        ef_search = min(configured, max(OWN_GRAPH_EF_MIN, wanted))
        return ef_search if ef_search < configured else None

    async def _refresh_found(
        self,
        tenant: str,
        found: builtins.list[StoreRow],
        refresh: bool,
        conn: asyncpg.Connection | None,
    ) -> None:
        # Only items with a TTL are refreshed: reads of others cost no write.
        timed = [(row.prefix, row.key) for row in found if row.has_ttl]
        if refresh and timed:
            await self.refresh(tenant, timed, conn=conn)

    async def _fetch(self, sql: str, values: builtins.list[object], conn: Any) -> Any:
        return await conn.fetch(sql, *values)

    async def _scan(self, sql: str, values: builtins.list[object], conn: Any) -> Any:
        return await self._run_search(conn, sql, values)

    async def _scan_walking(self, sql: str, values: builtins.list[object], conn: Any) -> Any:
        """:meth:`_scan`, planned without sorts: the walk, whatever the statistics say.

        For a transaction memsvc owns (see :meth:`_forces_walk`): the setting
        lasts until it ends.
        """
        async with conn.transaction():
            await conn.execute(q.PLAN_WITHOUT_SORTS)
            return await self._run_search(conn, sql, values)

    async def refresh(
        self,
        tenant: str,
        items: Sequence[tuple[str, str]],
        *,
        conn: asyncpg.Connection | None = None,
    ) -> None:
        """Restart the TTL of these items (those that have one and are live)."""
        sql = q.refresh_items(self._schema)
        prefixes, keys = [i[0] for i in items], [i[1] for i in items]

        async def attempt() -> None:
            async with self._transaction(conn, tenant=tenant) as active:
                await active.execute(sql, tenant, prefixes, keys)

        await self._retrying(attempt, owns_transaction=conn is None)

    async def list_namespaces(
        self,
        tenant: str,
        *,
        prefix: tuple[str, ...] | None,
        suffix: tuple[str, ...] | None,
        max_depth: int | None,
        limit: int,
        offset: int,
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[tuple[str, ...]]:
        """Distinct namespaces holding live items, in label order (``*`` matches any label)."""
        params = Params(tenant)
        conditions: builtins.list[str] = []
        if prefix:
            conditions += q.label_conditions(prefix, "prefix", params)
        if suffix:
            conditions += q.label_conditions(suffix, "suffix", params)
        depth = params.add(max_depth) if max_depth is not None else None
        sql = q.list_namespaces(
            self._schema, conditions, depth, params.add(limit), params.add(offset)
        )
        values = params.values

        async def fetch(active: asyncpg.Connection) -> builtins.list[Any]:
            found: builtins.list[Any] = await active.fetch(sql, *values)
            return found

        rows = await self._read(conn, fetch, tenant=tenant)
        return [tuple(row["namespace"]) for row in rows]

    async def delete_tenant(self, tenant: str, *, conn: asyncpg.Connection | None = None) -> int:
        """Erase every store item (and vector) of ``tenant``; returns how many items."""
        sql = q.delete_tenant(self._schema)

        async def attempt() -> int:
            async with self._transaction(conn, tenant=tenant) as active:
                deleted: int = await active.fetchval(sql, tenant)
            return deleted

        deleted = await self._retrying(attempt, owns_transaction=conn is None)
        if conn is None:
            # Their predicates name the tenant and its namespaces: they go too
            # (concurrently, so outside any transaction: not with a caller's).
            await self._indexes.drop_tenant(tenant)
            self._sizes = {where: size for where, size in self._sizes.items() if where[0] != tenant}
        return deleted

    async def sweep_expired(self, *, tenant: str | None = None, batch_size: int = 1000) -> int:
        """Delete expired items (of ``tenant``, or of all) in batches; returns how many."""
        sql = q.sweep_expired(self._schema, "$2" if tenant is not None else None)
        args: builtins.list[object] = [batch_size] + ([tenant] if tenant is not None else [])
        total = 0
        while True:

            async def attempt() -> int:
                async with self._transaction(tenant=tenant) as active:
                    deleted: int = await active.fetchval(sql, *args)
                return deleted

            deleted = await self._retrying(attempt, owns_transaction=True)
            total += deleted
            if deleted < batch_size:
                return total


def _with_ancestors(prefixes: Iterable[str]) -> builtins.list[str]:
    """These namespaces and every namespace above them (an index may serve any of them)."""
    found: set[str] = set()
    for prefix in prefixes:
        labels = prefix.split(".")
        found.update(".".join(labels[:depth]) for depth in range(1, len(labels) + 1))
    return sorted(found)


def _score(distance: str, value: float) -> float:
    if distance == "cosine":
        return 1.0 - float(value)
    return -float(value)
