"""memsvc as Model Context Protocol tools (``memsvc mcp``), on the official ``mcp`` SDK.

One server serves one scope fixed by its configuration: a tenant, and the
project and agent when given. Tool arguments can name a session under that
scope, never another tenant, project or agent, so an agent connected to it
reads and writes only what its operator allowed:

- writes (``memory_add``, ``memory_put``, ``memory_delete``) land in the
  server's scope or one of its sessions;
- reads see the server's scope, the scopes under it and (with
  ``include="ancestors"``) the scopes above it on its own path, e.g. facts
  stored for the whole tenant;
- a memory id outside that (another tenant's, a sibling project's) answers
  "not found", exactly as a missing one does.

Arguments are held to the input schema each tool publishes, as sent: an
argument the schema does not list, or a value of another JSON type (``"k":
"5"``, an object sent as a JSON string), is a tool error naming it, never
dropped or converted (see :func:`_held_to_schema`).

Memories come back as their id, a preview of at most ``PREVIEW_CHARS``
characters of their content (``truncated`` says when there is more) and
their other fields; the full content only from ``memory_get``, or from
``memory_search`` with ``full_content: true``. A tool's result travels twice
(as JSON text for clients without structured output, and as structured
content), so a large memory echoed in full would cost twice its size in
every reply that names it.

Failures come back as MCP tool errors carrying memsvc's message
(``ValidationError: k: ...``); tracebacks stay in the server's log.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal, cast

from jsonschema import Draft202012Validator
from jsonschema import ValidationError as SchemaViolation
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from memsvc.core.errors import MemsvcError, NotFoundError, ValidationError
from memsvc.core.models import Memory
from memsvc.core.scope import Include, Scope
from memsvc.core.settings import Settings
from memsvc.embedding import embedder_from_spec
from memsvc.integrations.loop_bridge import ServiceTypeError
from memsvc.ops.consolidation import CLUSTER_THRESHOLD, MAX_MEMBERS
from memsvc.service import MemoryService
from memsvc.working import WorkingMemory

Transport = Literal["stdio", "streamable-http"]

MAX_K = 100
# Characters of a memory's content the tools return unless asked for all of it.
PREVIEW_CHARS = 300
SERVER_NAME = "memsvc"
INSTRUCTIONS = (
    "Long-term memory and per-session working memory for this agent. Store durable facts "
    "with memory_add (or memory_put under a stable key), find them with memory_search; keep "
    "short-lived state of a conversation with working_set/working_get and notes with "
    "scratchpad_append. memory_remember turns a conversation into memories (when the server "
    "has an extractor); memory_consolidate groups related memories under summaries. Scope "
    "(tenant, project, agent) is fixed by the server."
)

# ----------------------------------------------------------------- tool results


class MemoryResult(BaseModel):
    """A stored memory as the tools report it: a preview of its content, the rest in full."""

    id: str = Field(description="Pass it to memory_get or memory_delete.")
    preview: str = Field(
        description=f"The content's first {PREVIEW_CHARS} characters (all of it when shorter)."
    )
    truncated: bool = Field(
        description="True when the content is longer than the preview: memory_get returns it."
    )
    content_chars: int = Field(description="The content's length in characters.")
    content: str | None = Field(
        default=None,
        description="The whole content: from memory_get, and from memory_search with "
        "full_content; null otherwise.",
    )
    metadata: dict[str, Any]
    importance: float
    key: str | None = Field(default=None, description="Set when stored with memory_put.")
    session: str | None = None
    scope: dict[str, str | None] = Field(description="tenant, project, agent and session.")
    version: int = Field(description="Goes up each time memory_put replaces it.")
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None = Field(default=None, description="Null: kept until deleted.")
    valid_from: datetime | None = Field(
        default=None, description="When the fact started to hold."
    )
    valid_to: datetime | None = Field(
        default=None, description="When the fact stopped holding; null: it still holds."
    )
    supersedes: list[str] = Field(
        default_factory=list, description="Ids of the memories this one replaced."
    )
    superseded_by: str | None = Field(
        default=None, description="Id of the memory that replaced this one."
    )
    merged: bool = Field(
        default=False,
        description="True when memory_add found the write repeats this memory (semantic "
        "deduplication): nothing new was stored, this one was reinforced.",
    )
    forgotten_at: datetime | None = Field(
        default=None,
        description="Set when the memory was forgotten (weak under its scope's half-life); "
        "null: it is in every read.",
    )

    @classmethod
    def of(cls, memory: Memory, *, full: bool = False) -> MemoryResult:
        """The report of one memory (without its embedding: it means nothing to a model).

        ``full``: with the whole content; else only its bounded preview.
        """
        return cls(
            id=str(memory.id),
            preview=memory.content[:PREVIEW_CHARS],
            truncated=len(memory.content) > PREVIEW_CHARS,
            content_chars=len(memory.content),
            content=memory.content if full else None,
            metadata=memory.metadata,
            importance=memory.importance,
            key=memory.key,
            session=memory.scope.session,
            scope=memory.scope.as_dict(),
            version=memory.version,
            created_at=memory.created_at,
            updated_at=memory.updated_at,
            expires_at=memory.expires_at,
            valid_from=memory.valid_from,
            valid_to=memory.valid_to,
            supersedes=[str(i) for i in memory.supersedes],
            superseded_by=None if memory.superseded_by is None else str(memory.superseded_by),
            merged=memory.merged,
            forgotten_at=memory.forgotten_at,
        )


class SearchResultItem(BaseModel):
    """One search hit: a memory and its score (higher is closer)."""

    score: float = Field(description="Similarity to the query, higher is closer (at most 1).")
    memory: MemoryResult


class SearchResult(BaseModel):
    """Hits of ``memory_search``, best first."""

    hits: list[SearchResultItem]


class DeleteResult(BaseModel):
    """Whether ``memory_delete`` removed the memory."""

    deleted: bool


class WorkingSetResult(BaseModel):
    """Acknowledges ``working_set``."""

    session: str
    key: str
    stored: bool


class WorkingGetResult(BaseModel):
    """Values of ``working_get``: one key, or every key of the session."""

    session: str
    values: dict[str, Any]


class ScratchpadEntry(BaseModel):
    """One scratchpad note with the moment it was written (ISO 8601)."""

    content: str
    timestamp: str


class ScratchpadResult(BaseModel):
    """The scratchpad of a session, oldest note first."""

    session: str
    entries: list[ScratchpadEntry]


class ConversationMessage(BaseModel):
    """One message of a conversation, as ``memory_remember`` takes it."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant", "system", "tool"] = Field(description="Who said it.")
    content: str = Field(description="What was said.")
    id: str = Field(
        description="The message's id, unique in the conversation: a message already "
        "remembered in this scope is skipped."
    )
    at: datetime | None = Field(
        default=None, description="When it was said (ISO 8601 with a time zone), if known."
    )


class AppliedOperation(BaseModel):
    """An operation the extractor decided and memsvc applied."""

    op: str = Field(description="ADD, UPDATE, SUPERSEDE, INVALIDATE or NOOP.")
    memory: MemoryResult | None = Field(description="The memory written or changed (NOOP: none).")


class SkippedOperation(BaseModel):
    """An operation (or answer) refused, and why."""

    index: int | None = Field(description="Its position in the answer (null: the whole answer).")
    reason: str


class RememberToolResult(BaseModel):
    """What ``memory_remember`` did."""

    applied: list[AppliedOperation]
    skipped: list[SkippedOperation]
    remembered: list[str] = Field(description="Ids of the messages applied now.")
    already_remembered: list[str] = Field(description="Ids applied by an earlier call.")
    pending: list[str] = Field(description="Ids the extractor's answer left unusable: resend.")
    model_calls: int


class ConsolidateResult(BaseModel):
    """What ``memory_consolidate`` did."""

    made: int = Field(description="Clusters made, each with a summary memory.")
    joined: int = Field(description="Memories that joined an existing cluster.")
    redone: int = Field(description="Clusters summarized again: a member changed or left.")
    dissolved: int = Field(description="Clusters removed: too few members left.")
    considered: int = Field(description="Memories considered for the first time.")
    summaries: list[str] = Field(description="Ids of the summary memories written.")


# ----------------------------------------------------------------- arguments

Content = Annotated[str, Field(description="The text to remember, self-contained.")]
Metadata = Annotated[
    dict[str, Any] | None,
    Field(description="Optional JSON object stored with the memory and filterable in search."),
]
Importance = Annotated[
    float, Field(ge=0.0, le=1.0, description="How much it matters, from 0 to 1.")
]
TtlSeconds = Annotated[
    float | None,
    Field(gt=0, description="Seconds until it expires; omit to keep it."),
]
OptionalSession = Annotated[
    str | None,
    Field(description="A session id under this server's scope; omit for the scope itself."),
]
Session = Annotated[str, Field(description="The session (conversation) id.")]
MemoryId = Annotated[str, Field(description="A memory id (UUID) returned by another tool.")]
Moment = Annotated[
    datetime | None,
    Field(description="An ISO 8601 moment with a timezone, e.g. 2024-06-01T00:00:00Z."),
]


def _is_under(scope: Scope, base: Scope) -> bool:
    """True when ``scope`` is ``base`` or nested under it."""
    upto = base.depth + 1
    return scope.levels[:upto] == base.levels[:upto]


def _is_visible(scope: Scope, base: Scope) -> bool:
    """True when the server may read a memory of ``scope``: under it or above it on its path."""
    return _is_under(scope, base) or scope in base.ancestors()


def _tool_error(exc: MemsvcError) -> ToolError:
    """The tool error a client sees: the error's class and memsvc's message, nothing else."""
    return ToolError(f"{type(exc).__name__}: {exc}")


@contextlib.contextmanager
def _tool_errors() -> Iterator[None]:
    """A memsvc failure inside becomes a tool error carrying memsvc's own message."""
    try:
        yield
    except MemsvcError as exc:
        raise _tool_error(exc) from exc


# Longest description of one refused argument (jsonschema quotes the value in full).
MAX_PROBLEM_CHARS = 200


def _schema_problem(error: SchemaViolation) -> str:
    where = ".".join(str(part) for part in error.absolute_path)
    message = str(error.message)
    if len(message) > MAX_PROBLEM_CHARS:
        message = message[:MAX_PROBLEM_CHARS] + " ..."
    return f"{where}: {message}" if where else message


class _AsSent(FuncMetadata):
    """A tool's arguments validated as the client sent them.

    The SDK would first parse a string argument holding JSON into the list
    or object it spells when the parameter is not a string (some hosts send
    objects that way); held to the schema, such a string is refused instead.
    """

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        """The arguments unchanged."""
        return data


class _HeldToSchema(ArgModelBase):
    """Arguments checked against the tool's published input schema before pydantic reads them."""

    model_config = ConfigDict(extra="forbid")
    input_schema: ClassVar[Draft202012Validator]

    @model_validator(mode="before")
    @classmethod
    def follow_the_schema(cls, data: Any) -> Any:
        """Refuse what the schema refuses, naming each argument; else pass ``data`` on."""
        problems = sorted(_schema_problem(e) for e in cls.input_schema.iter_errors(data))
        if problems:
            raise ValueError("; ".join(problems))
        return data


def _held_to_schema(tool: Tool) -> Tool:
    """``tool`` refusing what its published input schema refuses, before anything runs.

    The arguments are checked against the schema (made to refuse properties
    it does not list) with a JSON Schema validator: ``"k": "5"`` is not an
    integer, an unknown argument is not allowed, ``5.0`` is an integer, as
    JSON Schema has it. Only then does pydantic turn them into the
    function's arguments. A refusal is a tool error naming the argument.
    """
    loose = tool.fn_metadata.arg_model
    strict = cast(
        type[_HeldToSchema], create_model(loose.__name__, __base__=(loose, _HeldToSchema))
    )
    schema = strict.model_json_schema(by_alias=True)
    strict.input_schema = Draft202012Validator(schema)
    metadata = _AsSent(
        arg_model=strict,
        output_schema=tool.fn_metadata.output_schema,
        output_model=tool.fn_metadata.output_model,
        wrap_output=tool.fn_metadata.wrap_output,
    )
    return tool.model_copy(update={"fn_metadata": metadata, "parameters": schema})


def _tool(
    tools: list[Tool], annotations: ToolAnnotations
) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
    """Register a tool: its description is its docstring on one line (what a model
    reads), its arguments are held to its schema, and a memsvc failure inside it is
    a tool error with memsvc's message."""

    def register(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(fn)  # the SDK reads the signature (the schema) through __wrapped__
        async def call(*args: Any, **kwargs: Any) -> Any:
            with _tool_errors():
                return await fn(*args, **kwargs)

        description = " ".join(inspect.cleandoc(fn.__doc__ or "").split())
        tool = Tool.from_function(call, description=description, annotations=annotations)
        tools.append(_held_to_schema(tool))
        return fn

    return register


def create_server(service: MemoryService, scope: Scope) -> MCPServer[Any]:
    """An MCP server exposing ``service`` within ``scope`` as tools.

    Args:
        service: An open service with an embedder (text search needs one).
        scope: What the server serves: a tenant, optionally a project and an
            agent. Sessions are named per call; a session-level scope is refused.

    Raises:
        ValueError: ``scope`` names a session, or the service has no embedder.
        TypeError: ``service`` is not a MemoryService (a SyncMemoryService
            included: the tools run on the server's loop, so pass a service
            opened on it, as ``memsvc mcp`` does).
    """
    if not isinstance(service, MemoryService):
        raise ServiceTypeError(
            "service",
            "create_server takes a memsvc.MemoryService opened on the loop that serves "
            f"MCP (open it there with MemoryService.open()), not {type(service).__name__}",
        )
    if scope.session is not None:
        raise ValueError("the server's scope stops at the agent; sessions are tool arguments")
    if service.embedder is None:
        raise ValueError("memory_search needs a service opened with an embedder")
    memories = service.memories
    tools: list[Tool] = []
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    writes = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)

    async def visible(memory_id: str) -> Memory:
        # Looked up within the tenant only; a memory of another tenant, or off
        # this server's path, is reported exactly like a missing one.
        memory = await memories.get(memory_id, tenant=scope.tenant)
        if not _is_visible(memory.scope, scope):
            raise NotFoundError(f"memory {memory_id} not found")
        return memory

    @_tool(tools, writes)
    async def memory_add(
        content: Content,
        metadata: Metadata = None,
        importance: Importance = 0.5,
        ttl_seconds: TtlSeconds = None,
        session: OptionalSession = None,
    ) -> MemoryResult:
        """Store a long-term memory. Storing the same text again in the same place returns
        the memory already stored instead of a duplicate. Returns its id and a preview."""
        target = _scoped(scope, session)
        memory = await memories.add(
            target, content, metadata=metadata, importance=importance, ttl=ttl_seconds
        )
        return MemoryResult.of(memory)

    @_tool(tools, writes)
    async def memory_put(
        key: Annotated[str, Field(description="A stable name for the memory, e.g. 'units'.")],
        content: Content,
        metadata: Metadata = None,
        importance: Importance = 0.5,
        ttl_seconds: TtlSeconds = None,
        session: OptionalSession = None,
    ) -> MemoryResult:
        """Store a memory under a key, replacing what the key held before (its version goes
        up). Use it for facts that change, like a preference; read it back with memory_get."""
        target = _scoped(scope, session)
        memory = await memories.put(
            target, key, content, metadata=metadata, importance=importance, ttl=ttl_seconds
        )
        return MemoryResult.of(memory)

    @_tool(tools, read_only)
    async def memory_search(
        query: Annotated[str, Field(description="What to look for, in natural language.")],
        k: Annotated[int, Field(ge=1, le=MAX_K, description="How many memories to return.")] = 5,
        where: Annotated[
            dict[str, Any] | None,
            Field(
                description="Metadata filter on top-level keys, combined with AND: "
                '{"kind": "preference"} for equality, or operators $eq $ne $gt $gte $lt '
                '$lte $in $nin $exists, e.g. {"priority": {"$gte": 2}}.'
            ),
        ] = None,
        include: Annotated[
            Include,
            Field(
                description="descendants: the scope searched and everything under it "
                "(every session when no session is named); exact: that scope only; "
                "ancestors: that scope and the broader scopes above it."
            ),
        ] = "descendants",
        session: Annotated[
            str | None,
            Field(description="Search from this session instead of the server's whole scope."),
        ] = None,
        full_content: Annotated[
            bool,
            Field(
                description="Also return each hit's whole content (default: a preview of "
                f"{PREVIEW_CHARS} characters; memory_get reads one memory in full)."
            ),
        ] = False,
        valid: Annotated[
            Literal["now", "all"],
            Field(
                description="now: only facts that hold now (superseded and invalidated "
                "memories left out); all: whatever their validity."
            ),
        ] = "now",
        valid_at: Annotated[
            datetime | None,
            Field(
                description="Only facts that held at this ISO 8601 moment (with a timezone), "
                "e.g. to answer where someone lived in April 2024."
            ),
        ] = None,
    ) -> SearchResult:
        """Find the memories closest in meaning to a query, best first, with their scores and
        a preview of each (full_content for all of it). By default only facts that hold now."""
        target = _scoped(scope, session)
        hits = await memories.search(
            target, query, k=k, include=include, where=where, valid=valid, valid_at=valid_at
        )
        return SearchResult(
            hits=[
                SearchResultItem(score=h.score, memory=MemoryResult.of(h.memory, full=full_content))
                for h in hits
            ]
        )

    @_tool(tools, read_only)
    async def memory_get(
        id: Annotated[
            str | None, Field(description="The memory's id. Give either id or key.")
        ] = None,
        key: Annotated[
            str | None, Field(description="The key a memory was put under with memory_put.")
        ] = None,
        session: Annotated[
            str | None, Field(description="With key: the session the key was put in.")
        ] = None,
    ) -> MemoryResult:
        """Read one memory, its whole content included, by its id or by the key it was stored
        under with memory_put."""
        if id is not None and key is None:
            return MemoryResult.of(await visible(id), full=True)
        if key is not None and id is None:
            found = await memories.get_by_key(_scoped(scope, session), key)
            return MemoryResult.of(found, full=True)
        raise ValidationError("id", "give either id or key, not both or neither")

    deletes = ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
    )

    async def owned(memory_id: str) -> Memory:
        memory = await visible(memory_id)
        if not _is_under(memory.scope, scope):
            # Readable from here (stored above this scope) but not this server's to change.
            raise NotFoundError(f"memory {memory_id} not found in this server's scope")
        return memory

    @_tool(tools, deletes)
    async def memory_delete(id: MemoryId) -> DeleteResult:
        """Delete a memory stored in this server's scope or one of its sessions."""
        memory = await owned(id)
        return DeleteResult(deleted=await memories.delete(memory.id, tenant=scope.tenant))

    @_tool(tools, writes)
    async def memory_supersede(
        id: Annotated[str, Field(description="The id of the memory whose fact changed.")],
        content: Content,
        valid_from: Moment = None,
        metadata: Metadata = None,
    ) -> MemoryResult:
        """Record that a fact changed: store its new version and end the old memory's
        validity at valid_from (default: now), linking the two. Searches then return the new
        version; the old one stays readable for questions about the past."""
        memory = await owned(id)
        new = await memories.supersede(
            memory.id, content, valid_from=valid_from, metadata=metadata, tenant=scope.tenant
        )
        return MemoryResult.of(new)

    @_tool(tools, writes)
    async def memory_invalidate(id: MemoryId, at: Moment = None) -> MemoryResult:
        """Record that a fact stopped being true at a moment (default: now), with nothing
        replacing it. Searches then leave it out; it stays readable for the past."""
        memory = await owned(id)
        return MemoryResult.of(await memories.invalidate(memory.id, at=at, tenant=scope.tenant))

    @_tool(tools, writes)
    async def working_set(
        session: Session,
        key: Annotated[str, Field(description="The name of the value (not starting with '_').")],
        value: Annotated[Any, Field(description="Any JSON value.")],
        ttl_seconds: Annotated[
            float | None,
            Field(gt=0, description="Seconds it lives; omit for the server's default."),
        ] = None,
    ) -> WorkingSetResult:
        """Keep a short-lived value in a session's working memory (drafts, task state)."""
        target = _scoped(scope, session)
        await service.working(target).set(key, value, ttl_seconds=ttl_seconds)
        return WorkingSetResult(session=session, key=key, stored=True)

    @_tool(tools, read_only)
    async def working_get(
        session: Session,
        key: Annotated[
            str | None, Field(description="The value's name; omit to get every value.")
        ] = None,
    ) -> WorkingGetResult:
        """Read a session's working memory: one key (absent keys are left out) or all of it."""
        target = _scoped(scope, session)
        working = service.working(target)
        if key is None:
            values = await working.get_all()
        else:
            missing = object()
            value = await working.get(key, missing)
            values = {} if value is missing else {key: value}
        return WorkingGetResult(session=session, values=values)

    @_tool(tools, writes)
    async def scratchpad_append(
        session: Session,
        content: Annotated[str, Field(description="A note, e.g. what was just checked.")],
    ) -> ScratchpadResult:
        """Append a note to a session's scratchpad; returns the scratchpad."""
        target = _scoped(scope, session)
        working = service.working(target)
        await working.append_scratchpad(content)
        return await _scratchpad(working, session)

    @_tool(tools, read_only)
    async def scratchpad_get(session: Session) -> ScratchpadResult:
        """Read a session's scratchpad notes, oldest first, with their timestamps."""
        target = _scoped(scope, session)
        return await _scratchpad(service.working(target), session)

    @_tool(tools, writes)
    async def memory_remember(
        messages: Annotated[
            list[ConversationMessage],
            Field(min_length=1, description="The conversation's new messages, oldest first."),
        ],
        session: OptionalSession = None,
    ) -> RememberToolResult:
        """Remember what a conversation's messages state: the server's extractor decides which
        facts are new, reword or replace a memory, or are noise, and memsvc applies that, each
        message once (messages already remembered are skipped)."""
        if service.extractor is None:
            raise ValidationError(
                "extractor",
                "this MCP server has no extractor: start it with MEMSVC_EXTRACTOR set "
                "(openai:<model>, with MEMSVC_EXTRACTOR_BASE_URL and MEMSVC_EXTRACTOR_API_KEY)",
            )
        sent = [m.model_dump(exclude_none=True) for m in messages]
        result = await service.remember(_scoped(scope, session), sent)
        return RememberToolResult(
            applied=[
                AppliedOperation(
                    op=a.operation.op,
                    memory=None if a.memory is None else MemoryResult.of(a.memory),
                )
                for a in result.applied
            ],
            skipped=[SkippedOperation(index=r.index, reason=r.reason) for r in result.skipped],
            remembered=list(result.remembered),
            already_remembered=list(result.already_remembered),
            pending=list(result.pending),
            model_calls=result.model_calls,
        )

    @_tool(tools, writes)
    async def memory_consolidate(
        session: OptionalSession = None,
        min_cluster: Annotated[
            int,
            Field(ge=2, le=MAX_MEMBERS, description="Fewest related memories a cluster holds."),
        ] = 3,
        threshold: Annotated[
            float,
            Field(
                gt=0, le=1,
                description="Cosine similarity at which memories belong together "
                "(for the server's embedder; the default suits all-MiniLM-L6-v2).",
            ),
        ] = CLUSTER_THRESHOLD,
    ) -> ConsolidateResult:
        """Group related memories of this scope (or one session, exactly that scope) into
        clusters, each under a summary memory that searches ranked for recall show first;
        only memories new since the last run are considered. The members are kept."""
        report = await service.maintenance.consolidate(
            _scoped(scope, session), min_cluster=min_cluster, threshold=threshold
        )
        return ConsolidateResult(
            made=report.made,
            joined=report.joined,
            redone=report.redone,
            dissolved=report.dissolved,
            considered=report.considered,
            summaries=[str(summary) for summary in report.summaries],
        )

    return MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, tools=tools)


def _scoped(base: Scope, session: str | None) -> Scope:
    """The server's scope, narrowed to ``session`` when one is named."""
    return base if session is None else base.with_session(session)


async def _scratchpad(working: WorkingMemory, session: str) -> ScratchpadResult:
    entries = await working.get_scratchpad_with_timestamps()
    return ScratchpadResult(
        session=session, entries=[ScratchpadEntry(**entry) for entry in entries]
    )


@contextlib.asynccontextmanager
async def open_server(settings: Settings, scope: Scope) -> AsyncIterator[MCPServer[Any]]:
    """Open a service with the embedder ``settings.embedder`` names and serve ``scope``."""
    embedder = embedder_from_spec(settings.embedder, settings.embedding_dim)
    async with MemoryService.open(settings, embedder=embedder) as service:
        yield create_server(service, scope)


async def serve(
    settings: Settings,
    scope: Scope,
    *,
    transport: Transport = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``scope`` over stdio or streamable HTTP until the client (or a signal) ends it.

    ``on_ready`` is called with a line saying where the server listens, once
    the database is open (for HTTP; stdio answers on stdout at once).
    """
    async with open_server(settings, scope) as server:
        if transport == "stdio":
            await server.run_stdio_async()
            return
        await _serve_http(server, host, port, scope, on_ready)


async def _serve_http(
    server: MCPServer[Any],
    host: str,
    port: int,
    scope: Scope,
    on_ready: Callable[[str], None] | None,
) -> None:
    """Serve the streamable HTTP app with uvicorn until SIGINT/SIGTERM, then return.

    uvicorn shuts down on the signal, then raises it again under the handler
    that was installed before it started; with the default one the process
    would die right there, before the service closes its pool (or stops the
    embedded PostgreSQL). The handler installed here asks uvicorn to exit
    instead, which is also right for a signal arriving before uvicorn's own
    handlers are in place.
    """
    import uvicorn  # a dependency of the mcp SDK, needed for HTTP only

    app = server.streamable_http_app(host=host)
    http = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="info"))

    def stop(_signal: int, _frame: object) -> None:
        http.should_exit = True

    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if on_ready is not None:
            on_ready(f"memsvc MCP server for {_describe(scope)} on http://{host}:{port}/mcp")
        await http.serve()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _describe(scope: Scope) -> str:
    return "/".join(value for value in scope.levels if value is not None)
