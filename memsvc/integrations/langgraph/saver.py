"""``MemsvcSaver``: a LangGraph checkpointer on memsvc's PostgreSQL tables.

Checkpoints live in ``langgraph_checkpoints`` (one row each, with its channel
versions), channel values in ``langgraph_checkpoint_blobs`` (one per channel
version, written only when the version is new) and pending writes in
``langgraph_checkpoint_writes``; every key starts with the tenant.

Forks: two writers extending the same parent both succeed, and the thread
then has two children of that parent, as LangGraph allows; the thread's head
is the checkpoint with the greatest id. Every acknowledged put and write is
readable afterwards, and a read returns one whole checkpoint (one statement,
one snapshot).
"""

from __future__ import annotations

import builtins
import json
import random
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from memsvc.core.errors import ValidationError
from memsvc.core.scope import validate_id
from memsvc.core.validation import check_text
from memsvc.integrations.loop_bridge import async_service, on_service_loop, run_blocking
from memsvc.langgraph_db.checkpoints import LangGraphCheckpointRepository, row_blobs, row_writes
from memsvc.service import MemoryService
from memsvc.sync import SyncMemoryService

T = TypeVar("T")

PRUNE_STRATEGIES = ("keep_latest", "delete")
LIST_PAGE = 100
ANCESTOR_PAGE = 200


def _text(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, not {type(value).__name__}")
    check_text(field, value)
    return value


def _thread_id(value: object, field: str = "config.configurable.thread_id") -> str:
    if value is None:
        raise ValidationError(field, "is required")
    # LangGraph accepts any thread id and compares it as text.
    text = value if isinstance(value, str) else str(value)
    return _text(field, text)


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


class MemsvcSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer storing threads in memsvc's PostgreSQL schema.

    Args:
        svc: An open :class:`memsvc.MemoryService` or
            :class:`memsvc.sync.SyncMemoryService` (``self.svc`` is the
            MemoryService); anything else is a TypeError.
        tenant: Whose checkpoints these are (every row is keyed by it).
        serde: LangGraph serializer (default: LangGraph's ``JsonPlusSerializer``).

    The async methods may be awaited on any loop: their database work runs
    on the service's. The sync ones (``put``, ``get_tuple``, ...) may be
    called from any other thread while that loop runs, like LangGraph's own
    async savers; calling them on the loop's thread would deadlock and
    raises instead.
    """

    def __init__(
        self,
        svc: MemoryService | SyncMemoryService,
        *,
        tenant: str = "default",
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self.svc = async_service(svc, "MemsvcSaver")
        self.tenant = validate_id("tenant", tenant)
        self._repository = on_service_loop(
            LangGraphCheckpointRepository(self.svc.pool, self.svc.settings), self.svc
        )

    # ------------------------------------------------------------------ async

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config`` (the thread's newest without an id), or None."""
        configurable = config.get("configurable", {})
        thread_id = _thread_id(configurable.get("thread_id"))
        checkpoint_ns = _text(
            "config.configurable.checkpoint_ns", configurable.get("checkpoint_ns", "")
        )
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id is not None:
            _text("config.configurable.checkpoint_id", checkpoint_id)
        row = await self._repository.get(
            tenant=self.tenant,
            thread_id=thread_id,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint_id,
        )
        return None if row is None else self._tuple(row)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Checkpoints matching ``config`` (thread, namespace, id), ``filter``
        (metadata containing these pairs) and ``before`` (older ids), newest first.

        Read a page (one statement) at a time, so a long history never sits
        in memory whole: each checkpoint carries its channel values.
        """
        listing = self._listing(config, filter, before, limit)
        while (page := await self._next_page(listing)) is not None:
            for item in page:
                yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint; returns the config naming it.

        Only the channels in ``new_versions`` get new blobs; the others are
        read back from the blobs of their (unchanged) versions.
        """
        configurable = config.get("configurable", {})
        thread_id = _thread_id(configurable.get("thread_id"))
        checkpoint_ns = _text(
            "config.configurable.checkpoint_ns", configurable.get("checkpoint_ns", "")
        )
        parent_id = configurable.get("checkpoint_id")
        if parent_id is not None:
            _text("config.configurable.checkpoint_id", parent_id)
        checkpoint_id = _text("checkpoint.id", checkpoint["id"])
        saved: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = saved.pop("channel_values", None) or {}
        versions = checkpoint["channel_versions"]
        written: dict[str, Any] = dict(new_versions)
        if self.svc.settings.langgraph_checkpoint_keep_last is not None:
            # Retention may already have dropped the parent of a fork, and with
            # it the blobs of channels this put leaves unchanged: store the
            # values it carries for them too (a blob already there is kept).
            written.update(
                (channel, versions[channel])
                for channel in values
                if channel in versions and channel not in written
            )
        blobs = [
            (
                channel,
                str(version),
                *(
                    self.serde.dumps_typed(values[channel])
                    if channel in values
                    else ("empty", None)
                ),
            )
            for channel, version in written.items()
        ]
        stored_metadata = get_serializable_checkpoint_metadata(config, metadata)
        run_id = stored_metadata.get("run_id")
        await self._repository.put(
            tenant=self.tenant,
            thread_id=thread_id,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint_id,
            parent_id=parent_id,
            checkpoint=self.serde.dumps_typed(saved),
            channels=list(versions),
            versions=[str(version) for version in versions.values()],
            metadata=self._json("metadata", stored_metadata),
            run_id=None if run_id is None else str(run_id),
            blobs=blobs,
        )
        return _config(thread_id, checkpoint_ns, checkpoint_id)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes for the checkpoint named by ``config``.

        Regular writes are idempotent per (task, index); special ones (errors,
        interrupts, ...) replace what the task stored before, as in LangGraph.
        """
        if not writes:
            return
        configurable = config.get("configurable", {})
        checkpoint_id = configurable.get("checkpoint_id")
        if checkpoint_id is None:
            raise ValidationError("config.configurable.checkpoint_id", "is required")
        rows = [
            (
                WRITES_IDX_MAP.get(channel, idx),
                _text("writes.channel", channel),
                *self.serde.dumps_typed(value),
            )
            for idx, (channel, value) in enumerate(writes)
        ]
        await self._repository.put_writes(
            tenant=self.tenant,
            thread_id=_thread_id(configurable.get("thread_id")),
            checkpoint_ns=_text(
                "config.configurable.checkpoint_ns", configurable.get("checkpoint_ns", "")
            ),
            checkpoint_id=_text("config.configurable.checkpoint_id", checkpoint_id),
            task_id=_text("task_id", task_id),
            task_path=_text("task_path", task_path),
            writes=rows,
            replace=all(channel in WRITES_IDX_MAP for channel, _ in writes),
        )

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of a thread."""
        await self._repository.delete_threads(
            [_thread_id(thread_id, "thread_id")], tenant=self.tenant
        )

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) stored by these runs."""
        ids = [_text("run_ids", str(run_id)) for run_id in run_ids]
        if ids:
            await self._repository.delete_for_runs(ids, tenant=self.tenant)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, blob and write of a thread to another thread."""
        await self._repository.copy_thread(
            _thread_id(source_thread_id, "source_thread_id"),
            _thread_id(target_thread_id, "target_thread_id"),
            tenant=self.tenant,
        )

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune threads: ``keep_latest`` keeps each namespace's newest checkpoint
        (with its writes and blobs); ``delete`` removes the threads."""
        if strategy not in PRUNE_STRATEGIES:
            raise ValidationError("strategy", f"must be one of {', '.join(PRUNE_STRATEGIES)}")
        ids = [_thread_id(thread_id, "thread_ids") for thread_id in thread_ids]
        if strategy == "delete":
            await self._repository.delete_threads(ids, tenant=self.tenant)
        else:
            await self._repository.keep_newest(ids, 1, tenant=self.tenant)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """For each channel, the writes on the path to ``config``'s checkpoint since
        its nearest ancestor storing a value, and that value (``seed``).

        LangGraph's ``DeltaChannel`` rebuilds its state from these. The walk
        runs in the database, ANCESTOR_PAGE ancestors per statement, instead
        of one read per ancestor.
        """
        if not channels:
            return {}
        configurable = config.get("configurable", {})
        thread_id = _thread_id(configurable.get("thread_id"))
        checkpoint_ns = _text(
            "config.configurable.checkpoint_ns", configurable.get("checkpoint_ns", "")
        )
        cursor = get_checkpoint_id(config)
        collected: dict[str, builtins.list[PendingWrite]] = {channel: [] for channel in channels}
        seeds: dict[str, Any] = {}
        remaining = set(channels)
        seen: set[str] = set()
        while remaining:
            rows = await self._repository.ancestors(
                tenant=self.tenant,
                thread_id=thread_id,
                checkpoint_ns=checkpoint_ns,
                checkpoint_id=cursor,
                channels=sorted(remaining),
                limit=ANCESTOR_PAGE,
            )
            for row in rows:
                if row["checkpoint_id"] in seen:  # a cycle of parents: stop walking
                    rows = []
                    break
                seen.add(row["checkpoint_id"])
                # the writes stored at an ancestor produced its child, on the path
                for task_id, channel, value_type, value in reversed(builtins.list(row_writes(row))):
                    if channel in remaining:
                        collected[channel].append(
                            (task_id, channel, self.serde.loads_typed((value_type, value)))
                        )
                for channel, blob_type, blob in row_blobs(row):
                    if channel in remaining:
                        seeds[channel] = self.serde.loads_typed((blob_type, blob))
                        remaining.discard(channel)
                if not remaining:
                    break
            if len(rows) < ANCESTOR_PAGE:
                break
            cursor = rows[-1]["checkpoint_id"]
        result: dict[str, DeltaChannelHistory] = {}
        for channel in channels:
            entry: DeltaChannelHistory = {"writes": builtins.list(reversed(collected[channel]))}
            if channel in seeds:
                entry["seed"] = seeds[channel]
            result[channel] = entry
        return result

    # ------------------------------------------------------------------- sync

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Blocking :meth:`aget_tuple` (from a thread other than the service's loop)."""
        return self._run(self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Blocking :meth:`alist`, fetching a page at a time on the service's loop."""
        listing = self._listing(config, filter, before, limit)
        while (page := self._run(self._next_page(listing))) is not None:
            yield from page

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Blocking :meth:`aput`."""
        return self._run(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Blocking :meth:`aput_writes`."""
        self._run(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Blocking :meth:`adelete_thread`."""
        self._run(self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Blocking :meth:`adelete_for_runs`."""
        self._run(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Blocking :meth:`acopy_thread`."""
        self._run(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Blocking :meth:`aprune`."""
        self._run(self.aprune(thread_ids, strategy=strategy))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Blocking :meth:`aget_delta_channel_history`."""
        return self._run(self.aget_delta_channel_history(config=config, channels=channels))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The next channel version: a zero-padded counter plus a random suffix.

        The suffix keeps the versions of two forks of one parent apart, so
        their blobs never share a key.
        """
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # ---------------------------------------------------------------- helpers

    def _listing(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> dict[str, Any]:
        """The validated criteria of a listing, and where its next page starts."""
        configurable = (config or {}).get("configurable", {})
        thread_id = configurable.get("thread_id")
        checkpoint_ns = configurable.get("checkpoint_ns")
        checkpoint_id = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise ValidationError("limit", "must be an integer")
        return {
            "criteria": {
                "thread_id": None if thread_id is None else _thread_id(thread_id),
                "checkpoint_ns": None
                if checkpoint_ns is None
                else _text("config.configurable.checkpoint_ns", checkpoint_ns),
                "checkpoint_id": None
                if checkpoint_id is None
                else _text("config.configurable.checkpoint_id", checkpoint_id),
                "metadata_filter": None if not filter else self._json("filter", filter),
                "before": None if before_id is None else _text("before", before_id),
            },
            "remaining": limit,
            "after": None,
            "done": limit is not None and limit <= 0,
        }

    async def _next_page(self, listing: dict[str, Any]) -> builtins.list[CheckpointTuple] | None:
        """The listing's next page (keyset on id, thread, namespace), or None at its end."""
        if listing["done"]:
            return None
        remaining = listing["remaining"]
        size = LIST_PAGE if remaining is None else min(remaining, LIST_PAGE)
        rows = await self._repository.list(
            tenant=self.tenant, **listing["criteria"], after=listing["after"], limit=size
        )
        if remaining is not None:
            listing["remaining"] = remaining - len(rows)
        listing["done"] = len(rows) < size or listing["remaining"] == 0
        if rows:
            last = rows[-1]
            listing["after"] = (last["checkpoint_id"], last["thread_id"], last["checkpoint_ns"])
        return [self._tuple(row) for row in rows] if rows else None

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return run_blocking(
            self.svc.loop, coroutine, owner="MemsvcSaver", use="aget_tuple, aput, ..."
        )

    @staticmethod
    def _json(field: str, value: Any) -> str:
        try:
            return json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise ValidationError(field, f"must be JSON-serializable: {exc}") from exc

    def _tuple(self, row: Any) -> CheckpointTuple:
        thread_id = row["thread_id"]
        checkpoint_ns = row["checkpoint_ns"]
        checkpoint: Checkpoint = self.serde.loads_typed((row["checkpoint_type"], row["checkpoint"]))
        checkpoint["channel_values"] = {
            channel: self.serde.loads_typed((blob_type, blob))
            for channel, blob_type, blob in row_blobs(row)
        }
        parent_id = row["parent_checkpoint_id"]
        return CheckpointTuple(
            config=_config(thread_id, checkpoint_ns, row["checkpoint_id"]),
            checkpoint=checkpoint,
            metadata=row["metadata"],
            parent_config=None
            if parent_id is None
            else _config(thread_id, checkpoint_ns, parent_id),
            pending_writes=[
                (task_id, channel, self.serde.loads_typed((value_type, value)))
                for task_id, channel, value_type, value in row_writes(row)
            ],
        )
