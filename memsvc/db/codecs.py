"""Binary asyncpg codecs for pgvector's ``vector``/``halfvec`` and for ``jsonb``.

Vectors decode straight into numpy arrays (no per-float Python objects) and
encode from lists or arrays; the wire format is a 2-byte dimension, 2 unused
bytes, then big-endian floats.
"""

from __future__ import annotations

import struct
from typing import Any

import asyncpg
import numpy as np

from memsvc.core import jsontext

_HEADER = struct.Struct(">HH")


# dtype objects, not strings: numpy parses a string at every call.
_WIRE_DTYPES: dict[str, np.dtype[Any]] = {"vector": np.dtype(">f4"), "halfvec": np.dtype(">f2")}


def vector_bytes(value: Any, vector_type: str = "vector") -> bytes:
    """A vector in pgvector's binary wire format.

    Arrays of vectors are sent pre-encoded: asyncpg would otherwise take each
    numpy array for one more array dimension.
    """
    dtype = _WIRE_DTYPES[vector_type]
    # astype: an array's own conversion, without asarray's dispatch.
    array = value.astype(dtype) if type(value) is np.ndarray else np.asarray(value, dtype=dtype)
    encoded: bytes = _HEADER.pack(array.shape[0], 0) + array.tobytes()
    return encoded


def _encoder(vector_type: str) -> Any:
    def encode(value: Any) -> bytes:
        if isinstance(value, bytes):
            return value
        return vector_bytes(value, vector_type)

    return encode


def _decoder(dtype: np.dtype[Any]) -> Any:
    def decode(data: bytes) -> np.ndarray[Any, Any]:
        return np.frombuffer(data, dtype=dtype, offset=4).astype(np.float32)

    return decode


def _encode_json(value: Any) -> str:
    # Repositories validate and serialize JSON themselves (to enforce size
    # limits), so text passes through; other values are serialized here, so
    # that floats stay floats (see memsvc.core.jsontext).
    return value if isinstance(value, str) else jsontext.dumps(value)


def _encode_jsonb_binary(value: Any) -> bytes:
    # jsonb's binary format: a version byte (1), then the JSON text.
    return b"\x01" + _encode_json(value).encode()


def _decode_jsonb_binary(data: bytes) -> Any:
    return jsontext.loads(data[1:].decode())


async def register_binary_jsonb(conn: asyncpg.Connection) -> None:
    """Send and read ``jsonb`` in binary, same values as the text codec.

    For a connection that writes rows by binary COPY (a loader's own), which
    needs a binary codec for every column.
    """
    await conn.set_type_codec(
        "jsonb",
        schema="pg_catalog",
        encoder=_encode_jsonb_binary,
        decoder=_decode_jsonb_binary,
        format="binary",
    )


LEARN_UUID_ARRAY = "SELECT NULL::uuid[]"


async def register_codecs(conn: asyncpg.Connection, vector_schema: str) -> None:
    """Install the vector and jsonb codecs on a new connection."""
    await conn.set_type_codec(
        "jsonb", schema="pg_catalog", encoder=_encode_json, decoder=jsontext.loads, format="text"
    )
    for name, dtype in _WIRE_DTYPES.items():
        await conn.set_type_codec(
            name,
            schema=vector_schema,
            encoder=_encoder(name),
            decoder=_decoder(dtype),
            format="binary",
        )
    # memsvc's statements read and bind uuid[] (supersession links, id
    # lists), a type the driver learns by asking the server: asked here, in
    # the connection's setup, not inside the first such statement's timeout.
    await conn.fetchval(LEARN_UUID_ARRAY)
