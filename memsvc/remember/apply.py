"""Applying one batch's checked operations inside the batch's transaction.

The operations run one after the other in the batch's transaction. When the
store refuses one (a content the scope already holds under another memory,
a scope over its size limit), the batch starts over with each operation in
a savepoint: the refused one is rolled back alone and reported with the
store's reason, so no operation is ever half-applied, and a batch the store
accepts whole pays no savepoints. ADD and UPDATE use today's ``svc.memories`` API on the
batch's connection; SUPERSEDE and INVALIDATE call the store's ``supersede``
and ``invalidate`` where it has them (valid time, issue 29) and are refused
up front where it does not.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
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

# The ops every store applies; SUPERSEDE and INVALIDATE need valid time.
ALWAYS_SUPPORTED = ("ADD", "UPDATE", "NOOP")


def supported_operations(memories: MemoryRepository) -> tuple[str, ...]:
    """The ops this store can apply, in the wire order.

    SEAM(issue 29): ``supersede`` and ``invalidate`` arrive with valid time.
    """
    found = list(ALWAYS_SUPPORTED)
    if callable(getattr(memories, "supersede", None)):
        found.insert(2, "SUPERSEDE")
    if callable(getattr(memories, "invalidate", None)):
        found.insert(len(found) - 1, "INVALIDATE")
    return tuple(found)


def _accepts(method: Callable[..., Any], name: str) -> bool:
    return name in inspect.signature(method).parameters


def _keywords(method: Callable[..., Any], **candidates: Any) -> dict[str, Any]:
    """The keyword arguments among ``candidates`` that ``method`` takes (None ones left out)."""
    parameters = inspect.signature(method).parameters
    return {k: v for k, v in candidates.items() if v is not None and k in parameters}


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
    ) -> None:
        self._conn = conn
        self._memories = memories
        self._scope = scope
        self._shown = shown
        self._provenance = provenance
        self._embeddings = embeddings
        # SEAM(issue 29): the valid-time methods, where this store has them
        # (supported_operations() offers their ops only then).
        self._store_supersede: Callable[..., Awaitable[Any]] | None = getattr(
            memories, "supersede", None
        )
        self._store_invalidate: Callable[..., Awaitable[Any]] | None = getattr(
            memories, "invalidate", None
        )

    async def apply(
        self, accepted: Sequence[tuple[int, Operation]], *, isolated: bool = True
    ) -> tuple[list[Applied], list[Rejected]]:
        """Apply the operations; the store's refusals are reported.

        ``isolated``: each in its own savepoint. Otherwise a refusal raises
        :class:`StoreRefused` (the transaction is then unusable).
        """
        applied: list[Applied] = []
        refused: list[Rejected] = []
        for index, operation in accepted:
            try:
                if isolated:
                    async with self._conn.transaction():
                        memory = await self._one(operation)
                else:
                    memory = await self._one(operation)
            except (ValidationError, ConflictError, NotFoundError) as exc:
                if not isolated:
                    raise StoreRefused from exc
                refused.append(Rejected(index, f"refused by the store: {exc}", "", "apply"))
                continue
            applied.append(Applied(operation, memory, index))
        return applied, refused

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

    def _metadata(self, base: Mapping[str, Any], operation: Operation, **extra: Any) -> dict[
        str, Any
    ]:
        return {**base, PROVENANCE_KEY: self._provenance.for_operation(operation, **extra)}

    async def _add(self, operation: ADD) -> Memory:
        add = self._memories.add
        valid_from = operation.valid_from
        stated = None
        if valid_from is not None and not _accepts(add, "valid_from"):
            # SEAM(issue 29): until add() takes valid_from, the stated time is kept here.
            stated, valid_from = valid_from.isoformat(), None
        extra = _keywords(add, valid_from=valid_from)
        return await add(
            self._scope,
            operation.content,
            metadata=self._metadata(operation.metadata, operation, stated_valid_from=stated),
            importance=operation.importance,
            embedding=self._embeddings.get(operation.content),
            conn=self._conn,
            **extra,
        )

    async def _update(self, operation: UPDATE) -> Memory:
        shown = self._shown[operation.ref]
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
        # SEAM(issue 29): svc.memories.supersede(old_id, content, *, valid_from=None, ...).
        # Only its documented arguments are passed, each where it is accepted;
        # the integrator wires the rest (expected version) when the API lands.
        shown = self._shown[operation.ref]
        supersede = self._store_supersede
        if supersede is None:
            raise ValidationError("op", "SUPERSEDE is not supported by this memsvc")
        result: Memory = await supersede(
            shown.memory_id,
            operation.content,
            **_keywords(
                supersede,
                valid_from=operation.valid_from,
                metadata=self._metadata(operation.metadata, operation),
                embedding=self._embeddings.get(operation.content),
                expected_version=shown.version,
                tenant=self._scope.tenant,
                conn=self._conn,
            ),
        )
        return result

    async def _invalidate(self, operation: INVALIDATE) -> Memory | None:
        # SEAM(issue 29): svc.memories.invalidate(id, at=t).
        shown = self._shown[operation.ref]
        invalidate = self._store_invalidate
        if invalidate is None:
            raise ValidationError("op", "INVALIDATE is not supported by this memsvc")
        result = await invalidate(
            shown.memory_id,
            **_keywords(
                invalidate,
                at=operation.at,
                expected_version=shown.version,
                tenant=self._scope.tenant,
                conn=self._conn,
            ),
        )
        return result if isinstance(result, Memory) else None
