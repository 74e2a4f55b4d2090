"""The schema: one SQLAlchemy ``MetaData``, the single source alembic migrates from.

The embedding column's type, dimension and HNSW operator class depend on the
settings, so the metadata is built by :func:`build_metadata`. Every primary
and unique key starts with ``tenant_id`` so the tables can later be
partitioned or distributed by tenant.

The memory tables are built here; the other features' tables in
:mod:`memsvc.db.tables_features` and :mod:`memsvc.db.tables_langgraph`,
from the shared columns of :mod:`memsvc.db.table_columns`.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Computed,
    DateTime,
    Identity,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import (
    ARRAY,
    JSONB,
    REAL,
    TSVECTOR,
    UUID,
)

from memsvc.core.settings import Settings

# Re-exported: migrations and repositories import these from memsvc.db.tables.
from memsvc.db.table_columns import AT_COMMENT as AT_COMMENT
from memsvc.db.table_columns import COMMITTED_AT_COMMENT as COMMITTED_AT_COMMENT
from memsvc.db.table_columns import CONTENT_UNIQUE_COMMENT as CONTENT_UNIQUE_COMMENT
from memsvc.db.table_columns import CREATED_XID_COMMENT as CREATED_XID_COMMENT
from memsvc.db.table_columns import CURRENT_XID as CURRENT_XID
from memsvc.db.table_columns import FIRST_CHANGE_KEY as FIRST_CHANGE_KEY
from memsvc.db.table_columns import FORGOTTEN_AT_COMMENT as FORGOTTEN_AT_COMMENT
from memsvc.db.table_columns import LAST_REINFORCED_AT_COMMENT as LAST_REINFORCED_AT_COMMENT
from memsvc.db.table_columns import NAMING_CONVENTION as NAMING_CONVENTION
from memsvc.db.table_columns import OPCLASSES as OPCLASSES
from memsvc.db.table_columns import PINNED_COMMENT as PINNED_COMMENT
from memsvc.db.table_columns import POLICIES_COMMENT as POLICIES_COMMENT
from memsvc.db.table_columns import REINFORCED_COUNT_COMMENT as REINFORCED_COUNT_COMMENT
from memsvc.db.table_columns import SCOPE_COMMENTS as SCOPE_COMMENTS
from memsvc.db.table_columns import TEXT_SEARCH_CHARS as TEXT_SEARCH_CHARS
from memsvc.db.table_columns import XID8 as XID8
from memsvc.db.table_columns import change_key_column as change_key_column
from memsvc.db.table_columns import content_tsv_expression as content_tsv_expression
from memsvc.db.table_columns import created_xid_column as created_xid_column
from memsvc.db.table_columns import scope_columns
from memsvc.db.table_columns import store_vector_bits_expression as store_vector_bits_expression
from memsvc.db.table_columns import store_vector_index_expression as store_vector_index_expression
from memsvc.db.table_columns import vector_column_type as vector_column_type
from memsvc.db.tables_features import (
    add_assembly_tables,
    add_checkpoint_table,
    add_consolidation_tables,
    add_policies_table,
    add_remembered_messages_table,
    add_scope_indexes_table,
)
from memsvc.db.tables_langgraph import LANGGRAPH_COMMENTS as LANGGRAPH_COMMENTS
from memsvc.db.tables_langgraph import add_langgraph_store_tables, add_langgraph_tables
from memsvc.db.time_checks import add_range_checks


def build_metadata(settings: Settings) -> MetaData:
    """Build the schema for ``settings`` (schema name, vector type and dimension)."""
    metadata = MetaData(schema=settings.db_schema, naming_convention=NAMING_CONVENTION)
    vector_type = vector_column_type(settings)
    opclass = OPCLASSES[(settings.vector_type, settings.distance)]
    hnsw_with = {"m": settings.hnsw_m, "ef_construction": settings.hnsw_ef_construction}
    scope = ("tenant_id", "project_id", "agent_id", "session_id")

    Table(
        "schema_info",
        metadata,
        Column("key", Text, nullable=False, comment="Setting fixed at the first migration."),
        Column("value", Text, nullable=False, comment="Its value."),
        PrimaryKeyConstraint("key"),
        comment="Settings fixed when the schema was created (embedding dimension, vector type, "
        "distance); memsvc refuses to open with different ones.",
    )

    Table(
        "embedding_migrations",
        metadata,
        Column("id", BigInteger, Identity(always=False), nullable=False, comment="Migration id."),
        Column(
            "embedder",
            Text,
            nullable=False,
            comment="Spec of the new embedder (as MEMSVC_EMBEDDER: hashing, openai:..., "
            "local:...).",
        ),
        Column("dim", Integer, nullable=False, comment="Dimension of the new embeddings."),
        Column(
            "started_at",
            DateTime(timezone=True),
            nullable=False,
            server_default=text("now()"),
            comment="When the new column was added.",
        ),
        Column(
            "switched_at",
            DateTime(timezone=True),
            nullable=True,
            comment="When searches moved to the new embeddings (NULL: in progress).",
        ),
        PrimaryKeyConstraint("id"),
        comment="Online embedding-model migrations (memsvc reembed): the row with no "
        "switched_at is in progress, and writers embed with both models meanwhile.",
    )

    memories = Table(
        "memories",
        metadata,
        *scope_columns(),
        Column("id", UUID(as_uuid=True), nullable=False, comment="Memory id (client-generatable)."),
        Column("key", Text, nullable=True, comment="Name of a keyed memory (put/get_by_key)."),
        Column("content", Text, nullable=False, comment="The remembered text."),
        Column("content_hash", Text, nullable=False, comment="sha256:<hex> of content."),
        Column(
            "metadata",
            JSONB,
            nullable=False,
            server_default=text("'{}'::jsonb"),
            comment="Free-form JSON object, filterable in search.",
        ),
        Column("embedding", vector_type, nullable=True, comment="Embedding of the content."),
        Column(
            "importance",
            REAL,
            nullable=False,
            server_default=text("0.5"),
            comment="Importance in [0, 1].",
        ),
        Column(
            "version",
            Integer,
            nullable=False,
            server_default=text("1"),
            comment="Incremented by every change (optimistic locking).",
        ),
        Column(
            "created_at",
            DateTime(timezone=True),
            nullable=False,
            server_default=text("now()"),
            comment="When the memory was first written.",
        ),
        Column(
            "updated_at",
            DateTime(timezone=True),
            nullable=False,
            server_default=text("now()"),
            comment="When the memory last changed.",
        ),
        Column(
            "expires_at",
            DateTime(timezone=True),
            nullable=True,
            comment="After this moment the memory is invisible and gc deletes it.",
        ),
        Column(
            "access_count",
            BigInteger,
            nullable=False,
            server_default=text("0"),
            comment="How many times the memory was returned by get.",
        ),
        Column(
            "last_accessed_at",
            DateTime(timezone=True),
            nullable=True,
            comment="When the memory was last returned by get.",
        ),
        Column(
            "valid_from",
            DateTime(timezone=True),
            nullable=True,
            server_default=text("now()"),
            comment="When the fact started to hold (NULL: since created_at).",
        ),
        Column(
            "valid_to",
            DateTime(timezone=True),
            nullable=True,
            comment="When the fact stopped holding (NULL: holds).",
        ),
        Column(
            "supersedes",
            ARRAY(UUID(as_uuid=True)),
            nullable=True,
            comment="The memories this one superseded (NULL: none).",
        ),
        Column(
            "superseded_by",
            UUID(as_uuid=True),
            nullable=True,
            comment="The memory that superseded this one (NULL: none).",
        ),
        Column(
            "content_tsv",
            TSVECTOR,
            Computed(content_tsv_expression(settings.text_search_config), persisted=True),
            comment="Text search vector of content, kept by the database.",
        ),
        change_key_column("the memory's latest write"),
        created_xid_column(),
        Column(
            "pinned",
            Boolean,
            nullable=False,
            server_default=text("false"),
            comment=PINNED_COMMENT,
        ),
        Column(
            "forgotten_at", DateTime(timezone=True), nullable=True, comment=FORGOTTEN_AT_COMMENT
        ),
        Column(
            "reinforced_count",
            Integer,
            nullable=False,
            server_default=text("0"),
            comment=REINFORCED_COUNT_COMMENT,
        ),
        Column(
            "last_reinforced_at",
            DateTime(timezone=True),
            nullable=True,
            comment=LAST_REINFORCED_AT_COMMENT,
        ),
        Column(
            "content_unique",
            Boolean,
            nullable=False,
            server_default=text("true"),
            comment=CONTENT_UNIQUE_COMMENT,
        ),
        PrimaryKeyConstraint("tenant_id", "id"),
        CheckConstraint("importance >= 0 AND importance <= 1", name="importance_range"),
        CheckConstraint("content_hash LIKE 'sha256:%'", name="content_hash_format"),
        comment="Long-term agent memories, one row each.",
    )
    Index("ix_memories_id", memories.c.id)
    Index("ix_memories_scope", *(memories.c[c] for c in scope), memories.c.id)
    Index(
        "uq_memories_content",
        *(memories.c[c] for c in scope),
        memories.c.content_hash,
        unique=True,
        postgresql_nulls_not_distinct=True,
        # Exact deduplication matches only memories whose validity is open (and
        # not stored with dedupe="off").
        postgresql_where=text("key IS NULL AND valid_to IS NULL AND content_unique"),
    )
    Index(
        "uq_memories_key",
        *(memories.c[c] for c in scope),
        memories.c.key,
        unique=True,
        postgresql_nulls_not_distinct=True,
        postgresql_where=text("key IS NOT NULL"),
    )
    Index(
        "ix_memories_expires_at",
        memories.c.expires_at,
        postgresql_where=text("expires_at IS NOT NULL"),
    )
    Index(
        "ix_memories_forgotten_at",
        memories.c.forgotten_at,
        postgresql_where=text("forgotten_at IS NOT NULL"),
    )
    Index("ix_memories_metadata", memories.c.metadata, postgresql_using="gin")
    # fastupdate off: new rows go straight into the index instead of a pending
    # list every search scans linearly until (auto)vacuum merges it, which
    # slows text search badly after a burst of writes.
    Index(
        "ix_memories_content_tsv",
        memories.c.content_tsv,
        postgresql_using="gin",
        postgresql_with={"fastupdate": "off"},
    )
    Index(
        "ix_memories_embedding_hnsw",
        memories.c.embedding,
        postgresql_using="hnsw",
        postgresql_with=hnsw_with,
        postgresql_ops={"embedding": opclass},
    )

    events = Table(
        "memory_events",
        metadata,
        Column("tenant_id", Text, nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        Column(
            "event_id",
            BigInteger,
            Identity(always=False),
            nullable=False,
            comment="Increasing event number.",
        ),
        Column("memory_id", UUID(as_uuid=True), nullable=False, comment="The memory changed."),
        Column(
            "kind",
            Text,
            nullable=False,
            comment="created, updated, deleted, erased, superseded or invalidated.",
        ),
        Column("version", Integer, nullable=False, comment="The memory's version after the event."),
        Column(
            "prior",
            JSONB,
            nullable=True,
            comment="The values before the change (NULL for created and erased).",
        ),
        Column(
            "at",
            DateTime(timezone=True),
            nullable=False,
            server_default=text("now()"),
            comment=AT_COMMENT,
        ),
        Column(
            "committed_at",
            DateTime(timezone=True),
            nullable=True,
            comment=COMMITTED_AT_COMMENT,
        ),
        Column("project_id", Text, nullable=True, comment="Project of the memory."),
        Column("agent_id", Text, nullable=True, comment="Agent of the memory."),
        Column("session_id", Text, nullable=True, comment="Session of the memory."),
        change_key_column("the event"),
        PrimaryKeyConstraint("tenant_id", "event_id"),
        Column(
            "links",
            ARRAY(UUID(as_uuid=True)),
            nullable=True,
            comment="Memories the event links: a supersession's successor, "
            "a creation's predecessors.",
        ),
        CheckConstraint(
            "kind IN ('created', 'updated', 'deleted', 'erased', 'superseded', 'invalidated')",
            name="kind",
        ),
        comment="Append-only history of memories, written in the same transaction as each change.",
    )
    Index("ix_memory_events_memory", events.c.tenant_id, events.c.memory_id, events.c.event_id)
    # As-of reads look for the events committed after a moment: persisted
    # commit times through the first index, the not yet persisted (few, when
    # gc runs) through the second.
    Index("ix_memory_events_committed", events.c.tenant_id, events.c.committed_at)
    Index(
        "ix_memory_events_uncommitted",
        events.c.tenant_id,
        postgresql_where=events.c.committed_at.is_(None),
    )
    Index("ix_memory_events_change_key", events.c.change_key, events.c.event_id)
    # A scope's feed: its tenant's events after a position, in feed order.
    Index(
        "ix_memory_events_tenant_change_key",
        events.c.tenant_id,
        events.c.change_key,
        events.c.event_id,
    )
    Index("ix_memory_events_at", events.c.at)

    entity_events = Table(
        "entity_events",
        metadata,
        *scope_columns(),
        Column(
            "event_id",
            BigInteger,
            Identity(always=False),
            nullable=False,
            comment="Increasing event number.",
        ),
        Column("entity", Text, nullable=False, comment="assembly or checkpoint."),
        Column("entity_id", UUID(as_uuid=True), nullable=False, comment="The row changed."),
        Column("kind", Text, nullable=False, comment="created, updated or deleted."),
        Column("version", Integer, nullable=False, comment="The row's version after the event."),
        Column(
            "at",
            DateTime(timezone=True),
            nullable=False,
            server_default=text("now()"),
            comment="When the writing transaction started (now()).",
        ),
        change_key_column("the event"),
        PrimaryKeyConstraint("tenant_id", "event_id"),
        CheckConstraint("entity IN ('assembly', 'checkpoint')", name="entity"),
        CheckConstraint("kind IN ('created', 'updated', 'deleted')", name="kind"),
        comment="Content-free change ledger of assemblies and session checkpoints, written "
        "by triggers in the same statement as each change (the change feed reads it).",
    )
    Index("ix_entity_events_change_key", entity_events.c.change_key, entity_events.c.event_id)
    Index(
        "ix_entity_events_tenant_change_key",
        entity_events.c.tenant_id,
        entity_events.c.change_key,
        entity_events.c.event_id,
    )
    Index("ix_entity_events_at", entity_events.c.at)

    add_assembly_tables(metadata, settings, opclass, hnsw_with)
    add_checkpoint_table(metadata)
    add_langgraph_tables(metadata)
    add_langgraph_store_tables(metadata, vector_type, settings, hnsw_with)
    add_remembered_messages_table(metadata)
    add_consolidation_tables(metadata, settings)
    add_policies_table(metadata)
    add_scope_indexes_table(metadata)
    add_range_checks(metadata)
    return metadata
