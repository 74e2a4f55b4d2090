"""memsvc: the memory layer for AI agents, on PostgreSQL + pgvector and Redis."""

from __future__ import annotations

from memsvc.embedding import Embedder, HashingEmbedder
from memsvc.errors import (
    ConcurrencyError,
    ConflictError,
    MemsvcError,
    NotFoundError,
    SchemaError,
    StorageError,
    ValidationError,
    WorkingMemoryError,
)
from memsvc.models import (
    Assembly,
    AssemblyHit,
    Checkpoint,
    Memory,
    MemoryEvent,
    SearchHit,
    TaskState,
)
from memsvc.scope import Scope
from memsvc.service import MemoryService
from memsvc.settings import Settings

__all__ = [
    "Assembly",
    "AssemblyHit",
    "Checkpoint",
    "ConcurrencyError",
    "ConflictError",
    "Embedder",
    "HashingEmbedder",
    "Memory",
    "MemoryEvent",
    "MemoryService",
    "MemsvcError",
    "NotFoundError",
    "SchemaError",
    "Scope",
    "SearchHit",
    "Settings",
    "StorageError",
    "TaskState",
    "ValidationError",
    "WorkingMemoryError",
]
