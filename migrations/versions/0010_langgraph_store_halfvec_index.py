"""LangGraph store: the HNSW index of full-precision vectors holds half-precision copies.

A search walks the index for candidates and ranks them by their exact
distance, so scores stay those of the stored vectors; the index is half the
size, so more of it stays in the server's buffers. Schemas whose vector type
is already ``halfvec`` keep their index.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from memsvc.db.migrate import settings_for_migration
from memsvc.db.tables import OPCLASSES, store_vector_index_expression

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_langgraph_store_vectors_embedding_hnsw"


def _recreate(expression: str, opclass: str) -> None:
    settings = settings_for_migration()
    schema = settings.db_schema
    op.execute(f"DROP INDEX IF EXISTS {schema}.{INDEX}")
    op.execute(
        f"CREATE INDEX {INDEX} ON {schema}.langgraph_store_vectors USING hnsw "
        f"(({expression}) {opclass}) "
        f"WITH (m = {int(settings.hnsw_m)}, ef_construction = {int(settings.hnsw_ef_construction)})"
    )


def upgrade() -> None:
    settings = settings_for_migration()
    if settings.vector_type != "vector":
        return
    _recreate(store_vector_index_expression(settings), OPCLASSES[("halfvec", settings.distance)])


def downgrade() -> None:
    settings = settings_for_migration()
    if settings.vector_type != "vector":
        return
    _recreate("embedding", OPCLASSES[("vector", settings.distance)])
