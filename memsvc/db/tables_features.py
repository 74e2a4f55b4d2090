"""Tables of assemblies, messages, consolidation, policies, checkpoints, scope indexes."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKeyConstraint,
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
    DOUBLE_PRECISION,
    JSONB,
    UUID,
)

from memsvc.core.settings import Settings
from memsvc.db.table_columns import (
    POLICIES_COMMENT,
    SCOPE_COMMENTS,
    change_key_column,
    created_xid_column,
    scope_columns,
    vector_column_type,
)


def add_assembly_tables(
    metadata: MetaData, settings: Settings, opclass: str, hnsw_with: dict[str, int]
) -> None:
    scope = ("tenant_id", "project_id", "agent_id", "session_id")
    assemblies = Table(
        "assemblies",
        metadata,
        *scope_columns(),
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


def add_remembered_messages_table(metadata: MetaData) -> None:
    """The ledger of ``svc.remember``: which messages a scope has remembered."""
    remembered = Table(
        "remembered_messages",
        metadata,
        *scope_columns(),
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


def add_consolidation_tables(metadata: MetaData, settings: Settings) -> None:
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


def add_policies_table(metadata: MetaData) -> None:
    """Half-life policies per tenant or scope (forgetting, ``svc.policies``)."""
    policies = Table(
        "memory_policies",
        metadata,
        *scope_columns(),
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


SCOPE_INDEXES_COMMENT = (
    "Scope indexes of memories: one partial HNSW index of memories per row, holding the "
    "vectors of one scope, or of its subtree (see memsvc.memories.scope_indexes)."
)
SCOPE_INDEX_NAME_COMMENT = "The partial HNSW index of memories, in this schema."
SCOPE_INDEX_STATE_COMMENT = "'building' (claimed by a build, or one that stopped) or 'ready'."
SCOPE_INDEX_INCLUDE_COMMENT = (
    "'exact': the index holds exactly this scope's vectors; 'descendants': its subtree's."
)
SCOPE_INDEX_VECTORS_COMMENT = (
    "Vectors the index held when it was built or gc last counted them; NULL: not counted."
)


def add_scope_indexes_table(metadata: MetaData) -> None:
    """The catalog of memories' scope indexes (``memory_scope_indexes``)."""
    Table(
        "memory_scope_indexes",
        metadata,
        *scope_columns(),
        Column("index_name", Text, nullable=False, comment=SCOPE_INDEX_NAME_COMMENT),
        Column("state", Text, nullable=False, comment=SCOPE_INDEX_STATE_COMMENT),
        Column(
            "include",
            Text,
            nullable=False,
            server_default=text("'exact'"),
            comment=SCOPE_INDEX_INCLUDE_COMMENT,
        ),
        Column("vectors", BigInteger, comment=SCOPE_INDEX_VECTORS_COMMENT),
        PrimaryKeyConstraint("tenant_id", "index_name"),
        CheckConstraint("state IN ('building', 'ready')", name="state"),
        CheckConstraint("include IN ('exact', 'descendants')", name="include"),
        comment=SCOPE_INDEXES_COMMENT,
    )


def add_checkpoint_table(metadata: MetaData) -> None:
    checkpoints = Table(
        "session_checkpoints",
        metadata,
        *scope_columns(session_required=True),
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
