"""MemsvcSaver: LangGraph's own conformance suite, racing writers, retention, threads.

The conformance suite (``langgraph-checkpoint-conformance``) runs unmodified,
with every capability, directly and through pgbouncer in transaction mode.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

import asyncpg
import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver

from memsvc import HashingEmbedder, MemoryService, Settings, ValidationError
from memsvc.integrations.langgraph import MemsvcSaver
from memsvc.sync import SyncMemoryService
from memsvc.testing.postgres import settings_for_tests
from tests.reliability.test_pgbouncer import bouncer_service  # noqa: F401
from tests.test_row_level_security import rls_database  # noqa: F401

pytestmark = pytest.mark.timeout(300)

WRITERS = 20


async def run_conformance(service: MemoryService, **saver_args: Any) -> None:
    @checkpointer_test(name=f"MemsvcSaver-{uuid.uuid4().hex[:6]}")
    async def factory() -> AsyncIterator[MemsvcSaver]:
        yield MemsvcSaver(service, **saver_args)

    report = await validate(factory)
    failures = {
        name: result.failures for name, result in report.results.items() if not result.passed
    }
    assert failures == {}
    assert {cap.value for cap in ALL_CAPABILITIES} <= {
        name for name, result in report.results.items() if result.detected
    }
    assert report.passed_all_base() and report.passed_all()


async def put(
    saver: MemsvcSaver,
    thread: str,
    parent: dict[str, Any] | None = None,
    *,
    values: dict[str, Any] | None = None,
    ns: str = "",
    run_id: str | None = None,
) -> dict[str, Any]:
    """Put a checkpoint whose every channel gets a new version; returns its config."""
    config = generate_config(thread, checkpoint_ns=ns)
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    values = values or {}
    versions = {channel: saver.get_next_version(None, None) for channel in values}
    checkpoint = generate_checkpoint(channel_values=values, channel_versions=versions)
    extra = {} if run_id is None else {"run_id": run_id}
    stored: dict[str, Any] = await saver.aput(
        config, checkpoint, generate_metadata(**extra), versions
    )
    return stored


async def history(saver: MemsvcSaver, thread: str, ns: str = "") -> list[CheckpointTuple]:
    return [item async for item in saver.alist(generate_config(thread, checkpoint_ns=ns))]


# ------------------------------------------------------------------ conformance


async def test_conformance_suite_passes_with_every_capability(service: MemoryService) -> None:
    await run_conformance(service)


async def test_conformance_suite_passes_through_pgbouncer(
    bouncer_service: MemoryService,  # noqa: F811
) -> None:
    await run_conformance(bouncer_service)


async def test_conformance_suite_passes_with_retention_on(settings: Settings) -> None:
    # keep_latest and the retention both hold; a large N never prunes what the suite reads
    retaining = settings.model_copy(update={"langgraph_checkpoint_keep_last": 100})
    async with MemoryService.open(retaining, embedder=HashingEmbedder()) as service:
        await run_conformance(service)


async def test_conformance_suite_passes_under_row_level_security(
    rls_database: tuple[str, str],  # noqa: F811
) -> None:
    _, runtime_dsn = rls_database
    settings = settings_for_tests(runtime_dsn, row_level_security=True)
    async with MemoryService.open(settings, embedder=HashingEmbedder()) as service:
        await run_conformance(service, tenant="acme")


async def test_conformance_suite_passes_on_the_blocking_client(settings: Settings) -> None:
    # The suite awaits the saver on this test's loop; the client's connections
    # belong to its own loop, in its own thread.
    client = await asyncio.to_thread(SyncMemoryService.open, settings)
    try:
        await run_conformance(client)  # type: ignore[arg-type]
    finally:
        await asyncio.to_thread(client.close)


def test_the_blocking_client_serves_the_saver_from_plain_threads(settings: Settings) -> None:
    with SyncMemoryService.open(settings) as client:
        saver = MemsvcSaver(client)
        assert saver.svc is client.service
        versions = {"a": saver.get_next_version(None, None)}
        checkpoint = generate_checkpoint(channel_values={"a": 1}, channel_versions=versions)
        stored = saver.put(generate_config("t"), checkpoint, generate_metadata(), versions)
        found = saver.get_tuple(stored)
        assert found is not None and found.checkpoint["channel_values"] == {"a": 1}


@pytest.mark.parametrize("given", [object(), "postgresql://x/y", None])
def test_anything_but_a_client_is_a_type_error_saying_what_to_pass(given: object) -> None:
    with pytest.raises(TypeError, match=r"MemoryService or memsvc\.sync\.SyncMemoryService"):
        MemsvcSaver(given)  # type: ignore[arg-type]


# ------------------------------------------------------------------ concurrency


async def test_twenty_writers_forking_one_parent_all_keep_their_checkpoint(
    service: MemoryService,
) -> None:
    saver = MemsvcSaver(service)
    thread = str(uuid.uuid4())
    root = await put(saver, thread, values={"a": "root", "b": "root"})

    async def writer(number: int) -> dict[str, Any]:
        return await put(saver, thread, root, values={"a": f"w{number}", "b": f"w{number}"})

    children = await asyncio.gather(*(writer(n) for n in range(WRITERS)))

    stored = await history(saver, thread)
    assert len(stored) == WRITERS + 1  # every fork kept, nothing overwritten
    for number, child in enumerate(children):
        found = await saver.aget_tuple(child)
        assert found is not None
        assert found.checkpoint["channel_values"] == {"a": f"w{number}", "b": f"w{number}"}
        assert found.parent_config is not None
        assert (
            found.parent_config["configurable"]["checkpoint_id"]
            == (root["configurable"]["checkpoint_id"])
        )
    head = await saver.aget_tuple(generate_config(thread))
    assert head is not None
    assert head.checkpoint["id"] == max(c["configurable"]["checkpoint_id"] for c in children)


async def test_readers_racing_writers_see_only_whole_checkpoints(service: MemoryService) -> None:
    saver = MemsvcSaver(service)
    thread = str(uuid.uuid4())
    await put(saver, thread, values={"a": "start", "b": "start", "c": "start"})
    torn: list[dict[str, Any]] = []
    done = asyncio.Event()

    async def writer(number: int) -> None:
        parent = None
        for step in range(5):
            mark = f"w{number}-{step}"
            parent = await put(saver, thread, parent, values={"a": mark, "b": mark, "c": mark})

    async def reader() -> None:
        while not done.is_set():
            found = await saver.aget_tuple(generate_config(thread))
            assert found is not None
            if len(set(found.checkpoint["channel_values"].values())) != 1:
                torn.append(found.checkpoint["channel_values"])
            await asyncio.sleep(0)

    readers = [asyncio.create_task(reader()) for _ in range(3)]
    await asyncio.gather(*(writer(n) for n in range(WRITERS)))
    done.set()
    await asyncio.gather(*readers)
    assert torn == []
    assert len(await history(saver, thread)) == 1 + WRITERS * 5


async def test_twenty_tasks_writing_one_checkpoint_lose_no_write(service: MemoryService) -> None:
    saver = MemsvcSaver(service)
    stored = await put(saver, str(uuid.uuid4()), values={"a": 1})

    async def task(number: int) -> None:
        await saver.aput_writes(stored, [("a", number), ("b", -number)], f"task-{number:02}")

    await asyncio.gather(*(task(n) for n in range(WRITERS)))
    found = await saver.aget_tuple(stored)
    assert found is not None and found.pending_writes is not None
    assert sorted(found.pending_writes) == sorted(
        [(f"task-{n:02}", "a", n) for n in range(WRITERS)]
        + [(f"task-{n:02}", "b", -n) for n in range(WRITERS)]
    )


# --------------------------------------------------------------------- retention


async def blob_count(service: MemoryService, thread: str) -> int:
    count: int = await service.pool.fetchval(
        "SELECT count(*) FROM memsvc.langgraph_checkpoint_blobs WHERE thread_id = $1", thread
    )
    return count


async def test_retention_keeps_the_newest_n_with_a_whole_parent_chain(settings: Settings) -> None:
    retaining = settings.model_copy(update={"langgraph_checkpoint_keep_last": 3})
    async with MemoryService.open(retaining, embedder=HashingEmbedder()) as service:
        saver = MemsvcSaver(service)
        thread = str(uuid.uuid4())
        configs = []
        parent = None
        for step in range(10):
            parent = await put(saver, thread, parent, values={"a": step, "b": "same"})
            await saver.aput_writes(parent, [("a", step)], f"task-{step}")
            configs.append(parent)

        kept = await history(saver, thread)
        assert [t.config for t in kept] == list(reversed(configs[-3:]))
        # walking parents from the head reaches every kept checkpoint, then stops
        walk, cursor = [], kept[0].config
        while (found := await saver.aget_tuple(cursor)) is not None:
            walk.append(found.config)
            if found.parent_config is None:
                break
            cursor = found.parent_config
        assert walk == [t.config for t in kept]
        assert [t.checkpoint["channel_values"] for t in kept] == [
            {"a": 9, "b": "same"},
            {"a": 8, "b": "same"},
            {"a": 7, "b": "same"},
        ]
        assert [len(t.pending_writes or []) for t in kept] == [1, 1, 1]
        # blobs only for the kept checkpoints' versions: 3 of "a", 3 of "b"
        assert await blob_count(service, thread) == 6
        dropped = await saver.aget_tuple(configs[0])
        assert dropped is None


async def test_retention_is_exact_under_twenty_racing_writers(settings: Settings) -> None:
    await check_retention_under_racing_writers(settings)


async def test_retention_is_exact_under_racing_writers_through_pgbouncer(
    bouncer_service: MemoryService,  # noqa: F811
) -> None:
    await check_retention_under_racing_writers(bouncer_service.settings)


async def check_retention_under_racing_writers(settings: Settings) -> None:
    retaining = settings.model_copy(update={"langgraph_checkpoint_keep_last": 4})
    async with MemoryService.open(retaining, embedder=HashingEmbedder()) as service:
        saver = MemsvcSaver(service)
        thread = str(uuid.uuid4())
        root = await put(saver, thread, values={"a": "root"})
        children = await asyncio.gather(
            *(put(saver, thread, root, values={"a": n}) for n in range(WRITERS))
        )
        kept = [t.checkpoint["id"] for t in await history(saver, thread)]
        ids = sorted((c["configurable"]["checkpoint_id"] for c in children), reverse=True)
        # The newest 4 are kept, whatever order the writers committed in. A
        # put never deletes the checkpoint it wrote (its caller holds that
        # config), so when the last writer to commit carried an older id, its
        # checkpoint stays too, until the next put prunes it: at most one more.
        assert kept[:4] == ids[:4]
        assert len(kept) <= 5 and set(kept[4:]) <= set(ids[4:])
        assert await blob_count(service, thread) == len(kept)


async def test_prune_keep_latest_leaves_the_head_whole_and_drops_orphan_blobs(
    service: MemoryService,
) -> None:
    saver = MemsvcSaver(service)
    thread, other = str(uuid.uuid4()), str(uuid.uuid4())
    parent = None
    for step in range(4):
        parent = await put(saver, thread, parent, values={"a": step})
    await put(saver, other, values={"a": "other"})
    await saver.aprune([thread], strategy="keep_latest")
    kept = await history(saver, thread)
    assert [t.checkpoint["channel_values"] for t in kept] == [{"a": 3}]
    assert await blob_count(service, thread) == 1
    assert len(await history(saver, other)) == 1
    await saver.aprune([thread, other], strategy="delete")
    assert await history(saver, thread) == [] and await history(saver, other) == []
    assert await blob_count(service, thread) == 0


async def test_delete_for_runs_drops_the_runs_blobs_too(service: MemoryService) -> None:
    saver = MemsvcSaver(service)
    thread = str(uuid.uuid4())
    first = await put(saver, thread, values={"a": 1}, run_id="run-1")
    await put(saver, thread, first, values={"a": 2}, run_id="run-2")
    await saver.adelete_for_runs(["run-1"])
    kept = await history(saver, thread)
    assert [t.metadata["run_id"] for t in kept] == ["run-2"]
    assert kept[0].checkpoint["channel_values"] == {"a": 2}
    assert await blob_count(service, thread) == 1


# ----------------------------------------------------------- tenants, threads, input


async def test_tenants_do_not_see_each_others_threads(service: MemoryService) -> None:
    acme, globex = MemsvcSaver(service, tenant="acme"), MemsvcSaver(service, tenant="globex")
    thread = "shared-name"
    await put(acme, thread, values={"who": "acme"})
    await put(globex, thread, values={"who": "globex"})
    found = await acme.aget_tuple(generate_config(thread))
    assert found is not None and found.checkpoint["channel_values"] == {"who": "acme"}
    await globex.adelete_thread(thread)
    assert await globex.aget_tuple(generate_config(thread)) is None
    assert len(await history(acme, thread)) == 1
    assert len([t async for t in acme.alist(None)]) == 1


async def test_sync_methods_work_from_other_threads_and_refuse_the_loop(
    service: MemoryService,
) -> None:
    saver = MemsvcSaver(service)
    thread = str(uuid.uuid4())
    versions = {"a": saver.get_next_version(None, None)}
    checkpoint = generate_checkpoint(channel_values={"a": "sync"}, channel_versions=versions)

    def from_a_worker() -> tuple[Any, list[CheckpointTuple], str]:
        stored = saver.put(generate_config(thread), checkpoint, generate_metadata(), versions)
        saver.put_writes(stored, [("a", "pending")], "task")
        return (
            saver.get_tuple(stored),
            list(saver.list(generate_config(thread))),
            (threading.current_thread().name),
        )

    found, listed, worker = await asyncio.to_thread(from_a_worker)
    assert worker != threading.current_thread().name
    assert found.checkpoint["channel_values"] == {"a": "sync"}
    assert found.pending_writes == [("task", "a", "pending")]
    assert [t.config for t in listed] == [found.config]
    with pytest.raises(RuntimeError, match="another thread"):
        saver.get_tuple(generate_config(thread))


async def test_bad_input_is_refused_before_anything_is_written(service: MemoryService) -> None:
    saver = MemsvcSaver(service)
    checkpoint = generate_checkpoint()
    with pytest.raises(ValidationError) as error:
        await saver.aput({"configurable": {}}, checkpoint, generate_metadata(), {})
    assert error.value.field == "config.configurable.thread_id"
    with pytest.raises(ValidationError) as error:
        await saver.aput(generate_config("bad\x00thread"), checkpoint, generate_metadata(), {})
    assert error.value.field == "config.configurable.thread_id"
    with pytest.raises(ValidationError) as error:
        await saver.aput(generate_config("t"), checkpoint, generate_metadata(blob=object()), {})
    assert error.value.field == "metadata"
    with pytest.raises(ValidationError) as error:
        await saver.aprune(["t"], strategy="shred")
    assert error.value.field == "strategy"
    with pytest.raises(ValidationError) as error:
        await saver.aput_writes(generate_config("t"), [("a", 1)], "task")
    assert error.value.field == "config.configurable.checkpoint_id"
    with pytest.raises(ValidationError) as error:
        MemsvcSaver(service, tenant="")
    assert error.value.field == "tenant"
    conn: asyncpg.Connection
    async with service.pool.acquire() as conn:
        rows = await conn.fetchval("SELECT count(*) FROM memsvc.langgraph_checkpoints")
    assert rows == 0


async def test_pruning_keeps_the_root_checkpoint_a_subgraph_started_from(
    service: MemoryService,
) -> None:
    saver = MemsvcSaver(service)
    thread = str(uuid.uuid4())
    first = await put(saver, thread, values={"a": 1})
    config = generate_config(thread, checkpoint_ns="child:1")
    versions = {"s": saver.get_next_version(None, None)}
    checkpoint = generate_checkpoint(channel_values={"s": 1}, channel_versions=versions)
    parents = {"": first["configurable"]["checkpoint_id"]}
    await saver.aput(config, checkpoint, generate_metadata(parents=parents), versions)
    await put(saver, thread, first, values={"a": 2})
    await saver.aprune([thread], strategy="keep_latest")
    root = await history(saver, thread)
    assert [t.checkpoint["channel_values"] for t in root] == [{"a": 2}, {"a": 1}]


async def test_delta_channel_threads_are_never_pruned_by_retention_nor_keep_latest(
    settings: Settings,
) -> None:
    retaining = settings.model_copy(update={"langgraph_checkpoint_keep_last": 2})
    async with MemoryService.open(retaining, embedder=HashingEmbedder()) as service:
        saver = MemsvcSaver(service)
        thread = str(uuid.uuid4())
        parent = None
        for step in range(4):
            config = generate_config(thread)
            if parent is not None:
                config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
            metadata = generate_metadata(step=step, counters_since_delta_snapshot={"m": [step, 1]})
            parent = await saver.aput(config, generate_checkpoint(), metadata, {})
        assert len(await history(saver, thread)) == 4
        with pytest.raises(ValidationError) as error:
            await saver.aprune([thread], strategy="keep_latest")
        assert error.value.field == "thread_ids"
        assert len(await history(saver, thread)) == 4


async def test_a_compiled_graph_is_interrupted_and_resumed_from_its_checkpoint(
    service: MemoryService,
) -> None:
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    def plan(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"plan for: {state['messages'][-1].content}")]}

    def act(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"done after {len(state['messages'])} messages")]}

    builder = StateGraph(MessagesState)
    builder.add_node("plan", plan)
    builder.add_node("act", act)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "act")
    builder.add_edge("act", END)
    config: Any = {"configurable": {"thread_id": str(uuid.uuid4())}}

    first = builder.compile(checkpointer=MemsvcSaver(service), interrupt_before=["act"])
    await first.ainvoke({"messages": [HumanMessage("measure the span")]}, config)
    paused = await first.aget_state(config)
    assert paused.next == ("act",)

    # a new saver and graph, as another process would build them, resume the thread
    resumed = builder.compile(checkpointer=MemsvcSaver(service))
    result = await resumed.ainvoke(None, config)
    assert [m.content for m in result["messages"]] == [
        "measure the span",
        "plan for: measure the span",
        "done after 2 messages",
    ]
    states = [state async for state in resumed.aget_state_history(config)]
    assert states[0].next == () and len(states) >= 4


async def test_retention_keeps_a_fork_of_a_pruned_checkpoint_whole(settings: Settings) -> None:
    retaining = settings.model_copy(update={"langgraph_checkpoint_keep_last": 2})
    async with MemoryService.open(retaining, embedder=HashingEmbedder()) as service:
        saver = MemsvcSaver(service)
        thread = str(uuid.uuid4())

        async def step(
            parent: dict[str, Any] | None, previous: dict[str, Any], changes: dict[str, Any]
        ) -> tuple[dict[str, Any], dict[str, Any]]:
            versions = dict(previous)
            new = {
                channel: saver.get_next_version(versions.get(channel), None) for channel in changes
            }
            versions.update(new)
            values = {**(await current_values(parent)), **changes}
            config = generate_config(thread)
            if parent is not None:
                config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
            cp = generate_checkpoint(channel_values=values, channel_versions=versions)
            return await saver.aput(config, cp, generate_metadata(), new), versions

        async def current_values(config: dict[str, Any] | None) -> dict[str, Any]:
            if config is None:
                return {}
            found = await saver.aget_tuple(config)
            assert found is not None
            return dict(found.checkpoint["channel_values"])

        root, root_versions = await step(None, {}, {"a": "a0", "b": "b0"})
        root_values = await current_values(root)
        first, first_versions = await step(root, root_versions, {"a": "a1"})
        await step(first, first_versions, {"a": "a2"})  # retention drops the root now
        # a fork of the dropped root, changing only b, carries a's value along
        config = generate_config(thread)
        config["configurable"]["checkpoint_id"] = root["configurable"]["checkpoint_id"]
        versions = {**root_versions, "b": saver.get_next_version(root_versions["b"], None)}
        cp = generate_checkpoint(
            channel_values={**root_values, "b": "b-fork"}, channel_versions=versions
        )
        fork = await saver.aput(config, cp, generate_metadata(), {"b": versions["b"]})
        found = await saver.aget_tuple(fork)
        assert found is not None
        assert found.checkpoint["channel_values"] == {"a": "a0", "b": "b-fork"}


async def test_listing_pages_through_long_histories_without_gaps_or_repeats(
    service: MemoryService,
) -> None:
    saver = MemsvcSaver(service, tenant="pages")
    thread, copy = "history", "history-copy"
    parent = None
    for step in range(230):
        parent = await put(saver, thread, parent, values={"step": step})
    await saver.acopy_thread(thread, copy)  # the same checkpoint ids in a second thread

    everything = [t async for t in saver.alist(None)]
    keys = [
        (t.config["configurable"]["checkpoint_id"], t.config["configurable"]["thread_id"])
        for t in everything
    ]
    assert len(keys) == 460 and len(set(keys)) == 460
    assert keys == sorted(keys, reverse=True)
    from_a_thread = await asyncio.to_thread(lambda: [t.config for t in saver.list(None)])
    assert from_a_thread == [t.config for t in everything]
    one = [
        t.checkpoint["channel_values"]["step"] async for t in saver.alist(generate_config(thread))
    ]
    assert one == list(range(229, -1, -1))
    limited = [t async for t in saver.alist(generate_config(thread), limit=150)]
    assert [t.checkpoint["channel_values"]["step"] for t in limited] == list(range(229, 79, -1))
    older = [
        t.checkpoint["channel_values"]["step"]
        async for t in saver.alist(generate_config(thread), before=limited[-1].config)
    ]
    assert older == list(range(79, -1, -1))


def _extend(state: list[str], writes: Any) -> list[str]:
    return [*state, *(item for write in writes for item in write)]


class DeltaState(TypedDict):
    items: Annotated[list[str], DeltaChannel(_extend, snapshot_frequency=3)]


async def test_delta_channel_state_is_rebuilt_like_in_memory_saver(settings: Settings) -> None:
    from langgraph.graph import END, START, StateGraph

    def add(state: DeltaState) -> dict[str, Any]:
        return {"items": [f"seen {len(state['items'])}"]}

    builder = StateGraph(DeltaState)
    builder.add_node("add", add)
    builder.add_edge(START, "add")
    builder.add_edge("add", END)

    async def run(saver: Any) -> list[Any]:
        config: Any = {"configurable": {"thread_id": "delta"}}
        results = []
        for turn in range(5):
            graph = builder.compile(checkpointer=saver)  # a fresh graph each turn
            results.append(await graph.ainvoke({"items": [f"turn {turn}"]}, config))
        return results

    theirs = await run(InMemorySaver())
    assert len(theirs[-1]["items"]) == 10
    # also with retention on, which must leave a DeltaChannel thread's history alone
    for keep in (None, 2):
        chosen = settings.model_copy(update={"langgraph_checkpoint_keep_last": keep})
        async with MemoryService.open(chosen, embedder=HashingEmbedder()) as service:
            assert await run(MemsvcSaver(service, tenant=f"keep-{keep}")) == theirs


async def test_delta_channel_history_matches_langgraphs_reference_walk(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    import memsvc.integrations.langgraph.saver as saver_module

    monkeypatch.setattr(saver_module, "ANCESTOR_PAGE", 3)  # walk several pages
    saver = MemsvcSaver(service)
    thread = str(uuid.uuid4())
    configs: list[dict[str, Any]] = []
    parent = None
    for step in range(10):
        # "seeded" holds a value every fourth step; "log" never does
        values = {"seeded": f"snapshot {step}"} if step % 4 == 0 else {}
        versions = {"seeded": saver.get_next_version(None, None)} if values else {}
        config = generate_config(thread)
        if parent is not None:
            config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
        cp = generate_checkpoint(channel_values=values, channel_versions=versions)
        parent = await saver.aput(config, cp, generate_metadata(step=step), versions)
        await saver.aput_writes(
            parent, [("seeded", f"w{step}"), ("log", f"l{step}")], f"task-{step}", "~"
        )
        await saver.aput_writes(parent, [("log", f"early{step}")], f"early-{step}", "a")
        configs.append(parent)

    channels = ["seeded", "log", "absent"]
    for config in [*configs, generate_config(thread)]:
        ours = await saver.aget_delta_channel_history(config=config, channels=channels)
        reference = await BaseCheckpointSaver.aget_delta_channel_history(
            saver, config=config, channels=channels
        )
        assert ours == reference
    latest = await saver.aget_delta_channel_history(config=configs[-1], channels=channels)
    assert latest["seeded"]["seed"] == "snapshot 8"
    assert [w[2] for w in latest["log"]["writes"]][:2] == ["early0", "l0"]
    assert len(latest["log"]["writes"]) == 18 and "seed" not in latest["log"]
    in_thread = await asyncio.to_thread(
        saver.get_delta_channel_history, config=configs[-1], channels=channels
    )
    assert in_thread == latest
