"""Valid time: when a memory's fact held, supersession, invalidation, reads by validity.

Every memory has ``valid_from`` (by default the writing transaction's time;
NULL in rows written before valid time, read as ``created_at``) and
``valid_to`` (NULL while the fact holds). Transaction time stays what it was
(``created_at``, history, ``as_of`` reads): valid time says when the fact
held in the world, transaction time when memsvc learned it.

Closing validity (a supersession, an invalidation) locks the memories in id
order and checks, under the lock, that each is live, still valid (a memory
already superseded or invalidated is a ConflictError: of racing writers
exactly one wins) and, for a supersession, in the new memory's exact scope
and not keyed (another tenant's memory is not found at all). The moment
must come after each memory's ``valid_from`` (a ValidationError naming the
argument). Each closed memory gets a ``superseded`` or ``invalidated``
history event, linking the successor; the new memory's ``created`` event
links its predecessors. All of it runs in one transaction with the new
memory's insert, so nothing is half written.

Reads choose by validity (:func:`check_validity`): ``valid="now"`` (the
default of search, list and count) keeps what holds now, ``valid_at=t``
what held at ``t``, ``valid="all"`` everything. With ``as_of`` (transaction
time), ``"now"`` means the ``as_of`` moment: what memsvc believed then held
then.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

import asyncpg

from memsvc.core.errors import ConflictError, NotFoundError, ValidationError
from memsvc.core.ids import parse_id
from memsvc.core.scope import Scope
from memsvc.core.time_limits import validate_time
from memsvc.memories import queries as q
from memsvc.memories import validity_queries as vq

Valid = Literal["now", "all"]
# What a read keeps: ("now", None), ("at", t) or ("all", None).
Validity = tuple[str, datetime | None]

MAX_SUPERSEDED = 1000


def check_validity(valid: object, valid_at: object) -> Validity:
    """A read's ``valid`` / ``valid_at`` arguments, checked."""
    if valid not in ("now", "all"):
        raise ValidationError("valid", "must be 'now' or 'all' (or pass valid_at)")
    if valid_at is None:
        return str(valid), None
    if valid == "all":
        raise ValidationError("valid_at", "cannot be combined with valid='all'")
    return "at", validate_time(valid_at, "valid_at")


def validity_sql(validity: Validity, add: Any) -> str:
    """The condition keeping the memories valid as asked (``add`` binds a value, returns its
    placeholder)."""
    kind, moment = validity
    if kind == "all":
        return "TRUE"
    if kind == "now":
        return q.VALID_NOW
    return q.valid_at(add(moment))


def check_optional_time(value: object, field: str) -> datetime | None:
    """A moment argument that may be None, checked."""
    return None if value is None else validate_time(value, field)


def check_predecessors(supersedes: object) -> list[uuid.UUID]:
    """``supersedes``: ids of memories, without repeats, in the order given."""
    if supersedes is None:
        return []
    if isinstance(supersedes, str | bytes) or not isinstance(supersedes, Iterable):
        raise ValidationError("supersedes", "must be a list of memory ids")
    ids = [parse_id(f"supersedes[{i}]", value) for i, value in enumerate(supersedes)]
    if len(ids) > MAX_SUPERSEDED:
        raise ValidationError("supersedes", f"at most {MAX_SUPERSEDED} memories")
    return list(dict.fromkeys(ids))


def check_expected_version(value: object) -> int | None:
    """``expected_version``: None or an int."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValidationError("expected_version", "must be an integer")
    return value


async def lock_open(
    conn: asyncpg.Connection,
    schema: str,
    ids: Sequence[uuid.UUID],
    tenant: str | None,
    *,
    successor: uuid.UUID | None,
    expected: Mapping[uuid.UUID, int | None],
) -> tuple[list[Any], bool]:
    """Lock memories whose validity is to close, and check they are there and still valid.

    Returns the rows, and whether every one of them is already superseded by
    ``successor`` (a retried supersession with the same new id: nothing to do).
    """
    rows = await conn.fetch(vq.lock_for_closing(schema, tenant is not None), list(ids), tenant)
    found: dict[uuid.UUID, Any] = {}
    for row in rows:
        if row["id"] in found:
            raise ConflictError(f"memory id {row['id']} exists in several tenants")
        found[row["id"]] = row
    for memory_id in ids:
        row = found.get(memory_id)
        if row is None or not row["live"]:
            raise NotFoundError(f"memory {memory_id} not found")
    if successor is not None and all(row["superseded_by"] == successor for row in rows):
        return rows, True
    for memory_id in ids:
        row = found[memory_id]
        if row["superseded_by"] is not None:
            raise ConflictError(
                f"memory {memory_id} is no longer valid: superseded by {row['superseded_by']}"
            )
        if row["valid_to"] is not None:
            raise ConflictError(
                f"memory {memory_id} is no longer valid: invalidated at "
                f"{row['valid_to'].isoformat()}"
            )
        wanted = expected.get(memory_id)
        if wanted is not None and row["version"] != wanted:
            raise ConflictError(
                f"memory {memory_id} is at version {row['version']}, not {wanted}"
            )
    return [found[memory_id] for memory_id in ids], False


def check_closable(
    rows: Sequence[Any], moment: datetime, field: str, scope: Scope | None
) -> None:
    """Under the lock: ``moment`` after each ``valid_from``; for a supersession (``scope``
    given), each memory in that exact scope and not keyed."""
    for row in rows:
        if scope is not None:
            if (row["project_id"], row["agent_id"], row["session_id"]) != (
                scope.project,
                scope.agent,
                scope.session,
            ):
                raise ValidationError(
                    "supersedes", f"memory {row['id']} is in another scope than the new memory"
                )
            if row["key"] is not None:
                raise ValidationError(
                    "supersedes", f"memory {row['id']} is keyed: put() replaces it"
                )
        if moment <= row["valid_from"]:
            raise ValidationError(
                field,
                f"{moment.isoformat()} must be after the valid_from of memory {row['id']} "
                f"({row['valid_from'].isoformat()})",
            )


async def close(
    conn: asyncpg.Connection,
    schema: str,
    tenant: str,
    ids: Sequence[uuid.UUID],
    moment: datetime,
    successor: uuid.UUID | None,
) -> list[Any]:
    """Close the validity of locked memories at ``moment``; their rows after the change."""
    kind = "invalidated" if successor is None else "superseded"
    return list(
        await conn.fetch(vq.close_validity(schema, kind), tenant, list(ids), moment, successor)
    )
