"""Applying one batch's checked operations inside the batch's transaction.

The operations run one after the other in the batch's transaction, each one
``svc.memories`` call on the batch's connection: ADD is ``add`` (with its
``valid_from``), UPDATE ``update``, SUPERSEDE ``supersede`` and INVALIDATE
``invalidate`` (valid time), the last three holding the memory to the
version shown to the extractor. When the store refuses one (a content the
scope already holds under another memory, a scope over its size limit), the
batch starts over with each operation in a savepoint: the refused one is
rolled back alone and reported with the store's reason, so no operation is
ever half-applied, and a batch the store accepts whole pays no savepoints.
Applied whole, each run of consecutive ADDs is one ``add_many``: the
memories it writes are those ``add`` would write, one by one, in order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from memsvc.core.errors import ConflictError, NotFoundError, ValidationError
from memsvc.core.models import Memory
from memsvc.core.scope import Scope
from memsvc.extraction.answers import PROVENANCE_KEY
from memsvc.extraction.operations import (
    ADD,
    INVALIDATE,
    NOOP,
    SUPERSEDE,
    UPDATE,
    Operation,
    Rejected,
)
from memsvc.memories.repository import MemoryRepository
from memsvc.remember.candidates import Shown
from memsvc.remember.result import Applied

# The ops the store applies, in the wire order.
SUPPORTED = ("ADD", "UPDATE", "SUPERSEDE", "INVALIDATE", "NOOP")


@dataclass(frozen=True)
class Provenance:
    """Where a batch's writes come from: recorded in each memory's metadata and history."""

    message_ids: tuple[str, ...]
    extractor: str
    extractor_version: str
    model: str | None

    def for_operation(self, operation: Operation, **extra: Any) -> dict[str, Any]:
        recorded: dict[str, Any] = {
            "source_message_ids": list(self.message_ids),
            "extractor": self.extractor,
            "extractor_version": self.extractor_version,
            "model": self.model,
            "operation": operation.op,
        }
        recorded.update({k: v for k, v in extra.items() if v is not None})
        return recorded


class StoreRefused(Exception):
    """The store refused an operation applied without a savepoint: redo the batch isolated."""


class BatchApplier:
    """Applies checked operations on one connection (the batch's transaction)."""

    def __init__(
        self,
        conn: asyncpg.Connection,
        memories: MemoryRepository,
        scope: Scope,
        shown: Mapping[str, Shown],
        provenance: Provenance,
        embeddings: Mapping[str, Any],
        created: Mapping[int, str] | None = None,
    ) -> None:
        self._conn = conn
        self._memories = memories
        self._scope = scope
        # The memories shown, and (as the answer's ADDs write them) the new ones.
        self._shown = dict(shown)
        self._created = dict(created or {})
        self._provenance = provenance
        self._embeddings = embeddings

    async def apply(
        self, accepted: Sequence[tuple[int, Operation]], *, isolated: bool = True
    ) -> tuple[list[Applied], list[Rejected]]:
        """Apply the operations; the store's refusals are reported.

        ``isolated``: each in its own savepoint. Otherwise a refusal raises
        :class:`StoreRefused` (the transaction is then unusable).
        """
        if not isolated:
            try:
                return await self._together(accepted), []
            except (ValidationError, ConflictError, NotFoundError) as exc:
                raise StoreRefused from exc
        applied: list[Applied] = []
        refused: list[Rejected] = []
        for index, operation in accepted:
            try:
                async with self._conn.transaction():
                    memory = await self._one(operation)
            except (ValidationError, ConflictError, NotFoundError) as exc:
                refused.append(Rejected(index, f"refused by the store: {exc}", "", "apply"))
                continue
            self._name_created(index, memory)
            applied.append(Applied(operation, memory, index))
        return applied, refused

    async def _together(self, accepted: Sequence[tuple[int, Operation]]) -> list[Applied]:
        """Every operation in order, each run of consecutive ADDs as one ``add_many``."""
        applied: list[Applied] = []
        position = 0
        while position < len(accepted):
            end = position
            while end < len(accepted) and isinstance(accepted[end][1], ADD):
                end += 1
            if end > position + 1:
                run = accepted[position:end]
                added = await self._add_many([op for _, op in run if isinstance(op, ADD)])
                for (index, operation), memory in zip(run, added, strict=True):
                    self._name_created(index, memory)
                    applied.append(Applied(operation, memory, index))
                position = end
                continue
            index, operation = accepted[position]
            one = await self._one(operation)
            self._name_created(index, one)
            applied.append(Applied(operation, one, index))
            position += 1
        return applied

    def _name_created(self, index: int, memory: Memory | None) -> None:
        """An ADD's memory under the handle later operations of the answer name it by."""
        new_ref = self._created.get(index)
        if new_ref is not None and memory is not None:
            self._shown[new_ref] = Shown(new_ref, memory)

    async def _one(self, operation: Operation) -> Memory | None:
        if isinstance(operation, NOOP):
            return None
        if isinstance(operation, ADD):
            return await self._add(operation)
        if isinstance(operation, UPDATE):
            return await self._update(operation)
        if isinstance(operation, SUPERSEDE):
            return await self._supersede(operation)
        return await self._invalidate(operation)

    def _named(self, ref: str) -> Shown:
        """The memory ``ref`` names: one shown, or one an earlier ADD of the answer wrote."""
        named = self._shown.get(ref)
        if named is None:
            raise NotFoundError(f"{ref!r} names an ADD of this answer that was not applied")
        return named

    def _metadata(self, base: Mapping[str, Any], operation: Operation, **extra: Any) -> dict[
        str, Any
    ]:
        return {**base, PROVENANCE_KEY: self._provenance.for_operation(operation, **extra)}

    async def _add(self, operation: ADD) -> Memory:
        return await self._memories.add(
            self._scope,
            operation.content,
            metadata=self._metadata(operation.metadata, operation),
            importance=operation.importance,
            embedding=self._embeddings.get(operation.content),
            valid_from=operation.valid_from,
            conn=self._conn,
        )

    async def _add_many(self, operations: Sequence[ADD]) -> list[Memory]:
        items: list[dict[str, Any]] = []
        for operation in operations:
            item: dict[str, Any] = {
                "content": operation.content,
                "metadata": self._metadata(operation.metadata, operation),
                "importance": operation.importance,
                "valid_from": operation.valid_from,
            }
            embedding = self._embeddings.get(operation.content)
            if embedding is not None:
                item["embedding"] = embedding
            items.append(item)
        return await self._memories.add_many(self._scope, items, conn=self._conn)

    async def _update(self, operation: UPDATE) -> Memory:
        shown = self._named(operation.ref)
        return await self._memories.update(
            shown.memory_id,
            content=operation.content,
            metadata=self._metadata(shown.memory.metadata, operation),
            embedding=self._embeddings.get(operation.content),
            expected_version=shown.version,
            tenant=self._scope.tenant,
            conn=self._conn,
        )

    async def _supersede(self, operation: SUPERSEDE) -> Memory:
        shown = self._named(operation.ref)
        return await self._memories.supersede(
            shown.memory_id,
            operation.content,
            valid_from=operation.valid_from,
            metadata=self._metadata(operation.metadata, operation),
            embedding=self._embeddings.get(operation.content),
            expected_version=shown.version,
            tenant=self._scope.tenant,
            conn=self._conn,
        )

    async def _invalidate(self, operation: INVALIDATE) -> Memory:
        shown = self._named(operation.ref)
        return await self._memories.invalidate(
            shown.memory_id,
            at=operation.at,
            expected_version=shown.version,
            tenant=self._scope.tenant,
            conn=self._conn,
        )
