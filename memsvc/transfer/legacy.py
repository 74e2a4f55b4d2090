"""``memsvc import-legacy``: move a file-based memory store into PostgreSQL.

Two layouts are understood (the systems memsvc replaces):

**Directory store** (``memory_index.json``, ``memories/<id>.json``,
``assemblies/<id>.json``). Each memory file becomes a memory in the tenant
scope: ``id`` (or ``memory_id``, else the file name) becomes the memory id
when it is a UUID, else a deterministic uuid5 of it; ``content``,
``embedding``, ``metadata``, ``quickrecal_score`` (or ``significance``)
as ``importance`` (clamped to [0, 1]), ``timestamp``/``created_at`` and
``updated_at``/``quickrecal_updated`` as timestamps, ``access_count`` and
``last_access_time`` (or ``last_access``); index entries fill in what a file lacks. Each
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
(``"memsvc_legacy"`` when it already has a ``legacy`` key of its own), so
the old ids stay findable. No
field is dropped silently: a field memsvc has no column for (an assembly's
``keywords``, ``activation_level``, ``access_count``, ``composite_embedding``,
a session file's extra fields, an index entry's unused fields) is kept in
that ``legacy`` object; the index file's own ``metadata`` block, which
belongs to no record, is reported as a warning. A member missing from an
assembly is reported by its legacy id. Text with NUL bytes is rejected (the
file is named) unless ``strip_nul`` removes them (a warning per file).
Empty, truncated or otherwise unreadable files are reported with their path
and skipped; the import never stops for them. Ids are deterministic and the
load skips rows already stored, so running it again changes nothing.
``dry_run`` reads and validates everything and writes nothing; it counts
what the load would insert into an empty store, duplicates in the input
(same id, same content in a scope, same key) counted apart.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from memsvc.assemblies.repository import AssemblyRepository
from memsvc.core.errors import ValidationError
from memsvc.core.scope import Scope
from memsvc.core.settings import Settings
from memsvc.core.validation import (
    encode_json,
    validate_content,
    validate_embedding,
    validate_importance,
    validate_text,
)
from memsvc.db.errors import translate_errors
from memsvc.memories.repository import content_hash
from memsvc.memories.scope_indexes import ScopeIndexes
from memsvc.progress import NO_PROGRESS, ProgressReporter
from memsvc.transfer.bulk import (
    VectorIndexRebuild,
    count_new_memories,
    new_rows_needed,
    should_rebuild,
)
from memsvc.transfer.bulk_queries import count_up_to
from memsvc.transfer.export import IndexMode
from memsvc.transfer.loader import Loader, LoadReport, Problem
from memsvc.transfer.records import (
    AssemblyRecord,
    MemoryRecord,
    check_key,
    check_name,
    derived_id,
    parse_time,
)

# What a legacy store holds: memories and assemblies (no checkpoints, no store items).
LegacyRecord = MemoryRecord | AssemblyRecord

INDEX_FILE = "memory_index.json"
# Index-file entry fields that only locate the file.
INDEX_LOCATION = ("filepath",)


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
    # Dry run: valid records that repeat an earlier one (the load skips or rejects them).
    memories_duplicate: int = 0
    assemblies_duplicate: int = 0
    load: LoadReport = field(default_factory=LoadReport)

    @property
    def ok(self) -> bool:
        """True when no file or record was rejected."""
        return self.load.ok


class _Fields:
    """A legacy object's fields; remembers which were read, so the rest can be kept."""

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self._obj = obj
        self._read: set[str] = set()

    def has(self, *names: str) -> bool:
        return any(name in self._obj for name in names)

    def first(self, *names: str, default: Any = None) -> Any:
        """The value of the first of ``names`` present (marked as read), else ``default``."""
        for name in names:
            if name in self._obj:
                self._read.add(name)
                return self._obj[name]
        return default

    def unread(self) -> dict[str, Any]:
        """The fields nothing read, in file order."""
        return {k: v for k, v in self._obj.items() if k not in self._read}


def _strip_nul(value: Any) -> Any:
    """``value`` with NUL characters removed from every string in it (keys too)."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, Mapping):
        return {_strip_nul(k): _strip_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_nul(v) for v in value]
    return value


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, Mapping):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


class _Reader:
    """Turns a legacy tree into records, reporting unreadable files as it goes."""

    def __init__(
        self,
        root: Path,
        tenant: str,
        settings: Settings,
        report: LegacyReport,
        *,
        strip_nul: bool = False,
    ) -> None:
        self.root = root
        self.tenant = tenant
        self.settings = settings
        self.report = report
        self.strip_nul = strip_nul

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
        if self.strip_nul and _has_nul(obj):
            obj = dict(_strip_nul(obj))
            self.report.load.warn(self._rel(path), kind, "NUL characters removed (--strip-nul)")
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

    def _metadata(
        self, base: object, legacy: dict[str, Any], source: str, kind: str, **extra: Any
    ) -> str:
        """Metadata JSON: ``base``, ``extra`` fields, and ``legacy`` under ``"legacy"``.

        Fields of ``legacy`` beyond id/path/key are kept when the result fits
        the metadata limit; otherwise they are left out and named in a warning.
        """
        meta: dict[str, Any] = dict(base) if isinstance(base, Mapping) else {}
        if base is not None and not isinstance(base, Mapping):
            legacy = {**legacy, "metadata": base}  # not an object: kept, not merged
        for name, value in extra.items():
            meta.setdefault(name, value)
        if "legacy" in meta:
            # The record's own "legacy" key wins; ours goes next to it.
            meta.setdefault("memsvc_legacy", legacy)
        else:
            meta["legacy"] = legacy
        limit = self.settings.max_metadata_bytes
        try:
            return encode_json("metadata", meta, limit)
        except ValidationError as exc:
            kept = {k: legacy[k] for k in ("id", "path", "key") if k in legacy}
            if kept == legacy or "over the limit" not in exc.reason:
                raise
        dropped = sorted(set(legacy) - set(kept))
        self.report.load.warn(
            source, kind, f"legacy fields {', '.join(dropped)} not kept: metadata too large"
        )
        meta["legacy" if meta.get("legacy") is legacy else "memsvc_legacy"] = kept
        return encode_json("metadata", meta, limit)

    @staticmethod
    def _legacy(
        base: dict[str, Any], fields: _Fields, entry: _Fields | None = None
    ) -> dict[str, Any]:
        """``base`` plus the unread fields of the file (and of its index entry)."""
        legacy = dict(base)
        for name, value in fields.unread().items():
            legacy[name if name not in legacy else f"field_{name}"] = value
        if entry is not None:
            unread = {k: v for k, v in entry.unread().items() if k not in INDEX_LOCATION}
            if unread:
                legacy["index"] = unread
        return legacy

    # ------------------------------------------------------------ directory store

    def directory_store(self) -> Iterator[tuple[LegacyRecord, str]]:
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
        others = {k: v for k, v in index.items() if k not in ("memories", "assemblies")}
        if others:
            # The index's own fields (its "metadata" block...) belong to no record.
            shown = json.dumps(others, ensure_ascii=False, default=str)
            shown = shown if len(shown) <= 300 else shown[:300] + "..."
            self.report.load.warn(
                INDEX_FILE, "file", f"fields {', '.join(others)} not imported: {shown}"
            )
        yield from self._section(index.get("memories", {}), "memories", "memory")
        yield from self._section(index.get("assemblies", {}), "assemblies", "assembly")

    def _section(
        self, listed: dict[str, Any], folder: str, kind: str
    ) -> Iterator[tuple[LegacyRecord, str]]:
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
    ) -> Iterator[tuple[LegacyRecord, str]]:
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
            self._problem(source, kind, self._reason(exc))

    def _reason(self, exc: ValidationError) -> str:
        reason = f"{exc.field}: {exc.reason}"
        if "NUL" in exc.reason and not self.strip_nul:
            reason += " (--strip-nul imports it without them)"
        return reason

    def _memory(
        self, obj: dict[str, Any], legacy_id: str, entry_obj: dict[str, Any], source: str
    ) -> MemoryRecord:
        fields, entry = _Fields(obj), _Fields(entry_obj)
        own_id = fields.first("id", "memory_id")
        legacy_id = str(own_id) if own_id is not None else legacy_id
        text = validate_content(fields.first("content"), self.settings.max_content_bytes)
        embedding = fields.first("embedding")
        if fields.has("quickrecal_score", "significance"):
            score = fields.first("quickrecal_score", "significance")
        else:
            score = entry.first("quickrecal_score")
        importance = 0.5
        if isinstance(score, int | float) and not isinstance(score, bool):
            importance = validate_importance(min(1.0, max(0.0, float(score))))
        if fields.has("created_at", "timestamp"):
            created_value = fields.first("created_at", "timestamp")
        else:
            created_value = entry.first("created_at")
        created = parse_time("timestamp", created_value)
        if fields.has("updated_at", "quickrecal_updated"):
            updated_value = fields.first("updated_at", "quickrecal_updated")
        else:
            updated_value = entry.first("updated_at")
        updated = parse_time("updated_at", updated_value)
        access_count = fields.first("access_count", default=0)
        last_access = parse_time(
            "last_access_time", fields.first("last_access_time", "last_access")
        )
        valid_count = (
            isinstance(access_count, int) and not isinstance(access_count, bool)
            and access_count >= 0
        )
        legacy = {"id": legacy_id, "path": source}
        if not valid_count:
            legacy["access_count"] = access_count  # no count memsvc can store: kept as is
        base = fields.first("metadata")
        return MemoryRecord(
            id=self.memory_id(legacy_id),
            scope=Scope(self.tenant),
            content=text,
            content_hash=content_hash(text),
            metadata=self._metadata(
                base,
                self._legacy(legacy, fields, entry),
                source,
                "memory",
            ),
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
            access_count=access_count if valid_count else 0,
            last_accessed_at=last_access,
        )

    def _assembly(
        self, obj: dict[str, Any], legacy_id: str, entry_obj: dict[str, Any], source: str
    ) -> AssemblyRecord:
        fields, entry = _Fields(obj), _Fields(entry_obj)
        own_id = fields.first("assembly_id", "id")
        legacy_id = str(own_id) if own_id is not None else legacy_id
        members = fields.first("memory_ids", "memories", "member_ids", default=[])
        if isinstance(members, dict):
            members = list(members)
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise ValidationError("memory_ids", "must be a list of memory ids")
        if fields.has("creation_time", "created_at"):
            created_value = fields.first("creation_time", "created_at")
        else:
            created_value = entry.first("created_at")
        created = parse_time("creation_time", created_value)
        description = fields.first("description") or ""
        name = check_name(fields.first("name") or legacy_id)
        updated = parse_time("updated_at", fields.first("updated_at")) or created
        base = fields.first("metadata")
        member_ids: dict[uuid.UUID, str] = {}
        for member in members:
            member_ids.setdefault(self.memory_id(member), member)
        return AssemblyRecord(
            id=self.assembly_id(legacy_id),
            scope=Scope(self.tenant),
            name=name,
            description=validate_text(description, 64 * 1024, "description"),
            metadata=self._metadata(
                base,
                self._legacy({"id": legacy_id, "path": source}, fields, entry),
                source,
                "assembly",
            ),
            member_ids=list(member_ids),
            member_labels={k: v for k, v in member_ids.items() if str(k) != v},
            created_at=created,
            updated_at=updated,
        )

    # ------------------------------------------------------------ session files

    def session_files(self, files: list[Path]) -> Iterator[tuple[LegacyRecord, str]]:
        """Records of one-JSON-file-per-session stores."""
        for path in files:
            obj = self._read_object(path, "file")
            if obj is None:
                continue
            yield from self._session(path, obj)

    def _session(self, path: Path, obj: dict[str, Any]) -> Iterator[tuple[LegacyRecord, str]]:
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
        # The file's other fields are kept with each of its memories.
        extra = {k: v for k, v in obj.items() if k not in ("session_id", "memories")}
        self.report.sessions_found += 1
        for category, entries in categories.items():
            if not isinstance(entries, dict):
                self._problem(source, "memory", f"category {category!r} is not an object")
                continue
            for name, entry in entries.items():
                key = f"{category}/{name}"
                self.report.memories_found += 1
                try:
                    memory = self._session_memory(scope, key, category, entry, source, extra)
                except ValidationError as exc:
                    self._problem(source, "memory", f"{key}: {self._reason(exc)}")
                    continue
                self.report.memories_valid += 1
                yield memory, source

    def _session_memory(
        self,
        scope: Scope,
        key: str,
        category: str,
        entry: object,
        source: str,
        session_fields: Mapping[str, Any],
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
                fields,
                {"key": key, "path": source, **({"session": dict(session_fields)}
                                                 if session_fields else {})},
                source,
                "memory",
                category=category,
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
    path: Path, tenant: str, settings: Settings, report: LegacyReport, *, strip_nul: bool = False
) -> Iterator[tuple[LegacyRecord, str]]:
    """Records of the legacy store at ``path`` (a store directory, a session file or a
    directory of session files), with their source paths; problems go to ``report``."""
    root = path.resolve()
    if not root.exists():
        raise ValidationError("path", f"{path} does not exist")
    scope = Scope(tenant)  # validates the tenant before anything is read
    if _layout(root) == "directory":
        reader = _Reader(root, scope.tenant, settings, report, strip_nul=strip_nul)
        return reader.directory_store()
    if root.is_file():
        reader = _Reader(root.parent, scope.tenant, settings, report, strip_nul=strip_nul)
        return reader.session_files([root])
    reader = _Reader(root, scope.tenant, settings, report, strip_nul=strip_nul)
    return reader.session_files(sorted(root.rglob("*.json")))


class _DryRunCount:
    """What a load into an empty store would insert: the first record of each id,
    content (key-less memories, per scope), key and assembly name; later ones are
    duplicates (skipped or rejected by the load, as it finds them)."""

    def __init__(self, report: LegacyReport) -> None:
        self._report = report
        self._seen: set[tuple[object, ...]] = set()

    def add(self, record: LegacyRecord) -> None:
        scope = (record.scope.tenant, record.scope.project, record.scope.agent,
                 record.scope.session)
        keys: list[tuple[object, ...]]
        if isinstance(record, MemoryRecord):
            keys = [("memory", scope[0], record.id)]
            keys.append(("key", *scope, record.key) if record.key is not None
                        else ("content", *scope, record.content_hash))
            duplicate = any(k in self._seen for k in keys)
            if duplicate:
                self._report.memories_duplicate += 1
                self._report.memories_valid -= 1
        else:
            keys = [("assembly", scope[0], record.id), ("name", *scope, record.name)]
            duplicate = any(k in self._seen for k in keys)
            if duplicate:
                self._report.assemblies_duplicate += 1
                self._report.assemblies_valid -= 1
        if not duplicate:
            self._seen.update(keys)


def estimate_records(path: Path) -> int:
    """Roughly how many memories a legacy store holds (files), for the bulk decision."""
    root = path.resolve()
    if root.is_file():
        return 1
    if _layout(root) == "directory":
        return sum(1 for _ in (root / "memories").glob("*.json"))
    return sum(1 for _ in root.rglob("*.json"))


def _directory_records(path: Path) -> int | None:
    """Memory and assembly files of a directory store (progress total); None otherwise."""
    root = path.resolve()
    if not root.is_dir() or _layout(root) != "directory":
        return None
    return sum(1 for folder in ("memories", "assemblies") for _ in (root / folder).glob("*.json"))


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
    strip_nul: bool = False,
    progress: ProgressReporter = NO_PROGRESS,
    scope_indexes: ScopeIndexes | None = None,
) -> LegacyReport:
    """Import a legacy store (see the module docstring); with ``dry_run`` write nothing.

    ``conn``, ``dsn`` and ``assemblies`` may be None for a dry run.
    ``progress`` is told each record read (and the index rebuild step).
    ``strip_nul`` removes NUL characters from text instead of rejecting it.
    ``scope_indexes`` are dropped with the vector index for the load, and
    built again after it (see :mod:`memsvc.transfer.bulk`).
    """
    report = LegacyReport(dry_run=dry_run)
    records = read_legacy(path, tenant, settings, report, strip_nul=strip_nul)
    total = _directory_records(path)
    if dry_run:
        progress.start(f"checking {path.name}", total=total, unit="records")
        counter = _DryRunCount(report)
        for record, _source in records:
            counter.add(record)
            progress.advance(1)
        progress.done()
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
        if rebuild:
            rebuild = await _worth_rebuilding(
                conn, settings, path, tenant, existing, report, strip_nul, progress
            )
    async with AsyncExitStack() as stack:
        index = None
        if rebuild:
            index = await stack.enter_async_context(
                VectorIndexRebuild(dsn, settings, progress=progress, scope_indexes=scope_indexes)
            )
        progress.start(f"importing {path.name}", total=total, unit="records")
        async with Loader(dsn, settings, assemblies, report=report.load) as loader:
            for record, source in records:
                await loader.add(record, source)
                progress.advance(1)
        report.load.index_rebuilt = index is not None and index.active
    progress.done()
    if index is not None:
        index.record(report.load)
    return report


async def _worth_rebuilding(
    conn: asyncpg.Connection,
    settings: Settings,
    path: Path,
    tenant: str,
    existing: int,
    report: LegacyReport,
    strip_nul: bool,
    progress: ProgressReporter,
) -> bool:
    """Whether enough of the store's memories are not stored yet to rebuild the index."""

    def ids() -> Iterator[tuple[str, uuid.UUID]]:
        scratch = LegacyReport(dry_run=True)  # problems are reported by the load itself
        for record, _source in read_legacy(path, tenant, settings, scratch, strip_nul=strip_nul):
            progress.advance(1)
            if isinstance(record, MemoryRecord):
                yield record.scope.tenant, record.id

    progress.start("counting the memories not stored yet", unit="records")
    new = await count_new_memories(
        conn, settings.db_schema, ids(), enough=new_rows_needed(existing)
    )
    progress.done()
    rebuild = should_rebuild(new, existing)
    report.load.index_decision = (
        f"{'at least ' if rebuild else ''}{new} memories not stored yet"
        f" ({existing} stored): vector index "
        + ("dropped for the load" if rebuild else "kept in place")
    )
    return rebuild
