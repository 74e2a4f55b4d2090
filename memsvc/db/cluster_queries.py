"""SQL of :mod:`memsvc.db.cluster`."""

from __future__ import annotations

CITUS_INSTALLED = "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"
