"""WorkingMemory: the ephemeral, session-scoped memory an agent keeps while it works.

The surface is the one of the file-based system memsvc replaces (key-value
with TTLs, task state, scratchpad, checkpoints), but each call is one atomic
store operation: concurrent appends, progress updates, clears and restores
never lose or mix data. Checkpoints are durable, in PostgreSQL, through a
:class:`CheckpointRepository`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import math
import uuid
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Protocol

from memsvc.core.errors import NotFoundError, ValidationError, WorkingMemoryError
from memsvc.core.models import Checkpoint, TaskState
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.core.time_limits import MAX_DURATION_SECONDS
from memsvc.core.validation import check_text, validate_ttl
from memsvc.telemetry import traced_operations
from memsvc.working.store import SessionLimits, SessionSnapshot, WorkingStore
from memsvc.working.values import encode_scratchpad_entry, encode_value, validate_key

CHECKPOINT_FORMAT = 1

_TASK_FIELDS = tuple(field.name for field in dataclasses.fields(TaskState))
_DATETIME_FIELDS = frozenset({"started_at", "updated_at"})


class CheckpointRepository(Protocol):
    """What WorkingMemory needs from the durable checkpoint repository (PostgreSQL)."""

    async def create(self, scope: Scope, data: Any, *, description: str = "") -> Checkpoint:
        """Store ``data`` as a new checkpoint of ``scope``."""
        ...

    async def get(self, id: uuid.UUID, *, tenant: str | None = None) -> Checkpoint:
        """Load one checkpoint; raises NotFoundError when it does not exist."""
        ...

    async def list(
        self, scope: Scope, *, limit: int = 100, after: uuid.UUID | None = None
    ) -> list[Checkpoint]:
        """Checkpoints of ``scope``, newest first."""
        ...

    async def delete(self, id: uuid.UUID, *, tenant: str | None = None) -> bool:
        """Delete one checkpoint; True when it existed."""
        ...


MAX_DURATION_MS = int(MAX_DURATION_SECONDS * 1000)


def _now() -> datetime:
    return datetime.now(UTC)


def _parse_checkpoint_id(checkpoint_id: object) -> uuid.UUID:
    if isinstance(checkpoint_id, uuid.UUID):
        return checkpoint_id
    try:
        return uuid.UUID(str(checkpoint_id))
    except ValueError:
        raise NotFoundError(f"checkpoint {checkpoint_id!r} not found") from None


@traced_operations("memsvc.working", scope_attribute="scope")
class WorkingMemory:
    """Session-scoped working memory on a :class:`~memsvc.working.store.WorkingStore`.

    Every method is atomic: it is one Lua script (Redis) or one lock hold
    (in-process store), never a read in Python followed by a write.

    Args:
        scope: The session; ``scope.session`` must be set.
        store: Where state lives (``RedisStore`` or ``LocalStore``); shared
            by many WorkingMemory objects and owned by the caller.
        settings: TTL and size limits (``working_memory_*``,
            ``scratchpad_max_entries``).
        checkpoints: Durable checkpoint repository; without it the
            checkpoint methods raise WorkingMemoryError.

    Raises:
        ValidationError: ``scope.session`` is not set (field ``scope.session``).
    """

    def __init__(
        self,
        scope: Scope,
        store: WorkingStore,
        settings: Settings | None = None,
        checkpoints: CheckpointRepository | None = None,
    ) -> None:
        if not isinstance(scope, Scope):
            raise ValidationError("scope", f"must be a Scope, not {type(scope).__name__}")
        if scope.session is None:
            raise ValidationError("scope.session", "working memory needs a session scope")
        self._scope = scope
        self._store = store
        self._settings = settings if settings is not None else Settings()
        self._checkpoints = checkpoints
        self._limits = SessionLimits.from_settings(self._settings)
        self._max_value_bytes = self._settings.working_memory_max_value_bytes
        default_ttl = self._settings.working_memory_default_ttl_seconds
        self._default_ttl_ms = None if default_ttl is None else default_ttl * 1000
        self._owns_store = False

    @classmethod
    async def for_session(
        cls,
        session_id: str,
        project_id: str | None = None,
        agent_instance_id: str | None = None,
        *,
        tenant: str = "default",
        store: WorkingStore | None = None,
        settings: Settings | None = None,
        checkpoints: CheckpointRepository | None = None,
    ) -> WorkingMemory:
        """Working memory for one session, building the scope from its ids.

        Without ``store`` a new store is opened from ``settings`` (Redis when
        ``redis_url`` is set, else an in-process store, which is then private
        to this object); that store is closed by :meth:`close`.

        Args:
            session_id: The session id.
            project_id: Optional project id.
            agent_instance_id: Optional agent id (``Scope.agent``).
            tenant: Tenant id.
            store: A shared store; the caller keeps ownership.
            settings: Settings (default: read from the environment).
            checkpoints: Durable checkpoint repository.
        """
        from memsvc.working.opening import open_working_store

        scope = Scope(tenant, project_id, agent_instance_id, session_id)
        settings = settings if settings is not None else Settings()
        owns = store is None
        if store is None:
            store, _ = await open_working_store(settings)
        memory = cls(scope, store, settings, checkpoints)
        memory._owns_store = owns
        return memory

    @property
    def scope(self) -> Scope:
        """The session scope."""
        return self._scope

    @property
    def store(self) -> WorkingStore:
        """The backing store."""
        return self._store

    @property
    def is_using_fallback(self) -> bool:
        """True when an in-process store stands in for an unreachable Redis."""
        return self._store.using_fallback

    # --- validation helpers ----------------------------------------------------
    def _encode_value(self, value: Any) -> str:
        return encode_value("value", value, self._max_value_bytes)

    def _ttl_ms(self, ttl_seconds: float | None) -> int | None:
        if ttl_seconds is None:
            return self._default_ttl_ms
        ttl = validate_ttl(ttl_seconds, "ttl_seconds")
        assert ttl is not None
        return max(1, math.ceil(ttl * 1000))

    # --- key-value -------------------------------------------------------------
    async def set(self, key: str, value: Any, ttl_seconds: float | None = None) -> None:
        """Store a JSON-serializable value under ``key``.

        Args:
            key: A non-empty key of at most 255 printable characters, not
                starting with ``_``.
            value: Any JSON value (no NaN/infinity, NUL or lone surrogates),
                at most ``working_memory_max_value_bytes`` once encoded.
            ttl_seconds: Lifetime in seconds (fractions allowed); default
                ``working_memory_default_ttl_seconds``.

        Raises:
            ValidationError: Bad key (``key``), value (``value``) or TTL
                (``ttl_seconds``); or ``key`` is new and the session already
                holds ``working_memory_max_keys`` keys (field ``key``).
                Nothing is written.
            WorkingMemoryError: The store failed.
        """
        validate_key(key)
        text = self._encode_value(value)
        ttl_ms = self._ttl_ms(ttl_seconds)
        if not await self._store.set_value(self._scope, key, text, ttl_ms, self._limits):
            raise ValidationError(
                "key",
                f"the session already holds {self._limits.max_keys} keys "
                "(working_memory_max_keys); delete some or raise the limit",
            )

    async def get(self, key: str, default: Any = None) -> Any:
        """The value under ``key``, or ``default`` when absent or expired."""
        validate_key(key)
        text = await self._store.get_value(self._scope, key)
        return default if text is None else json.loads(text)

    async def delete(self, key: str) -> bool:
        """Delete ``key``; True when it existed."""
        validate_key(key)
        return await self._store.delete_value(self._scope, key)

    async def exists(self, key: str) -> bool:
        """True when ``key`` holds a live value."""
        validate_key(key)
        return await self._store.has_value(self._scope, key)

    async def list_keys(self, pattern: str = "*") -> list[str]:
        """User keys matching a glob ``pattern`` (``fnmatch``, case-sensitive), sorted."""
        if not isinstance(pattern, str):
            raise ValidationError("pattern", "must be a string")
        keys = await self._store.list_keys(self._scope)
        if pattern != "*":
            keys = [key for key in keys if fnmatch.fnmatchcase(key, pattern)]
        return sorted(keys)

    async def get_all(self) -> dict[str, Any]:
        """Every user key and value, read at one instant."""
        values = await self._store.get_values(self._scope)
        return {key: json.loads(text) for key, text in values.items()}

    async def clear(self) -> int:
        """Delete every user key in one step; task state and scratchpad are kept.

        Returns:
            How many keys were deleted.
        """
        return await self._store.clear_values(self._scope)

    # --- task state -------------------------------------------------------------
    def _encode_task_field(self, name: str, value: Any) -> str:
        if isinstance(value, datetime):
            value = value.isoformat()
        return encode_value(f"task_state.{name}", value, self._max_value_bytes)

    @staticmethod
    def _decode_task(fields: dict[str, str]) -> TaskState:
        values: dict[str, Any] = {}
        for name in _TASK_FIELDS:
            if name not in fields:
                continue
            value = json.loads(fields[name])
            if name in _DATETIME_FIELDS and isinstance(value, str):
                value = datetime.fromisoformat(value)
            values[name] = value
        return TaskState(**values)

    async def set_task_state(self, state: TaskState) -> None:
        """Replace the task state (``updated_at`` is set to now; ``state`` is not changed).

        Raises:
            ValidationError: ``state`` is not a TaskState or a field is not
                JSON-encodable (field ``task_state.<name>``).
        """
        if not isinstance(state, TaskState):
            raise ValidationError("task_state", f"must be a TaskState, not {type(state).__name__}")
        if not isinstance(state.task_id, str) or not state.task_id:
            raise ValidationError("task_state.task_id", "must be a non-empty string")
        if not isinstance(state.context, dict):
            raise ValidationError("task_state.context", "must be a dict")
        stored = dataclasses.replace(
            state,
            progress_percent=self._check_progress(
                state.progress_percent, "task_state.progress_percent"
            ),
            updated_at=_now(),
        )
        fields = {
            name: self._encode_task_field(name, getattr(stored, name)) for name in _TASK_FIELDS
        }
        await self._store.set_task(self._scope, fields, self._limits)

    async def get_task_state(self) -> TaskState | None:
        """The current task state, or None."""
        fields = await self._store.get_task(self._scope)
        return None if fields is None else self._decode_task(fields)

    @staticmethod
    def _check_progress(value: object, field: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValidationError(field, "must be a number")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValidationError(field, "must be finite")
        return float(min(100, max(0, value)))

    async def update_task_progress(
        self,
        current_step: int | None = None,
        progress_percent: float | None = None,
        status: str | None = None,
    ) -> TaskState | None:
        """Update some progress fields of the task state in one step.

        Only the given fields are written (plus ``updated_at``), so concurrent
        updates of different fields never undo each other. ``progress_percent``
        is clamped to 0..100.

        Returns:
            The whole updated TaskState, or None when no task state is set.
        """
        fields: dict[str, str] = {}
        if current_step is not None:
            if isinstance(current_step, bool) or not isinstance(current_step, int):
                raise ValidationError("current_step", "must be an integer")
            fields["current_step"] = json.dumps(current_step)
        if progress_percent is not None:
            progress = self._check_progress(progress_percent, "progress_percent")
            fields["progress_percent"] = json.dumps(progress)
        if status is not None:
            if not isinstance(status, str):
                raise ValidationError("status", "must be a string")
            fields["status"] = encode_value("status", status, self._max_value_bytes)
        fields["updated_at"] = json.dumps(_now().isoformat())
        updated = await self._store.update_task(self._scope, fields, self._limits)
        return None if updated is None else self._decode_task(updated)

    # --- scratchpad -------------------------------------------------------------
    async def append_scratchpad(self, content: str) -> None:
        """Append a note to the scratchpad in one step.

        The scratchpad keeps the newest ``scratchpad_max_entries`` entries.

        Raises:
            ValidationError: ``content`` is not a string, holds NUL or lone
                surrogates, or exceeds ``working_memory_max_value_bytes``.
        """
        text = encode_scratchpad_entry(content, _now().isoformat(), self._max_value_bytes)
        await self._store.append_scratchpad(self._scope, text, self._limits)

    async def get_scratchpad(self) -> list[str]:
        """Scratchpad contents, oldest first."""
        entries = await self._store.get_scratchpad(self._scope)
        return [json.loads(text)["content"] for text in entries]

    async def get_scratchpad_with_timestamps(self) -> list[dict[str, Any]]:
        """Scratchpad entries as ``{"content", "timestamp"}`` dicts (ISO 8601), oldest first."""
        return [json.loads(text) for text in await self._store.get_scratchpad(self._scope)]

    async def clear_scratchpad(self) -> int:
        """Empty the scratchpad; returns how many entries it held."""
        return await self._store.clear_scratchpad(self._scope)

    # --- checkpoints ------------------------------------------------------------
    def _repository(self) -> CheckpointRepository:
        if self._checkpoints is None:
            raise WorkingMemoryError(
                "durable checkpoints need a database: build WorkingMemory with "
                "checkpoints=<CheckpointRepository> (MemoryService.working does this)"
            )
        return self._checkpoints

    async def create_checkpoint(self, description: str = "") -> str:
        """Snapshot the whole session (user keys, task state, scratchpad) durably.

        The snapshot is read in one atomic step, then stored in PostgreSQL.
        User keys keep the TTL they had left at this moment.

        Returns:
            The checkpoint id (a UUID string).
        """
        repository = self._repository()
        if not isinstance(description, str):
            raise ValidationError("description", "must be a string")
        check_text("description", description)
        snapshot = await self._store.snapshot(self._scope)
        data = {
            "format": CHECKPOINT_FORMAT,
            "values": {key: json.loads(text) for key, (text, _) in snapshot.values.items()},
            "ttl_ms": {key: ttl for key, (_, ttl) in snapshot.values.items() if ttl is not None},
            "task_state": None
            if snapshot.task is None
            else {name: json.loads(text) for name, text in snapshot.task.items()},
            "scratchpad": [json.loads(text) for text in snapshot.scratchpad],
        }
        checkpoint = await repository.create(self._scope, data, description=description)
        return str(checkpoint.id)

    async def _load_checkpoint(self, checkpoint_id: str) -> Checkpoint:
        # The tenant narrows the lookup (and is required under row-level security).
        checkpoint = await self._repository().get(
            _parse_checkpoint_id(checkpoint_id), tenant=self._scope.tenant
        )
        if checkpoint.scope != self._scope:
            # Another session's checkpoint is treated as absent: ids alone must
            # not let one session read or overwrite another's state.
            raise NotFoundError(f"checkpoint {checkpoint_id} not found in this session")
        return checkpoint

    def _snapshot_from(self, data: Any) -> SessionSnapshot:
        """Check and encode checkpoint data (written by :meth:`create_checkpoint`)."""
        if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
            raise WorkingMemoryError("the checkpoint data is not in a format this version reads")
        values_in = data.get("values") or {}
        ttls = data.get("ttl_ms") or {}
        task_in = data.get("task_state")
        scratchpad_in = data.get("scratchpad") or []
        if not (
            isinstance(values_in, dict)
            and isinstance(ttls, dict)
            and (task_in is None or isinstance(task_in, dict))
            and isinstance(scratchpad_in, list)
        ):
            raise WorkingMemoryError("the checkpoint data is malformed")
        if len(values_in) > self._limits.max_keys:
            raise ValidationError(
                "checkpoint",
                f"holds {len(values_in)} keys, over working_memory_max_keys "
                f"({self._limits.max_keys})",
            )
        values: dict[str, tuple[str, int | None]] = {}
        for key, value in values_in.items():
            validate_key(key)
            ttl = ttls.get(key)
            if ttl is not None and (
                isinstance(ttl, bool) or not isinstance(ttl, int) or ttl > MAX_DURATION_MS
            ):
                raise WorkingMemoryError("the checkpoint data is malformed (ttl_ms)")
            values[key] = (self._encode_value(value), None if ttl is None else max(1, ttl))
        task = (
            None
            if task_in is None
            else {
                name: encode_value(f"task_state.{name}", value, self._max_value_bytes)
                for name, value in task_in.items()
                if name in _TASK_FIELDS
            }
        )
        scratchpad = [
            encode_value("content", entry, self._max_value_bytes) for entry in scratchpad_in
        ]
        return SessionSnapshot(values=values, task=task, scratchpad=scratchpad)

    async def restore_checkpoint(self, checkpoint_id: str) -> None:
        """Replace the whole session state with a checkpoint, in one atomic step.

        A concurrent reader sees either the state before or the restored
        state, never a mix.

        Raises:
            NotFoundError: No such checkpoint in this session (or a malformed id).
        """
        checkpoint = await self._load_checkpoint(checkpoint_id)
        snapshot = self._snapshot_from(checkpoint.data)
        await self._store.restore(self._scope, snapshot, self._limits)

    async def list_checkpoints(self, limit: int = 100) -> list[dict[str, Any]]:
        """The session's checkpoints, newest first: ``{"id", "description", "created_at"}``."""
        checkpoints = await self._repository().list(self._scope, limit=limit)
        return [
            {
                "id": str(checkpoint.id),
                "description": checkpoint.description,
                "created_at": checkpoint.created_at.isoformat(),
            }
            for checkpoint in checkpoints
        ]

    async def delete_checkpoint(self, checkpoint_id: str) -> bool:
        """Delete one of this session's checkpoints; True when it existed."""
        repository = self._repository()
        try:
            await self._load_checkpoint(checkpoint_id)
        except NotFoundError:
            return False
        return await repository.delete(
            _parse_checkpoint_id(checkpoint_id), tenant=self._scope.tenant
        )

    # --- health and lifecycle -----------------------------------------------------
    async def is_healthy(self) -> bool:
        """True when the store answers."""
        return await self._store.ping()

    async def get_stats(self) -> dict[str, Any]:
        """Counts describing the session (read in one step)."""
        stats = await self._store.stats(self._scope)
        return {
            "scope": self._scope.as_dict(),
            "backend": self._store.backend,
            "using_fallback": self._store.using_fallback,
            "user_keys": stats.user_keys,
            "scratchpad_entries": stats.scratchpad_entries,
            "has_task_state": stats.has_task_state,
            "created_at": stats.created_at,
        }

    async def close(self) -> None:
        """Close the store if this object opened it (``for_session`` without ``store``)."""
        if self._owns_store:
            await self._store.close()

    async def __aenter__(self) -> WorkingMemory:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
