"""Input checks run before anything is sent to a server.

Each check raises :class:`memsvc.core.errors.ValidationError` naming the field, so
a bad call writes nothing at all.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeGuard

import numpy as np

from memsvc.core import jsontext
from memsvc.core.errors import ValidationError
from memsvc.core.scope import Scope, validate_id
from memsvc.core.time_limits import validate_duration

# Largest finite values each vector type can store.
VECTOR_LIMITS = {"vector": float(np.finfo(np.float32).max), "halfvec": 65504.0}


def check_text(field: str, value: str) -> None:
    """Reject NUL bytes and lone surrogates, which PostgreSQL text cannot hold."""
    if "\x00" in value:
        raise ValidationError(field, "must not contain NUL bytes")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(field, "must not contain lone surrogates") from exc


def validate_text(value: object, max_bytes: int, field: str) -> str:
    """Check free text (a description): a string of at most ``max_bytes`` UTF-8 bytes."""
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, not {type(value).__name__}")
    check_text(field, value)
    size = len(value.encode("utf-8"))
    if size > max_bytes:
        raise ValidationError(field, f"is {size} bytes, over the limit of {max_bytes}")
    return value


def validate_content(value: object, max_bytes: int, field: str = "content") -> str:
    """Check memory content: non-blank text of at most ``max_bytes`` UTF-8 bytes.

    Empty or whitespace-only content is refused: it has nothing to search
    for, and every blank memory of a scope would share one content hash.
    """
    text = validate_text(value, max_bytes, field)
    if not text or text.isspace():
        raise ValidationError(field, "must not be empty or only whitespace")
    return text


def validate_sequence(value: object, field: str) -> list[Any]:
    """Check a parameter that takes several items and return them as a list.

    Any collection or iterator of items is accepted (list, tuple, set,
    generator...), except the ones that would be iterated by mistake: a
    string or bytes (its characters) and a mapping (its keys).
    """
    if isinstance(value, str | bytes | bytearray | memoryview | Mapping) or not isinstance(
        value, Iterable
    ):
        raise ValidationError(
            field, f"must be a list (or other collection) of items, not {type(value).__name__}"
        )
    return list(value)


def _check_json_value(field: str, value: object, depth: int) -> None:
    if depth > 512:
        raise ValidationError(field, "is nested deeper than 512 levels")
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(field, "must not contain NaN or infinity")
        return
    if isinstance(value, str):
        check_text(field, value)
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValidationError(field, f"keys must be strings, not {type(key).__name__}")
            check_text(f"{field} key", key)
            _check_json_value(field, item, depth + 1)
        return
    if isinstance(value, list | tuple):
        for item in value:
            _check_json_value(field, item, depth + 1)
        return
    raise ValidationError(field, f"is not JSON-serializable ({type(value).__name__})")


def encode_json(field: str, value: object, max_bytes: int) -> str:
    """Validate a JSON value and return its text, bounded by ``max_bytes``."""
    _check_json_value(field, value, 0)
    text = jsontext.dumps(value)
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise ValidationError(field, f"is {size} bytes, over the limit of {max_bytes}")
    return text


def validate_metadata(value: object, max_bytes: int, field: str = "metadata") -> str:
    """Check metadata (a JSON object) and return it encoded as JSON text."""
    if value is None:
        return "{}"
    if not isinstance(value, Mapping):
        raise ValidationError(field, f"must be a mapping, not {type(value).__name__}")
    return encode_json(field, value, max_bytes)


# Element types known to be real numbers (the common ones, checked first).
_REAL_TYPES = frozenset({float, int, np.float32, np.float64, np.float16, np.int64, np.int32})


def _is_real_type(kind: type) -> bool:
    if kind in _REAL_TYPES:
        return True
    return issubclass(kind, numbers.Real) and not issubclass(kind, bool | np.bool_)


_FLOAT32 = np.dtype(np.float32)


def _is_plain_float32(
    value: object, dim: int, vector_type: str
) -> TypeGuard[np.ndarray[Any, np.dtype[np.float32]]]:
    """Whether ``value`` is the commonest embedding: a float32 array of ``dim`` values.

    Such a value needs only :func:`_has_finite_length` of
    :func:`validate_embedding`'s checks, for the ``vector`` type (whose range
    is float32's). A native float32 array's dtype is numpy's one instance of
    it: an identity test, where ``==`` converts its other side first.
    """
    return (
        type(value) is np.ndarray
        and value.dtype is _FLOAT32
        and value.shape == (dim,)
        and vector_type == "vector"
    )


def _has_finite_length(vector: np.ndarray[Any, Any]) -> bool:
    """Whether a float32 vector has no NaN or infinity and a non-zero length.

    One pass answers all three: a NaN or infinite value makes the sum of
    squares NaN or infinite too, as no length makes it 0. A vector it does
    not clear goes through :func:`validate_embedding`'s full checks, which
    name the problem (a sum can also overflow with finite values).
    """
    return 0.0 < float(vector.dot(vector)) < math.inf


def validate_embedding(
    value: object,
    dim: int,
    vector_type: str = "vector",
    field: str = "embedding",
    *,
    distance: str | None = None,
) -> np.ndarray[Any, np.dtype[np.float32]]:
    """Check an embedding and return it as a float32 array.

    An embedding is a sequence (or 1-d numpy array) of ``dim`` real numbers
    (ints or floats; not bools, not strings), finite and within the vector
    type's range. Under ``distance="cosine"`` it must also have a length:
    a zero vector (or one so small that its length is zero once stored)
    has no direction, and would score NaN against everything.
    """
    if _is_plain_float32(value, dim, vector_type):
        vector = value.copy()  # the caller may reuse its array
        if _has_finite_length(vector):
            return vector
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "fiu":
            raise ValidationError(field, f"must contain only real numbers, not {value.dtype}")
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray):
        odd = [kind for kind in set(map(type, value)) if not _is_real_type(kind)]
        if odd:
            names = ", ".join(sorted(kind.__name__ for kind in odd))
            raise ValidationError(field, f"must contain only real numbers, not {names}")
    else:
        raise ValidationError(
            field, f"must be a list of floats or a numpy array, not {type(value).__name__}"
        )
    # A float32 array (what embedders and pgvector reads produce) is checked
    # as it is: widening it to float64 first costs a copy and a pass.
    array: np.ndarray[Any, Any]
    try:
        if isinstance(value, np.ndarray) and value.dtype == np.float32:
            array = value
        else:
            array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValidationError(field, "must contain only numbers") from exc
    if array.ndim != 1:
        raise ValidationError(field, "must be one-dimensional")
    if array.shape[0] != dim:
        raise ValidationError(field, f"has {array.shape[0]} dimensions, expected {dim}")
    limit = VECTOR_LIMITS[vector_type]
    # One pass for both checks: NaN fails the comparison, infinity exceeds the limit.
    if not np.abs(array).max(initial=0.0) <= limit:
        if not np.isfinite(array).all():
            raise ValidationError(field, "must not contain NaN or infinity")
        raise ValidationError(field, f"has values outside the {vector_type} range (±{limit:g})")
    vector = array.astype(np.float32)  # a copy: the caller may reuse its array
    if distance == "cosine":
        # pgvector sums the squares in single precision, of the stored values.
        stored = vector if vector_type == "vector" else vector.astype(np.float16).astype(np.float32)
        if not float(np.dot(stored, stored)) > 0.0:
            raise ValidationError(
                field, "is a zero vector: it has no direction to compare under cosine distance"
            )
    return vector


def validate_embedded(
    vectors: Sequence[object],
    count: int,
    dim: int,
    vector_type: str,
    field: str,
    *,
    distance: str,
) -> list[np.ndarray[Any, Any]]:
    """Check what an embedder returned for ``count`` texts: one valid vector each."""
    if len(vectors) != count:
        raise ValidationError(field, "the embedder returned the wrong number of vectors")
    return [validate_embedding(v, dim, vector_type, field, distance=distance) for v in vectors]


def validate_importance(value: object, field: str = "importance") -> float:
    """Check an importance score in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(field, "must be a number")
    if (isinstance(value, float) and not math.isfinite(value)) or not 0.0 <= value <= 1.0:
        raise ValidationError(field, "must be between 0 and 1")
    return float(value)


def validate_ttl(value: object, field: str = "ttl") -> float | None:
    """Check a time-to-live (seconds or timedelta); returns seconds or None.

    Positive and at most :data:`memsvc.core.time_limits.MAX_DURATION` (None: no expiry).
    """
    if value is None:
        return None
    return validate_duration(value, field, hint="; None keeps it with no expiry")


def validate_scope(value: object, field: str = "scope") -> Scope:
    """Check that a scope argument is a :class:`memsvc.Scope`."""
    if not isinstance(value, Scope):
        raise ValidationError(field, "must be a memsvc.Scope")
    return value


def validate_tenant(value: object, field: str = "tenant") -> str | None:
    """Check an optional ``tenant=`` argument (a scope id, or None)."""
    return None if value is None else validate_id(field, value)


def validate_name(value: object, field: str, max_length: int) -> str:
    """Check a name or key: a non-empty string of at most ``max_length`` characters."""
    if not isinstance(value, str) or not value:
        raise ValidationError(field, "must be a non-empty string")
    check_text(field, value)
    if len(value) > max_length:
        raise ValidationError(field, f"must be at most {max_length} characters")
    return value


def validate_limit(value: object, field: str, maximum: int) -> int:
    """Check a page size or ``k``: an integer in [1, maximum]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(field, "must be an integer")
    if not 1 <= value <= maximum:
        raise ValidationError(field, f"must be between 1 and {maximum}")
    return value
