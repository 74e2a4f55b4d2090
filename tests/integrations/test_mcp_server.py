"""``memsvc mcp``: the real server process, driven by the ``mcp`` SDK's own client.

Every test starts ``python -m memsvc.cli mcp ...`` on this test's database
(and the suite's Redis for working memory) and talks to it over stdio or
streamable HTTP, as an MCP host would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult, TextContent

from memsvc import MemoryService, Scope, Settings
from memsvc.cli import main
from memsvc.core.errors import ValidationError
from memsvc.embedding import HashingEmbedder, embedder_from_spec
from memsvc.integrations.mcp import create_server
from memsvc.sync import SyncMemoryService
from tests.extraction.fake_chat import serving as serving_chat

TOOLS = {
    "memory_add",
    "memory_put",
    "memory_search",
    "memory_get",
    "memory_delete",
    "memory_supersede",
    "memory_invalidate",
    "working_set",
    "working_get",
    "scratchpad_append",
    "scratchpad_get",
    "memory_remember",
    "memory_consolidate",
}

ServerFactory = Callable[..., StdioServerParameters]


@pytest.fixture
def server_env(memsvc_database_url: str, redis_url: str) -> dict[str, str]:
    """What the server process needs to reach this test's database and Redis."""
    return {
        "MEMSVC_DATABASE_URL": memsvc_database_url,
        "MEMSVC_AUTO_MIGRATE": "false",
        "MEMSVC_REDIS_URL": redis_url,
        "MEMSVC_POOL_MIN_SIZE": "1",
        "MEMSVC_POOL_MAX_SIZE": "4",
    }


@pytest.fixture
def stdio_server(server_env: dict[str, str]) -> ServerFactory:
    """Parameters launching ``memsvc mcp`` with the given command-line options over stdio."""

    def make(*options: str) -> StdioServerParameters:
        return StdioServerParameters(
            command=sys.executable, args=["-m", "memsvc.cli", "mcp", *options], env=server_env
        )

    return make


def _tenant() -> str:
    # Redis is shared by the session: a tenant per test keeps working memory apart.
    return f"t-{uuid.uuid4().hex[:8]}"


async def _ok(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, _text(result)
    assert result.structured_content is not None
    return result.structured_content


async def _error(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    text = _text(result)
    assert "Traceback" not in text and 'File "' not in text
    return text


def _text(result: CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, TextContent))


# --------------------------------------------------------------------- listing


async def test_tools_are_listed_with_descriptions_and_schemas(
    stdio_server: ServerFactory,
) -> None:
    async with Client(stdio_server("--tenant", _tenant())) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description and len(tool.description) > 30, tool.name
        assert tool.input_schema["type"] == "object"
        for name, spec in tool.input_schema["properties"].items():
            assert spec.get("description"), f"{tool.name}.{name} has no description"
        assert tool.output_schema is not None, tool.name
    search = tools["memory_search"].input_schema
    assert search["required"] == ["query"]
    assert search["properties"]["k"]["minimum"] == 1
    assert search["properties"]["include"]["enum"] == ["exact", "ancestors", "descendants"]
    assert tools["memory_get"].annotations is not None
    assert tools["memory_get"].annotations.read_only_hint is True
    assert tools["memory_delete"].annotations is not None
    assert tools["memory_delete"].annotations.destructive_hint is True
    assert set(tools["working_set"].input_schema["required"]) == {"session", "key", "value"}


# --------------------------------------------------------------------- every tool


async def test_supersede_invalidate_and_search_by_validity_over_stdio(
    stdio_server: ServerFactory,
) -> None:
    async with Client(stdio_server("--tenant", _tenant(), "--project", "bridge")) as client:
        paris = await _ok(client, "memory_add", {"content": "Ana lives in Paris"})
        berlin = await _ok(client, "memory_supersede", {
            "id": paris["id"], "content": "Ana lives in Berlin",
            "valid_from": "2099-01-01T00:00:00Z",
        })
        assert berlin["supersedes"] == [paris["id"]]
        assert berlin["valid_from"].startswith("2099-01-01")
        now = await _ok(client, "memory_search", {"query": "where does Ana live", "k": 5})
        assert [h["memory"]["id"] for h in now["hits"]] == [paris["id"]]
        later = await _ok(client, "memory_search", {
            "query": "where does Ana live", "valid_at": "2099-06-01T00:00:00Z",
        })
        assert [h["memory"]["id"] for h in later["hits"]] == [berlin["id"]]
        old = await _ok(client, "memory_get", {"id": paris["id"]})
        assert old["superseded_by"] == berlin["id"] and old["valid_to"].startswith("2099")
        ended = await _ok(client, "memory_invalidate", {
            "id": berlin["id"], "at": "2099-09-01T00:00:00Z",
        })
        assert ended["valid_to"].startswith("2099-09-01")
        every = await _ok(client, "memory_search", {"query": "Ana", "valid": "all"})
        assert len(every["hits"]) == 2
        assert "no longer valid" in await _error(
            client, "memory_invalidate", {"id": berlin["id"]}
        )



async def test_every_tool_over_stdio(
    stdio_server: ServerFactory, memsvc_service: MemoryService
) -> None:
    tenant = _tenant()
    async with Client(stdio_server("--tenant", tenant, "--project", "bridge")) as client:
        added = await _ok(client, "memory_add", {
            "content": "the user prefers metric units",
            "metadata": {"kind": "preference"},
            "importance": 0.9,
            "session": "s-1",
        })
        assert added["scope"] == {
            "tenant": tenant, "project": "bridge", "agent": None, "session": "s-1"
        }
        again = await _ok(client, "memory_add", {
            "content": "the user prefers metric units", "session": "s-1"
        })
        assert again["id"] == added["id"]  # deduplicated, not stored twice
        assert again["merged"] is False and again["forgotten_at"] is None  # exact, live
        expiring = await _ok(client, "memory_add", {
            "content": "deploys happen on Tuesdays", "metadata": {"kind": "fact"},
            "ttl_seconds": 3600,
        })
        assert expiring["expires_at"] is not None and added["expires_at"] is None

        first = await _ok(client, "memory_put", {"key": "units", "content": "metric"})
        second = await _ok(client, "memory_put", {"key": "units", "content": "SI with kN"})
        assert second["id"] == first["id"] and second["version"] == first["version"] + 1

        hits = (await _ok(client, "memory_search", {"query": "which units does the user prefer",
                                                     "k": 2}))["hits"]
        assert len(hits) == 2
        assert hits[0]["memory"]["preview"] == "the user prefers metric units"
        assert hits[0]["memory"]["content"] is None  # a preview unless full_content is asked
        assert hits[0]["score"] >= hits[1]["score"]
        filtered = (await _ok(client, "memory_search", {
            "query": "units", "k": 5, "where": {"kind": "fact"}
        }))["hits"]
        assert [h["memory"]["preview"] for h in filtered] == ["deploys happen on Tuesdays"]
        exact = (await _ok(client, "memory_search", {
            "query": "units", "k": 5, "include": "exact", "session": "s-1"
        }))["hits"]
        assert [h["memory"]["id"] for h in exact] == [added["id"]]

        got = await _ok(client, "memory_get", {"id": added["id"]})
        assert got["content"] == "the user prefers metric units"
        assert got["metadata"] == {"kind": "preference"}
        by_key = await _ok(client, "memory_get", {"key": "units"})
        assert by_key["content"] == "SI with kN" and by_key["key"] == "units"

        assert (await _ok(client, "memory_delete", {"id": added["id"]})) == {"deleted": True}
        assert "not found" in await _error(client, "memory_get", {"id": added["id"]})

        stored = await _ok(client, "working_set", {
            "session": "s-1", "key": "draft", "value": {"step": 1, "items": [1, 2]}
        })
        assert stored == {"session": "s-1", "key": "draft", "stored": True}
        await _ok(client, "working_set", {"session": "s-1", "key": "mode", "value": "edit"})
        one = await _ok(client, "working_get", {"session": "s-1", "key": "draft"})
        assert one == {"session": "s-1", "values": {"draft": {"step": 1, "items": [1, 2]}}}
        every = await _ok(client, "working_get", {"session": "s-1"})
        assert every["values"] == {"draft": {"step": 1, "items": [1, 2]}, "mode": "edit"}
        absent = await _ok(client, "working_get", {"session": "s-1", "key": "nothing"})
        assert absent["values"] == {}

        await _ok(client, "scratchpad_append", {"session": "s-1", "content": "checked spans"})
        pad = await _ok(client, "scratchpad_append", {"session": "s-1", "content": "then loads"})
        assert [e["content"] for e in pad["entries"]] == ["checked spans", "then loads"]
        read = await _ok(client, "scratchpad_get", {"session": "s-1"})
        assert read == pad and all(e["timestamp"] for e in read["entries"])

    # What the tools wrote is memsvc's own data, visible through the Python API.
    scope = Scope(tenant, "bridge")
    assert await memsvc_service.memories.count(scope, include="descendants") == 2
    assert (await memsvc_service.memories.get_by_key(scope, "units")).content == "SI with kN"


# --------------------------------------------------------------------- isolation


async def test_another_tenants_memory_answers_not_found(
    stdio_server: ServerFactory, memsvc_service: MemoryService
) -> None:
    acme, other = _tenant(), _tenant()
    async with (
        Client(stdio_server("--tenant", acme)) as ours,
        Client(stdio_server("--tenant", other)) as theirs,
    ):
        secret = await _ok(ours, "memory_add", {"content": "the vault code is 1234"})
        await _ok(ours, "memory_put", {"key": "plan", "content": "acme's plan"})
        await _ok(ours, "working_set", {"session": "s", "key": "k", "value": "acme's"})
        await _ok(ours, "scratchpad_append", {"session": "s", "content": "acme's note"})

        assert "not found" in await _error(theirs, "memory_get", {"id": secret["id"]})
        assert "not found" in await _error(theirs, "memory_delete", {"id": secret["id"]})
        assert "NotFoundError" in await _error(theirs, "memory_get", {"key": "plan"})
        hits = await _ok(theirs, "memory_search", {"query": "vault code", "k": 10})
        assert hits["hits"] == []
        # Every include mode stays inside the server's tenant.
        for include in ("exact", "ancestors", "descendants"):
            found = await _ok(theirs, "memory_search", {
                "query": "vault code", "include": include, "session": "s"
            })
            assert found["hits"] == [], include
        assert (await _ok(theirs, "working_get", {"session": "s"}))["values"] == {}
        assert (await _ok(theirs, "scratchpad_get", {"session": "s"}))["entries"] == []
        # Arguments that are not part of a tool's schema cannot name a tenant.
        await _error(theirs, "memory_get", {"id": secret["id"], "tenant": acme})

    # Their failed delete left our memory in place.
    assert (await memsvc_service.memories.get(secret["id"], tenant=acme)).content.startswith(
        "the vault"
    )


async def test_project_and_agent_confine_the_server(
    stdio_server: ServerFactory, memsvc_service: MemoryService
) -> None:
    tenant = _tenant()
    shared = await memsvc_service.memories.add(Scope(tenant), "tenant-wide: metric units")
    sibling = await memsvc_service.memories.add(Scope(tenant, "other"), "other project's plan")
    async with Client(stdio_server("--tenant", tenant, "--project", "bridge",
                                   "--agent", "planner")) as client:
        mine = await _ok(client, "memory_add", {"content": "planner's note", "session": "s"})
        assert mine["scope"]["agent"] == "planner"
        # Above it on its own path: readable, not deletable.
        assert (await _ok(client, "memory_get", {"id": str(shared.id)}))["content"].startswith(
            "tenant-wide"
        )
        assert "not found" in await _error(client, "memory_delete", {"id": str(shared.id)})
        # A sibling project: invisible.
        assert "not found" in await _error(client, "memory_get", {"id": str(sibling.id)})
        assert "not found" in await _error(client, "memory_delete", {"id": str(sibling.id)})
        ancestors = await _ok(client, "memory_search", {
            "query": "plan units note", "k": 10, "include": "ancestors", "session": "s"
        })
        contents = {h["memory"]["preview"] for h in ancestors["hits"]}
        assert contents == {"planner's note", "tenant-wide: metric units"}
    assert await memsvc_service.memories.count(Scope(tenant), include="descendants") == 3


# --------------------------------------------------------------------- bad input


async def test_bad_arguments_are_tool_errors_with_memsvcs_message(
    stdio_server: ServerFactory, memsvc_service: MemoryService
) -> None:
    tenant = _tenant()
    async with Client(stdio_server("--tenant", tenant)) as client:
        assert "ValidationError: content" in await _error(
            client, "memory_add", {"content": "nul \x00 byte"}
        )
        assert "ValidationError: scope.session" in await _error(
            client, "memory_add", {"content": "x", "session": "bad\x01session"}
        )
        assert "ValidationError: id" in await _error(client, "memory_get", {"id": "../etc"})
        assert "ValidationError: id" in await _error(client, "memory_get", {})
        assert "ValidationError: id" in await _error(
            client, "memory_get", {"id": str(uuid.uuid4()), "key": "k"}
        )
        assert "ValidationError: where" in await _error(
            client, "memory_search", {"query": "x", "where": {"kind": {"$regex": ".*"}}}
        )
        assert "ValidationError: key" in await _error(
            client, "working_set", {"session": "s", "key": "_reserved", "value": 1}
        )
        assert "ValidationError: key" in await _error(client, "memory_put", {
            "key": "", "content": "x"
        })
        # Refused by the tools' schemas before memsvc runs: the field is named.
        assert "k" in await _error(client, "memory_search", {"query": "x", "k": 0})
        assert "include" in await _error(
            client, "memory_search", {"query": "x", "include": "everything"}
        )
        assert "importance" in await _error(
            client, "memory_add", {"content": "x", "importance": 2}
        )
        assert "content" in await _error(client, "memory_add", {})
        assert "Unknown tool" in await _error(client, "memory_drop_all", {})
        # A TTL past what memsvc keeps (365,000 days) is refused, naming it.
        assert "ValidationError: ttl: must be at most" in await _error(
            client, "memory_add", {"content": "keep forever", "ttl_seconds": 1e12}
        )
        # The server is still serving after all of that, searches included.
        assert (await _ok(client, "memory_add", {"content": "still fine"}))["preview"]
        assert (await _ok(client, "memory_search", {"query": "still fine"}))["hits"]
    # Nothing was partially written: only the last memory exists.
    assert await memsvc_service.memories.count(Scope(tenant), include="descendants") == 1


async def test_arguments_are_held_to_the_published_schema(
    stdio_server: ServerFactory, memsvc_service: MemoryService
) -> None:
    tenant = _tenant()
    async with Client(stdio_server("--tenant", tenant)) as client:
        # An argument the schema does not list is refused, naming it, not dropped.
        unknown = await _error(client, "memory_add", {"content": "x", "tenant": "other"})
        assert "'tenant' was unexpected" in unknown
        assert "'limit' was unexpected" in await _error(
            client, "memory_search", {"query": "x", "limit": 3}
        )
        # A value of another JSON type is refused, not converted.
        assert "k: '5' is not of type 'integer'" in await _error(
            client, "memory_search", {"query": "x", "k": "5"}
        )
        assert "importance: '0.5' is not of type 'number'" in await _error(
            client, "memory_add", {"content": "x", "importance": "0.5"}
        )
        assert "where:" in await _error(
            client, "memory_search", {"query": "x", "where": '{"kind": "fact"}'}
        )
        assert "metadata:" in await _error(
            client, "memory_add", {"content": "x", "metadata": '{"kind": "fact"}'}
        )
        # What the schema allows still passes: 5.0 is an integer in JSON Schema,
        # and a string is a JSON value a working-memory value may be, kept as sent.
        assert (await _ok(client, "memory_search", {"query": "x", "k": 5.0}))["hits"] == []
        await _ok(client, "working_set", {"session": "s", "key": "k", "value": '{"a": 1}'})
        kept = await _ok(client, "working_get", {"session": "s", "key": "k"})
        assert kept["values"] == {"k": '{"a": 1}'}
        tools = (await client.list_tools()).tools
        assert all(tool.input_schema["additionalProperties"] is False for tool in tools)
    # Nothing was written by the refused calls.
    assert await memsvc_service.memories.count(Scope(tenant), include="descendants") == 0


async def test_large_memories_come_back_as_bounded_previews(
    stdio_server: ServerFactory,
) -> None:
    big = "".join(f"line {i} of a long design note. " for i in range(60_000))  # ~2 MB
    async with Client(stdio_server("--tenant", _tenant())) as client:
        added = await client.call_tool("memory_add", {"content": big, "session": "s"})
        assert not added.is_error, _text(added)
        summary = added.structured_content
        assert summary is not None
        assert summary["preview"] == big[:300] and summary["truncated"] is True
        assert summary["content_chars"] == len(big) and summary["content"] is None
        # Both channels together stay small: the content is not echoed.
        assert len(_text(added)) + len(json.dumps(summary)) < 5_000

        found = await client.call_tool("memory_search", {"query": "long design note", "k": 3})
        hit = found.structured_content["hits"][0]["memory"]  # type: ignore[index]
        assert hit["id"] == summary["id"] and hit["content"] is None
        assert len(_text(found)) < 5_000

        full = await _ok(client, "memory_search", {
            "query": "long design note", "k": 1, "full_content": True
        })
        assert full["hits"][0]["memory"]["content"] == big
        got = await _ok(client, "memory_get", {"id": summary["id"]})
        assert got["content"] == big and got["preview"] == big[:300]

        short = await _ok(client, "memory_add", {"content": "short and whole"})
        assert short["preview"] == "short and whole" and short["truncated"] is False


def test_command_refuses_a_bad_tenant_or_embedder_without_a_traceback(
    server_env: dict[str, str],
) -> None:
    runner = CliRunner()
    bad_tenant = runner.invoke(main, ["mcp", "--tenant", "bad\x01"], env=server_env)
    assert bad_tenant.exit_code == 1
    assert "ValidationError: scope.tenant" in bad_tenant.output
    unknown = runner.invoke(
        main, ["mcp", "--tenant", "t"], env={**server_env, "MEMSVC_EMBEDDER": "no-such-model"}
    )
    assert unknown.exit_code == 1
    assert "ValidationError: embedder: unknown embedder 'no-such-model'" in unknown.output
    assert "Traceback" not in bad_tenant.output + unknown.output


def test_embedder_from_spec_names_what_memsvc_ships() -> None:
    embedder = embedder_from_spec("hashing", 64)
    assert isinstance(embedder, HashingEmbedder) and embedder.dim == 64
    with pytest.raises(ValidationError) as caught:
        embedder_from_spec("word2vec", 64)
    assert caught.value.field == "embedder"


# --------------------------------------------------------------------- HTTP


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def http_server(
    server_env: dict[str, str], tmp_path: Path
) -> Iterator[Callable[[str], str]]:
    """Start ``memsvc mcp --transport streamable-http`` for a tenant; returns its URL."""
    processes: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(tenant: str) -> str:
        port = _free_port()
        # A file, not a pipe: a server logging more than a pipe holds would block.
        log = tmp_path / f"server-{port}.log"
        with log.open("wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "memsvc.cli", "mcp", "--tenant", tenant,
                 "--transport", "streamable-http", "--port", str(port)],
                env={**_base_env(), **server_env},
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        processes.append((process, log))
        return f"http://127.0.0.1:{port}/mcp"

    yield start
    failures = []
    for process, log_path in processes:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log = log_path.read_text(errors="replace")
        # SIGTERM stops uvicorn, then the service closes its pool: a clean exit.
        if process.returncode != 0 or "Traceback" in log:
            failures.append(f"exit code {process.returncode}:\n{log[-2000:]}")
    assert not failures, failures


def _base_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("MEMSVC_")}


@contextlib.asynccontextmanager
async def _http_client(url: str) -> AsyncIterator[Client]:
    """A client of a server that may still be starting (imports, pool)."""
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    for _ in range(300):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        writer.close()
        await writer.wait_closed()
        break
    else:
        raise AssertionError(f"the server never listened on {url}")
    async with Client(url) as client:
        yield client


async def test_streamable_http_serves_the_same_tools_per_tenant(
    http_server: Callable[[str], str],
) -> None:
    acme, other = _tenant(), _tenant()
    async with (
        _http_client(http_server(acme)) as ours,
        _http_client(http_server(other)) as theirs,
    ):
        assert {tool.name for tool in (await ours.list_tools()).tools} == TOOLS
        stored = await _ok(ours, "memory_add", {"content": "served over HTTP", "session": "h"})
        hits = await _ok(ours, "memory_search", {"query": "served over HTTP", "k": 1})
        assert [h["memory"]["id"] for h in hits["hits"]] == [stored["id"]]
        await _ok(ours, "working_set", {"session": "h", "key": "k", "value": [1, 2]})
        assert (await _ok(ours, "working_get", {"session": "h", "key": "k"}))["values"] == {
            "k": [1, 2]
        }
        assert "not found" in await _error(theirs, "memory_get", {"id": stored["id"]})
        assert (await _ok(theirs, "memory_search", {"query": "served", "k": 5}))["hits"] == []
        assert "ValidationError: content" in await _error(ours, "memory_add", {"content": "\x00"})


def test_create_server_says_which_client_to_pass(settings: Settings) -> None:
    with SyncMemoryService.open(settings, embedder=HashingEmbedder()) as client:
        # Its tools run on the MCP server's loop: a client on another loop is refused.
        for given in (client, object()):
            with pytest.raises(TypeError, match="MemoryService opened on the loop"):
                create_server(given, Scope("t"))  # type: ignore[arg-type]


# --------------------------------------------------------------------- remember, consolidate


async def test_memory_remember_uses_the_servers_extractor_once_per_message(
    server_env: dict[str, str], memsvc_service: MemoryService
) -> None:
    tenant = _tenant()
    messages = [
        {"role": "user", "content": "I live in Porto. I have two kids.", "id": "u1",
         "at": "2026-11-01T09:00:00+00:00"},
        {"role": "assistant", "content": "Good to know!", "id": "a1"},
    ]
    with serving_chat() as chat:
        env = {**server_env, "MEMSVC_EXTRACTOR": "openai:test-model",
               "MEMSVC_EXTRACTOR_BASE_URL": chat.base_url}
        parameters = StdioServerParameters(
            command=sys.executable, args=["-m", "memsvc.cli", "mcp", "--tenant", tenant], env=env
        )
        async with Client(parameters) as client:
            done = await _ok(client, "memory_remember", {"messages": messages, "session": "s-1"})
            assert [a["op"] for a in done["applied"]] == ["ADD", "ADD"]
            assert done["remembered"] == ["u1", "a1"] and done["model_calls"] == 2
            again = await _ok(client, "memory_remember", {"messages": messages, "session": "s-1"})
            assert again["applied"] == [] and again["already_remembered"] == ["u1", "a1"]
            bad = await _error(client, "memory_remember", {
                "messages": [{"role": "user", "content": "hi", "id": "x", "mood": "happy"}]
            })
            assert "mood" in bad
        assert chat.steps() == ["facts", "operations"]
        assert chat.requests[0].body["model"] == "test-model"
    stored = await memsvc_service.memories.list(Scope(tenant, session="s-1"))
    assert sorted(m.content for m in stored) == ["I have two kids.", "I live in Porto."]
    assert stored[0].metadata["provenance"]["model"] == "test-model"


async def test_memory_remember_without_an_extractor_is_a_clear_tool_error(
    stdio_server: ServerFactory,
) -> None:
    async with Client(stdio_server("--tenant", _tenant())) as client:
        text = await _error(client, "memory_remember", {
            "messages": [{"role": "user", "content": "I live in Porto.", "id": "u1"}]
        })
    assert "no extractor" in text and "MEMSVC_EXTRACTOR" in text


async def test_memory_consolidate_groups_related_memories_under_a_summary(
    stdio_server: ServerFactory, memsvc_service: MemoryService
) -> None:
    tenant = _tenant()
    related = ["the user has a cat called Miso", "the user has a cat called Miso who is three",
               "the user has a cat called Miso and feeds it at six"]
    async with Client(stdio_server("--tenant", tenant)) as client:
        for content in [*related, "deploys happen on Tuesdays"]:
            await _ok(client, "memory_add", {"content": content, "session": "s-1"})
        done = await _ok(client, "memory_consolidate", {"session": "s-1", "threshold": 0.6})
        assert (done["made"], done["considered"], len(done["summaries"])) == (1, 4, 1)
        summary = await _ok(client, "memory_get", {"id": done["summaries"][0]})
        assert summary["metadata"]["kind"] == "summary"
        assert len(summary["metadata"]["derived_from"]) == 3
        again = await _ok(client, "memory_consolidate", {"session": "s-1", "threshold": 0.6})
        assert (again["made"], again["considered"]) == (0, 0)
        assert "threshold" in await _error(client, "memory_consolidate", {"threshold": 2})
    assert await memsvc_service.memories.count(Scope(tenant, session="s-1")) == 5
