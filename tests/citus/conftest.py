"""Tests against a real Citus cluster (coordinator + 2 workers), marked ``citus``.

They need a Citus kit (``MEMSVC_CITUS_KIT``, see :mod:`memsvc.testing.citus`)
and skip with that reason without one. Run them alone:
``MEMSVC_CITUS_KIT=<kit dir> pytest tests/citus -m citus``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memsvc import MemoryService, Settings
from memsvc.testing.citus import (  # noqa: F401  (fixtures, found by name)
    citus_cluster,
    citus_schema,
    citus_service,
    citus_settings,
)

HERE = Path(__file__).parent


# The single-node suite's fixtures, pointed at the cluster: the test modules
# test_suites_*.py import single-node tests, which then run here unchanged.
@pytest.fixture
def settings(citus_settings: Settings) -> Settings:  # noqa: F811  (the fixture)
    return citus_settings


@pytest.fixture
def service(citus_service: MemoryService) -> MemoryService:  # noqa: F811  (the fixture)
    return citus_service


@pytest.fixture
def memsvc_database_url(citus_settings: Settings) -> str:  # noqa: F811  (the fixture)
    """The coordinator's database, for tests that read tables with a connection of their own."""
    assert citus_settings.database_url is not None
    return citus_settings.database_url


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.citus)
