"""Tests against a real Citus cluster (coordinator + 2 workers), marked ``citus``.

They need a Citus kit (``MEMSVC_CITUS_KIT``, see :mod:`memsvc.testing.citus`)
and skip with that reason without one. Run them alone:
``MEMSVC_CITUS_KIT=<kit dir> pytest tests/citus -m citus``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memsvc.testing.citus import (  # noqa: F401  (fixtures, found by name)
    citus_cluster,
    citus_schema,
    citus_service,
    citus_settings,
)
from tests.citus.prototype_fixes import PROTOTYPE_ENV, prototype_fixes  # noqa: F401

HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "citus: needs a Citus cluster (MEMSVC_CITUS_KIT names the kit)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.citus)


@pytest.fixture(scope="session", autouse=True)
def citus_prototype(request: pytest.FixtureRequest) -> None:
    """The research prototype of the fixes, when ``MEMSVC_CITUS_PROTOTYPE=1`` (see its module)."""
    if os.environ.get(PROTOTYPE_ENV) == "1":
        request.getfixturevalue("prototype_fixes")
