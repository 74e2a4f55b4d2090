"""Storage of LangGraph checkpoints, channel blobs and pending writes.

The rows behind :class:`memsvc.integrations.langgraph.MemsvcSaver`. The
repository stores what the saver already serialized (it knows nothing of
LangGraph); its SQL is in :mod:`memsvc.langgraph_db.checkpoint_queries`.

Concurrency:

- A put is one statement (blobs and checkpoint row together), so a reader
  sees all of a checkpoint or none of it. Writers extending the same parent
  never wait for each other and each gets its own checkpoint: a fork, which
  LangGraph allows (the newest id is the thread's head).
- Retention (``settings.langgraph_checkpoint_keep_last``), :meth:`keep_newest`
  and the deletes take a transaction-scoped advisory lock on the thread, and
  a retaining put takes it before its statement, so each prune sees every
  put of the thread that committed before it.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterator, Sequence
from typing import Any

import asyncpg

from memsvc.core.errors import ValidationError
from memsvc.core.scope import validate_id
from memsvc.db.repository import Repository
from memsvc.langgraph_db import checkpoint_queries as q

MAX_KEEP = 1_000_000


def _keep(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError("keep_last", "must be an integer")
    if not 0 <= value <= MAX_KEEP:
        raise ValidationError("keep_last", f"must be between 0 and {MAX_KEEP}")
    return value


# A checkpoint row's blobs and writes come as parallel arrays (see
# checkpoint_queries.BLOB_ARRAYS); these read them as tuples, without
# copying the row (a read of one checkpoint takes ~130 us: a copy showed).


def row_blobs(row: Any) -> Iterator[tuple[str, str, bytes]]:
    """The row's stored channel values: (channel, type, bytes)."""
    return zip(
        row["blob_channels"] or (), row["blob_types"] or (), row["blob_values"] or (), strict=True
    )


def row_writes(row: Any) -> Iterator[tuple[str, str, str, bytes]]:
    """The row's pending writes, in order: (task id, channel, type, bytes)."""
    return zip(
        row["write_task_ids"] or (),
        row["write_channels"] or (),
        row["write_types"] or (),
        row["write_values"] or (),
        strict=True,
    )


class LangGraphCheckpointRepository(Repository):
    """Checkpoints, blobs (one per channel version) and writes of LangGraph threads."""

    def _thread_key(self, tenant: str, thread_id: str) -> str:
        # JSON of the parts is injective: two threads share a lock only on a
        # hash collision, which just makes them wait for each other.
        return json.dumps(["memsvc.langgraph_checkpoints", self._schema, tenant, thread_id])

    async def put(
        self,
        *,
        tenant: str,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        parent_id: str | None,
        checkpoint: tuple[str, bytes],
        channels: Sequence[str],
        versions: Sequence[str],
        metadata: str,
        run_id: str | None,
        blobs: Sequence[tuple[str, str, str, bytes | None]],
        conn: asyncpg.Connection | None = None,
    ) -> None:
        """Store a checkpoint and its new blobs ``(channel, version, type, bytes)``.

        With ``settings.langgraph_checkpoint_keep_last`` set, the thread's
        namespace keeps its newest N checkpoints, pruned in the same transaction.
        """
        tenant = validate_id("tenant", tenant)
        args: list[Any] = [
            tenant,
            thread_id,
            checkpoint_ns,
            checkpoint_id,
            parent_id,
            checkpoint[0],
            checkpoint[1],
            list(channels),
            list(versions),
            metadata,
            run_id,
            [b[0] for b in blobs],
            [b[1] for b in blobs],
            [b[2] for b in blobs],
            [b[3] for b in blobs],
        ]
        keep = self._settings.langgraph_checkpoint_keep_last
        if keep is None:

            async def attempt() -> None:
                async with self._connection(conn, tenant=tenant) as active:
                    await active.execute(q.put(self._schema), *args)

        else:
            args.append(keep)
            key = self._thread_key(tenant, thread_id)

            async def attempt() -> None:
                async with self._transaction(conn, tenant=tenant) as active:
                    await active.execute(q.lock_thread(), key)
                    await active.execute(q.put_and_retain(self._schema), *args)

        await self._retrying(attempt, owns_transaction=conn is None)

    async def put_writes(
        self,
        *,
        tenant: str,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        task_id: str,
        task_path: str,
        writes: Sequence[tuple[int, str, str, bytes | None]],
        replace: bool,
        conn: asyncpg.Connection | None = None,
    ) -> None:
        """Store pending writes ``(idx, channel, type, bytes)`` of a task (one statement)."""
        tenant = validate_id("tenant", tenant)
        args: list[Any] = [
            tenant,
            thread_id,
            checkpoint_ns,
            checkpoint_id,
            task_id,
            task_path,
            [w[0] for w in writes],
            [w[1] for w in writes],
            [w[2] for w in writes],
            [w[3] for w in writes],
        ]
        sql = q.put_writes(self._schema, replace=replace)

        async def attempt() -> None:
            async with self._connection(conn, tenant=tenant) as active:
                await active.execute(sql, *args)

        await self._retrying(attempt, owns_transaction=conn is None)

    async def get(
        self,
        *,
        tenant: str,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str | None,
        conn: asyncpg.Connection | None = None,
    ) -> Any:
        """The checkpoint row (the newest if no id), or None; read its blobs and writes
        with :func:`row_blobs` and :func:`row_writes`."""
        tenant = validate_id("tenant", tenant)
        args: list[Any] = [tenant, thread_id, checkpoint_ns]
        if checkpoint_id is not None:
            args.append(checkpoint_id)
        sql = q.get_tuple(self._schema, by_id=checkpoint_id is not None)
        return await self._read(conn, lambda active: active.fetchrow(sql, *args), tenant=tenant)

    async def list(
        self,
        *,
        tenant: str,
        thread_id: str | None,
        checkpoint_ns: str | None,
        checkpoint_id: str | None,
        metadata_filter: str | None,
        before: str | None,
        after: tuple[str, str, str] | None,
        limit: int | None,
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[Any]:
        """Checkpoint rows (with blobs and writes) matching every given criterion, newest first.

        ``metadata_filter`` is a JSON object the metadata must contain;
        ``before`` keeps ids below it; ``after`` is the previous page's last
        row as (checkpoint_id, thread_id, checkpoint_ns).
        """
        tenant = validate_id("tenant", tenant)
        given: dict[str, tuple[Any, ...] | None] = {
            "thread_id": None if thread_id is None else (thread_id,),
            "checkpoint_ns": None if checkpoint_ns is None else (checkpoint_ns,),
            "checkpoint_id": None if checkpoint_id is None else (checkpoint_id,),
            "metadata": None if metadata_filter is None else (metadata_filter,),
            "before": None if before is None else (before,),
            "after": after,
        }
        filters = [name for name in q.LIST_FILTERS if given[name] is not None]
        args: builtins.list[Any] = [tenant]
        for name in filters:
            args.extend(given[name] or ())
        if limit is not None:
            args.append(limit)
        sql = q.list_checkpoints(self._schema, filters, limited=limit is not None)
        rows: builtins.list[Any] = await self._read(
            conn, lambda active: active.fetch(sql, *args), tenant=tenant
        )
        return rows

    async def ancestors(
        self,
        *,
        tenant: str,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str | None,
        channels: Sequence[str],
        limit: int,
        conn: asyncpg.Connection | None = None,
    ) -> builtins.list[Any]:
        """Up to ``limit`` ancestors of a checkpoint (the newest if no id), nearest
        first, with their stored values of ``channels`` and their writes to them.

        To walk further, call again with the last ancestor's id: the walk
        continues from its parent.
        """
        tenant = validate_id("tenant", tenant)
        args = [tenant, thread_id, checkpoint_ns, checkpoint_id, list(channels), limit]
        sql = q.ancestors(self._schema, by_id=checkpoint_id is not None)
        rows: builtins.list[Any] = await self._read(
            conn, lambda active: active.fetch(sql, *args), tenant=tenant
        )
        return rows

    async def delete_threads(
        self, thread_ids: Sequence[str], *, tenant: str, conn: asyncpg.Connection | None = None
    ) -> None:
        """Delete every checkpoint, blob and write of these threads."""
        tenant = validate_id("tenant", tenant)
        await self._locked(tenant, thread_ids, q.delete_threads(self._schema), [], conn)

    async def erase_tenant_threads(
        self, *, tenant: str, batch_size: int = 100, conn: asyncpg.Connection | None = None
    ) -> dict[str, int]:
        """Delete every thread of ``tenant``, ``batch_size`` threads per transaction.

        Each batch takes the threads' locks, as writers do, so a put is either
        wholly deleted or (committing after its thread went) wholly kept.
        Returns the rows deleted per table.
        """
        tenant = validate_id("tenant", tenant)
        removed = {q.CP: 0, q.BLOBS: 0, q.WRITES: 0}
        while True:
            threads = await self._read(
                conn,
                lambda active: active.fetch(q.tenant_threads(self._schema), tenant, batch_size),
                tenant=tenant,
                routed=False,  # the threads a delete acts on: never a replica's stale list
            )
            if not threads:
                return removed
            names = sorted(row["thread_id"] for row in threads)
            keys = [self._thread_key(tenant, thread) for thread in names]

            async def attempt(names: list[str] = names, keys: list[str] = keys) -> Any:
                async with self._transaction(conn, tenant=tenant) as active:
                    await active.execute(q.lock_threads(), keys)
                    return await active.fetchrow(q.erase_threads(self._schema), tenant, names)

            row = await self._retrying(attempt, owns_transaction=conn is None)
            for table in removed:
                removed[table] += row[table]

    async def keep_newest(
        self,
        thread_ids: Sequence[str],
        keep_last: int,
        *,
        tenant: str,
        conn: asyncpg.Connection | None = None,
    ) -> int:
        """Keep the newest ``keep_last`` checkpoints per namespace of these threads.

        Deletes the others with their writes, and the blobs no kept checkpoint
        refers to; returns how many checkpoints went. Refuses (ValidationError,
        nothing deleted) threads whose graph uses a LangGraph ``DeltaChannel``:
        their channel values are rebuilt from older checkpoints' writes.
        """
        tenant = validate_id("tenant", tenant)
        keep = _keep(keep_last)
        sql = q.keep_newest(self._schema)
        return await self._locked(tenant, thread_ids, sql, [keep], conn, refuse_delta=True)

    async def delete_for_runs(
        self, run_ids: Sequence[str], *, tenant: str, conn: asyncpg.Connection | None = None
    ) -> int:
        """Delete the checkpoints of these runs with their writes; returns how many."""
        tenant = validate_id("tenant", tenant)
        sql = q.delete_for_runs(self._schema)

        async def attempt() -> int:
            async with self._transaction(conn, tenant=tenant) as active:
                deleted: int = await active.fetchval(sql, tenant, list(run_ids))
            return deleted

        return await self._retrying(attempt, owns_transaction=conn is None)

    async def copy_thread(
        self,
        source_thread_id: str,
        target_thread_id: str,
        *,
        tenant: str,
        conn: asyncpg.Connection | None = None,
    ) -> None:
        """Copy every checkpoint, blob and write of one thread to another (one statement)."""
        tenant = validate_id("tenant", tenant)
        sql = q.copy_thread(self._schema)

        async def attempt() -> None:
            async with self._transaction(conn, tenant=tenant) as active:
                await active.execute(q.lock_thread(), self._thread_key(tenant, target_thread_id))
                await active.execute(sql, tenant, source_thread_id, target_thread_id)

        await self._retrying(attempt, owns_transaction=conn is None)

    async def _locked(
        self,
        tenant: str,
        thread_ids: Sequence[str],
        sql: str,
        extra: builtins.list[Any],
        conn: asyncpg.Connection | None,
        *,
        refuse_delta: bool = False,
    ) -> int:
        """Run ``sql`` ($1 tenant, $2 thread ids, then ``extra``) under the threads' locks."""
        threads = sorted(set(thread_ids))
        if not threads:
            return 0
        keys = [self._thread_key(tenant, thread) for thread in threads]

        async def attempt() -> int:
            async with self._transaction(conn, tenant=tenant) as active:
                await active.execute(q.lock_threads(), keys)
                if refuse_delta:
                    delta = await active.fetch(q.delta_threads(self._schema), tenant, threads)
                    if delta:
                        names = ", ".join(repr(row["thread_id"]) for row in delta)
                        raise ValidationError(
                            "thread_ids",
                            f"{names} use a DeltaChannel, whose state older checkpoints' "
                            "writes rebuild: keep_latest would lose it (use strategy='delete')",
                        )
                result = await active.fetchval(sql, tenant, threads, *extra)
            return int(result or 0)

        return await self._retrying(attempt, owns_transaction=conn is None)
