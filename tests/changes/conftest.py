"""Fixtures of the change feed tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.changes.clusters import Cluster, start_cluster


@pytest.fixture(scope="session")
def other_cluster() -> Iterator[Cluster]:
    """A second PostgreSQL cluster (restores land there; prepared transactions allowed)."""
    yield from start_cluster()
