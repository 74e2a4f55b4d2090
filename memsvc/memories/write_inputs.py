"""What a write stores, checked before anything is sent: one memory's fields, or a batch's items."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from memsvc.core.errors import ValidationError
from memsvc.core.ids import new_id, parse_id
from memsvc.core.settings import Settings
from memsvc.core.time_limits import validate_time
from memsvc.core.validation import (
    validate_content,
    validate_importance,
    validate_metadata,
    validate_ttl,
)
from memsvc.memories.embedding_space import EmbeddingSpace

# A memory's checked fields: content, its fingerprint, metadata (JSON text),
# importance, and TTL in seconds (None: never expires).
Fields = tuple[str, str, str, float, float | None]
# A batch's items as parallel lists: ids, contents, fingerprints, metadata,
# embeddings (None where the embedder computes them), importances, TTLs,
# valid_from (None: the transaction's time), pinned flags.
Items = tuple[
    list[uuid.UUID],
    list[str],
    list[str],
    list[str],
    list[Any],
    list[float],
    list[float | None],
    list[datetime | None],
    list[bool],
]

ITEM_FIELDS = frozenset(
    {"content", "embedding", "metadata", "importance", "ttl", "id", "valid_from", "pinned"}
)


def validate_pinned(value: object, field: str = "pinned") -> bool:
    """``pinned`` is True or False (never forgotten when True)."""
    if not isinstance(value, bool):
        raise ValidationError(field, "must be True or False")
    return value


def content_hash(content: str) -> str:
    """The ``sha256:<hex>`` fingerprint deduplication uses."""
    return "sha256:" + hashlib.sha256(content.encode("utf-8")).hexdigest()


def prepare(
    settings: Settings, content: object, metadata: object, importance: object, ttl: object
) -> Fields:
    """One memory's fields, checked."""
    text = validate_content(content, settings.max_content_bytes)
    meta = validate_metadata(metadata, settings.max_metadata_bytes)
    return text, content_hash(text), meta, validate_importance(importance), validate_ttl(ttl)


def prepare_update(
    settings: Settings,
    content: object,
    metadata: object,
    importance: object,
    expected_version: object,
) -> tuple[str | None, str | None, str | None, float | None]:
    """An update's content, its fingerprint, metadata and importance, checked (None: unchanged)."""
    if expected_version is not None and (
        isinstance(expected_version, bool) or not isinstance(expected_version, int)
    ):
        raise ValidationError("expected_version", "must be an integer")
    text = digest = None
    if content is not None:
        text = validate_content(content, settings.max_content_bytes)
        digest = content_hash(text)
    meta = None if metadata is None else validate_metadata(metadata, settings.max_metadata_bytes)
    weight = None if importance is None else validate_importance(importance)
    return text, digest, meta, weight


def prepare_items(
    settings: Settings, space: EmbeddingSpace, items: Iterable[str | Mapping[str, Any]]
) -> Items:
    """A batch's items (strings, or mappings of :data:`ITEM_FIELDS`), checked.

    A bad item is a ValidationError naming it (``items[3].metadata``).
    """
    ids: list[uuid.UUID] = []
    texts: list[str] = []
    digests: list[str] = []
    metas: list[str] = []
    vectors: list[Any] = []
    weights: list[float] = []
    ttls: list[float | None] = []
    starts: list[datetime | None] = []
    pins: list[bool] = []
    for i, item in enumerate(items):
        spec: Mapping[str, Any] = {"content": item} if isinstance(item, str) else item
        if not isinstance(spec, Mapping) or "content" not in spec:
            raise ValidationError(f"items[{i}]", "must be a string or a mapping with content")
        unknown = set(spec) - ITEM_FIELDS
        if unknown:
            raise ValidationError(f"items[{i}]", f"unknown fields {sorted(unknown)}")
        try:
            text, digest, meta, weight, ttl_s = prepare(
                settings,
                spec["content"],
                spec.get("metadata"),
                spec.get("importance", 0.5),
                spec.get("ttl"),
            )
            raw_id = spec.get("id")
            ids.append(new_id() if raw_id is None else parse_id("id", raw_id))
            embedding = spec.get("embedding")
            vectors.append(None if embedding is None else space.vector(embedding))
            start = spec.get("valid_from")
            starts.append(None if start is None else validate_time(start, "valid_from"))
            pins.append(validate_pinned(spec.get("pinned", False)))
        except ValidationError as exc:
            raise ValidationError(f"items[{i}].{exc.field}", exc.reason) from exc
        texts.append(text)
        digests.append(digest)
        metas.append(meta)
        weights.append(weight)
        ttls.append(ttl_s)
    return ids, texts, digests, metas, vectors, weights, ttls, starts, pins
