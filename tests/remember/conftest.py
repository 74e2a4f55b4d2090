"""Fixtures of the remember tests: a scripted chat completions server and its extractor."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memsvc import OpenAIChatExtractor
from tests.extraction.fake_chat import FakeChatServer, serving


@pytest.fixture
def chat() -> Iterator[FakeChatServer]:
    with serving() as running:
        yield running


@pytest.fixture
def extractor(chat: FakeChatServer) -> OpenAIChatExtractor:
    return OpenAIChatExtractor(chat.base_url, "test-model", "sk-remember", backoff_s=0.01)
