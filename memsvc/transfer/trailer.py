"""The last line of an export, which proves the file complete: line count and checksum.

An export ends with one ``trailer`` line::

    {"type":"trailer","lines":50001,"sha256":"<hex>"}

``lines`` counts every line before it (the header included) and ``sha256``
is the SHA-256 of those lines' bytes exactly as written (UTF-8, each ending
in ``\\n``), so ``head -n -1 FILE | sha256sum`` prints the same digest. An
export cut short (Ctrl-C, a full disk, a killed process) has no trailer, or
one that does not match what precedes it; :func:`check_export_file` says
which, and the import refuses such a file unless told to load it anyway.

Files exported before trailers existed, and files written by hand, have no
trailer either: nothing tells them apart from an export cut short, so they
are refused the same way and load with ``allow_truncated`` (``memsvc
import --allow-truncated``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

TRAILER_TYPE = "trailer"
# A trailer is under 150 bytes; a last line longer than this is not one.
_TAIL_BYTES = 4096
_CHUNK = 2**20


class LineSink:
    """Writes an export's lines to a stream, counting them and hashing their bytes.

    Give it a binary stream (a file opened ``"wb"``) and each line is encoded
    once; a text stream gets the text, and the bytes are encoded for the hash.
    """

    def __init__(self, out: IO[str] | IO[bytes]) -> None:
        binary = isinstance(out, io.RawIOBase | io.BufferedIOBase) or "b" in getattr(
            out, "mode", ""
        )
        self._binary_out = cast(IO[bytes], out) if binary else None
        self._text_out = None if binary else cast(IO[str], out)
        self._digest = hashlib.sha256()
        self.lines = 0

    def _emit(self, text: str, data: bytes) -> None:
        if self._binary_out is not None:
            self._binary_out.write(data)
        elif self._text_out is not None:
            self._text_out.write(text)

    def write_lines(self, lines: list[str]) -> None:
        """Write ``lines``, each followed by a newline."""
        if not lines:
            return
        text = "\n".join(lines) + "\n"
        data = text.encode("utf-8")
        self._digest.update(data)
        self.lines += len(lines)
        self._emit(text, data)

    def write_trailer(self) -> None:
        """Write the trailer line: what was written so far, counted and hashed."""
        trailer = json.dumps(
            {"type": TRAILER_TYPE, "lines": self.lines, "sha256": self._digest.hexdigest()},
            separators=(",", ":"),
        )
        self._emit(trailer + "\n", (trailer + "\n").encode("utf-8"))


@dataclass(frozen=True, slots=True)
class ExportFileCheck:
    """Whether a file ends with a trailer that matches it.

    ``lines`` is the number of lines before the trailer (all lines when there
    is none); ``problem`` is None for a complete export, else what is wrong.
    """

    lines: int
    problem: str | None = None

    @property
    def complete(self) -> bool:
        """True when the trailer is there and matches the lines before it."""
        return self.problem is None


def _last_line(path: Path, size: int) -> tuple[int, bytes | None]:
    """Where the file's last line starts, and that line (None if longer than a trailer)."""
    start = max(0, size - _TAIL_BYTES)
    with path.open("rb") as handle:
        handle.seek(start)
        tail = handle.read()
    body = tail[:-1] if tail.endswith(b"\n") else tail
    cut = body.rfind(b"\n")
    if cut < 0:
        return (0, body) if start == 0 else (size, None)
    return start + cut + 1, body[cut + 1 :]


def _trailer_of(line: bytes | None) -> dict[str, object] | None:
    if line is None or b'"trailer"' not in line:
        return None
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(obj, dict) and obj.get("type") == TRAILER_TYPE:
        return obj
    return None


def _read_lines(path: Path, end: int, *, digest: bool) -> tuple[int, str]:
    """Newlines in the first ``end`` bytes, and (``digest``) their SHA-256."""
    hasher = hashlib.sha256()
    lines = 0
    left = end
    with path.open("rb") as handle:
        while left > 0 and (chunk := handle.read(min(_CHUNK, left))):
            left -= len(chunk)
            lines += chunk.count(b"\n")
            if digest:
                hasher.update(chunk)
    return lines, hasher.hexdigest()


_last_check: tuple[tuple[str, int, int, int], ExportFileCheck] | None = None


def check_export_file(path: Path) -> ExportFileCheck:
    """Read ``path`` once: is its trailer there, and do its count and checksum match?

    The result for a file unchanged since (same path, size, inode and
    modification time) is remembered, so the command line's check before
    opening the service and the import's own check read it only once.
    """
    global _last_check
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_ino, stat.st_mtime_ns)
    if _last_check is not None and _last_check[0] == key:
        return _last_check[1]
    result = _check(path, stat.st_size)
    _last_check = (key, result)
    return result


def _check(path: Path, size: int) -> ExportFileCheck:
    if size == 0:
        return ExportFileCheck(0, "the file is empty: it has no header and no trailer")
    start, last = _last_line(path, size)
    trailer = _trailer_of(last)
    if trailer is None:
        lines, _ = _read_lines(path, size, digest=False)
        if size and not _ends_with_newline(path, size):
            lines += 1  # a last line cut mid-way
        return ExportFileCheck(
            lines,
            f"it has no trailer line (line count and checksum) after its {lines:,} lines: "
            "the export was cut short, or was written by hand or by a memsvc older than "
            "export trailers",
        )
    lines, digest = _read_lines(path, start, digest=True)
    expected_lines, expected_digest = trailer.get("lines"), trailer.get("sha256")
    if expected_lines != lines:
        counted = f"{expected_lines:,}" if isinstance(expected_lines, int) else repr(expected_lines)
        return ExportFileCheck(
            lines,
            f"its trailer counts {counted} lines but {lines:,} precede it: lines "
            "were lost or added after the export",
        )
    if expected_digest != digest:
        return ExportFileCheck(
            lines,
            "the checksum of its lines does not match its trailer's: the file was "
            "changed or damaged after the export",
        )
    return ExportFileCheck(lines)


def _ends_with_newline(path: Path, size: int) -> bool:
    with path.open("rb") as handle:
        handle.seek(size - 1)
        return handle.read(1) == b"\n"


def fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (where the platform allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
