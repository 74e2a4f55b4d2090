"""Value types returned by memsvc: plain frozen dataclasses, no database handles."""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from memsvc.core.scope import Scope

# Vectors longer than this are shortened in reprs.
_REPR_VALUES = 2


def scope_from_row(row: Mapping[str, Any]) -> Scope:
    """Build a Scope from a row's scope columns."""
    return _trusted_scope(row["tenant_id"], row["project_id"], row["agent_id"], row["session_id"])


# Scopes are immutable values and rows repeat a few of them: one instance per
# scope serves every row read from it (a cache hit is a tuple hash, cheaper
# than building a frozen dataclass).
_trusted_scope = functools.lru_cache(maxsize=4096)(Scope.trusted)


@functools.lru_cache(maxsize=4096)
def real_value(value: float) -> float:
    """A ``real`` (float4) column's value as it was written: 0.8, not 0.800000011920929.

    PostgreSQL stores the float32 nearest to what was written; the shortest
    decimal that rounds to that float32 is what was written (or as close as
    a float32 can say it). Cached: rows repeat a few importance values, and
    every search hit goes through here.
    """
    return float(str(np.float32(value)))


_VECTOR_ARM = ("vector",)
_new = object.__new__


def _vector_repr(values: list[float] | None) -> str:
    if values is None or len(values) <= _REPR_VALUES + 1:
        return repr(values)
    head = ", ".join(f"{x:.4g}" for x in values[:_REPR_VALUES])
    return f"[{head}, ... {len(values)} floats]"


def _short_repr(obj: Any, vector_field: str) -> str:
    """A dataclass repr with its vector field shortened (384 floats help nobody)."""
    parts = []
    for item in dataclasses.fields(obj):
        value = getattr(obj, item.name)
        text = _vector_repr(value) if item.name == vector_field else repr(value)
        parts.append(f"{item.name}={text}")
    return f"{type(obj).__name__}({', '.join(parts)})"


# Memory and SearchHit keep their fields in an instance dict (no slots): a
# row read back is stored into the dict of an instance made without
# __init__ (the values are memsvc's own, already typed), one dict store per
# field, where a slotted frozen dataclass's __init__ makes one
# object.__setattr__ call per field, which was the largest share of a
# search's client work (and a dict literal merged in costs a dict more).
@dataclass(frozen=True)
class Memory:
    """A long-term memory.

    ``valid_from`` / ``valid_to`` say when its fact held (valid time; ``valid_to``
    None: it still holds); ``supersedes`` lists the memories it replaced and
    ``superseded_by`` names the one that replaced it (see
    docs/how-to/valid-time.md).
    """

    id: uuid.UUID
    scope: Scope
    content: str
    content_hash: str
    metadata: dict[str, Any]
    embedding: list[float] | None
    importance: float
    version: int
    created_at: datetime
    updated_at: datetime
    key: str | None = None
    expires_at: datetime | None = None
    access_count: int = 0
    last_accessed_at: datetime | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    supersedes: tuple[uuid.UUID, ...] = ()
    superseded_by: uuid.UUID | None = None
    pinned: bool = False
    forgotten_at: datetime | None = None
    reinforced_count: int = 0
    last_reinforced_at: datetime | None = None
    # True on the memory an add returns when semantic deduplication merged
    # the write into it (nothing new was stored); False on every read.
    merged: bool = False

    @classmethod
    def from_row(cls, row: Mapping[str, Any], scope: Scope | None = None) -> Memory:
        """Build a Memory from a ``memories`` row.

        ``scope``: the row's scope when the caller knows it (every hit of an
        exact-scope search shares one), saving a Scope per row.
        """
        embedding = row["embedding"]
        memory = _new(cls)
        fields = memory.__dict__
        fields["id"] = row["id"]
        fields["scope"] = scope_from_row(row) if scope is None else scope
        fields["content"] = row["content"]
        fields["content_hash"] = row["content_hash"]
        fields["metadata"] = row["metadata"]
        fields["embedding"] = None if embedding is None else embedding.tolist()
        fields["importance"] = real_value(row["importance"])
        fields["version"] = row["version"]
        fields["created_at"] = row["created_at"]
        fields["updated_at"] = row["updated_at"]
        fields["key"] = row["key"]
        fields["expires_at"] = row["expires_at"]
        fields["access_count"] = row["access_count"]
        fields["last_accessed_at"] = row["last_accessed_at"]
        # Rows written before valid time hold NULL: valid since their creation.
        valid_from = row["valid_from"]
        fields["valid_from"] = row["created_at"] if valid_from is None else valid_from
        fields["valid_to"] = row["valid_to"]
        supersedes = row["supersedes"]
        fields["supersedes"] = () if supersedes is None else tuple(supersedes)
        fields["superseded_by"] = row["superseded_by"]
        fields["pinned"] = row["pinned"]
        fields["forgotten_at"] = row["forgotten_at"]
        fields["reinforced_count"] = row["reinforced_count"]
        fields["last_reinforced_at"] = row["last_reinforced_at"]
        fields["merged"] = False
        return memory

    def __repr__(self) -> str:
        return _short_repr(self, "embedding")


@dataclass(frozen=True)
class Policy:
    """How fast the memories of a tenant or scope fade (``svc.policies``).

    A memory's strength is ``importance x 0.5 ** (age / half_life)``, its age
    counted from the latest of its creation, its last tracked access and its
    restoration; the policy of the most specific scope on its path applies.
    """

    scope: Scope
    half_life: timedelta
    updated_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Policy:
        """Build a Policy from a ``memory_policies`` row."""
        return cls(
            scope=scope_from_row(row),
            half_life=timedelta(seconds=row["half_life_s"]),
            updated_at=row["updated_at"],
        )


@dataclass(frozen=True)
class SearchHit:
    """A search result: the memory and its score (higher is better).

    ``score`` is what hits are ranked by: the vector similarity (vector mode),
    ``ts_rank_cd`` (text), the reciprocal-rank-fusion score (hybrid), the
    reranker's score, or the ``rank="recall"`` blend. ``similarity`` is the
    vector similarity, None when there is none (text mode, or no embedding).
    ``arms`` names the arms that found the hit (``"vector"``, ``"text"``) and
    ``vector_rank`` / ``text_rank`` its 1-based rank in each (None if absent).
    """

    memory: Memory
    score: float
    similarity: float | None
    arms: tuple[str, ...] = ("vector",)
    vector_rank: int | None = None
    text_rank: int | None = None

    @classmethod
    def vector_hits(cls, rows: Iterable[Mapping[str, Any]], scope: Scope | None) -> list[SearchHit]:
        """Hits of the vector-mode statement's rows, best first.

        Those rows all have an id (unlike hybrid's, which carry a count row)
        and a ``similarity`` column, a float.

        Each scored by its similarity and ranked by its place; ``scope`` as in
        :meth:`Memory.from_row`. One loop with no call per row but the
        Memory's: the commonest search's result.
        """
        hits = []
        from_row = Memory.from_row
        for place, row in enumerate(rows, 1):
            similarity = row["similarity"]
            hit = _new(cls)
            fields = hit.__dict__
            fields["memory"] = from_row(row, scope)
            fields["score"] = similarity
            fields["similarity"] = similarity
            fields["arms"] = _VECTOR_ARM
            fields["vector_rank"] = place
            fields["text_rank"] = None
            hits.append(hit)
        return hits


@dataclass(frozen=True, slots=True)
class MemoryEvent:
    """One entry of a memory's history.

    ``kind``: created, updated, deleted, erased, superseded or invalidated.
    ``links``: the successor of a ``superseded`` event, the memories a
    ``created`` one superseded (empty otherwise).
    """

    event_id: int
    memory_id: uuid.UUID
    kind: str
    version: int
    prior: dict[str, Any] | None
    at: datetime
    links: tuple[uuid.UUID, ...] = ()

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> MemoryEvent:
        """Build an event from a ``memory_events`` row."""
        links = row.get("links")
        return cls(
            event_id=row["event_id"],
            memory_id=row["memory_id"],
            kind=row["kind"],
            version=row["version"],
            prior=row["prior"],
            at=row["at"],
            links=() if links is None else tuple(links),
        )


@dataclass(frozen=True, slots=True)
class Change:
    """One committed change from the change feed (``svc.changes``).

    ``entity`` is ``"memory"``, ``"assembly"`` or ``"checkpoint"`` and
    ``entity_id`` its id; ``memory_id`` is the same id (the memory's, for
    memory changes). ``kind`` is ``created``, ``updated``, ``deleted``,
    ``erased``, or (memories' valid time) ``superseded`` / ``invalidated``;
    ``version`` the row's version after the change (checkpoints have no
    versions: 1). ``values`` holds the values after the change when
    asked for with ``with_values=True`` (None for deletions, and when the row
    has changed again since: a later change carries them). ``cursor`` is an
    opaque string: pass the last one processed as ``since`` to resume.
    """

    cursor: str
    kind: str
    memory_id: uuid.UUID
    scope: Scope
    version: int
    at: datetime
    entity: str = "memory"
    values: dict[str, Any] | None = None

    @property
    def entity_id(self) -> uuid.UUID:
        """The id of the memory, assembly or checkpoint changed."""
        return self.memory_id


@dataclass(frozen=True, slots=True)
class Assembly:
    """A named group of memories with a centroid of their embeddings."""

    id: uuid.UUID
    scope: Scope
    name: str
    description: str
    metadata: dict[str, Any]
    member_count: int
    centroid: list[float] | None
    version: int
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Assembly:
        """Build an Assembly from an ``assemblies`` row."""
        centroid = row["centroid"]
        return cls(
            id=row["id"],
            scope=scope_from_row(row),
            name=row["name"],
            description=row["description"],
            metadata=row["metadata"],
            member_count=row["member_count"],
            centroid=None if centroid is None else centroid.tolist(),
            version=row["version"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )

    def __repr__(self) -> str:
        return _short_repr(self, "centroid")


@dataclass(frozen=True, slots=True)
class AssemblyHit:
    """An assembly search result."""

    assembly: Assembly
    score: float


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A durable snapshot of a session's state."""

    id: uuid.UUID
    scope: Scope
    description: str
    data: Any
    size_bytes: int
    created_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Checkpoint:
        """Build a Checkpoint from a ``session_checkpoints`` row."""
        return cls(
            id=row["id"],
            scope=scope_from_row(row),
            description=row["description"],
            # jsonb arrives decoded: a JSON string stays a string.
            data=row.get("data"),
            size_bytes=row["size_bytes"],
            created_at=row["created_at"],
        )


@dataclass(slots=True)
class TaskState:
    """What an agent is doing in a session (kept in working memory)."""

    task_id: str
    task_type: str = ""
    description: str = ""
    status: str = "pending"
    current_step: int = 0
    total_steps: int = 0
    progress_percent: float = 0.0
    context: dict[str, Any] = field(default_factory=dict)
    started_at: datetime | None = None
    updated_at: datetime | None = None
