"""Online embedding-model migration (``memsvc reembed``): searches stay right throughout.

The "old" model is the 384-dimension hashing embedder the suite uses; the
"new" ones are hashing embedders of another dimension, or of the same
dimension with a salt (a different model in the same space shape).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import asyncpg
import numpy as np
import pytest

from memsvc import MemoryService, Scope, ValidationError
from memsvc.core.errors import SchemaError
from memsvc.embedding import HashingEmbedder
from memsvc.ops.reembed import Reembedder
from memsvc.testing.postgres import settings_for_tests

from .conftest import Cli

OLD_DIM = 384
NEW_DIM = 96
REFRESH_S = 0.2  # services re-read the migration state this often (the switch waits 2x)
SCOPE = Scope(tenant="acme", project="bridge", agent="planner")


class SaltedHashing(HashingEmbedder):
    """A hashing embedder whose vectors differ from the plain one's: another "model"."""

    def embed_one(self, text: str) -> Any:
        return super().embed_one("salted " + text)


def content(i: int) -> str:
    return f"memory {i} about topic{i} and word{i % 7} with marker{i}x"


async def open_aware(dsn: str, next_embedder: Any) -> MemoryService:
    """A service told the new model (it follows the switch)."""
    settings = settings_for_tests(dsn, embedding_state_refresh_s=REFRESH_S)
    return await MemoryService.open(
        settings, embedder=HashingEmbedder(OLD_DIM), next_embedder=next_embedder
    )


async def seed(svc: MemoryService, n: int) -> list[Any]:
    memories = await svc.memories.add_many(SCOPE, [content(i) for i in range(n)])
    await svc.assemblies.create(SCOPE, "evens", memory_ids=[m.id for m in memories[:40:2]])
    return memories


async def search_continuously(
    svc: MemoryService, n: int, stop: asyncio.Event, seen: list[int]
) -> None:
    """Search each memory by its own text: it must always come first, before and after."""
    i = 0
    while not stop.is_set():
        target = content(i % n)
        hits = await svc.memories.search(SCOPE, target, k=3, mode="vector")
        assert hits, "a search found nothing"
        assert hits[0].memory.content == target, (target, [h.memory.content for h in hits])
        seen.append(svc.memories.embedding_dim)
        i += 7
        await asyncio.sleep(0)


async def assert_all_in(conn: asyncpg.Connection, schema: str, embedder: Any, dim: int) -> None:
    """Every memory's embedding is ``embedder``'s embedding of its content."""
    rows = await conn.fetch(f"SELECT content, embedding::real[] AS e FROM {schema}.memories")
    assert rows
    for row in rows:
        stored = np.asarray(row["e"], dtype=np.float32)
        assert stored.shape == (dim,)
        expected = (await embedder([row["content"]]))[0]
        assert np.allclose(stored, expected, atol=1e-6), row["content"]


async def recorded_dim(conn: asyncpg.Connection, schema: str) -> int:
    return int(
        await conn.fetchval(f"SELECT value FROM {schema}.schema_info WHERE key='embedding_dim'")
    )


async def test_reembed_switches_while_searches_and_writes_run(
    memsvc_database_url: str, db: asyncpg.Connection
) -> None:
    new = HashingEmbedder(NEW_DIM)
    svc = await open_aware(memsvc_database_url, new)
    schema = svc.settings.db_schema
    try:
        n = 300
        await seed(svc, n)
        stop = asyncio.Event()
        seen: list[int] = []
        searcher = asyncio.create_task(search_continuously(svc, n, stop, seen))

        async def write_meanwhile() -> int:
            written = 0
            while not stop.is_set():
                await svc.memories.add(SCOPE, f"written during the migration {written}")
                await svc.memories.put(SCOPE, "k", f"keyed version {written}")
                written += 1
                await asyncio.sleep(0.01)
            return written

        writer = asyncio.create_task(write_meanwhile())
        report = await svc.maintenance.reembed("hashing", dim=NEW_DIM, batch_size=40)
        await asyncio.sleep(3 * REFRESH_S)  # searches and writes go on after the switch
        stop.set()
        await searcher
        written = await writer
        # Assemblies are searched in the new space too.
        found = await svc.assemblies.search(SCOPE, new.embed_one(content(0)), k=1)
        assert [hit.assembly.name for hit in found] == ["evens"]
    finally:
        await svc.close()

    assert report.switched_here and report.dim == NEW_DIM
    assert written > 0
    assert OLD_DIM in seen and seen[-1] == NEW_DIM, "searches ran before and after the switch"
    assert await recorded_dim(db, schema) == NEW_DIM
    await assert_all_in(db, schema, new, NEW_DIM)
    # The centroid of the assembly is the mean of its members' new embeddings.
    row = await db.fetchrow(
        f"SELECT centroid::real[] AS c, embedded_count FROM {schema}.assemblies"
    )
    members = await db.fetch(
        f"SELECT m.embedding::real[] AS e FROM {schema}.assembly_members am "
        f"JOIN {schema}.memories m ON m.tenant_id = am.tenant_id AND m.id = am.memory_id"
    )
    assert row["embedded_count"] == len(members) == 20
    mean = np.mean([np.asarray(m["e"]) for m in members], axis=0)
    assert np.allclose(np.asarray(row["c"]), mean, atol=1e-5)
    # The old column, its trigger and the second index are gone; the view still works.
    columns = await db.fetchval(
        "SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 "
        "AND table_name = 'memories' AND column_name LIKE 'embedding%'",
        schema,
    )
    assert columns == 1
    assert await db.fetchval(f"SELECT sum(embedded_memories) FROM {schema}.scope_stats") > n
    index = await db.fetchval(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 "
        "AND indexname = 'ix_memories_embedding_hnsw'",
        schema,
    )
    assert index is not None and "hnsw" in index

    # A service opened afterwards with the new settings works and passes the doctor.
    after = settings_for_tests(memsvc_database_url, embedding_dim=NEW_DIM)
    async with MemoryService.open(after, embedder=new) as fresh:
        hits = await fresh.memories.search(SCOPE, content(5), k=1, mode="vector")
        assert hits[0].memory.content == content(5)
        doctor = await fresh.maintenance.doctor()
        assert doctor.ok, [c for c in doctor.checks if c.status != "ok"]


async def test_reembed_to_another_model_of_the_same_dimension(
    memsvc_database_url: str, db: asyncpg.Connection
) -> None:
    salted = SaltedHashing(OLD_DIM)
    svc = await open_aware(memsvc_database_url, salted)
    try:
        await seed(svc, 60)
        report = await svc.maintenance.reembed(salted, spec="salted", batch_size=25)
        assert report.switched_here
        # Text queries now embed with the new model: the hit is exact.
        hits = await svc.memories.search(SCOPE, content(9), k=1, mode="vector")
        assert hits[0].memory.content == content(9)
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)
        added = await svc.memories.add(SCOPE, "after the switch")
        assert np.allclose(added.embedding, salted.embed_one("after the switch"), atol=1e-6)
    finally:
        await svc.close()
    await assert_all_in(db, svc.settings.db_schema, salted, OLD_DIM)


async def test_workers_share_the_rows_and_one_switches(
    memsvc_database_url: str, db: asyncpg.Connection
) -> None:
    new = HashingEmbedder(NEW_DIM)
    services = [await open_aware(memsvc_database_url, new) for _ in range(3)]
    try:
        n = 400
        await seed(services[0], n)
        reports = await asyncio.gather(
            *(s.maintenance.reembed("hashing", dim=NEW_DIM, batch_size=10) for s in services)
        )
    finally:
        for s in services:
            await s.close()
    # Every row embedded exactly once (SKIP LOCKED: no worker redid another's rows).
    assert sum(r.embedded + r.caught_up for r in reports) == n
    assert sum(r.switched_here for r in reports) == 1
    assert len({r.migration_id for r in reports}) == 1
    await assert_all_in(db, services[0].settings.db_schema, new, NEW_DIM)


async def test_writers_without_the_new_model_are_caught_up_then_refused(
    memsvc_database_url: str, db: asyncpg.Connection
) -> None:
    new = HashingEmbedder(NEW_DIM)
    aware = await open_aware(memsvc_database_url, new)
    unaware = await MemoryService.open(
        settings_for_tests(memsvc_database_url, embedding_state_refresh_s=REFRESH_S),
        embedder=HashingEmbedder(OLD_DIM),
    )
    try:
        memories = await seed(aware, 50)

        async def migrate() -> Any:
            return await aware.maintenance.reembed("hashing", dim=NEW_DIM, batch_size=10)

        task = asyncio.create_task(migrate())
        # Wait until the migration is recorded, then write and edit without the new model.
        while not await db.fetchval(
            f"SELECT count(*) FROM {aware.settings.db_schema}.embedding_migrations"
        ):
            await asyncio.sleep(0.01)
        await unaware.memories.add(SCOPE, "an unaware write")
        await unaware.memories.update(memories[0].id, content="edited by an unaware writer")
        await task
        await asyncio.sleep(2 * REFRESH_S)
        with pytest.raises(SchemaError, match="reopen the service"):
            await unaware.memories.add(SCOPE, "after the switch, old model")
    finally:
        await aware.close()
        await unaware.close()
    await assert_all_in(db, aware.settings.db_schema, new, NEW_DIM)


async def test_reembed_refuses_bad_input_and_a_second_migration(
    memsvc_database_url: str, db: asyncpg.Connection
) -> None:
    svc = await open_aware(memsvc_database_url, HashingEmbedder(NEW_DIM))
    schema = svc.settings.db_schema
    try:
        await seed(svc, 5)
        with pytest.raises(ValidationError) as bad_batch:
            await svc.maintenance.reembed("hashing", dim=NEW_DIM, batch_size=0)
        assert bad_batch.value.field == "batch_size"
        with pytest.raises(ValidationError) as bad_dim:
            await svc.maintenance.reembed("hashing", dim=0)
        assert bad_dim.value.field == "dim"
        with pytest.raises(ValidationError) as bad_spec:
            await svc.maintenance.reembed("nonsense", dim=NEW_DIM)
        assert bad_spec.value.field == "embedder"
        assert await db.fetchval(f"SELECT count(*) FROM {schema}.embedding_migrations") == 0
        # One migration is in progress (recorded by hand, as a crashed worker leaves it).
        await db.execute(
            f"INSERT INTO {schema}.embedding_migrations (embedder, dim) VALUES ('hashing', 64)"
        )
        with pytest.raises(ValidationError) as other:
            await svc.maintenance.reembed("hashing", dim=NEW_DIM)
        assert other.value.field == "embedder"
    finally:
        await svc.close()


def _reembed_process(dsn: str, batch: int, log: IO[bytes]) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "MEMSVC_DATABASE_URL": dsn,
        "MEMSVC_AUTO_MIGRATE": "false",
        "MEMSVC_EMBEDDING_STATE_REFRESH_S": str(REFRESH_S),
    }
    command = [sys.executable, "-m", "memsvc", "reembed", "--embedder", "hashing",
               "--dim", str(NEW_DIM), "--batch-size", str(batch)]  # fmt: skip
    # Output goes to a file: a pipe nobody reads could fill and stall the worker.
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


async def test_kill_9_mid_migration_then_resume(
    memsvc_database_url: str,
    db: asyncpg.Connection,
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("MEMSVC_EMBEDDING_STATE_REFRESH_S", str(REFRESH_S))
    new = HashingEmbedder(NEW_DIM)
    svc = await open_aware(memsvc_database_url, new)
    schema = svc.settings.db_schema
    try:
        n = 2000
        await seed(svc, n)
        stop = asyncio.Event()
        seen: list[int] = []
        searcher = asyncio.create_task(search_continuously(svc, n, stop, seen))
        log_path = tmp_path / "reembed.log"
        log = log_path.open("wb")
        process = _reembed_process(memsvc_database_url, batch=5, log=log)
        filled: Sequence[Any] = []
        try:
            # Kill it once it has embedded some rows and before it switched.
            for _ in range(20_000):  # bounded: a stuck worker fails the test, not hangs it
                if process.poll() is not None:
                    break
                if await db.fetchval(
                    "SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 "
                    "AND table_name = 'memories' AND column_name = 'embedding_next'",
                    schema,
                ):
                    filled = await db.fetch(
                        f"SELECT id FROM {schema}.memories WHERE embedding_next IS NOT NULL "
                        "LIMIT 1"
                    )
                    if filled:
                        break
                await asyncio.sleep(0.005)
            process.send_signal(signal.SIGKILL)
            process.wait()
        finally:
            if process.poll() is None:
                process.kill()
            log.close()
        assert filled, "no row embedded before the worker ended: " + log_path.read_text()
        assert await recorded_dim(db, schema) == OLD_DIM, "killed before the switch"

        doctor = await cli("doctor")
        assert "embedding migration" in doctor.output
        assert "in progress" in doctor.output and "rows embedded" in doctor.output

        # Searches kept working with the old model; a new worker finishes the job.
        await asyncio.sleep(0.1)
        assert seen and set(seen) == {OLD_DIM}
        result = await cli("reembed", "--embedder", "hashing", "--dim", str(NEW_DIM),
                           "--batch-size", "200")  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "switched" in result.output
        await asyncio.sleep(3 * REFRESH_S)
        stop.set()
        await searcher
    finally:
        await svc.close()
    assert seen[-1] == NEW_DIM
    assert await recorded_dim(db, schema) == NEW_DIM
    await assert_all_in(db, schema, new, NEW_DIM)


async def test_a_worker_still_filling_when_another_switches_returns_cleanly(
    memsvc_database_url: str, db: asyncpg.Connection
) -> None:
    new = HashingEmbedder(NEW_DIM)
    first = await open_aware(memsvc_database_url, new)
    second = await open_aware(memsvc_database_url, new)
    try:
        await seed(first, 30)
        late = Reembedder(
            second.pool, second.settings, second.dsn, new, spec="hashing", dim=NEW_DIM
        )
        joined = await late._start()  # joins the migration, then falls behind
        done = await first.maintenance.reembed("hashing", dim=NEW_DIM)
        assert done.switched_here and done.migration_id == joined.migration_id
        await late._fill(joined)  # the second column is gone: nothing left, no error
        assert joined.embedded == 0
        again = await second.maintenance.reembed("hashing", dim=NEW_DIM)
        assert again.already_done and not again.switched_here
    finally:
        await first.close()
        await second.close()
    await assert_all_in(db, first.settings.db_schema, new, NEW_DIM)


async def test_after_a_new_dimension_open_and_doctor_name_the_setting_to_change(
    memsvc_database_url: str, cli: Cli
) -> None:
    svc = await open_aware(memsvc_database_url, HashingEmbedder(NEW_DIM))
    try:
        await svc.memories.add_many(SCOPE, [content(i) for i in range(5)])
        await svc.maintenance.reembed("hashing", dim=NEW_DIM, batch_size=10)
    finally:
        await svc.close()
    # Settings still at the old dimension: the schema is fine, the setting is not.
    with pytest.raises(SchemaError) as raised:
        await MemoryService.open(settings_for_tests(memsvc_database_url))
    message = str(raised.value)
    assert f"set MEMSVC_EMBEDDING_DIM={NEW_DIM} to use it" in message
    assert "Use the same settings" not in message
    found = await cli("doctor")
    assert found.exit_code == 1
    assert f"MEMSVC_EMBEDDING_DIM={NEW_DIM}" in found.output
    assert "try --repair" not in found.output  # it cannot fix a setting
    assert found.output.rstrip().endswith("1 problem(s) remain")


async def test_the_switch_keeps_view_grants_to_roles_whose_names_need_quotes(
    memsvc_database_url: str, db: asyncpg.Connection
) -> None:
    # The switch recreates the views that read the embedding with their
    # grants. A role's name as regrole writes it is already an identifier
    # ("Report Readers" with its quotes): quoting it again named no role.
    role = f"Report Readers {os.getpid()}"
    schema = "memsvc"
    await db.execute(f'CREATE ROLE "{role}"')
    try:
        await db.execute(f'GRANT SELECT ON {schema}.scope_stats TO "{role}"')
        salted = SaltedHashing(OLD_DIM)
        svc = await open_aware(memsvc_database_url, salted)
        try:
            await seed(svc, 10)
            report = await svc.maintenance.reembed(salted, spec="salted", batch_size=25)
            assert report.switched_here
        finally:
            await svc.close()
        allowed = await db.fetchval(
            "SELECT has_table_privilege($1, $2, 'SELECT')", role, f"{schema}.scope_stats"
        )
        assert allowed
    finally:
        await db.execute(f'DROP OWNED BY "{role}"')
        await db.execute(f'DROP ROLE "{role}"')
