"""Fixtures for the framework adapters' tests.

LangChain's standard vector store tests embed with a 6-dimension fake
embedding, so they get databases cloned from a template migrated with
``embedding_dim=6`` (in its own schema, should the server refuse CREATE
DATABASE and every template share one database).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from memsvc.core.settings import Settings
from memsvc.testing.postgres import MigratedTemplate, TestPostgres

T = TypeVar("T")

SMALL_DIM = 6


class LoopThread:
    """An event loop running in a daemon thread, as an app's server loop would."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


@pytest.fixture(scope="session")
async def dim6_template(memsvc_postgres: TestPostgres) -> AsyncIterator[MigratedTemplate]:
    """A template database migrated with 6-dimension embeddings."""
    template = MigratedTemplate(memsvc_postgres, embedding_dim=SMALL_DIM, db_schema="memsvc_dim6")
    await template.build()
    yield template
    await template.drop()


@pytest.fixture
async def dim6_settings(dim6_template: MigratedTemplate) -> AsyncIterator[Settings]:
    """Settings of a fresh 6-dimension database for this test."""
    async with dim6_template.fresh_database() as dsn:
        yield dim6_template.settings(dsn)


@pytest.fixture
def loop_thread() -> Iterator[LoopThread]:
    """A background event loop, stopped after the test."""
    runner = LoopThread()
    yield runner
    runner.stop()
