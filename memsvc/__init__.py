"""memsvc: the memory layer for AI agents, on PostgreSQL + pgvector and Redis."""

from __future__ import annotations

from memsvc.core.errors import (
    ConcurrencyError,
    ConflictError,
    CursorExpiredError,
    EmbeddingError,
    FeedEpochError,
    MemsvcError,
    NotFoundError,
    RedisUnavailableError,
    SchemaError,
    StorageError,
    ValidationError,
    WorkingMemoryError,
)
from memsvc.core.models import (
    Assembly,
    AssemblyHit,
    Change,
    Checkpoint,
    Memory,
    MemoryEvent,
    SearchHit,
    TaskState,
)
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.embedding import (
    Embedder,
    HashingEmbedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    embedder_from_spec,
)
from memsvc.erasure.receipt import ErasureReceipt
from memsvc.service import MemoryService

__all__ = [
    "Assembly",
    "AssemblyHit",
    "Change",
    "Checkpoint",
    "ConcurrencyError",
    "ConflictError",
    "CursorExpiredError",
    "Embedder",
    "EmbeddingError",
    "ErasureReceipt",
    "FeedEpochError",
    "HashingEmbedder",
    "Memory",
    "MemoryEvent",
    "MemoryService",
    "MemsvcError",
    "NotFoundError",
    "OpenAIEmbedder",
    "RedisUnavailableError",
    "SchemaError",
    "Scope",
    "SearchHit",
    "SentenceTransformerEmbedder",
    "Settings",
    "StorageError",
    "TaskState",
    "ValidationError",
    "WorkingMemoryError",
    "embedder_from_spec",
]
