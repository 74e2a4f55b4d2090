"""``MemsvcStore``: LangGraph's ``BaseStore`` on memsvc's PostgreSQL tables.

Items live in ``langgraph_store_items`` (one row per namespace and key, keyed
by tenant) and the embeddings of their indexed fields in
``langgraph_store_vectors`` (HNSW, the service's vector type and distance),
so memsvc's stats, gc and tenant erasure see them. Semantics follow
LangGraph's ``PostgresStore`` where its in-memory store leaves them to a
dict's accident: searches without a query list the most recently put items
first, and namespaces whose items were all deleted are not listed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)

from memsvc.core.errors import ValidationError
from memsvc.core.scope import validate_id
from memsvc.core.time_limits import validate_duration
from memsvc.core.validation import encode_json
from memsvc.integrations.loop_bridge import (
    async_service,
    on_service_loop,
    run_blocking,
    running_loop,
)
from memsvc.langgraph_db.store import (
    Condition,
    FieldVector,
    ItemWrite,
    LangGraphStoreRepository,
    StoreRow,
)
from memsvc.service import MemoryService
from memsvc.sync import SyncMemoryService

log = logging.getLogger(__name__)

MAX_PAGE = 10_000
OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
DISTANCES = {"cosine": "cosine", "l2": "l2", "inner_product": "ip"}


def _prefix(namespace: object, field: str, *, allow_empty: bool = False) -> str | None:
    """A namespace's stored text (labels joined with '.'), validated."""
    if not isinstance(namespace, tuple):
        raise ValidationError(field, "must be a tuple of strings")
    if not namespace:
        if allow_empty:
            return None
        raise ValidationError(field, "cannot be empty")
    for label in namespace:
        if not isinstance(label, str) or not label:
            raise ValidationError(field, "labels must be non-empty strings")
        if "." in label:
            raise ValidationError(field, f"label {label!r} contains a period")
        if "\x00" in label:
            raise ValidationError(field, "labels cannot contain NUL")
    return ".".join(namespace)


def _labels(path: object, field: str) -> tuple[str, ...] | None:
    if path is None:
        return None
    if not isinstance(path, tuple) or not all(isinstance(label, str) for label in path):
        raise ValidationError(field, "must be a tuple of strings")
    return path


def _count(value: object, field: str, *, maximum: int = MAX_PAGE) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise ValidationError(field, f"must be an integer between 0 and {maximum}")
    return value


def _conditions(filter: object, max_bytes: int) -> list[Condition]:
    """LangGraph's filter as (path, operator, operand) conditions on the item's value."""
    if filter is None:
        return []
    if not isinstance(filter, Mapping):
        raise ValidationError("filter", "must be a mapping")
    found: list[Condition] = []

    def walk(path: list[str], expected: object) -> None:
        if isinstance(expected, Mapping) and any(str(k).startswith("$") for k in expected):
            for operator, operand in expected.items():
                if operator not in OPERATORS:
                    raise ValidationError("filter", f"unsupported operator {operator!r}")
                if operator in ("$eq", "$ne"):
                    found.append((path, operator, encode_json("filter", operand, max_bytes)))
                elif isinstance(operand, bool) or not isinstance(operand, int | float | str):
                    raise ValidationError("filter", f"{operator} needs a number or a string")
                else:
                    found.append((path, operator, operand))
        elif isinstance(expected, Mapping):
            for key, nested in expected.items():
                if not isinstance(key, str):
                    raise ValidationError("filter", "keys must be strings")
                walk([*path, key], nested)
        else:
            found.append((path, "$eq", encode_json("filter", expected, max_bytes)))

    for key, expected in filter.items():
        if not isinstance(key, str):
            raise ValidationError("filter", "keys must be strings")
        walk([key], expected)
    return found


T = TypeVar("T")

class MemsvcStore(BaseStore):
    """A LangGraph store on an open :class:`memsvc.MemoryService`.

    Args:
        svc: The open service (a MemoryService or a SyncMemoryService;
            anything else is a TypeError); its pool and loop serve the store.
        index: ``{"dims", "embed", "fields"}`` for semantic search: ``dims``
            must equal the service's ``embedding_dim``; ``fields`` are the
            value paths embedded (default ``["$"]``, the whole value).
        ttl: LangGraph's TTL config (``default_ttl`` and
            ``sweep_interval_minutes`` in minutes, ``refresh_on_read``).
        tenant: The memsvc tenant owning the store's items.

    The ``a*`` methods may be awaited on any loop (their database work runs
    on the service's); the sync ones may be called from any other thread
    while that loop runs.
    """

    supports_ttl = True

    def __init__(
        self,
        svc: MemoryService | SyncMemoryService,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        tenant: str = "default",
    ) -> None:
        self._svc = svc = async_service(svc, "MemsvcStore")
        self._tenant = validate_id("tenant", tenant)
        self._repository = on_service_loop(
            LangGraphStoreRepository(svc.pool, svc.settings), svc
        )
        self._max_bytes = svc.settings.max_metadata_bytes
        self.ttl_config = ttl
        self.index_config = self._index(index)
        self.embeddings = ensure_embeddings(index.get("embed")) if index else None
        self._sweeper: asyncio.Task[None] | None = None
        svc.stop_on_close(self)

    def _index(self, index: IndexConfig | None) -> IndexConfig | None:
        if index is None:
            return None
        settings = self._svc.settings
        if index.get("dims") != settings.embedding_dim:
            raise ValidationError(
                "index.dims", f"must equal the service's embedding_dim ({settings.embedding_dim})"
            )
        distance = dict(index).get("distance_type")
        if distance is not None and DISTANCES.get(str(distance)) != settings.distance:
            raise ValidationError(
                "index.distance_type", f"the service's schema uses {settings.distance!r}"
            )
        if index.get("embed") is None:
            raise ValidationError("index.embed", "an embedding function or model is required")
        config = dict(index)
        config["__tokenized_fields"] = [
            (path, tokenize_path(path) if path != "$" else path)
            for path in (index.get("fields") or ["$"])
        ]
        return config  # type: ignore[return-value]

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return run_blocking(self._svc.loop, coroutine, owner="MemsvcStore", use="aput, aget, ...")

    # ------------------------------------------------------------------ batch

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run operations from a thread other than the service's loop (blocks)."""
        return self._run(self.abatch(ops))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run operations: puts and deletes first (one transaction), then the reads.

        Within one batch the last put of a (namespace, key) wins.
        """
        ops = list(ops)
        results: list[Result] = [None] * len(ops)
        puts: dict[tuple[str, str], PutOp] = {}
        for op in ops:
            if isinstance(op, PutOp):
                prefix = _prefix(op.namespace, "namespace")
                assert prefix is not None
                if not isinstance(op.key, str):
                    raise ValidationError("key", "must be a string")
                puts[(prefix, op.key)] = op
            else:
                # Reads are checked before any write: a bad op writes nothing.
                self._check_read(op)
        if puts:
            await self._write(puts)
        reads = []
        gets = [(i, op) for i, op in enumerate(ops) if isinstance(op, GetOp)]
        if gets:
            reads.append(self._get(gets, results))
        for i, op in enumerate(ops):
            if isinstance(op, SearchOp):
                reads.append(self._search(i, op, results))
            elif isinstance(op, ListNamespacesOp):
                reads.append(self._list_namespaces(i, op, results))
        if reads:
            await asyncio.gather(*reads)
        return results

    def _check_read(self, op: Op) -> None:
        if isinstance(op, GetOp):
            _prefix(op.namespace, "namespace")
        elif isinstance(op, SearchOp):
            _prefix(op.namespace_prefix, "namespace_prefix", allow_empty=True)
            _conditions(op.filter, self._max_bytes)
            _count(op.limit, "limit")
            _count(op.offset, "offset", maximum=1_000_000)
            if op.query is not None and not isinstance(op.query, str):
                raise ValidationError("query", "must be a string")
        elif isinstance(op, ListNamespacesOp):
            self._namespace_conditions(op)
            _count(op.limit, "limit")
            _count(op.offset, "offset", maximum=1_000_000)
            if op.max_depth is not None:
                _count(op.max_depth, "max_depth", maximum=1_000)
        else:
            raise ValidationError("ops", f"unknown operation {type(op).__name__}")

    async def _write(self, puts: dict[tuple[str, str], PutOp]) -> None:
        writes: list[ItemWrite] = []
        texts: list[tuple[str, str, str, str]] = []
        for (prefix, key), op in puts.items():
            if op.value is None:
                writes.append(ItemWrite(prefix, key, None))
                continue
            if not isinstance(op.value, Mapping):
                raise ValidationError("value", "must be a mapping (or None to delete)")
            value = encode_json("value", dict(op.value), self._max_bytes)
            ttl = None if op.ttl is None else validate_duration(op.ttl, "ttl", "minutes")
            writes.append(ItemWrite(prefix, key, value, ttl))
            texts += self._texts(prefix, key, op)
        vectors: list[FieldVector] = []
        if texts and self.embeddings is not None:
            embedded = await self.embeddings.aembed_documents([t[3] for t in texts])
            vectors = [
                FieldVector(prefix, key, field, embedding)
                for (prefix, key, field, _), embedding in zip(texts, embedded, strict=True)
            ]
        await self._repository.write(self._tenant, writes, vectors)

    def _texts(self, prefix: str, key: str, op: PutOp) -> list[tuple[str, str, str, str]]:
        """(prefix, key, field, text) of each text of the value to embed."""
        if self.index_config is None or op.index is False:
            return []
        if op.index is None:
            paths = self.index_config["__tokenized_fields"]  # type: ignore[typeddict-item]
        else:
            paths = [(path, tokenize_path(path)) for path in op.index]
        found: dict[str, str] = {}
        for path, tokens in paths:
            texts = get_text_at_path(op.value, tokens)
            if len(texts) == 1:
                found[path] = texts[0]
            else:
                for i, text in enumerate(texts):
                    found[f"{path}.{i}"] = text
        return [(prefix, key, field, text) for field, text in found.items()]

    async def _get(self, gets: list[tuple[int, GetOp]], results: list[Result]) -> None:
        wanted = []
        for _, op in gets:
            prefix = _prefix(op.namespace, "namespace")
            assert prefix is not None
            wanted.append((prefix, str(op.key), bool(op.refresh_ttl)))
        rows = await self._repository.get(self._tenant, wanted)
        for (i, op), (prefix, key, _) in zip(gets, wanted, strict=True):
            row = rows.get((prefix, key))
            results[i] = None if row is None else _item(row, op.namespace)

    async def _search(self, i: int, op: SearchOp, results: list[Result]) -> None:
        prefix = _prefix(op.namespace_prefix, "namespace_prefix", allow_empty=True)
        conditions = _conditions(op.filter, self._max_bytes)
        limit = _count(op.limit, "limit")
        offset = _count(op.offset, "offset", maximum=1_000_000)
        if limit == 0:
            results[i] = []
            return
        refresh = bool(op.refresh_ttl)
        if op.query and self.embeddings is not None:
            if not isinstance(op.query, str):
                raise ValidationError("query", "must be a string")
            vector = await self.embeddings.aembed_query(op.query)
            rows = await self._repository.search(
                self._tenant,
                prefix,
                conditions,
                vector,
                limit=limit,
                offset=offset,
                refresh=refresh,
            )
        else:
            rows = await self._repository.list(
                self._tenant, prefix, conditions, limit=limit, offset=offset, refresh=refresh
            )
        results[i] = [_search_item(row) for row in rows]

    async def _list_namespaces(self, i: int, op: ListNamespacesOp, results: list[Result]) -> None:
        prefix, suffix = self._namespace_conditions(op)
        max_depth = op.max_depth
        if max_depth is not None:
            max_depth = _count(max_depth, "max_depth", maximum=1_000)
        results[i] = await self._repository.list_namespaces(
            self._tenant,
            prefix=prefix,
            suffix=suffix,
            max_depth=max_depth,
            limit=_count(op.limit, "limit"),
            offset=_count(op.offset, "offset", maximum=1_000_000),
        )

    @staticmethod
    def _namespace_conditions(
        op: ListNamespacesOp,
    ) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
        prefix = suffix = None
        for condition in op.match_conditions or ():
            path = _labels(tuple(condition.path), "match_conditions")
            if condition.match_type == "prefix":
                prefix = path
            elif condition.match_type == "suffix":
                suffix = path
            else:
                raise ValidationError("match_conditions", f"unknown {condition.match_type!r}")
        return prefix, suffix

    # -------------------------------------------------------------------- TTL

    async def await_index_builds(self) -> None:
        """Wait for this store's background namespace index work, if any.

        A namespace of 2,000 vectors or more holding at most a quarter of the
        store's gets an HNSW index of its own, built in the background (without
        blocking writers) as soon as this store's writes take it past that
        size or a search counts it; searches use it once built. Deleting a
        namespace's last item drops its index (also in the background).
        """
        await self._repository.wait_for_index_builds()

    async def asweep_ttl(self, *, batch_size: int = 1000) -> int:
        """Delete this store's expired items now; returns how many."""
        return await self._repository.sweep_expired(tenant=self._tenant, batch_size=batch_size)

    def sweep_ttl(self, *, batch_size: int = 1000) -> int:
        """:meth:`asweep_ttl` from another thread (blocks)."""
        return self._run(self.asweep_ttl(batch_size=batch_size))

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> asyncio.Task[None]:
        """Sweep expired items periodically on the service's loop until stopped.

        The interval defaults to the TTL config's ``sweep_interval_minutes`` (else 5).
        Call from the service's loop (or any thread while it runs).
        """
        if self._sweeper is not None and not self._sweeper.done():
            return self._sweeper
        minutes = (
            sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        )
        loop = self._svc.loop

        async def sweep_forever() -> None:
            while True:
                try:
                    swept = await self.asweep_ttl()
                    if swept:
                        log.info("swept %d expired LangGraph store items", swept)
                except Exception:
                    log.exception("LangGraph store TTL sweep failed; retrying next interval")
                await asyncio.sleep(minutes * 60)

        async def start() -> asyncio.Task[None]:
            return asyncio.create_task(sweep_forever())

        if running_loop() is loop:
            self._sweeper = loop.create_task(sweep_forever())
        else:
            self._sweeper = self._run(start())
        return self._sweeper

    async def stop_background_work(self) -> None:
        """Stop the sweeper and cancel index work (the service calls this when it closes).

        A cancelled build leaves an invalid index that the next build of the
        namespace, or gc, replaces: closing never waits minutes for one.
        """
        await self.stop_ttl_sweeper()
        await self._repository.cancel_index_build()

    async def stop_ttl_sweeper(self) -> None:
        """Stop the sweeper started by :meth:`start_ttl_sweeper`."""
        task, self._sweeper = self._sweeper, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _namespace(prefix: str) -> tuple[str, ...]:
    return tuple(prefix.split("."))


def _item(row: StoreRow, namespace: tuple[str, ...]) -> Item:
    return Item(
        value=row.value,
        key=row.key,
        namespace=namespace,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _search_item(row: StoreRow) -> SearchItem:
    return SearchItem(
        namespace=_namespace(row.prefix),
        key=row.key,
        value=row.value,
        created_at=row.created_at,
        updated_at=row.updated_at,
        score=row.score,
    )


__all__ = ["MemsvcStore"]
