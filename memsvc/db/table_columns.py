"""Columns, types and expressions the schema's tables share (see :mod:`memsvc.db.tables`)."""

from __future__ import annotations

from typing import Any

from pgvector.sqlalchemy import HALFVEC, VECTOR
from sqlalchemy import (
    Column,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql.base import ischema_names
from sqlalchemy.types import UserDefinedType

from memsvc.core.settings import Settings

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class XID8(UserDefinedType[Any]):
    """PostgreSQL's 64-bit transaction id (``xid8``), which orders the change feed."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "XID8"


# Reflection (alembic's comparison with the database) knows the type by name.
ischema_names["xid8"] = XID8

# The writing transaction's id, the change feed's ordering key (see
# memsvc.changes.queries).
CURRENT_XID = "pg_current_xact_id()"


CREATED_XID_COMMENT = (
    "Id of the transaction that created the row (1 for rows older than revision 0021). "
    "Erasure takes what committed before it began by this id, never by created_at."
)


def created_xid_column() -> Column[Any]:
    """The ``created_xid`` column: which transaction created the row (erasure's cut)."""
    return Column(
        "created_xid",
        XID8(),
        nullable=False,
        server_default=text(CURRENT_XID),
        comment=CREATED_XID_COMMENT,
    )


# change_key's column default: the trigger ``assign_change_key`` (revision
# 0031) raises it to the writing transaction's id on the node holding the row.
FIRST_CHANGE_KEY = "'1'::xid8"


def change_key_column(what: str) -> Column[Any]:
    """The ``change_key`` column: the feed's ordering key of a row's latest write."""
    return Column(
        "change_key",
        XID8(),
        nullable=False,
        server_default=text(FIRST_CHANGE_KEY),
        comment=f"Change-feed ordering key of {what}: the writing transaction's id, "
        "never below the key of the row's previous write.",
    )


# HNSW operator class for each (vector type, distance) pair.
OPCLASSES = {
    ("vector", "cosine"): "vector_cosine_ops",
    ("vector", "l2"): "vector_l2_ops",
    ("vector", "ip"): "vector_ip_ops",
    ("halfvec", "cosine"): "halfvec_cosine_ops",
    ("halfvec", "l2"): "halfvec_l2_ops",
    ("halfvec", "ip"): "halfvec_ip_ops",
}

SCOPE_COMMENTS = {
    "tenant_id": "Tenant that owns the row; the first column of every key.",
    "project_id": "Project within the tenant, or NULL.",
    "agent_id": "Agent within the project, or NULL.",
    "session_id": "Session of the agent, or NULL.",
}


def scope_columns(session_required: bool = False) -> list[Column[Any]]:
    return [
        Column("tenant_id", Text, nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        Column("project_id", Text, nullable=True, comment=SCOPE_COMMENTS["project_id"]),
        Column("agent_id", Text, nullable=True, comment=SCOPE_COMMENTS["agent_id"]),
        Column(
            "session_id",
            Text,
            nullable=not session_required,
            comment="Session of the agent." if session_required else SCOPE_COMMENTS["session_id"],
        ),
    ]


# Text search reads this many leading characters of content: a tsvector is
# capped at 1 MB, and content may be 8 MB.
TEXT_SEARCH_CHARS = 200_000


def content_tsv_expression(config: str) -> str:
    """The generated ``content_tsv`` column: words under ``config``, plus raw tokens.

    The second half indexes the content under ``simple`` with ``-`` and ``_``
    read as spaces, so the parts of identifiers (``ENG-4312``,
    ``retry_backoff_ms``) are unstemmed lexemes too: ``4312`` or ``ENG 4312``
    find ``ENG-4312``, which the default parser alone keeps as ``eng`` + ``-4312``.
    """
    head = f"left(content, {TEXT_SEARCH_CHARS})"
    return (
        f"to_tsvector('{config}'::regconfig, {head}) || "
        f"to_tsvector('simple'::regconfig, translate({head}, '-_', '  '))"
    )


def vector_column_type(settings: Settings) -> Any:
    """The SQLAlchemy type of embedding columns for these settings."""
    if settings.vector_type == "halfvec":
        return HALFVEC(settings.embedding_dim)
    return VECTOR(settings.embedding_dim)


def store_vector_index_expression(settings: Settings) -> str:
    """What the LangGraph store's HNSW index holds: the vectors in half precision.

    Searches walk it for candidates and rank those by their exact distance;
    the index is half the size of a full-precision one, so more of it stays
    in the server's buffers.
    """
    if settings.vector_type == "halfvec":
        return "embedding"
    return f"(embedding::halfvec({int(settings.embedding_dim)}))"


PINNED_COMMENT = "True: never forgotten, whatever its strength (see memory_policies)."
FORGOTTEN_AT_COMMENT = (
    "When a forget pass took the memory out of every read (its strength had fallen "
    "below the floor); NULL: not forgotten. gc deletes it after the grace period."
)
REINFORCED_COUNT_COMMENT = "How many writes semantic deduplication merged into the memory."
LAST_REINFORCED_AT_COMMENT = (
    "When semantic deduplication last merged a write into the memory (renews its strength)."
)
CONTENT_UNIQUE_COMMENT = (
    "False: added with dedupe='off', outside the unique index on content (its scope "
    "may hold the same content again)."
)
POLICIES_COMMENT = (
    "Half-life per tenant or scope: a memory's strength is importance x "
    "0.5 ^ (age / half_life), by the most specific policy on its scope's path."
)

AT_COMMENT = "When the writing transaction started (now()); committed_at is when it committed."
COMMITTED_AT_COMMENT = (
    "When the writing transaction committed (from pg_xact_commit_timestamp, "
    "persisted by gc; NULL until then)."
)


def store_vector_bits_expression(settings: Settings) -> str:
    """The sign bits of a LangGraph store vector, one per dimension (kept by the database).

    A search in a mid-sized namespace ranks the namespace's vectors by the
    Hamming distance of these bits, read from a covering index, and re-ranks
    the nearest few hundred by their exact distance.
    """
    return f"binary_quantize(embedding)::bit({int(settings.embedding_dim)})"
