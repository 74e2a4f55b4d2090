"""Tables of the LangGraph checkpointer and store."""

from __future__ import annotations

from typing import Any

from pgvector.sqlalchemy import HALFVEC
from sqlalchemy import (
    CheckConstraint,
    Column,
    Computed,
    DateTime,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    cast,
    text,
)
from sqlalchemy.dialects.postgresql import (
    ARRAY,
    BIT,
    BYTEA,
    DOUBLE_PRECISION,
    JSONB,
)

from memsvc.core.settings import Settings
from memsvc.db.table_columns import (
    OPCLASSES,
    SCOPE_COMMENTS,
    store_vector_bits_expression,
)

LANGGRAPH_COMMENTS = {
    "thread_id": "LangGraph thread the row belongs to.",
    "checkpoint_ns": "LangGraph checkpoint namespace ('' for the root graph).",
}


def langgraph_thread_columns() -> list[Column[Any]]:
    return [
        Column("tenant_id", Text, nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        Column("thread_id", Text, nullable=False, comment=LANGGRAPH_COMMENTS["thread_id"]),
        Column(
            "checkpoint_ns", Text, nullable=False, comment=LANGGRAPH_COMMENTS["checkpoint_ns"]
        ),
    ]


def add_langgraph_tables(metadata: MetaData) -> None:
    """Tables of the LangGraph checkpointer (``memsvc.integrations.langgraph``)."""
    checkpoints = Table(
        "langgraph_checkpoints",
        metadata,
        *langgraph_thread_columns(),
        Column("checkpoint_id", Text, nullable=False, comment="LangGraph checkpoint id."),
        Column(
            "parent_checkpoint_id",
            Text,
            nullable=True,
            comment="The checkpoint this one continues (NULL for a thread's first).",
        ),
        Column("checkpoint_type", Text, nullable=False, comment="Serializer type of checkpoint."),
        Column(
            "checkpoint",
            BYTEA,
            nullable=False,
            comment="The serialized checkpoint without its channel values (kept in blobs).",
        ),
        Column(
            "channels",
            ARRAY(Text),
            nullable=False,
            comment="Channels of the checkpoint, in step with versions.",
        ),
        Column(
            "versions",
            ARRAY(Text),
            nullable=False,
            comment="Version of each channel: the blob holding its value.",
        ),
        Column("metadata", JSONB, nullable=False, comment="Checkpoint metadata (filterable)."),
        Column("run_id", Text, nullable=True, comment="metadata.run_id, for delete_for_runs."),
        Column(
            "created_at",
            DateTime(timezone=True),
            nullable=False,
            server_default=text("clock_timestamp()"),
            comment="When it was stored.",
        ),
        PrimaryKeyConstraint("tenant_id", "thread_id", "checkpoint_ns", "checkpoint_id"),
        comment="LangGraph checkpoints (MemsvcSaver); channel values live in "
        "langgraph_checkpoint_blobs.",
    )
    Index("ix_langgraph_checkpoints_run", checkpoints.c.tenant_id, checkpoints.c.run_id)
    Table(
        "langgraph_checkpoint_blobs",
        metadata,
        *langgraph_thread_columns(),
        Column("channel", Text, nullable=False, comment="Channel name."),
        Column("version", Text, nullable=False, comment="Channel version."),
        Column("blob_type", Text, nullable=False, comment="Serializer type ('empty': no value)."),
        Column("blob", BYTEA, nullable=True, comment="The serialized channel value."),
        PrimaryKeyConstraint("tenant_id", "thread_id", "checkpoint_ns", "channel", "version"),
        comment="LangGraph channel values, one per channel version, shared by the "
        "checkpoints that reference that version.",
    )
    Table(
        "langgraph_checkpoint_writes",
        metadata,
        *langgraph_thread_columns(),
        Column("checkpoint_id", Text, nullable=False, comment="Checkpoint the writes follow."),
        Column("task_id", Text, nullable=False, comment="Task that made the write."),
        Column("idx", Integer, nullable=False, comment="Index of the write (negative: special)."),
        Column("channel", Text, nullable=False, comment="Channel written."),
        Column("value_type", Text, nullable=False, comment="Serializer type of value."),
        Column("value", BYTEA, nullable=True, comment="The serialized value."),
        Column(
            "task_path",
            Text,
            nullable=False,
            server_default=text("''"),
            comment="Path of the task (orders a step's writes).",
        ),
        PrimaryKeyConstraint(
            "tenant_id", "thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"
        ),
        comment="LangGraph pending writes of tasks, per checkpoint.",
    )


def add_langgraph_store_tables(
    metadata: MetaData, vector_type: Any, settings: Settings, hnsw_with: dict[str, int]
) -> None:
    """The LangGraph store's items and their per-field vectors.

    A namespace is kept as its labels joined with ``.`` (LangGraph forbids the
    period in labels, so the text is injective), in the "C" collation so
    prefix ranges and ordering compare code points, as Python does.
    """
    items = Table(
        "langgraph_store_items",
        metadata,
        Column("tenant_id", Text, nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        Column(
            "prefix",
            Text(collation="C"),
            nullable=False,
            comment="The item's namespace: its labels joined with '.'.",
        ),
        Column("key", Text, nullable=False, comment="The item's key within its namespace."),
        Column("value", JSONB, nullable=False, comment="The item's value (a JSON object)."),
        Column(
            "created_at",
            DateTime(timezone=True),
            nullable=False,
            server_default=text("now()"),
            comment="When the item was first put.",
        ),
        Column(
            "updated_at",
            DateTime(timezone=True),
            nullable=False,
            server_default=text("now()"),
            comment="When the item was last put.",
        ),
        Column(
            "expires_at",
            DateTime(timezone=True),
            nullable=True,
            comment="After this moment the item is invisible and gc deletes it.",
        ),
        Column(
            "ttl_minutes",
            DOUBLE_PRECISION,
            nullable=True,
            comment="The item's TTL, applied again when a read refreshes it.",
        ),
        PrimaryKeyConstraint("tenant_id", "prefix", "key"),
        comment="Items of LangGraph stores (memsvc.integrations.langgraph.MemsvcStore).",
    )
    Index(
        "ix_langgraph_store_items_expires_at",
        items.c.expires_at,
        postgresql_where=text("expires_at IS NOT NULL"),
    )
    vectors = Table(
        "langgraph_store_vectors",
        metadata,
        Column("tenant_id", Text, nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        Column("prefix", Text(collation="C"), nullable=False, comment="The item's namespace."),
        Column("key", Text, nullable=False, comment="The item's key."),
        Column(
            "field",
            Text,
            nullable=False,
            comment="Path of the embedded text in the value ('$': the whole value).",
        ),
        Column("embedding", vector_type, nullable=False, comment="Embedding of that text."),
        Column(
            "embedding_bits",
            BIT(settings.embedding_dim),
            Computed(store_vector_bits_expression(settings), persisted=True),
            comment="Sign bits of the embedding, kept by the database (quantized search).",
        ),
        PrimaryKeyConstraint("tenant_id", "prefix", "key", "field"),
        ForeignKeyConstraint(
            ["tenant_id", "prefix", "key"],
            [items.c.tenant_id, items.c.prefix, items.c.key],
            ondelete="CASCADE",
        ),
        comment="Embeddings of the indexed fields of LangGraph store items.",
    )
    # Half-precision copies in the index (see store_vector_index_expression).
    indexed: Any = vectors.c.embedding
    if settings.vector_type != "halfvec":
        indexed = cast(indexed, HALFVEC(settings.embedding_dim)).label("embedding")
    Index(
        "ix_langgraph_store_vectors_embedding_hnsw",
        indexed,
        postgresql_using="hnsw",
        postgresql_with=hnsw_with,
        postgresql_ops={"embedding": OPCLASSES[("halfvec", settings.distance)]},
    )
    # A namespace's keys and bits side by side: its quantized search reads only this index.
    Index(
        "ix_langgraph_store_vectors_namespace_bits",
        vectors.c.tenant_id,
        vectors.c.prefix,
        postgresql_include=["key", "field", "embedding_bits"],
    )
    Table(
        "langgraph_store_namespace_indexes",
        metadata,
        Column("tenant_id", Text, nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        Column(
            "prefix",
            Text(collation="C"),
            nullable=False,
            comment="The namespace the index holds the vectors of (and those under it).",
        ),
        Column(
            "index_name",
            Text,
            nullable=False,
            comment="The partial HNSW index of langgraph_store_vectors, in this schema.",
        ),
        Column(
            "state",
            Text,
            nullable=False,
            comment="'building' (claimed by a build, or one that stopped) or 'ready'.",
        ),
        Column(
            "updated_at",
            DateTime(timezone=True),
            nullable=False,
            server_default=text("now()"),
            comment="When the state was last set.",
        ),
        PrimaryKeyConstraint("tenant_id", "prefix"),
        CheckConstraint("state IN ('building', 'ready')", name="state"),
        comment="Namespace indexes of LangGraph stores: one partial HNSW index of "
        "langgraph_store_vectors per row.",
    )
