"""JSON text for PostgreSQL ``jsonb`` that reads back as it was written.

``jsonb`` stores numbers as ``numeric`` and prints them without an exponent:
the float ``1e20``, which Python writes as ``1e+20``, comes back as
``100000000000000000000`` and would decode as an int. Floats are therefore
written here so that their text always has a decimal point
(``100000000000000000000.0``), which ``numeric`` keeps (it keeps the scale it
was given) and which decodes as a float again, to the same value: the digits
are those of ``repr``, the shortest that round-trip. Small floats
(``1e-07``) need nothing: ``numeric`` prints them as ``0.0000001``.

Decoding is plain :func:`json.loads`; :func:`loads` is here so that readers
and writers name one module.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from json.encoder import encode_basestring
from typing import Any

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
# The scanner of a decoder with json.loads's own settings (strict, no hooks):
# set in JSONDecoder.__init__, which typeshed does not declare.
_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def dumps(value: Any) -> str:
    """Compact JSON text of ``value`` in which every float keeps its float type in jsonb.

    The value must already be valid JSON data (see
    :func:`memsvc.core.validation.encode_json`): no NaN or infinity.
    """
    text = _ENCODER.encode(value)
    # Python writes an exponent only for floats of magnitude >= 1e16 ("e+")
    # or < 1e-4 ("e-", harmless). No "e+" anywhere (strings included): done.
    if "e+" not in text:
        return text
    return _write(value)


def loads(text: str | bytes) -> Any:
    """Decode JSON text (as :func:`json.loads`)."""
    # PostgreSQL's jsonb text has no surrounding whitespace: its one value is
    # scanned directly, without json.loads's layers (which cost more than the
    # scan on every metadata column read). Anything else takes json.loads.
    if type(text) is str:
        try:
            value, end = _scan(text, 0)
        except StopIteration:
            pass
        else:
            if end == len(text):
                return value
    return json.loads(text)


def float_text(value: float) -> str:
    """A float's JSON text with a decimal point, never a positive exponent."""
    text = repr(value)
    if "e+" not in text:
        return text
    return format(Decimal(text), "f") + ".0"


def _write(value: Any) -> str:
    if isinstance(value, float):
        return float_text(value)
    if isinstance(value, dict):
        items = (f"{encode_basestring(str(key))}:{_write(item)}" for key, item in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_write(item) for item in value) + "]"
    return _ENCODER.encode(value)
