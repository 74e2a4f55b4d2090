"""Record how many hash partitions ``memories`` has (``Settings.partitions``).

0001 creates ``memories`` partitioned by hash of ``tenant_id`` when
``Settings.partitions`` > 1; the count is read back from the catalog here and
kept in ``schema_info`` (0 for an unpartitioned table, databases created
before the setting included), so a service opened with another count is
refused like one with another embedding dimension.

Row-level security: a policy on the parent binds every query through it, but
the runtime role may read the partitions directly (it is granted every table
of the schema), so each partition gets the parent's policy, enabled and
forced when the parent's is. The partitions' indexes are renamed after their
parent index (``ix_memories_embedding_hnsw_p0``, ...), so plans name them.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from memsvc.db.migrate import settings_for_migration
from memsvc.db.partition_queries import (
    name_partition_indexes,
    record_partitions,
    secure_partitions,
    unsecure_partitions,
)
from memsvc.db.partitions import SETTING_KEY

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = settings_for_migration().db_schema
    op.execute(record_partitions(schema))
    op.execute(secure_partitions(schema))
    op.execute(name_partition_indexes(schema))


def downgrade() -> None:
    schema = settings_for_migration().db_schema
    op.execute(unsecure_partitions(schema))
    op.execute(f"DELETE FROM {schema}.schema_info WHERE key = '{SETTING_KEY}'")
