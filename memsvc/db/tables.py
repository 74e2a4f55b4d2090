"""The schema: one SQLAlchemy ``MetaData``, the single source alembic migrates from.

The embedding column's type, dimension and HNSW operator class depend on the
settings, so the metadata is built by :func:`build_metadata`. Every primary
and unique key starts with ``tenant_id`` so the tables can later be
partitioned or distributed by tenant.
"""

from __future__ import annotations

from typing import Any

from pgvector.sqlalchemy import HALFVEC, VECTOR
from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Computed,
    DateTime,
    ForeignKeyConstraint,
    Identity,
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
    REAL,
    TSVECTOR,
    UUID,
)
from sqlalchemy.dialects.postgresql.base import ischema_names
from sqlalchemy.types import UserDefinedType

from memsvc.core.settings import Settings
from memsvc.db.time_checks import add_range_checks

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


def _scope_columns(session_required: bool = False) -> list[Column[Any]]:
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
        *_scope_columns(),
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
        *_scope_columns(),
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

    _add_assembly_tables(metadata, settings, opclass, hnsw_with)
    _add_checkpoint_table(metadata)
    _add_langgraph_tables(metadata)
    _add_langgraph_store_tables(metadata, vector_type, settings, hnsw_with)
    _add_remembered_messages_table(metadata)
    _add_consolidation_tables(metadata, settings)
    _add_policies_table(metadata)
    add_range_checks(metadata)
    return metadata


def _add_assembly_tables(
    metadata: MetaData, settings: Settings, opclass: str, hnsw_with: dict[str, int]
) -> None:
    scope = ("tenant_id", "project_id", "agent_id", "session_id")
    assemblies = Table(
        "assemblies",
        metadata,
        *_scope_columns(),
        Column("id", UUID(as_uuid=True), nullable=False, comment="Assembly id."),
        Column("name", Text, nullable=False, comment="Name, unique within the scope."),
        Column(
            "description",
            Text,
            nullable=False,
            server_default=text("''"),
            comment="What the group is for.",
        ),
        Column(
            "metadata",
            JSONB,
            nullable=False,
            server_default=text("'{}'::jsonb"),
            comment="Free-form JSON object.",
        ),
        Column(
            "member_count",
            Integer,
            nullable=False,
            server_default=text("0"),
            comment="Number of rows in assembly_members for this assembly.",
        ),
        Column(
            "embedded_count",
            Integer,
            nullable=False,
            server_default=text("0"),
            comment="Members that have an embedding (the centroid's denominator).",
        ),
        Column(
            "embedding_sum",
            ARRAY(DOUBLE_PRECISION),
            nullable=True,
            comment="Sum of the members' embeddings, kept in double precision.",
        ),
        Column(
            "centroid",
            vector_column_type(settings),
            nullable=True,
            comment="Mean of the members' embeddings (NULL when none has one).",
        ),
        Column(
            "version",
            Integer,
            nullable=False,
            server_default=text("1"),
            comment="Incremented by every change.",
        ),
        Column(
            "created_at",
            DateTime(timezone=True),
            nullable=False,
            server_default=text("now()"),
            comment="When the assembly was created.",
        ),
        Column(
            "updated_at",
            DateTime(timezone=True),
            nullable=False,
            server_default=text("now()"),
            comment="When the assembly or its membership last changed.",
        ),
        change_key_column("the assembly's latest write"),
        created_xid_column(),
        PrimaryKeyConstraint("tenant_id", "id"),
        CheckConstraint("member_count >= 0", name="member_count_nonnegative"),
        CheckConstraint(
            "embedded_count >= 0 AND embedded_count <= member_count", name="embedded_count_range"
        ),
        comment="Named groups of memories.",
    )
    Index("ix_assemblies_id", assemblies.c.id)
    Index(
        "uq_assemblies_name",
        *(assemblies.c[c] for c in scope),
        assemblies.c.name,
        unique=True,
        postgresql_nulls_not_distinct=True,
    )
    Index(
        "ix_assemblies_centroid_hnsw",
        assemblies.c.centroid,
        postgresql_using="hnsw",
        postgresql_with=hnsw_with,
        postgresql_ops={"centroid": opclass},
    )

    members = Table(
        "assembly_members",
        metadata,
        Column("tenant_id", Text, nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        Column("assembly_id", UUID(as_uuid=True), nullable=False, comment="The assembly."),
        Column("memory_id", UUID(as_uuid=True), nullable=False, comment="The member memory."),
        Column(
            "added_at",
            DateTime(timezone=True),
            nullable=False,
            server_default=text("now()"),
            comment="When the memory joined the assembly.",
        ),
        PrimaryKeyConstraint("tenant_id", "assembly_id", "memory_id"),
        ForeignKeyConstraint(
            ["tenant_id", "assembly_id"],
            [assemblies.c.tenant_id, assemblies.c.id],
            ondelete="CASCADE",
        ),
        ForeignKeyConstraint(
            ["tenant_id", "memory_id"],
            [f"{settings.db_schema}.memories.tenant_id", f"{settings.db_schema}.memories.id"],
            ondelete="CASCADE",
        ),
        comment="Which memories belong to which assembly (one row per membership).",
    )
    Index("ix_assembly_members_memory", members.c.tenant_id, members.c.memory_id)


def _add_remembered_messages_table(metadata: MetaData) -> None:
    """The ledger of ``svc.remember``: which messages a scope has remembered."""
    remembered = Table(
        "remembered_messages",
        metadata,
        *_scope_columns(),
        Column("message_id", Text, nullable=False, comment="The app's id of the message."),
        Column(
            "batch_id",
            UUID(as_uuid=True),
            nullable=False,
            comment="The remember batch (one transaction) that applied it.",
        ),
        Column(
            "extractor",
            Text,
            nullable=False,
            comment="The extractor that read it: name/version.",
        ),
        Column("model", Text, nullable=True, comment="The extractor's model, if any."),
        Column(
            "remembered_at",
            DateTime(timezone=True),
            nullable=False,
            server_default=text("now()"),
            comment="When the batch committed (its transaction's start).",
        ),
        created_xid_column(),
        PrimaryKeyConstraint("tenant_id", "batch_id", "message_id"),
        comment="Messages svc.remember has applied, one row each: a message id already "
        "here is never applied again in its scope.",
    )
    Index(
        "uq_remembered_messages_message",
        *(remembered.c[c] for c in ("tenant_id", "project_id", "agent_id", "session_id")),
        remembered.c.message_id,
        unique=True,
        postgresql_nulls_not_distinct=True,
    )


def _add_consolidation_tables(metadata: MetaData, settings: Settings) -> None:
    """The state of ``svc.maintenance.consolidate``: its clusters and the memories it has seen."""
    schema = settings.db_schema
    clusters = Table(
        "consolidation_clusters",
        metadata,
        Column("tenant_id", Text, nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        Column(
            "assembly_id",
            UUID(as_uuid=True),
            nullable=False,
            comment="The cluster's assembly (its members; its scope is the cluster's).",
        ),
        Column(
            "summary_id",
            UUID(as_uuid=True),
            nullable=True,
            comment="The summary memory (NULL until the first summary commits).",
        ),
        Column(
            "summarized_count",
            Integer,
            nullable=False,
            server_default=text("0"),
            comment="Members the current summary was written from.",
        ),
        Column(
            "summarizer",
            Text,
            nullable=False,
            comment="The summarizer that wrote the summary: name/version.",
        ),
        Column("model", Text, nullable=True, comment="The summarizer's model, if any."),
        PrimaryKeyConstraint("tenant_id", "assembly_id"),
        ForeignKeyConstraint(
            ["tenant_id", "assembly_id"],
            [f"{schema}.assemblies.tenant_id", f"{schema}.assemblies.id"],
            ondelete="CASCADE",
        ),
        comment="Clusters svc.maintenance.consolidate made: one assembly and one summary "
        "memory each.",
    )
    seen = Table(
        "consolidation_members",
        metadata,
        Column("tenant_id", Text, nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        Column("memory_id", UUID(as_uuid=True), nullable=False, comment="The memory."),
        Column(
            "assembly_id",
            UUID(as_uuid=True),
            nullable=True,
            comment="Its cluster (NULL: considered, in no cluster yet).",
        ),
        Column(
            "memory_version",
            Integer,
            nullable=False,
            comment="The memory's version when it was considered or last summarized.",
        ),
        Column(
            "summarized",
            Boolean,
            nullable=False,
            server_default=text("false"),
            comment="Whether the cluster's current summary was written from it.",
        ),
        PrimaryKeyConstraint("tenant_id", "memory_id"),
        ForeignKeyConstraint(
            ["tenant_id", "memory_id"],
            [f"{schema}.memories.tenant_id", f"{schema}.memories.id"],
            ondelete="CASCADE",
        ),
        ForeignKeyConstraint(
            ["tenant_id", "assembly_id"],
            [clusters.c.tenant_id, clusters.c.assembly_id],
            ondelete="CASCADE",
        ),
        comment="Memories svc.maintenance.consolidate has considered, one row each (the key "
        "keeps a memory in at most one cluster); a memory with no row is new to it.",
    )
    Index("ix_consolidation_members_assembly", seen.c.tenant_id, seen.c.assembly_id)


def _add_policies_table(metadata: MetaData) -> None:
    """Half-life policies per tenant or scope (forgetting, ``svc.policies``)."""
    policies = Table(
        "memory_policies",
        metadata,
        *_scope_columns(),
        Column("id", UUID(as_uuid=True), nullable=False, comment="Policy id."),
        Column(
            "half_life_s",
            DOUBLE_PRECISION,
            nullable=False,
            comment="Half-life of the strength of the scope's memories, in seconds.",
        ),
        Column(
            "updated_at",
            DateTime(timezone=True),
            nullable=False,
            server_default=text("now()"),
            comment="When the policy was last set.",
        ),
        PrimaryKeyConstraint("tenant_id", "id"),
        CheckConstraint("half_life_s > 0", name="half_life_positive"),
        comment=POLICIES_COMMENT,
    )
    Index(
        "uq_memory_policies_scope",
        *(policies.c[c] for c in ("tenant_id", "project_id", "agent_id", "session_id")),
        unique=True,
        postgresql_nulls_not_distinct=True,
    )


def _add_checkpoint_table(metadata: MetaData) -> None:
    checkpoints = Table(
        "session_checkpoints",
        metadata,
        *_scope_columns(session_required=True),
        Column("id", UUID(as_uuid=True), nullable=False, comment="Checkpoint id (a full uuid)."),
        Column(
            "description",
            Text,
            nullable=False,
            server_default=text("''"),
            comment="What the checkpoint marks.",
        ),
        Column("data", JSONB, nullable=False, comment="The saved session state."),
        Column("size_bytes", Integer, nullable=False, comment="Size of data as JSON text."),
        Column(
            "created_at",
            DateTime(timezone=True),
            nullable=False,
            server_default=text("clock_timestamp()"),
            comment="When it was taken.",
        ),
        change_key_column("the checkpoint's write"),
        created_xid_column(),
        PrimaryKeyConstraint("tenant_id", "id"),
        comment="Durable snapshots of session state; the newest N per session are kept.",
    )
    Index("ix_session_checkpoints_id", checkpoints.c.id)
    Index(
        "ix_session_checkpoints_session",
        checkpoints.c.tenant_id,
        checkpoints.c.project_id,
        checkpoints.c.agent_id,
        checkpoints.c.session_id,
        checkpoints.c.created_at.desc(),
        checkpoints.c.id.desc(),
    )


LANGGRAPH_COMMENTS = {
    "thread_id": "LangGraph thread the row belongs to.",
    "checkpoint_ns": "LangGraph checkpoint namespace ('' for the root graph).",
}


def _langgraph_thread_columns() -> list[Column[Any]]:
    return [
        Column("tenant_id", Text, nullable=False, comment=SCOPE_COMMENTS["tenant_id"]),
        Column("thread_id", Text, nullable=False, comment=LANGGRAPH_COMMENTS["thread_id"]),
        Column(
            "checkpoint_ns", Text, nullable=False, comment=LANGGRAPH_COMMENTS["checkpoint_ns"]
        ),
    ]


def _add_langgraph_tables(metadata: MetaData) -> None:
    """Tables of the LangGraph checkpointer (``memsvc.integrations.langgraph``)."""
    checkpoints = Table(
        "langgraph_checkpoints",
        metadata,
        *_langgraph_thread_columns(),
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
        *_langgraph_thread_columns(),
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
        *_langgraph_thread_columns(),
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


def _add_langgraph_store_tables(
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
