"""The benchmark's corpus: real English text found on this machine, cut into snippets.

Two sources, read at benchmark time and never shipped with the project:

- the documentation Debian packages install under ``/usr/share/doc`` (READMEs,
  changelogs, NEWS, plain text and Markdown; ``.gz`` files decompressed;
  licence texts skipped: thousands of identical paragraphs);
- the docstrings of the installed Python packages and of the standard library,
  read with ``ast`` (nothing is imported).

Text is cleaned (markup, code examples, e-mail trailers and tables dropped),
cut into snippets of one to three sentences (or changelog bullets) of 100-400
characters, and deduplicated on lower-cased, whitespace-collapsed text. Each
snippet keeps its *source*: the Debian package or the top-level Python package
it came from, which makes the benchmark's scopes.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import re
import site
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DOC_ROOT = Path("/usr/share/doc")
MIN_CHARS, MAX_CHARS, MAX_UNITS = 100, 400, 3
# Files under a package's doc directory worth reading (by lower-cased name).
_DOC_NAME = re.compile(
    r"^(readme|changelog|changes|news|history|todo|faq|authors|thanks|bugs|usage|install)"
    r"|\.(txt|md|rst|markdown)(\.gz)?$"
)
_SKIP_NAME = re.compile(r"copyright|licen[cs]e|copying|\.(html?|png|svg|css|js|json|c|h|pl|py)")
_MAX_FILE_BYTES = 2_000_000

_WORD = re.compile(r"[A-Za-z]+")
_BULLET = re.compile(r"^\s*(?:[*+\-\u2022]|\d+[.)])\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\"'`])")
_CHANGELOG_HEADER = re.compile(r"^\S+ \([^)]*\) [^;]*; urgency=", re.M)
_TRAILER = re.compile(r"^\s*--\s.*<[^>]+@[^>]+>")
_ROLE = re.compile(r":[a-z:]+:`~?([^`<]+?)(?:\s*<[^>]*>)?`")  # :class:`Foo` -> Foo
_LITERAL = re.compile(r"``([^`]+)``|`([^`]+)`_?")
_MD_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_SPACES = re.compile(r"\s+")
# Function words: a block with too few of them is code, a table or not English.
_ENGLISH = frozenset(
    "the a an of to in and or is are be for on with that this it as by from not "
    "can will if when which you your at was were has have use used".split()
)


@dataclass(frozen=True, slots=True)
class Snippet:
    """One snippet of text and the package (source) it came from."""

    text: str
    source: str


def iter_doc_files(root: Path = DOC_ROOT) -> Iterator[tuple[str, Path]]:
    """(package, file) for every readable documentation file under ``root``."""
    if not root.is_dir():
        return
    for package_dir in sorted(root.iterdir()):
        if not package_dir.is_dir() or package_dir.is_symlink():
            continue
        for path in sorted(package_dir.rglob("*")):
            name = path.name.lower()
            if not path.is_file() or _SKIP_NAME.search(name) or not _DOC_NAME.search(name):
                continue
            yield package_dir.name, path


def read_doc(path: Path) -> str:
    """A documentation file's text (decompressed), or "" when it is not text."""
    try:
        if path.stat().st_size > _MAX_FILE_BYTES:
            return ""
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile):
        return ""
    if b"\x00" in raw[:4096]:
        return ""
    return raw.decode("utf-8", errors="replace")


def python_roots() -> list[Path]:
    """Where installed Python packages and the standard library live."""
    roots = [Path(p) for p in site.getsitepackages()]
    roots.append(Path(sysconfig.get_paths()["stdlib"]))
    roots += [Path(p) for p in sys.path if p.endswith(("dist-packages", "site-packages"))]
    seen: list[Path] = []
    for root in roots:
        if root.is_dir() and root.resolve() not in seen:
            seen.append(root.resolve())
    return seen


def iter_docstrings(roots: list[Path]) -> Iterator[tuple[str, str]]:
    """(top-level package, docstring) for every module, class and function."""
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).parts
            if root == stdlib and rel[0] in ("site-packages", "dist-packages"):
                continue
            if any(part in ("tests", "test", "testing", "_vendor", "vendor") for part in rel):
                continue
            source = "python" if root == stdlib else rel[0].removesuffix(".py")
            try:
                if path.stat().st_size > _MAX_FILE_BYTES:
                    continue
                tree = ast.parse(path.read_bytes())
            except (OSError, SyntaxError, ValueError, RecursionError):
                continue
            for node in ast.walk(tree):
                if isinstance(
                    node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
                ):
                    doc = ast.get_docstring(node)
                    if doc:
                        yield source, doc


def _is_prose(block: str) -> bool:
    words = _WORD.findall(block)
    if len(words) < 8:
        return False
    letters = sum(c.isalpha() or c.isspace() for c in block)
    english = sum(1 for w in words if w.lower() in _ENGLISH)
    ascii_share = sum(c.isascii() for c in block) / len(block)
    return letters / len(block) >= 0.75 and english / len(words) >= 0.12 and ascii_share > 0.98


def _clean(text: str) -> str:
    text = _ROLE.sub(r"\1", text)
    text = _LITERAL.sub(lambda m: m.group(1) or m.group(2), text)
    text = _MD_LINK.sub(r"\1", text)
    return _SPACES.sub(" ", text.replace("**", "").replace("#", " ")).strip()


def _units(block: str) -> list[str]:
    """A block's bullets, or its sentences when it has no bullets."""
    items: list[list[str]] = []
    for line in block.splitlines():
        if _BULLET.match(line):
            items.append([_BULLET.sub("", line, count=1)])
        elif items:
            items[-1].append(line)
        else:
            items.append([line])
    units: list[str] = []
    for item in items:
        units += _SENTENCE_END.split(_clean(" ".join(item)))
    return [u for u in units if u]


def _is_code_line(line: str) -> bool:
    stripped = line.strip()
    return (
        stripped.startswith((">>>", "...", "$ ", "#!", "|", "+--", "==", "--", "..", "```"))
        or _TRAILER.match(line) is not None
        or stripped.endswith(("{", "}", ";"))
        or (line.startswith("        ") and not _BULLET.match(line))
        or set(stripped) <= set("=-~^*_#+ ")
    )


def snippets_of(text: str) -> Iterator[str]:
    """Snippets of one to three sentences (or bullets), 100-400 characters."""
    text = _CHANGELOG_HEADER.sub("", text)
    for block in re.split(r"\n\s*\n", text):
        lines = [line for line in block.splitlines() if line.strip() and not _is_code_line(line)]
        if not lines:
            continue
        chunk: list[str] = []
        for unit in _units("\n".join(lines)):
            if chunk and (len(chunk) == MAX_UNITS or len(" ".join([*chunk, unit])) > MAX_CHARS):
                yield from _accept(" ".join(chunk))
                chunk = []
            chunk.append(unit)
        if chunk:
            yield from _accept(" ".join(chunk))


def _accept(snippet: str) -> Iterator[str]:
    if MIN_CHARS <= len(snippet) <= MAX_CHARS and _is_prose(snippet):
        yield snippet


def _norm(text: str) -> str:
    return _SPACES.sub(" ", text.lower()).strip()


def collect(limit: int | None = None) -> list[Snippet]:
    """Every distinct snippet found on the machine (docs first, then docstrings).

    ``limit`` caps what each of the two sources contributes (the machine
    holds a few hundred thousand; the benchmark samples from them).
    """
    seen: set[bytes] = set()
    found: list[Snippet] = []

    def add(source: str, text: str) -> None:
        for snippet in snippets_of(text):
            digest = hashlib.blake2b(_norm(snippet).encode(), digest_size=12).digest()
            if digest not in seen:
                seen.add(digest)
                found.append(Snippet(snippet, _slug(source)))

    for package, path in iter_doc_files():
        add("deb-" + package, read_doc(path))
        if limit is not None and len(found) >= limit:
            break
    docs = len(found)
    for package, doc in iter_docstrings(python_roots()):
        add("py-" + package, doc)
        if limit is not None and len(found) - docs >= limit:
            break
    return found


def _slug(source: str) -> str:
    """A scope id: lower-case letters, digits, ``-`` and ``_`` only."""
    return re.sub(r"[^a-z0-9_-]+", "-", source.lower()).strip("-")[:60] or "unknown"
