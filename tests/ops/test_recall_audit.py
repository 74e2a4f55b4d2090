"""Recall audit: search recall against an exact scan, per scope-size bucket, on real PostgreSQL."""

from __future__ import annotations

import asyncio

import asyncpg
import numpy as np
import pytest
from click.testing import CliRunner

from memsvc import MemoryService, Scope, ValidationError
from memsvc.cli import main
from memsvc.ops.recall_audit import bucket_label, bucket_of

from .conftest import Cli, open_service

DIM = 384


def vectors(count: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(count, DIM))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


async def fill(service: MemoryService, scope: Scope, count: int, seed: int) -> None:
    rows = vectors(count, seed)
    await service.memories.add_many(
        scope, [{"content": f"{scope.levels} {i}", "embedding": v} for i, v in enumerate(rows)]
    )


def test_scope_sizes_fall_in_the_documented_buckets() -> None:
    assert [bucket_of(n) for n in (1, 99, 100, 999, 1_000, 9_999, 10_000, 10**7)] == [
        0, 0, 1, 1, 2, 2, 3, 3,
    ]
    assert [bucket_label(1, 99), bucket_label(1_000, 9_999), bucket_label(10_000, None)] == [
        "1-99", "1,000-9,999", "10,000+",
    ]


async def test_audit_reports_recall_and_short_pages_per_bucket(
    service: MemoryService, db: asyncpg.Connection
) -> None:
    for i, size in enumerate((10, 20, 50)):
        await fill(service, Scope("acme", f"small-{i}"), size, seed=i)
    await fill(service, Scope("acme", "medium"), 150, seed=9)
    # Expired rows are no part of any scope's size: this scope is not counted.
    gone = await service.memories.add(Scope("acme", "expired"), "x", embedding=vectors(1, 7)[0])
    await db.execute(
        "UPDATE memsvc.memories SET expires_at = now() - interval '1 minute' WHERE id = $1",
        gone.id,
    )

    report = await service.maintenance.recall_audit(sample=20)

    small, medium, large, huge = report.buckets
    assert (small.label, small.scopes, small.queries) == ("1-99", 3, 20)
    assert (medium.label, medium.scopes, medium.queries) == ("100-999", 1, 20)
    assert small.recall == 1.0 and small.short_pages == 0
    assert medium.recall is not None and medium.recall >= 0.9 and medium.short_pages == 0
    for empty in (large, huge):
        assert (empty.scopes, empty.queries, empty.recall) == (0, 0, None)
    assert report.ok and report.failing == []

    # A sample larger than a bucket's rows asks each row at most once.
    whole = await service.maintenance.recall_audit(sample=1_000, perturb=0.2, seed=3)
    assert whole.buckets[0].queries == 80 and whole.buckets[1].queries == 150


async def test_audit_rejects_bad_arguments_by_name(service: MemoryService) -> None:
    for kwargs, field in (
        ({"sample": 0}, "sample"),
        ({"sample": True}, "sample"),
        ({"threshold": 1.5}, "threshold"),
        ({"threshold": float("nan")}, "threshold"),
        ({"k": 0}, "k"),
        ({"perturb": -0.1}, "perturb"),
    ):
        with pytest.raises(ValidationError) as caught:
            await service.maintenance.recall_audit(**kwargs)  # type: ignore[arg-type]
        assert caught.value.field == field


async def test_doctor_recall_prints_buckets_and_passes(service: MemoryService, cli: Cli) -> None:
    await fill(service, Scope("acme", "p"), 30, seed=1)
    result = await cli("doctor", "--recall", "--sample", "5")
    assert result.exit_code == 0, result.output
    assert "recall@10" in result.output
    assert "1-99" in result.output and "10,000+" in result.output
    assert "recall ok" in result.output


async def test_doctor_recall_fails_when_the_index_misses_neighbours(
    memsvc_database_url: str,
) -> None:
    """A starved HNSW search (ef_search=1, few tuples scanned) on many rows loses recall."""
    svc = await open_service(memsvc_database_url)
    try:
        await fill(svc, Scope("acme", "big"), 3_000, seed=5)
        await svc.pool.execute("ANALYZE memsvc.memories")
    finally:
        await svc.close()
    starved = await open_service(
        memsvc_database_url, hnsw_ef_search=1, hnsw_max_scan_tuples=10
    )
    try:
        report = await starved.maintenance.recall_audit(sample=30, perturb=0.5)
    finally:
        await starved.close()
    bucket = report.buckets[2]
    assert bucket.queries == 30
    if bucket.recall is not None and bucket.recall >= 0.9:
        pytest.skip(f"the planner scanned exactly (recall {bucket.recall}): no index to starve")
    assert not report.ok and report.failing == [bucket]

    env = {
        "MEMSVC_DATABASE_URL": memsvc_database_url,
        "MEMSVC_AUTO_MIGRATE": "false",
        "MEMSVC_HNSW_EF_SEARCH": "1",
        "MEMSVC_HNSW_MAX_SCAN_TUPLES": "10",
    }
    result = await asyncio.to_thread(
        CliRunner().invoke, main, ["doctor", "--recall", "--sample", "30"], env=env
    )
    assert result.exit_code == 1, result.output
    assert "RECALL BELOW 0.9 in scopes of 1,000-9,999" in result.output
