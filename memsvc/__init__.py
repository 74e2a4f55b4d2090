"""memsvc: the memory layer for AI agents, on PostgreSQL + pgvector and Redis."""

from __future__ import annotations

from memsvc.core.errors import (
    CitusUnsupportedError,
    ConcurrencyError,
    ConflictError,
    CursorExpiredError,
    EmbeddingError,
    ExtractionError,
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
    Policy,
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
from memsvc.extraction import (
    ExtractiveSummarizer,
    Extractor,
    OpenAIChatExtractor,
    OpenAIChatSummarizer,
    Summarizer,
    SummaryMember,
    extractor_from_spec,
    summarizer_from_spec,
)
from memsvc.ops.consolidation import ConsolidationReport
from memsvc.remember import RememberResult
from memsvc.service import MemoryService

__all__ = [
    "Assembly",
    "AssemblyHit",
    "Change",
    "Checkpoint",
    "CitusUnsupportedError",
    "ConcurrencyError",
    "ConflictError",
    "ConsolidationReport",
    "CursorExpiredError",
    "Embedder",
    "EmbeddingError",
    "ErasureReceipt",
    "ExtractionError",
    "ExtractiveSummarizer",
    "Extractor",
    "FeedEpochError",
    "HashingEmbedder",
    "Memory",
    "MemoryEvent",
    "MemoryService",
    "MemsvcError",
    "NotFoundError",
    "OpenAIChatExtractor",
    "OpenAIChatSummarizer",
    "OpenAIEmbedder",
    "Policy",
    "RedisUnavailableError",
    "RememberResult",
    "SchemaError",
    "Scope",
    "SearchHit",
    "SentenceTransformerEmbedder",
    "Settings",
    "StorageError",
    "Summarizer",
    "SummaryMember",
    "TaskState",
    "ValidationError",
    "WorkingMemoryError",
    "embedder_from_spec",
    "extractor_from_spec",
    "summarizer_from_spec",
]
