"""``memsvc import-legacy``: move a file-based memory store into PostgreSQL.

Two layouts are understood (the systems memsvc replaces):

**Directory store** (``memory_index.json``, ``memories/<id>.json``,
``assemblies/<id>.json``). Each memory file becomes a memory in the tenant
scope: ``id`` (or ``memory_id``, else the file name) becomes the memory id
when it is a UUID, else a deterministic uuid5 of it; ``content``,
``embedding``, ``metadata``, ``quickrecal_score`` (or ``significance``)
as ``importance`` (clamped to [0, 1]), ``timestamp``/``created_at`` and
``updated_at``/``quickrecal_updated`` as timestamps, ``access_count`` and
``last_access_time``; index entries fill in what a file lacks. Each
assembly file becomes an assembly (``assembly_id``/``id``, ``name``,
``description``, ``memory_ids``/``memories``/``member_ids`` mapped the same
way, ``creation_time``/``created_at``); its counts and centroid are
recomputed from the members. Files listed in the index but missing, and
files missing from the index, are reported (the latter still imported).

**One JSON file per session** (``{"session_id": ..., "memories": {category:
{key: {"value": ..., "timestamp": ..., ...}}}}``). Every entry becomes a
keyed memory in the scope ``Scope(tenant, session=session_id)`` with key
``"<category>/<key>"``, content the value (JSON text when it is not a
string), ``created_at``/``updated_at`` the timestamp, and metadata
``{"category": ..., **the entry's other fields}``. Its id is a uuid5 of
tenant, session and key.

Every imported memory's metadata gets ``"legacy": {"id": ..., "path": ...}``
(unless it already has a ``legacy`` key), so the old ids stay findable.
Empty, truncated or otherwise unreadable files are reported with their path
and skipped; the import never stops for them. Ids are deterministic and the
load skips rows already stored, so running it again changes nothing.
``dry_run`` reads and validates everything and writes nothing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from memsvc.db.errors import translate_errors
from memsvc.errors import ValidationError
from memsvc.ops.bulk import VectorIndexRebuild, should_rebuild
from memsvc.ops.bulk_queries import count_up_to
from memsvc.ops.export import IndexMode
from memsvc.ops.loader import Loader, LoadReport, Problem
from memsvc.ops.records import (
    AssemblyRecord,
    MemoryRecord,
    Record,
    check_key,
    check_name,
    derived_id,
    parse_time,
)
from memsvc.repositories.assemblies import AssemblyRepository
from memsvc.repositories.memories import content_hash
from memsvc.scope import Scope
from memsvc.settings import Settings
from memsvc.validation import (
    encode_json,
    validate_content,
    validate_embedding,
    validate_importance,
    validate_text,
)

INDEX_FILE = "memory_index.json"

Progress = Callable[[int], None]


@dataclass
class LegacyReport:
    """What an import-legacy run found, and what the load did with it."""

    dry_run: bool
    files_read: int = 0
    memories_found: int = 0
    assemblies_found: int = 0
    sessions_found: int = 0
    memories_valid: int = 0
    assemblies_valid: int = 0
    load: LoadReport = field(default_factory=LoadReport)

    @property
    def ok(self) -> bool:
        """True when no file or record was rejected."""
        return self.load.ok


class _Reader:
    """Turns a legacy tree into records, reporting unreadable files as it goes."""

    def __init__(self, root: Path, tenant: str, settings: Settings, report: LegacyReport) -> None:
        self.root = root
        self.tenant = tenant
        self.settings = settings
        self.report = report

    # ------------------------------------------------------------ helpers

    def _rel(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix() or path.name
        except ValueError:
            return str(path)

    def _problem(self, path: Path | str, kind: str, reason: str) -> None:
        source = path if isinstance(path, str) else self._rel(path)
        self.report.load.note_rejection(Problem(source, kind, reason))
        counts = self.report.load.counts(kind)
        if counts is not None:
            counts.rejected += 1

    def _read_object(self, path: Path, kind: str) -> dict[str, Any] | None:
        """A JSON object from a file, or None after reporting why it cannot be read."""
        self.report.files_read += 1
        try:
            raw = path.read_bytes()
        except OSError as exc:
            self._problem(path, kind, f"cannot be read ({exc.strerror})")
            return None
        if not raw.strip():
            self._problem(path, kind, "empty file")
            return None
        try:
            obj = json.loads(raw)
        except UnicodeDecodeError:
            self._problem(path, kind, "not UTF-8 text")
            return None
        except json.JSONDecodeError as exc:
            # Running out of text (mid-string or mid-object) is what a torn write leaves.
            cut = exc.pos >= len(raw.rstrip()) or exc.msg.startswith("Unterminated string")
            what = "truncated JSON" if cut else "invalid JSON"
            self._problem(path, kind, f"{what} (line {exc.lineno}, column {exc.colno})")
            return None
        if not isinstance(obj, dict):
            self._problem(path, kind, f"not a JSON object (a {type(obj).__name__})")
            return None
        return obj

    def _inside(self, relative: object, default: Path) -> Path | None:
        if not isinstance(relative, str) or not relative:
            return default
        candidate = (self.root / relative).resolve()
        # An index entry must not send us outside the store.
        if not candidate.is_relative_to(self.root.resolve()):
            return None
        return candidate

    def memory_id(self, legacy_id: str) -> uuid.UUID:
        """The memsvc id of a legacy memory id (itself when it is a UUID)."""
        try:
            return uuid.UUID(legacy_id)
        except ValueError:
            return derived_id("legacy-memory", self.tenant, legacy_id)

    def assembly_id(self, legacy_id: str) -> uuid.UUID:
        """The memsvc id of a legacy assembly id (itself when it is a UUID)."""
        try:
            return uuid.UUID(legacy_id)
        except ValueError:
            return derived_id("legacy-assembly", self.tenant, legacy_id)

    def _metadata(self, base: object, legacy: dict[str, Any], **extra: Any) -> str:
        meta: dict[str, Any] = dict(base) if isinstance(base, Mapping) else {}
        for name, value in extra.items():
            meta.setdefault(name, value)
        meta.setdefault("legacy", legacy)
        return encode_json("metadata", meta, self.settings.max_metadata_bytes)

    # ------------------------------------------------------------ directory store

    def directory_store(self) -> Iterator[tuple[Record, str]]:
        """Records of a ``memory_index.json`` + ``memories/`` + ``assemblies/`` store."""
        index_path = self.root / INDEX_FILE
        index: dict[str, Any] = {}
        if index_path.exists():
            index = self._read_object(index_path, "file") or {}
        else:
            self._problem(INDEX_FILE, "file", "missing; reading memories/ without it")
        for section in ("memories", "assemblies"):
            if not isinstance(index.get(section, {}), dict):
                self._problem(index_path, "file", f"its {section!r} is not an object; ignored")
                index[section] = {}
        yield from self._section(index.get("memories", {}), "memories", "memory")
        yield from self._section(index.get("assemblies", {}), "assemblies", "assembly")

    def _section(
        self, listed: dict[str, Any], folder: str, kind: str
    ) -> Iterator[tuple[Record, str]]:
        directory = self.root / folder
        on_disk = {p.resolve(): p for p in sorted(directory.glob("*.json"))}
        seen: set[Path] = set()
        for legacy_id, entry in listed.items():
            entry = entry if isinstance(entry, dict) else {}
            path = self._inside(entry.get("filepath"), directory / f"{legacy_id}.json")
            if path is None:
                self._problem(INDEX_FILE, kind, f"{legacy_id}: filepath points outside the store")
                continue
            path = path.resolve()
            if path not in on_disk and not path.exists():
                self._problem(
                    f"{folder}/{path.name}",
                    kind,
                    f"listed in {INDEX_FILE} as {legacy_id!r} but the file is missing",
                )
                continue
            seen.add(path)
            yield from self._file(path, legacy_id, entry, kind)
        for resolved, path in on_disk.items():
            if resolved in seen:
                continue
            if listed:
                self.report.load.warn(
                    self._rel(path), kind, f"not listed in {INDEX_FILE}; imported anyway"
                )
            yield from self._file(resolved, path.stem, {}, kind)

    def _file(
        self, path: Path, legacy_id: str, entry: dict[str, Any], kind: str
    ) -> Iterator[tuple[Record, str]]:
        obj = self._read_object(path, kind)
        if obj is None:
            return
        source = self._rel(path)
        try:
            if kind == "memory":
                self.report.memories_found += 1
                memory = self._memory(obj, legacy_id, entry, source)
                self.report.memories_valid += 1
                yield memory, source
            else:
                self.report.assemblies_found += 1
                assembly = self._assembly(obj, legacy_id, entry, source)
                self.report.assemblies_valid += 1
                yield assembly, source
        except ValidationError as exc:
            self._problem(source, kind, f"{exc.field}: {exc.reason}")

    def _memory(
        self, obj: dict[str, Any], legacy_id: str, entry: dict[str, Any], source: str
    ) -> MemoryRecord:
        own_id = obj.get("id", obj.get("memory_id"))
        legacy_id = str(own_id) if own_id is not None else legacy_id
        text = validate_content(obj.get("content"), self.settings.max_content_bytes)
        embedding = obj.get("embedding")
        score = obj.get("quickrecal_score", obj.get("significance", entry.get("quickrecal_score")))
        importance = 0.5
        if isinstance(score, int | float) and not isinstance(score, bool):
            importance = validate_importance(min(1.0, max(0.0, float(score))))
        created = parse_time(
            "timestamp",
            obj.get("created_at", obj.get("timestamp", entry.get("created_at"))),
        )
        updated = parse_time(
            "updated_at",
            obj.get("updated_at", obj.get("quickrecal_updated", entry.get("updated_at"))),
        )
        access_count = obj.get("access_count", 0)
        return MemoryRecord(
            id=self.memory_id(legacy_id),
            scope=Scope(self.tenant),
            content=text,
            content_hash=content_hash(text),
            metadata=self._metadata(obj.get("metadata"), {"id": legacy_id, "path": source}),
            embedding=None
            if embedding is None
            else validate_embedding(
                embedding,
                self.settings.embedding_dim,
                self.settings.vector_type,
                distance=self.settings.distance,
            ),
            importance=importance,
            created_at=created,
            updated_at=updated or created,
            access_count=access_count
            if isinstance(access_count, int) and not isinstance(access_count, bool)
            and access_count >= 0
            else 0,
            last_accessed_at=parse_time("last_access_time", obj.get("last_access_time")),
        )

    def _assembly(
        self, obj: dict[str, Any], legacy_id: str, entry: dict[str, Any], source: str
    ) -> AssemblyRecord:
        own_id = obj.get("assembly_id", obj.get("id"))
        legacy_id = str(own_id) if own_id is not None else legacy_id
        members = obj.get("memory_ids", obj.get("memories", obj.get("member_ids", [])))
        if isinstance(members, dict):
            members = list(members)
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise ValidationError("memory_ids", "must be a list of memory ids")
        created = parse_time(
            "creation_time",
            obj.get("creation_time", obj.get("created_at", entry.get("created_at"))),
        )
        description = obj.get("description") or ""
        return AssemblyRecord(
            id=self.assembly_id(legacy_id),
            scope=Scope(self.tenant),
            name=check_name(obj.get("name") or legacy_id),
            description=validate_text(description, 64 * 1024, "description"),
            metadata=self._metadata(obj.get("metadata"), {"id": legacy_id, "path": source}),
            member_ids=list(dict.fromkeys(self.memory_id(m) for m in members)),
            created_at=created,
            updated_at=parse_time("updated_at", obj.get("updated_at")) or created,
        )

    # ------------------------------------------------------------ session files

    def session_files(self, files: list[Path]) -> Iterator[tuple[Record, str]]:
        """Records of one-JSON-file-per-session stores."""
        for path in files:
            obj = self._read_object(path, "file")
            if obj is None:
                continue
            yield from self._session(path, obj)

    def _session(self, path: Path, obj: dict[str, Any]) -> Iterator[tuple[Record, str]]:
        source = self._rel(path)
        session_id = obj.get("session_id")
        if not isinstance(session_id, str) or not session_id:
            session_id = path.stem
            self.report.load.warn(
                source, "file", f"no session_id; using the file name {path.stem!r}"
            )
        try:
            scope = Scope(self.tenant, session=session_id)
        except ValidationError as exc:
            self._problem(source, "file", f"session_id: {exc.reason}")
            return
        categories = obj.get("memories", {})
        if not isinstance(categories, dict):
            self._problem(source, "file", "its 'memories' is not an object")
            return
        self.report.sessions_found += 1
        for category, entries in categories.items():
            if not isinstance(entries, dict):
                self._problem(source, "memory", f"category {category!r} is not an object")
                continue
            for name, entry in entries.items():
                key = f"{category}/{name}"
                self.report.memories_found += 1
                try:
                    memory = self._session_memory(scope, key, category, entry, source)
                except ValidationError as exc:
                    self._problem(source, "memory", f"{key}: {exc.field}: {exc.reason}")
                    continue
                self.report.memories_valid += 1
                yield memory, source

    def _session_memory(
        self, scope: Scope, key: str, category: str, entry: object, source: str
    ) -> MemoryRecord:
        fields = dict(entry) if isinstance(entry, dict) else {"value": entry}
        value = fields.pop("value", None)
        moment = parse_time("timestamp", fields.pop("timestamp", None))
        score = fields.pop("importance", fields.pop("quickrecal_score", 0.5))
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text = validate_content(text, self.settings.max_content_bytes)
        checked_key = check_key(key)
        assert checked_key is not None
        return MemoryRecord(
            id=derived_id("legacy-session", self.tenant, scope.session, key),
            scope=scope,
            content=text,
            content_hash=content_hash(text),
            metadata=self._metadata(
                fields, {"key": key, "path": source}, category=category
            ),
            embedding=None,
            importance=validate_importance(score),
            key=checked_key,
            created_at=moment,
            updated_at=moment,
        )


def _layout(root: Path) -> str:
    if root.is_file():
        return "sessions"
    markers = (root / INDEX_FILE, root / "memories", root / "assemblies")
    return "directory" if any(m.exists() for m in markers) else "sessions"


def read_legacy(
    path: Path, tenant: str, settings: Settings, report: LegacyReport
) -> Iterator[tuple[Record, str]]:
    """Records of the legacy store at ``path`` (a store directory, a session file or a
    directory of session files), with their source paths; problems go to ``report``."""
    root = path.resolve()
    if not root.exists():
        raise ValidationError("path", f"{path} does not exist")
    scope = Scope(tenant)  # validates the tenant before anything is read
    if _layout(root) == "directory":
        reader = _Reader(root, scope.tenant, settings, report)
        return reader.directory_store()
    if root.is_file():
        reader = _Reader(root.parent, scope.tenant, settings, report)
        return reader.session_files([root])
    reader = _Reader(root, scope.tenant, settings, report)
    return reader.session_files(sorted(root.rglob("*.json")))


def estimate_records(path: Path) -> int:
    """Roughly how many memories a legacy store holds (files), for the bulk decision."""
    root = path.resolve()
    if root.is_file():
        return 1
    if _layout(root) == "directory":
        return sum(1 for _ in (root / "memories").glob("*.json"))
    return sum(1 for _ in root.rglob("*.json"))


async def import_legacy(
    conn: asyncpg.Connection | None,
    dsn: str | None,
    settings: Settings,
    assemblies: AssemblyRepository | None,
    path: Path,
    *,
    tenant: str = "default",
    dry_run: bool = False,
    index_mode: IndexMode = "auto",
    progress: Progress | None = None,
) -> LegacyReport:
    """Import a legacy store (see the module docstring); with ``dry_run`` write nothing.

    ``conn``, ``dsn`` and ``assemblies`` may be None for a dry run.
    ``progress`` is called with 1 per record read.
    """
    report = LegacyReport(dry_run=dry_run)
    records = read_legacy(path, tenant, settings, report)
    if dry_run:
        for _record, _source in records:
            if progress is not None:
                progress(1)
        return report
    if conn is None or dsn is None or assemblies is None:
        raise ValueError("conn, dsn and assemblies are required unless dry_run")
    rebuild = index_mode == "rebuild"
    if index_mode == "auto":
        incoming = estimate_records(path)
        with translate_errors():
            existing = await conn.fetchval(
                count_up_to(settings.db_schema, "memories"), incoming + 1
            )
        rebuild = should_rebuild(incoming, existing)
    async with AsyncExitStack() as stack:
        index = None
        if rebuild:
            index = await stack.enter_async_context(VectorIndexRebuild(dsn, settings))
        async with Loader(dsn, settings, assemblies, report=report.load) as loader:
            for record, source in records:
                await loader.add(record, source)
                if progress is not None:
                    progress(1)
        report.load.index_rebuilt = index is not None and index.active
    return report
