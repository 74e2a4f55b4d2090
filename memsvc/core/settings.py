"""Settings, read from ``MEMSVC_*`` environment variables or passed in code."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from memsvc.core.errors import ValidationError
from memsvc.core.time_limits import MAX_DURATION_DAYS, MAX_DURATION_SECONDS

VectorType = Literal["vector", "halfvec"]
Distance = Literal["cosine", "l2", "ip"]

ENV_PREFIX = "MEMSVC_"
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# PostgreSQL's integer settings and parameters (timeouts in milliseconds,
# retention counts) are 32-bit.
MAX_INT4 = 2**31 - 1
MAX_TIMEOUT_MS = MAX_INT4
# Client-side timeouts become socket timeouts, which must fit the OS's timeval.
MAX_TIMEOUT_S = 30 * 86_400.0
# pgvector's HNSW index holds vectors of at most this many dimensions.
HNSW_MAX_DIM = {"vector": 2_000, "halfvec": 4_000}


class Settings(BaseSettings):
    """Configuration of a :class:`memsvc.MemoryService`.

    Every field can be set with an environment variable named ``MEMSVC_`` plus
    the field name in upper case, e.g. ``MEMSVC_DATABASE_URL``. A bad value
    raises :class:`memsvc.ValidationError` naming the setting and its variable.
    """

    # NaN and infinity are refused for every float setting: none of them means "never".
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, frozen=True, extra="forbid", allow_inf_nan=False
    )

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except pydantic.ValidationError as exc:
            raise settings_error(exc) from None

    # --- PostgreSQL -------------------------------------------------------
    database_url: str | None = Field(
        default=None,
        description="postgresql:// DSN. Unset: start the embedded PostgreSQL in data_dir.",
    )
    data_dir: Path = Field(
        default=Path.home() / ".memsvc",
        description="Where the embedded PostgreSQL keeps its data (kept across runs).",
    )
    db_schema: str = Field(default="memsvc", description="PostgreSQL schema holding every table.")
    auto_migrate: bool | None = Field(
        default=None,
        description="Run migrations at open. Unset: on for the embedded database only.",
    )
    pool_min_size: int = Field(default=1, ge=0)
    pool_max_size: int = Field(default=10, ge=1)
    statement_timeout_ms: int = Field(
        default=30_000, ge=0, le=MAX_TIMEOUT_MS, description="0 disables it."
    )
    lock_timeout_ms: int = Field(
        default=10_000, ge=0, le=MAX_TIMEOUT_MS, description="0 disables it."
    )
    connect_timeout_s: float = Field(default=10.0, gt=0, le=MAX_TIMEOUT_S)
    command_timeout_s: float = Field(
        default=60.0,
        gt=0,
        le=MAX_TIMEOUT_S,
        description="Client-side deadline for one statement and for getting a pooled "
        "connection; past it a call raises StorageError even if the server never answers.",
    )
    pgbouncer: bool = Field(
        default=False,
        description="Transaction-pooling mode: no prepared statements, no session state.",
    )
    row_level_security: bool = Field(default=False)
    listen_url: str | None = Field(
        default=None,
        description="postgresql:// DSN of a direct connection (not through pgbouncer in "
        "transaction mode) on which the change feed LISTENs for wake-ups. Unset: "
        "database_url, or polling only when pgbouncer is on.",
    )
    change_poll_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="Change feed: longest wait between reads when no notification arrives.",
    )
    change_retention_days: float | None = Field(
        default=None,
        gt=0,
        le=MAX_DURATION_DAYS,
        description="gc removes change events (memory history included) older than this; "
        "a feed cursor older than what gc removed raises CursorExpiredError. Unset: keep all.",
    )
    change_stall_report_s: float = Field(
        default=60.0,
        gt=0,
        description="Change feed: a feed held back this long behind one open transaction "
        "logs a warning naming it (pid or prepared transaction) and shows in the "
        "memsvc.changes.stalled gauge; doctor reports such a transaction as a problem.",
    )

    # --- read replicas ------------------------------------------------------
    replica_urls: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="postgresql:// DSNs of streaming replicas of database_url; searches, "
        "gets, lists, counts and history run there. Environment: comma-separated, or a "
        'JSON list (MEMSVC_REPLICA_URLS=\'["postgresql://r1/db", "postgresql://r2/db"]\').',
    )
    read_your_writes: bool = Field(
        default=True,
        description="A read after this service's own write runs on a replica only once "
        "the replica has replayed that write (else on the primary).",
    )
    replica_wait_s: float = Field(
        default=0.1,
        ge=0,
        description="Longest a read waits for a replica to replay the service's writes "
        "before it runs on the primary instead.",
    )
    replica_max_lag_s: float = Field(
        default=5.0,
        ge=0,
        description="A replica whose replay is further behind than this is skipped.",
    )
    replica_check_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="How often a replica's health (standby, replay lag) is checked.",
    )
    replica_retry_s: float = Field(
        default=5.0,
        gt=0,
        description="How long a replica that could not be reached is skipped.",
    )

    # --- vectors ------------------------------------------------------------
    embedding_dim: int = Field(default=384, ge=1, le=16_000)
    vector_type: VectorType = "vector"
    distance: Distance = "cosine"
    partitions: int = Field(
        default=0,
        ge=0,
        le=256,
        description="Hash partitions of the memories table by tenant_id, each with its own "
        "HNSW index (0 or 1: one table). Fixed when the schema is first created.",
    )
    hnsw_m: int = Field(default=16, ge=2, le=100)
    hnsw_ef_construction: int = Field(default=64, ge=4, le=1000)
    hnsw_ef_search: int = Field(default=100, ge=1, le=1000)
    hnsw_max_scan_tuples: int = Field(default=20_000, ge=1, le=MAX_INT4)
    scope_index_from: int = Field(
        default=5_000,
        ge=100,
        le=MAX_INT4,
        description="An exact scope holding at least this many live vectors gets a partial "
        "HNSW index of its own (built by gc and svc.maintenance.index_scopes(), see "
        "docs/how-to/scope-indexes.md).",
    )
    scope_indexes_max: int = Field(
        default=32,
        ge=0,
        le=1_024,
        description="Scope indexes at most (0: none). Every statement planned on memories "
        "locks each of them; see docs/how-to/scope-indexes.md for the measured ceiling.",
    )
    embedder: str = Field(
        default="hashing",
        description="Embedder where memsvc picks one (`memsvc mcp`, the demo): `hashing`, "
        "`openai:<model>` or `local:<model or path>` (see memsvc.embedding.embedder_from_spec).",
    )
    extractor: str | None = Field(
        default=None,
        description="Extractor `svc.remember` uses when a call names none: `openai:<model>` "
        "(see memsvc.extraction.extractor_from_spec; MEMSVC_EXTRACTOR_BASE_URL and "
        "MEMSVC_EXTRACTOR_API_KEY, else OPENAI_BASE_URL and OPENAI_API_KEY); unset: none.",
    )
    summarizer: str = Field(
        default="extractive",
        description="Summarizer where memsvc picks one: `extractive` (no model) or "
        "`openai:<model>` (see memsvc.extraction.summarizer_from_spec).",
    )
    embedding_state_refresh_s: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="How often a service re-reads whether an embedding-model migration "
        "(`memsvc reembed`) is in progress; the switch waits twice this long after the start.",
    )
    text_search_config: str = Field(
        default="english",
        description="PostgreSQL text search configuration of the memories' text search column "
        "(fixed at migration; changing it means migrating the column again, see "
        "docs/how-to/hybrid-search.md).",
    )
    exact_search_threshold: int = Field(
        default=2_000,
        ge=0,
        description="Assembly search: scopes with fewer assemblies are scanned exactly.",
    )

    # --- limits ---------------------------------------------------------------
    max_content_bytes: int = Field(default=8 * 1024 * 1024, ge=1)
    max_metadata_bytes: int = Field(default=256 * 1024, ge=2)
    max_memories_per_scope: int | None = Field(
        default=None,
        ge=1,
        description="Most memories one exact scope may hold; adds past it are a ConflictError.",
    )
    max_checkpoint_bytes: int = Field(default=16 * 1024 * 1024, ge=2)
    import_clock_skew_s: float = Field(
        default=300.0,
        ge=0,
        description="Imports store a timestamp further than this in the future as the "
        "time of the import (and report it).",
    )
    dedupe: Literal["exact", "semantic", "off"] = Field(
        default="exact",
        description="What add and add_many do with a memory their scope already holds: "
        "exact (same content: the stored one is returned), semantic (also a near-duplicate "
        "by embedding: merged into it), off (stored again).",
    )
    semantic_dedupe_threshold: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="dedupe='semantic': the cosine similarity at which a write is merged "
        "into a live memory of its scope (which must hold the same identifier-like tokens).",
    )
    forget_below: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="gc's forget pass (run when a half-life policy is set) forgets the "
        "memories whose strength is below this.",
    )
    forget_grace_days: float = Field(
        default=30.0,
        ge=0,
        le=MAX_DURATION_DAYS,
        description="A forgotten memory can be restored (svc.memories.restore) this long; "
        "then gc deletes it.",
    )
    checkpoint_keep_last: int = Field(default=50, ge=1, le=MAX_INT4)
    langgraph_checkpoint_keep_last: int | None = Field(
        default=None,
        ge=1,
        le=MAX_INT4,
        description="MemsvcSaver keeps the newest N checkpoints per thread and namespace, "
        "pruned in each put's transaction. Unset: keep them all.",
    )

    # --- working memory ----------------------------------------------------------
    redis_url: str | None = Field(default=None, description="Unset: in-process store.")
    working_memory_require_redis: bool = False
    working_memory_default_ttl_seconds: int | None = Field(
        default=86_400, ge=1, le=int(MAX_DURATION_SECONDS)
    )
    working_memory_max_sessions: int = Field(default=1_000, ge=1)
    working_memory_max_keys: int = Field(default=10_000, ge=1)
    working_memory_max_value_bytes: int = Field(default=1024 * 1024, ge=1)
    scratchpad_max_entries: int = Field(default=1_000, ge=1)
    redis_timeout_s: float = Field(default=1.0, gt=0, le=MAX_TIMEOUT_S)
    redis_max_connections: int = Field(default=50, ge=1)

    @field_validator("data_dir", "database_url", "redis_url", "listen_url", mode="before")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        # An empty variable (MEMSVC_DATA_DIR=) would read as the current
        # directory, an empty URL as libpq's defaults: never what was meant.
        if isinstance(value, str | Path) and not str(value).strip():
            raise ValueError("must not be empty (unset it to use the default)")
        return value

    @field_validator("data_dir")
    @classmethod
    def _path_is_printable(cls, value: Path) -> Path:
        # The server's postmaster.pid records the path on one line.
        if _CONTROL.search(str(value)):
            raise ValueError("must not contain control characters (newlines, tabs, NUL)")
        return value

    @model_validator(mode="after")
    def _settings_work_together(self) -> Settings:
        # Checked here, before anything starts, rather than by the driver,
        # the server or the first index build.
        check_combinations(self)
        return self

    @field_validator("db_schema")
    @classmethod
    def _schema_is_identifier(cls, value: str) -> str:
        # The schema name is interpolated into SQL text, so it must be a plain
        # lower-case identifier; anything else is refused here.
        if not _IDENTIFIER.match(value):
            raise ValueError("must be a lower-case identifier: [a-z_][a-z0-9_]{0,62}")
        return value

    @field_validator("replica_urls", mode="before")
    @classmethod
    def _split_replica_urls(cls, value: Any) -> Any:
        # From the environment: a JSON list or comma-separated DSNs.
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("replica_urls")
    @classmethod
    def _replica_urls_are_postgres(cls, value: list[str]) -> list[str]:
        for url in value:
            if not url.startswith(("postgresql://", "postgres://")):
                # The URL itself is left out: it may hold a password.
                raise ValueError("each replica URL must be a postgresql:// DSN")
        return value

    @field_validator("text_search_config")
    @classmethod
    def _config_is_identifier(cls, value: str) -> str:
        # Interpolated into DDL and queries as a regconfig literal.
        if not _IDENTIFIER.match(value):
            raise ValueError("must be a text search configuration name: [a-z_][a-z0-9_]{0,62}")
        return value

    @property
    def partition_count(self) -> int:
        """How many partitions the memories table has (0: not partitioned; 1 means 0)."""
        return self.partitions if self.partitions > 1 else 0

    @property
    def uses_embedded_database(self) -> bool:
        """True when no database_url is set and the embedded server is used."""
        return self.database_url is None

    @property
    def should_auto_migrate(self) -> bool:
        """Whether :meth:`MemoryService.open` runs migrations itself."""
        if self.auto_migrate is None:
            return self.uses_embedded_database
        return self.auto_migrate


def _combination_error(first: str, second: str, reason: str) -> ValidationError:
    return ValidationError(
        first, f"{reason} (environment variables {env_var(first)}, {env_var(second)})"
    )


def check_combinations(settings: Settings) -> None:
    """Raise ValidationError, naming both settings, for two that cannot work together."""
    if settings.pool_min_size > settings.pool_max_size:
        raise _combination_error(
            "pool_min_size",
            "pool_max_size",
            f"is {settings.pool_min_size}, above pool_max_size ({settings.pool_max_size})",
        )
    if settings.working_memory_require_redis and settings.redis_url is None:
        raise _combination_error(
            "working_memory_require_redis",
            "redis_url",
            "is set but redis_url is not: set redis_url, or unset working_memory_require_redis "
            "to use the in-process store",
        )
    most = HNSW_MAX_DIM[settings.vector_type]
    if settings.embedding_dim > most:
        other = "halfvec (up to 4000)" if settings.vector_type == "vector" else "a smaller model"
        raise _combination_error(
            "embedding_dim",
            "vector_type",
            f"is {settings.embedding_dim}, but an HNSW index of vector_type "
            f"{settings.vector_type!r} holds at most {most} dimensions: use {other}",
        )
    if settings.hnsw_ef_construction < 2 * settings.hnsw_m:
        raise _combination_error(
            "hnsw_ef_construction",
            "hnsw_m",
            f"is {settings.hnsw_ef_construction}, below 2 x hnsw_m ({2 * settings.hnsw_m}), "
            "which pgvector requires",
        )
    if settings.replica_urls and settings.database_url is None:
        raise _combination_error(
            "replica_urls",
            "database_url",
            "are set but database_url is not: replicas serve reads of database_url's "
            "server, never of the embedded one",
        )


def env_var(setting: str) -> str:
    """The environment variable of a setting (``embedding_dim`` -> ``MEMSVC_EMBEDDING_DIM``)."""
    return ENV_PREFIX + setting.upper()


def settings_error(exc: pydantic.ValidationError) -> ValidationError:
    """pydantic's multi-line report as one memsvc ValidationError naming each bad
    setting and its variable (values are left out: a URL may hold a password)."""
    problems = []
    for error in exc.errors(include_url=False, include_input=False):
        raised = error.get("ctx", {}).get("error")
        if isinstance(raised, ValidationError):
            # A check of several settings (check_combinations) names its own.
            problems.append((raised.field, raised.reason))
            continue
        location = error["loc"]
        setting = str(location[0]) if location else "settings"
        message = error["msg"].removeprefix("Value error, ")
        problems.append((setting, f"{message} (environment variable {env_var(setting)})"))
    setting, reason = problems[0]
    for other, other_reason in problems[1:]:
        reason += f"; {other}: {other_reason}"
    return ValidationError(setting, reason)
