"""What an erasure removed, kept for its verification in constant memory.

Each erasing statement returns the fingerprints of the texts it removed: a
keyed SHA-256 (``sha256(key || text)``) with the text's byte length in front,
36 bytes each. They go to an anonymous temporary file (unlinked at once, so
gone when the process ends, crash included), never to the database and never
into a list that grows with the tenant; the verification streams them into a
temporary table of its transaction.

The key is random per erasure and lives only in this process: a fingerprint
left anywhere (the file's disk blocks) cannot be checked against a guessed
text once the erasure is over.

Plain texts are kept too, up to a small budget, for the verification's
substring search (a copy of an erased text inside a longer value). Past the
budget the substring search is skipped, and the receipt says so.
"""

from __future__ import annotations

import hashlib
import secrets
import struct
import tempfile
from collections.abc import AsyncIterator, Iterable
from types import TracebackType

FINGERPRINT_BYTES = 36  # 4 bytes of length (big-endian), 32 of keyed SHA-256
# Substring search: texts at least this long (shorter ones match by chance) ...
SUBSTRING_MIN_BYTES = 16
# ... and at most this many, of this many bytes in all (the search compares
# every erased text with every value it scans).
SUBSTRING_MAX_TEXTS = 256
SUBSTRING_MAX_BYTES = 256 * 1024
# Fingerprints read back per chunk when streaming them to the server.
READ_CHUNK = 4096


class ErasedTexts:
    """The fingerprints (on disk) and a bounded set of plain texts of what was erased.

    Use as a context manager; the file is closed (and its space freed) on exit.
    """

    def __init__(self) -> None:
        self.key = secrets.token_bytes(32)
        """The per-erasure key of the fingerprints (sent with each erasing statement)."""
        self._file = tempfile.TemporaryFile(prefix="memsvc-erasure-")
        self._count = 0
        self._texts: dict[str, None] = {}  # insertion-ordered set
        self._text_bytes = 0
        self.substrings_overflowed = False
        """True once more texts qualified for the substring search than the budget holds."""

    def __enter__(self) -> ErasedTexts:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Drop the file and the texts."""
        self._file.close()
        self._texts.clear()

    @property
    def count(self) -> int:
        """Fingerprints written (duplicates included)."""
        return self._count

    @property
    def texts_left(self) -> int:
        """How many more plain texts the substring budget takes (0: send none)."""
        if self.substrings_overflowed:
            return 0
        return SUBSTRING_MAX_TEXTS - len(self._texts)

    @property
    def bytes_left(self) -> int:
        """How many more bytes of plain text the substring budget takes."""
        if self.substrings_overflowed:
            return 0
        return SUBSTRING_MAX_BYTES - self._text_bytes

    def add(
        self, fingerprints: Iterable[bytes], texts: Iterable[str] = (), *, more: bool = False
    ) -> None:
        """Record one batch: its fingerprints, and plain texts within the budget.

        ``more`` says the statement left out texts that qualified for the
        substring search because the budget was spent: the search is then
        skipped for the whole erasure.
        """
        for fingerprint in fingerprints:
            if len(fingerprint) != FINGERPRINT_BYTES:
                raise ValueError("a fingerprint is 36 bytes")
            self._file.write(fingerprint)
            self._count += 1
        for text in texts:
            if text not in self._texts:
                self._texts[text] = None
                self._text_bytes += len(text.encode())
        over = len(self._texts) > SUBSTRING_MAX_TEXTS or self._text_bytes > SUBSTRING_MAX_BYTES
        if more or over:
            self.substrings_overflowed = True
            self._texts.clear()

    def fingerprint(self, text: str) -> bytes:
        """The 32-byte keyed hash of ``text`` (what the server computes)."""
        return hashlib.sha256(self.key + text.encode()).digest()

    def substring_texts(self) -> list[str]:
        """The plain texts kept for the substring search (empty when it overflowed)."""
        return list(self._texts)

    async def records(self) -> AsyncIterator[tuple[bytes, int]]:
        """Every ``(hash, length)`` written, read back from the file a chunk at a time."""
        self._file.flush()
        self._file.seek(0)
        while chunk := self._file.read(FINGERPRINT_BYTES * READ_CHUNK):
            for start in range(0, len(chunk), FINGERPRINT_BYTES):
                (length,) = struct.unpack_from(">i", chunk, start)
                yield chunk[start + 4 : start + FINGERPRINT_BYTES], length
        self._file.seek(0, 2)
