"""Checks and JSON encoding of what callers put in working memory.

The rules are those of :mod:`memsvc.core.validation` (no NaN/infinity, NUL bytes,
lone surrogates or non-string keys; a size limit), with fast paths for the
common valid value, since ``WorkingMemory.set`` is a hot path.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable
from typing import Any

from memsvc.core.errors import ValidationError
from memsvc.core.validation import check_text, encode_json

MAX_KEY_LENGTH = 255

# One encoder built once: json.dumps() with options builds a new encoder per
# call, which costs about as much as encoding a small value.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_MAX_DEPTH = 512
_CONTAINERS = (dict, list, tuple)


def validate_key(key: object) -> str:
    """Check a user key: a non-empty printable string of at most 255 characters.

    Keys starting with ``_`` are reserved for memsvc's own state.
    """
    if not isinstance(key, str):
        raise ValidationError("key", f"must be a string, not {type(key).__name__}")
    if not key:
        raise ValidationError("key", "must not be empty")
    if len(key) > MAX_KEY_LENGTH:
        raise ValidationError("key", f"must be at most {MAX_KEY_LENGTH} characters")
    if key[0] == "_":
        raise ValidationError("key", "keys starting with '_' are reserved")
    # isprintable() is False for every control character and lone surrogate,
    # so the common case needs no per-character scan.
    if not key.isprintable():
        for char in key:
            category = unicodedata.category(char)
            if category == "Cc":
                raise ValidationError("key", "must not contain control characters or NUL")
            if category == "Cs":
                raise ValidationError("key", "must not contain lone surrogates")
    return key


def _needs_full_check(value: Any, depth: int = 0) -> bool:
    """True if ``value`` holds what the C encoder accepts but memsvc refuses.

    That is non-string dict keys (the encoder stringifies them) and nesting
    deeper than :func:`memsvc.core.validation.encode_json` allows.
    """
    if depth >= _MAX_DEPTH:
        return True
    items: Iterable[Any]
    if isinstance(value, dict):
        for key in value:
            if type(key) is not str:
                return True
        items = value.values()
    else:
        items = value
    for item in items:
        if isinstance(item, _CONTAINERS) and _needs_full_check(item, depth + 1):
            return True
    return False


def encode_value(field: str, value: object, max_bytes: int) -> str:
    """Validate and encode a JSON value, like :func:`memsvc.core.validation.encode_json`.

    Same rules (no NaN/infinity, NUL, lone surrogates, non-string keys; at most
    ``max_bytes``), with a fast path for the common valid value: encode once
    with a prebuilt encoder and only walk dicts and lists for the checks the
    encoder does not make. Anything unusual goes to ``encode_json``, which
    raises the precise ValidationError.
    """
    try:
        text = _ENCODER.encode(value)
        size = len(text.encode("utf-8"))
    except (TypeError, ValueError, RecursionError):
        # UnicodeEncodeError (lone surrogate) is a ValueError too.
        return _encode_slowly(field, value, max_bytes)
    if "\\u0000" in text:
        return _encode_slowly(field, value, max_bytes)
    # Without "{" there is no dict, hence no key to check, and short text
    # cannot nest deeper than the limit: most values skip the walk.
    if ("{" in text or len(text) > _MAX_DEPTH) and _needs_full_check(value):
        return _encode_slowly(field, value, max_bytes)
    if size > max_bytes:
        raise ValidationError(field, f"is {size} bytes, over the limit of {max_bytes}")
    return text


def _encode_slowly(field: str, value: object, max_bytes: int) -> str:
    try:
        return encode_json(field, value, max_bytes)
    except (TypeError, ValueError, RecursionError) as exc:
        if isinstance(exc, ValidationError):
            raise
        raise ValidationError(field, f"is not JSON-serializable ({exc})") from exc


def encode_scratchpad_entry(content: object, timestamp: str, max_bytes: int) -> str:
    """The JSON text of a scratchpad entry ``{"content", "timestamp"}``.

    Raises:
        ValidationError: ``content`` is not a string, holds NUL or lone
            surrogates, or is over ``max_bytes`` UTF-8 bytes (field ``content``).
    """
    if not isinstance(content, str):
        raise ValidationError("content", f"must be a string, not {type(content).__name__}")
    check_text("content", content)
    size = len(content.encode("utf-8"))
    if size > max_bytes:
        raise ValidationError("content", f"is {size} bytes, over the limit of {max_bytes}")
    # Built by hand: the string is already checked and the timestamp is ours.
    return f'{{"content":{_ENCODER.encode(content)},"timestamp":"{timestamp}"}}'
