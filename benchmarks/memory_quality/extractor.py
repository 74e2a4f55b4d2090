"""The perfect extractor: a stream's ground-truth operations applied to memsvc.

It measures the store, not an extraction model: every memory is written as
the answer key says, with the embedding computed beforehand. What it calls
depends on the ``Store`` asked for and on what this memsvc has, found by
looking at the public API's signatures (``Capabilities.of``), so the same
runner works before and after the valid-time API lands:

- ``plain``: each ``Add`` written with ``add_many``, in order, as a backend
  does today; ``supersedes`` and ``Invalidate`` are ignored.
- ``supersession``: an ``Add`` with ``valid_from``; one that supersedes
  memories passes ``supersedes=[ids]`` to ``add`` (or, lacking that, calls
  ``supersede(old, ...)`` and ``invalidate`` for the rest); an
  ``Invalidate`` calls ``invalidate(id, at=...)`` per memory.
- ``dedupe``: ``dedupe="exact"|"semantic"|"off"`` passed on every write (and
  the similarity threshold, if given, to ``add``'s parameter whose name says
  ``threshold``).

A memory deduplicated into an existing one maps to that one's id, so later
operations on it land where the store put it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from benchmarks.memory_quality.model import Add, Invalidate, Operation
from memsvc import ConflictError, MemoryService, Scope, ValidationError

BATCH = 1_000


@dataclass(frozen=True)
class Capabilities:
    """What this memsvc's memories API offers, read from its signatures."""

    supersedes_on_add: bool
    supersede: bool
    invalidate: bool
    valid_from: bool
    validity_reads: bool
    dedupe: bool
    dedupe_on_add_many: bool
    threshold_parameter: str | None
    hybrid: bool

    @classmethod
    def of(cls, svc: MemoryService) -> Capabilities:
        memories = svc.memories
        add = _parameters(memories.add)
        add_many = _parameters(memories.add_many)
        search = _parameters(memories.search)
        thresholds = sorted(name for name in add if "threshold" in name)
        return cls(
            supersedes_on_add="supersedes" in add,
            supersede=callable(getattr(memories, "supersede", None)),
            invalidate=callable(getattr(memories, "invalidate", None)),
            valid_from="valid_from" in add,
            validity_reads={"valid", "valid_at"} <= search,
            dedupe="dedupe" in add,
            dedupe_on_add_many="dedupe" in add_many,
            threshold_parameter=thresholds[0] if thresholds else None,
            hybrid={"mode", "query_embedding"} <= search,
        )

    @property
    def supersession(self) -> bool:
        """Writes can end older memories, and reads can ask what held when."""
        can_supersede = self.supersedes_on_add or (self.supersede and self.invalidate)
        return can_supersede and self.valid_from and self.validity_reads

    def describe(self) -> str:
        names = [name for name, value in vars(self).items() if value]
        return ", ".join(names) or "none of the valid-time API"


@dataclass(frozen=True)
class Store:
    """How a stream is written: as today, or with supersession and a dedupe mode."""

    name: str
    supersession: bool = False
    dedupe: str | None = None  # None: no argument, today's behaviour

    def missing(self, caps: Capabilities) -> str | None:
        """Why this memsvc cannot build the store (None: it can)."""
        if self.supersession and not caps.supersession:
            return "supersession / valid_from / valid_at"
        if self.dedupe is not None and not caps.dedupe:
            return f'add(dedupe="{self.dedupe}")'
        return None


def _parameters(method: Callable[..., Any] | None) -> set[str]:
    if method is None:
        return set()
    return set(inspect.signature(method).parameters)


class Extractor:
    """Writes one stream's operations into one scope; ``ids`` maps memory keys to ids."""

    def __init__(
        self,
        svc: MemoryService,
        caps: Capabilities,
        store: Store,
        threshold: float | None = None,
    ) -> None:
        self.memories: Any = svc.memories  # typed loosely: the API it targets may not exist yet
        self.caps = caps
        self.store = store
        self.ids: dict[str, Any] = {}
        # Writes answered with a memory that states another fact (or none):
        # a dedupe that merged what it should have kept apart.
        self.wrong_merges = 0
        # Supersessions and invalidations the store refused (a memory already
        # closed, or dated before the moment it would end): a refused
        # supersession is written as a plain add instead. Only
        # the latency scope's filler histories make them, where exact dedupe
        # merges one text told of several people at different dates.
        self.refused_supersessions = 0
        self.dedupe: dict[str, Any] = {}
        if store.dedupe is not None:
            self.dedupe["dedupe"] = store.dedupe
            if threshold is not None and caps.threshold_parameter:
                self.dedupe[caps.threshold_parameter] = threshold
        # add_many with valid_from in its items, until this memsvc says it has none.
        self.batch_valid_from = store.supersession

    async def apply(
        self, scope: Scope, ops: Sequence[Operation], vectors: dict[str, np.ndarray]
    ) -> None:
        """Every operation in order (``vectors``: each Add's embedding by memory key)."""
        pending: list[Add] = []
        batched = not self.store.dedupe or self.caps.dedupe_on_add_many
        for op in ops:
            plain_add = isinstance(op, Add) and (not self.store.supersession or not op.supersedes)
            if plain_add and batched:
                assert isinstance(op, Add)
                pending.append(op)
                if len(pending) >= BATCH:
                    await self.write_many(scope, pending, vectors)
                    pending = []
                continue
            if pending:
                await self.write_many(scope, pending, vectors)
                pending = []
            if isinstance(op, Add):
                await self.write_one(scope, op, vectors[op.memory])
            elif self.store.supersession:
                await self.end(op)
        if pending:
            await self.write_many(scope, pending, vectors)

    async def write_many(
        self, scope: Scope, adds: list[Add], vectors: dict[str, np.ndarray]
    ) -> None:
        items = []
        for op in adds:
            item: dict[str, Any] = {
                "content": op.content,
                "embedding": vectors[op.memory],
                "metadata": metadata(op),
            }
            if self.batch_valid_from:
                item["valid_from"] = _moment(op.valid_from)
            items.append(item)
        extra = self.dedupe if self.store.dedupe else {}
        try:
            stored = await self.memories.add_many(scope, items, **extra)
        except (TypeError, ValidationError) as exc:
            if not self.batch_valid_from or "valid_from" not in str(exc):
                raise
            # This add_many takes no valid_from: one add at a time from now on.
            self.batch_valid_from = False
            for op in adds:
                await self.write_one(scope, op, vectors[op.memory])
            return
        for op, memory in zip(adds, stored, strict=True):
            self.stored(op, memory)

    async def write_one(self, scope: Scope, op: Add, vector: np.ndarray) -> None:
        kwargs: dict[str, Any] = {"embedding": vector, "metadata": metadata(op), **self.dedupe}
        if not self.store.supersession:
            self.stored(op, await self.memories.add(scope, op.content, **kwargs))
            return
        kwargs["valid_from"] = _moment(op.valid_from)
        older = self.known(op.supersedes)
        if older and self.caps.supersedes_on_add:
            try:
                memory = await self.memories.add(scope, op.content, supersedes=older, **kwargs)
            except (ConflictError, ValidationError):
                self.refused_supersessions += 1
                memory = await self.memories.add(scope, op.content, **kwargs)
        elif older:
            memory = await self.memories.supersede(older[0], op.content, **kwargs)
            for memory_id in older[1:]:
                await self.memories.invalidate(memory_id, at=kwargs["valid_from"])
        else:
            memory = await self.memories.add(scope, op.content, **kwargs)
        self.stored(op, memory)

    def stored(self, op: Add, memory: Any) -> None:
        self.ids[op.memory] = memory.id
        if memory.metadata.get("fact") != op.fact:
            self.wrong_merges += 1

    async def end(self, op: Invalidate) -> None:
        for memory_id in self.known(op.memories):
            try:
                await self.memories.invalidate(memory_id, at=_moment(op.at))
            except (ConflictError, ValidationError):
                self.refused_supersessions += 1

    def known(self, keys: list[str]) -> list[Any]:
        """The ids of these memory keys, each once (dedupe may have merged some)."""
        ids: list[Any] = []
        for key in keys:
            memory_id = self.ids.get(key)
            if memory_id is not None and memory_id not in ids:
                ids.append(memory_id)
        return ids


def metadata(op: Add) -> dict[str, Any]:
    """What a hit is scored by (the fact it states, None if none) and searched within.

    A structured extractor knows whom a memory is about and which attribute
    it states: ``about`` and ``slot`` let a search ask within them.
    """
    slot = op.fact.split("/")[1] if op.fact else None
    return {"key": op.memory, "fact": op.fact, "kind": op.kind, "about": op.about, "slot": slot}


def _moment(text: str) -> datetime:
    return datetime.fromisoformat(text)
