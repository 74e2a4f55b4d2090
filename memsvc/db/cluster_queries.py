"""SQL of :mod:`memsvc.db.cluster`."""

from __future__ import annotations

CITUS_INSTALLED = "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"


def tenants_of_id(schema: str, table: str) -> str:
    """The tenants holding row ``$1`` of ``table`` (no lock; at most two are looked at)."""
    return f"SELECT DISTINCT tenant_id FROM {schema}.{table} WHERE id = $1 LIMIT 2"
