"""The interchange format of ``memsvc export`` / ``memsvc import``: one JSON object per line.

Every line has a ``type``:

- ``header`` (first line of an export): ``format``, ``version``,
  ``embedding_dim``, ``vector_type``, ``distance``, ``exported_at``;
- ``memory``: ``id``, ``tenant``, ``project``, ``agent``, ``session``,
  ``key``, ``content``, ``content_hash``, ``metadata``, ``embedding`` (a
  list of floats, or null), ``importance``, ``version``, ``created_at``,
  ``updated_at``, ``expires_at``, ``access_count``, ``last_accessed_at``,
  ``valid_from``, ``valid_to``, ``supersedes`` (a list of ids),
  ``superseded_by`` (valid time: absent or null in older files);
  and when set ``pinned`` (true), ``forgotten_at``, ``reinforced_count``,
  ``last_reinforced_at``, ``content_unique`` (false: stored with
  ``dedupe="off"``);
- ``assembly``: ``id``, the scope, ``name``, ``description``, ``metadata``,
  ``member_ids``, ``version``, ``created_at``, ``updated_at`` (counts and
  centroid are derived from the members on import);
- ``checkpoint``: ``id``, the scope (with a session), ``description``,
  ``data``, ``created_at``;
- ``store_item`` (a LangGraph store item): ``tenant``, ``namespace`` (a
  list of labels), ``key``, ``value``, ``created_at``, ``updated_at``,
  ``expires_at``, ``ttl_minutes``, ``vectors`` (field path -> embedding);
- ``trailer`` (last line of an export): ``lines`` and ``sha256`` of the
  lines before it (see :mod:`memsvc.transfer.trailer`).

Timestamps are ISO 8601 (naive ones are taken as UTC; numbers as Unix
seconds). Floats are written with 9 significant digits, which round-trips
float32 (and halfvec) exactly. A missing ``id`` is derived deterministically
(uuid5) from the scope and content (memories), name (assemblies), so
importing the same file twice never duplicates rows.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from memsvc.assemblies.repository import MAX_DESCRIPTION_BYTES as ASSEMBLY_DESCRIPTION_BYTES
from memsvc.assemblies.repository import MAX_NAME_LENGTH
from memsvc.checkpoints.repository import MAX_DESCRIPTION_BYTES as CHECKPOINT_DESCRIPTION_BYTES
from memsvc.core.errors import ValidationError
from memsvc.core.ids import parse_id
from memsvc.core.models import real_value
from memsvc.core.scope import Scope, validate_id
from memsvc.core.settings import Settings
from memsvc.core.time_limits import RANGE_TEXT, validate_duration, validate_time
from memsvc.core.validation import (
    VECTOR_LIMITS,
    check_text,
    encode_json,
    validate_content,
    validate_embedding,
    validate_importance,
    validate_metadata,
    validate_text,
)
from memsvc.memories.repository import KEY_MAX_LENGTH, content_hash

FORMAT = "memsvc-export"
FORMAT_VERSION = 1

# Namespace of the uuid5 ids memsvc derives for rows that came without a UUID.
ID_NAMESPACE = uuid.UUID("4f1c7d52-8a3e-5b9c-9d2e-6d656d737663")

Vector = np.ndarray[Any, Any]

# A top-level ``embedding`` array that ends the line (as exports write it):
# after its ``]`` only the outer object's ``}`` may follow, so it cannot be
# a nested key (inside a JSON string the quotes would be escaped).
_TRAILING_EMBEDDING = re.compile(rb'"embedding"\s*:\s*\[([^\]]*)\]\s*}\s*$')
_NUMBER_BYTES = b"0123456789.,-+eE \t"
# An element of at least 1e-5 in magnitude (no negative exponent): a vector
# holding one has a length once stored, even as halfvec.
_CLEARLY_NONZERO = re.compile(
    rb"(?:^|,)\s*[-+]?(?:[1-9][0-9]*\.?[0-9]*|0*\.0{0,4}[1-9][0-9]*)(?:[eE]\+?[0-9]+)?\s*(?:,|$)"
)


def derived_id(*parts: object) -> uuid.UUID:
    """A deterministic id (uuid5) for a row identified by ``parts``."""
    return uuid.uuid5(ID_NAMESPACE, json.dumps([str(p) if p is not None else None for p in parts]))


@dataclass(slots=True)
class MemoryRecord:
    """A memory ready to load."""

    id: uuid.UUID
    scope: Scope
    content: str
    content_hash: str
    metadata: str  # JSON text
    # An array, or (imports) the vector's numbers as the line has them
    # (b"x,y,..."), checked for shape here and parsed a batch at a time by
    # the loader (see parse_vector_texts).
    embedding: Vector | bytes | None
    importance: float = 0.5
    key: str | None = None
    version: int = 1
    created_at: datetime | None = None
    updated_at: datetime | None = None
    expires_at: datetime | None = None
    access_count: int = 0
    last_accessed_at: datetime | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    supersedes: list[uuid.UUID] | None = None
    superseded_by: uuid.UUID | None = None
    pinned: bool = False
    forgotten_at: datetime | None = None
    reinforced_count: int = 0
    last_reinforced_at: datetime | None = None
    content_unique: bool = True


@dataclass(slots=True)
class AssemblyRecord:
    """An assembly and its member ids, ready to load."""

    id: uuid.UUID
    scope: Scope
    name: str
    description: str = ""
    metadata: str = "{}"
    member_ids: list[uuid.UUID] = field(default_factory=list)
    version: int = 1
    created_at: datetime | None = None
    updated_at: datetime | None = None
    # How the input named members whose id was derived (legacy ids), for reports.
    member_labels: dict[uuid.UUID, str] = field(default_factory=dict)


@dataclass(slots=True)
class CheckpointRecord:
    """A session checkpoint ready to load."""

    id: uuid.UUID
    scope: Scope
    data: str  # JSON text
    description: str = ""
    created_at: datetime | None = None


@dataclass(slots=True)
class StoreItemRecord:
    """A LangGraph store item with the embeddings of its fields, ready to load."""

    tenant: str
    prefix: str  # the namespace's labels joined with "."
    key: str
    value: str  # JSON text
    vectors: dict[str, Vector] = field(default_factory=dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    expires_at: datetime | None = None
    ttl_minutes: float | None = None


Record = MemoryRecord | AssemblyRecord | CheckpointRecord | StoreItemRecord


# ----------------------------------------------------------------- reading


def parse_time(field_name: str, value: object) -> datetime | None:
    """An ISO 8601 string or Unix seconds as an aware datetime (naive means UTC)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValidationError(field_name, "must be an ISO 8601 timestamp or Unix seconds")
    if isinstance(value, int | float):
        try:
            moment = datetime.fromtimestamp(value, UTC)
        except (OverflowError, OSError, ValueError) as exc:
            raise ValidationError(field_name, f"must be within {RANGE_TEXT}") from exc
    elif isinstance(value, str):
        text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
        try:
            moment = datetime.fromisoformat(text)
        except ValueError as exc:
            raise ValidationError(field_name, f"is not an ISO 8601 timestamp: {value!r}") from exc
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
    else:
        raise ValidationError(field_name, "must be an ISO 8601 timestamp or Unix seconds")
    # Within what both PostgreSQL and Python represent (see memsvc.core.time_limits).
    return validate_time(moment, field_name)


def _int(field_name: str, value: object, default: int, minimum: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValidationError(field_name, f"must be an integer >= {minimum}")
    if value > 2**31 - 1 and field_name == "version":
        raise ValidationError(field_name, "is too large")
    return value


def scope_of(obj: Mapping[str, Any]) -> Scope:
    """The scope named by an object's ``tenant``/``project``/``agent``/``session``."""
    return Scope(
        obj.get("tenant", "default"), obj.get("project"), obj.get("agent"), obj.get("session")
    )


def check_key(value: object) -> str | None:
    """A keyed memory's key (None for none)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValidationError("key", "must be a non-empty string")
    check_text("key", value)
    if len(value) > KEY_MAX_LENGTH:
        raise ValidationError("key", f"must be at most {KEY_MAX_LENGTH} characters")
    return value


def check_name(value: object) -> str:
    """An assembly name."""
    if not isinstance(value, str) or not value:
        raise ValidationError("name", "must be a non-empty string")
    check_text("name", value)
    if len(value) > MAX_NAME_LENGTH:
        raise ValidationError("name", f"must be at most {MAX_NAME_LENGTH} characters")
    return value


def split_embedding(
    raw: bytes, dim: int, distance: str | None = None
) -> tuple[bytes, bytes] | None:
    """Cut a line's trailing ``"embedding": [...]`` out as its numbers, for speed.

    Parsing 384 floats per line with ``json`` dominates an import; the text
    is parsed later, a batch of vectors at a time, by
    :func:`parse_vector_texts`. Returns the line with ``null`` in place of
    the array, and the array's numbers (``b"x,y,..."``), when it holds exactly
    ``dim`` plain numbers (and, under ``distance="cosine"``, one of them is
    clearly not zero); otherwise None (the caller parses the whole line, and
    validation names the problem, a zero vector included).
    """
    match = _TRAILING_EMBEDDING.search(raw)
    if match is None:
        return None
    numbers = match.group(1)
    if numbers.count(b",") != dim - 1 or numbers.translate(None, _NUMBER_BYTES):
        return None
    if distance == "cosine" and _CLEARLY_NONZERO.search(numbers) is None:
        return None
    start, end = match.span(1)
    rest = raw[: start - 1] + b"null" + raw[end + 1 :]
    return rest, numbers


def parse_vector_texts(
    texts: list[bytes], dim: int, vector_type: str, distance: str | None = None
) -> list[Vector | None]:
    """Parse vectors' numbers (``b"x,y,..."``, from :func:`split_embedding`), a batch at once.

    Each vector comes back as :func:`memsvc.core.validation.validate_embedding`
    would return it (float64 values, then float32: the same numbers as
    ``json`` gives), or None where that check has something to say (a value
    out of range, a zero vector under cosine, text numpy cannot read): the
    caller runs the check on that one for its reason. numpy's C reader of
    the whole batch costs about half of what PostgreSQL's ``vector`` input
    spends on the same text (which then has nothing to parse: rows go by
    binary COPY).
    """
    if not texts:
        return []
    try:
        matrix = np.loadtxt(
            texts,
            delimiter=",",
            dtype=np.float64,
            comments=None,
            quotechar=None,
            ndmin=2,
        )
    except ValueError:
        matrix = None
    if matrix is None or matrix.shape != (len(texts), dim):
        if len(texts) == 1:
            return [None]
        # One text numpy cannot read spoils the batch: read them one by one.
        return [parse_vector_texts([text], dim, vector_type, distance)[0] for text in texts]
    # As validate_embedding: NaN fails the comparison, infinity exceeds the
    # limit. Rows out of range overflow in the casts below: they are refused.
    ok = np.abs(matrix).max(axis=1) <= VECTOR_LIMITS[vector_type]
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        vectors = matrix.astype(np.float32)
        if distance == "cosine":
            # pgvector sums the squares in single precision, of the stored values.
            stored = vectors
            if vector_type == "halfvec":
                stored = vectors.astype(np.float16).astype(np.float32)
            ok &= np.einsum("ij,ij->i", stored, stored) > 0.0
    return [vector if good else None for vector, good in zip(vectors, ok.tolist(), strict=True)]


def memory_from_json(obj: Mapping[str, Any], settings: Settings) -> MemoryRecord:
    """Validate a ``memory`` object; raises ValidationError naming the field."""
    scope = scope_of(obj)
    text = validate_content(obj.get("content"), settings.max_content_bytes)
    digest = content_hash(text)
    given_hash = obj.get("content_hash")
    if given_hash is not None and given_hash != digest:
        raise ValidationError("content_hash", "does not match the content (sha256)")
    key = check_key(obj.get("key"))
    raw_id = obj.get("id")
    memory_id = (
        derived_id("memory", *scope.levels, key, digest)
        if raw_id is None
        else parse_id("id", raw_id)
    )
    embedding = obj.get("embedding")
    vector = (
        None
        if embedding is None
        else validate_embedding(
            embedding, settings.embedding_dim, settings.vector_type, distance=settings.distance
        )
    )
    return MemoryRecord(
        id=memory_id,
        scope=scope,
        content=text,
        content_hash=digest,
        metadata=validate_metadata(obj.get("metadata"), settings.max_metadata_bytes),
        embedding=vector,
        importance=validate_importance(obj.get("importance", 0.5)),
        key=key,
        version=_int("version", obj.get("version"), 1, 1),
        created_at=parse_time("created_at", obj.get("created_at")),
        updated_at=parse_time("updated_at", obj.get("updated_at")),
        expires_at=parse_time("expires_at", obj.get("expires_at")),
        access_count=_int("access_count", obj.get("access_count"), 0, 0),
        last_accessed_at=parse_time("last_accessed_at", obj.get("last_accessed_at")),
        pinned=_flag("pinned", obj.get("pinned", False)),
        forgotten_at=parse_time("forgotten_at", obj.get("forgotten_at")),
        reinforced_count=_int("reinforced_count", obj.get("reinforced_count"), 0, 0),
        last_reinforced_at=parse_time("last_reinforced_at", obj.get("last_reinforced_at")),
        content_unique=_flag("content_unique", obj.get("content_unique", True)),
        **_validity_fields(obj),
    )


def _flag(field: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValidationError(field, "must be true or false")
    return value


def _validity_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A memory line's valid time, checked (``valid_to`` after ``valid_from``)."""
    valid_from = parse_time("valid_from", obj.get("valid_from"))
    valid_to = parse_time("valid_to", obj.get("valid_to"))
    start = valid_from or parse_time("created_at", obj.get("created_at"))
    if valid_to is not None and start is not None and valid_to <= start:
        raise ValidationError("valid_to", "must be after valid_from")
    links = obj.get("supersedes")
    if links is not None and not isinstance(links, list):
        raise ValidationError("supersedes", "must be a list of memory ids")
    successor = obj.get("superseded_by")
    return {
        "valid_from": valid_from,
        "valid_to": valid_to,
        "supersedes": None
        if not links
        else [parse_id(f"supersedes[{i}]", value) for i, value in enumerate(links)],
        "superseded_by": None if successor is None else parse_id("superseded_by", successor),
    }


def assembly_from_json(obj: Mapping[str, Any], settings: Settings) -> AssemblyRecord:
    """Validate an ``assembly`` object; raises ValidationError naming the field."""
    scope = scope_of(obj)
    name = check_name(obj.get("name"))
    raw_id = obj.get("id")
    members = obj.get("member_ids", [])
    if not isinstance(members, list):
        raise ValidationError("member_ids", "must be a list of memory ids")
    return AssemblyRecord(
        id=(
            derived_id("assembly", *scope.levels, name)
            if raw_id is None
            else parse_id("id", raw_id)
        ),
        scope=scope,
        name=name,
        description=validate_text(
            obj.get("description", ""), ASSEMBLY_DESCRIPTION_BYTES, "description"
        ),
        metadata=validate_metadata(obj.get("metadata"), settings.max_metadata_bytes),
        member_ids=list(
            dict.fromkeys(parse_id(f"member_ids[{i}]", value) for i, value in enumerate(members))
        ),
        version=_int("version", obj.get("version"), 1, 1),
        created_at=parse_time("created_at", obj.get("created_at")),
        updated_at=parse_time("updated_at", obj.get("updated_at")),
    )


def checkpoint_from_json(obj: Mapping[str, Any], settings: Settings) -> CheckpointRecord:
    """Validate a ``checkpoint`` object; raises ValidationError naming the field."""
    scope = scope_of(obj)
    if scope.session is None:
        raise ValidationError("session", "checkpoints belong to a session: set one")
    if "data" not in obj:
        raise ValidationError("data", "is missing")
    raw_id = obj.get("id")
    if raw_id is None:
        raise ValidationError("id", "is missing")
    return CheckpointRecord(
        id=parse_id("id", raw_id),
        scope=scope,
        data=encode_json("data", obj["data"], settings.max_checkpoint_bytes),
        description=validate_text(
            obj.get("description", ""), CHECKPOINT_DESCRIPTION_BYTES, "description"
        ),
        created_at=parse_time("created_at", obj.get("created_at")),
    )


def store_item_from_json(obj: Mapping[str, Any], settings: Settings) -> StoreItemRecord:
    """Validate a ``store_item`` object; raises ValidationError naming the field."""
    tenant = validate_id("tenant", obj.get("tenant"))
    namespace = obj.get("namespace")
    if (
        not isinstance(namespace, list)
        or not namespace
        or not all(isinstance(label, str) and label and "." not in label for label in namespace)
    ):
        raise ValidationError("namespace", "must be a list of non-empty labels without '.'")
    for label in namespace:
        check_text("namespace", label)
    key = obj.get("key")
    if not isinstance(key, str):
        raise ValidationError("key", "must be a string")
    check_text("key", key)
    value = obj.get("value")
    if not isinstance(value, Mapping):
        raise ValidationError("value", "must be a JSON object")
    ttl = obj.get("ttl_minutes")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float)):
        raise ValidationError("ttl_minutes", "must be a positive number or null")
    if ttl is not None:
        ttl = validate_duration(ttl, "ttl_minutes", "minutes")
    raw_vectors = obj.get("vectors") or {}
    if not isinstance(raw_vectors, Mapping):
        raise ValidationError("vectors", "must map field paths to embeddings")
    vectors = {
        str(path): validate_embedding(
            vector, settings.embedding_dim, settings.vector_type, f"vectors.{path}"
        )
        for path, vector in raw_vectors.items()
    }
    return StoreItemRecord(
        tenant=tenant,
        prefix=".".join(namespace),
        key=key,
        value=encode_json("value", value, settings.max_metadata_bytes),
        vectors=vectors,
        created_at=parse_time("created_at", obj.get("created_at")),
        updated_at=parse_time("updated_at", obj.get("updated_at")),
        expires_at=parse_time("expires_at", obj.get("expires_at")),
        ttl_minutes=None if ttl is None else float(ttl),
    )


def record_from_json(obj: object, settings: Settings) -> Record | None:
    """The record a parsed line describes; None for a header. ValidationError if bad."""
    if not isinstance(obj, Mapping):
        raise ValidationError("line", f"must be a JSON object, not {type(obj).__name__}")
    kind = obj.get("type")
    if kind == "memory":
        return memory_from_json(obj, settings)
    if kind == "assembly":
        return assembly_from_json(obj, settings)
    if kind == "checkpoint":
        return checkpoint_from_json(obj, settings)
    if kind == "store_item":
        return store_item_from_json(obj, settings)
    if kind == "header":
        check_header(obj, settings)
        return None
    raise ValidationError("type", "must be memory, assembly, checkpoint, store_item or header")


def check_header(obj: Mapping[str, Any], settings: Settings) -> None:
    """Refuse an export written with other vector settings than this database's."""
    if obj.get("format") != FORMAT:
        raise ValidationError("format", f"must be {FORMAT!r}")
    version = obj.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValidationError("version", f"must be at most {FORMAT_VERSION}")
    dim = obj.get("embedding_dim")
    if dim is not None and dim != settings.embedding_dim:
        raise ValidationError(
            "embedding_dim",
            f"the file has {dim}-d embeddings, this database {settings.embedding_dim}",
        )


# ----------------------------------------------------------------- writing


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


@functools.cache
def _vector_template(length: int) -> str:
    # "[%.9g,...]": one %-format of a tuple formats a vector in about two
    # thirds of the time a join over per-element f-strings takes (same text:
    # both are C's %.9g).
    return "[" + ",".join(["%.9g"] * length) + "]"


def _floats(vector: Vector | None) -> str:
    if vector is None:
        return "null"
    values = vector.tolist()
    return _vector_template(len(values)) % tuple(values)


def _dumps(
    obj: dict[str, Any], vector_field: str | None = None, vector: Vector | None = None
) -> str:
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    if vector_field is None:
        return text
    # The vector goes in last as pre-formatted text: 9 significant digits
    # round-trip float32 exactly and write about half the characters of repr.
    return f'{text[:-1]},"{vector_field}":{_floats(vector)}}}'


def header_line(settings: Settings, exported_at: datetime) -> str:
    """The first line of an export."""
    return _dumps(
        {
            "type": "header",
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "embedding_dim": settings.embedding_dim,
            "vector_type": settings.vector_type,
            "distance": settings.distance,
            "exported_at": exported_at.isoformat(),
        }
    )


def _scope_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "tenant": row["tenant_id"],
        "project": row["project_id"],
        "agent": row["agent_id"],
        "session": row["session_id"],
    }


def _json_value(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def memory_line(row: Mapping[str, Any]) -> str:
    """A ``memory`` line from a ``memories`` row."""
    obj = {
        "type": "memory",
        "id": str(row["id"]),
        **_scope_fields(row),
        "key": row["key"],
        "content": row["content"],
        "content_hash": row["content_hash"],
        "metadata": _json_value(row["metadata"]),
        "importance": real_value(row["importance"]),
        "version": row["version"],
        "created_at": _time(row["created_at"]),
        "updated_at": _time(row["updated_at"]),
        "expires_at": _time(row["expires_at"]),
        "access_count": row["access_count"],
        "last_accessed_at": _time(row["last_accessed_at"]),
        "valid_from": _time(row["valid_from"] or row["created_at"]),
        "valid_to": _time(row["valid_to"]),
        "supersedes": [str(i) for i in row["supersedes"] or ()],
        "superseded_by": None if row["superseded_by"] is None else str(row["superseded_by"]),
    }
    # Written only when set, so lines of memories never pinned or forgotten
    # read as before.
    if row["pinned"]:
        obj["pinned"] = True
    if row["forgotten_at"] is not None:
        obj["forgotten_at"] = _time(row["forgotten_at"])
    if row["reinforced_count"]:
        obj["reinforced_count"] = row["reinforced_count"]
        obj["last_reinforced_at"] = _time(row["last_reinforced_at"])
    if not row["content_unique"]:
        obj["content_unique"] = False
    return _dumps(obj, "embedding", row["embedding"])


def assembly_line(row: Mapping[str, Any]) -> str:
    """An ``assembly`` line from an ``assemblies`` row with its ``member_ids``."""
    return _dumps(
        {
            "type": "assembly",
            "id": str(row["id"]),
            **_scope_fields(row),
            "name": row["name"],
            "description": row["description"],
            "metadata": _json_value(row["metadata"]),
            "member_ids": [str(m) for m in row["member_ids"]],
            "member_count": row["member_count"],
            "version": row["version"],
            "created_at": _time(row["created_at"]),
            "updated_at": _time(row["updated_at"]),
        }
    )


def checkpoint_line(row: Mapping[str, Any]) -> str:
    """A ``checkpoint`` line from a ``session_checkpoints`` row (data as JSON text)."""
    obj = {
        "type": "checkpoint",
        "id": str(row["id"]),
        **_scope_fields(row),
        "description": row["description"],
        "size_bytes": row["size_bytes"],
        "created_at": _time(row["created_at"]),
    }
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    # data arrives as JSON text (the export casts it): spliced in unparsed.
    return f'{text[:-1]},"data":{row["data"]}}}'


def store_item_line(row: Mapping[str, Any]) -> str:
    """A ``store_item`` line from a ``langgraph_store_items`` row with its ``vectors``.

    ``vectors`` arrives as JSON text (pgvector's text form is a JSON array)
    and is spliced in unparsed.
    """
    obj = {
        "type": "store_item",
        "tenant": row["tenant_id"],
        "namespace": row["prefix"].split("."),
        "key": row["key"],
        "value": _json_value(row["value"]),
        "created_at": _time(row["created_at"]),
        "updated_at": _time(row["updated_at"]),
        "expires_at": _time(row["expires_at"]),
        "ttl_minutes": row["ttl_minutes"],
    }
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return f'{text[:-1]},"vectors":{row["vectors"]}}}'
