"""Every Python example in the README and the documentation runs as written.

A page's ```` ```python ```` blocks run in order in one namespace, as a reader
would type them into ``python -m asyncio`` (top-level ``await`` works), against
this test's fresh database and a private Redis (``MEMSVC_DATABASE_URL`` and
``MEMSVC_REDIS_URL`` are set, as a deployment would set them), with
``OPENAI_BASE_URL`` pointing at a local server speaking the OpenAI
embeddings API and ``MEMSVC_EXTRACTOR_BASE_URL`` at one speaking its chat
completions API (a scripted extractor: each sentence a user says is a fact,
added unless a related memory says it already), from an empty working
directory. Blocks without ``await``
run in a worker thread, as plain scripts would (the blocking client starts
its own event loop).

A block that cannot run here (it needs a service outside the test machine)
is preceded by an HTML comment saying why, which the rendered page hides::

    <!-- not run: needs an OpenAI API key -->

The comment is the skip's reason; nothing else is skipped.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from tests.embedders.fake_openai import serving
from tests.extraction.fake_chat import serving as serving_chat

ROOT = Path(__file__).resolve().parent.parent
# docs/pending holds notes not yet on the site (mkdocs.yml excludes it too).
PAGES = [
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").rglob("*.md") if "pending" not in p.parts),
]
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>.+?)\s*-->", re.DOTALL)


@dataclass(frozen=True)
class Example:
    """One ```python block of a page."""

    line: int  # 1-based line of the block's first code line
    source: str
    not_run: str | None  # the reason given in a preceding comment, if any


def examples(page: Path) -> list[Example]:
    """The page's Python blocks, in order, with any not-run reason."""
    tokens = MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8"))
    found: list[Example] = []
    reason: str | None = None
    for token in tokens:
        if token.type == "html_block":
            match = NOT_RUN.search(token.content)
            reason = match.group("reason") if match else None
            continue
        if token.type == "fence" and token.info.split()[:1] == ["python"] and token.map:
            found.append(Example(token.map[0] + 2, token.content, reason))
        reason = None
    return found


def pages_with_examples() -> list[Path]:
    return [page for page in PAGES if examples(page)]


async def run_example(example: Example, page: Path, namespace: dict[str, Any]) -> None:
    """Run one block in ``namespace``; awaits it when it uses top-level await."""
    # Blank lines first, so a traceback's line numbers are the page's.
    source = "\n" * (example.line - 1) + example.source
    code = compile(
        source, str(page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
    )
    if code.co_flags & inspect.CO_COROUTINE:
        await eval(code, namespace)
    else:
        await asyncio.to_thread(exec, code, namespace)


def test_every_page_with_examples_is_collected() -> None:
    """A page the docs build includes is a page whose examples run."""
    names = {page.relative_to(ROOT).as_posix() for page in pages_with_examples()}
    assert "README.md" in names
    assert any(name.startswith("docs/") for name in names)


@pytest.mark.parametrize(
    "page", pages_with_examples(), ids=lambda page: page.relative_to(ROOT).as_posix()
)
async def test_examples_run_as_written(
    page: Path,
    memsvc_database_url: str,
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("MEMSVC_DATABASE_URL", memsvc_database_url)
    monkeypatch.setenv("MEMSVC_REDIS_URL", redis_url)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    skipped: list[str] = []
    with serving(dim=384) as openai_compatible, serving_chat() as chat_compatible:
        monkeypatch.setenv("OPENAI_BASE_URL", openai_compatible.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-docs")
        monkeypatch.setenv("MEMSVC_EXTRACTOR_BASE_URL", chat_compatible.base_url)
        for example in examples(page):
            if example.not_run is not None:
                skipped.append(f"line {example.line}: {example.not_run}")
                continue
            await run_example(example, page, namespace)
    if skipped and len(skipped) == len(examples(page)):
        pytest.skip("; ".join(skipped))
