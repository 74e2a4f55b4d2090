"""Embedder benchmark: what embedding costs an app, and what memsvc saves of it.

    python -m benchmarks.embedders                  # all-MiniLM-L6-v2 if installed
    python -m benchmarks.embedders --adds 200 --database-url postgresql://...

Reports, each against its peer measured in the same run:
- duplicate ``add`` p50 (the stored memory comes back, no embedder call)
  against a first ``add`` of new text (one embedder call), and how many texts
  the embedder saw;
- the longest event-loop stall while a batch is embedded with
  ``SentenceTransformerEmbedder`` (encode in a worker thread) against calling
  the model's encode on the loop.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from benchmarks.scratch import scratch_dir
from memsvc import MemoryService, Scope, Settings
from memsvc.db.embedded import EmbeddedPostgres
from memsvc.embedding import Embedder, HashingEmbedder, SentenceTransformerEmbedder


class Counting:
    """Wraps an embedder and counts the texts it is given."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.texts = 0

    async def __call__(self, texts: Sequence[str]) -> Sequence[Any]:
        self.texts += len(texts)
        return await self.inner(texts)


def sentence(i: int) -> str:
    return f"note {i}: the deploy of service {i % 17} moved to slot {i * 7 % 23} after review"


async def p50_ms(calls: list[Callable[[], Awaitable[Any]]]) -> float:
    times = []
    for call in calls:
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def embed_once(dsn: str, embedder: Embedder, label: str, adds: int) -> None:
    counting = Counting(embedder)
    settings = Settings(database_url=dsn, auto_migrate=True, pool_max_size=2)
    async with MemoryService.open(settings, embedder=counting) as svc:
        scope = Scope("bench", "embedders", "agent", f"run-{time.time_ns()}")
        fresh = await p50_ms(
            [lambda i=i: svc.memories.add(scope, sentence(i)) for i in range(adds)]
        )
        seen = counting.texts
        again = await p50_ms(
            [lambda i=i: svc.memories.add(scope, sentence(i)) for i in range(adds)]
        )
        print(f"embed once ({label}, {adds} adds)")
        print(f"  first add p50      {fresh:8.2f} ms  ({seen} texts embedded)")
        print(
            f"  duplicate add p50  {again:8.2f} ms  ({counting.texts - seen} texts embedded)"
            f"  ratio {again / fresh:.3f}x"
        )


async def loop_stall(embedder: SentenceTransformerEmbedder, batch: int) -> None:
    texts = [sentence(i) for i in range(batch)]
    embedder.embed_sync(texts[:4])  # load the model outside the measurement

    async def longest_gap(work: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
        gaps: list[float] = []
        done = asyncio.Event()

        async def ticker() -> None:
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(0.001)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0.01)
        started = time.perf_counter()
        await work()
        elapsed = time.perf_counter() - started
        done.set()
        await task
        return max(gaps) * 1000, elapsed * 1000

    async def on_the_loop() -> None:
        embedder.embed_sync(texts)

    threaded, threaded_total = await longest_gap(lambda: embedder(texts))
    blocking, blocking_total = await longest_gap(on_the_loop)
    print(f"event loop while embedding {batch} texts (all-MiniLM-L6-v2, CPU)")
    print(f"  encode on the loop   longest stall {blocking:8.1f} ms of {blocking_total:.0f} ms")
    print(
        f"  worker thread        longest stall {threaded:8.1f} ms of {threaded_total:.0f} ms"
        f"  ratio {threaded / blocking:.3f}x"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="PostgreSQL with pgvector (default: embedded)")
    parser.add_argument("--adds", type=int, default=100, help="adds per measurement")
    parser.add_argument("--batch", type=int, default=128, help="texts in the stall batch")
    args = parser.parse_args()

    local = None
    if importlib.util.find_spec("sentence_transformers") is not None:
        local = SentenceTransformerEmbedder("all-MiniLM-L6-v2", device="cpu")
    else:
        print("(sentence-transformers not installed: HashingEmbedder only, no stall figures)")

    embedded = None
    dsn = args.database_url
    if dsn is None:
        embedded = EmbeddedPostgres(scratch_dir("memsvc-bench-"))
        dsn = embedded.start()
    try:
        await embed_once(dsn, HashingEmbedder(), "HashingEmbedder", args.adds)
        if local is not None:
            await embed_once(dsn, local, "all-MiniLM-L6-v2", args.adds)
            await loop_stall(local, args.batch)
    finally:
        if embedded is not None:
            embedded.close()


if __name__ == "__main__":
    asyncio.run(main())
