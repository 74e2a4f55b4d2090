"""The extractor and summarizer that ask a model behind a chat completions API.

Both work with any OpenAI-compatible server (OpenAI, vLLM, Ollama, LiteLLM)
through :class:`~memsvc.extraction.chat.ChatCompletions`: structured output
by JSON schema or tool call, retries with backoff and ``Retry-After``,
errors naming the endpoint and model but never the key. What the model is
sent: the system prompt of the package's prompt file, and as JSON the new
messages (role, text, time), the candidate facts, and the related memories
(handle, text, creation time); never memory ids, metadata or scope ids.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from memsvc.core.errors import ExtractionError
from memsvc.extraction.chat import ChatCompletions, StructuredOutput
from memsvc.extraction.messages import Message, message_payload
from memsvc.extraction.prompts import (
    EXTRACT_VERSION,
    FACTS_SCHEMA,
    SUMMARIZE_VERSION,
    SUMMARY_SCHEMA,
    operations_schema,
    prompt,
)
from memsvc.extraction.protocols import ExtractionRequest, SummaryMember


class OpenAIChatExtractor:
    """An :class:`~memsvc.extraction.protocols.Extractor` asking a chat model.

    Two calls per batch of messages: the facts they state, then the
    operations given the related memories. Its answers are returned as the
    model wrote them; ``remember`` validates them.

    Args:
        base_url: The API root ending in ``/v1`` (None: ``OPENAI_BASE_URL``).
        model: The model name the server knows.
        api_key: Bearer token (None: ``OPENAI_API_KEY``; a local server may need none).
        timeout_s: Deadline of one request.
        max_retries: Further attempts after a timeout, 408, 429 or 5xx.
        structured_output: ``auto`` (JSON schema, else a tool call),
            ``json_schema`` or ``tool``.
        backoff_s: First backoff; it doubles with each retry.
        max_backoff_s: Longest single wait.
        temperature: Sampling temperature.
    """

    name = "openai-chat"
    version = EXTRACT_VERSION

    def __init__(
        self,
        base_url: str | None,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        *,
        structured_output: StructuredOutput = "auto",
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        temperature: float = 0.0,
    ) -> None:
        self.chat = ChatCompletions(
            base_url,
            model,
            api_key=api_key,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
            structured_output=structured_output,
            temperature=temperature,
        )
        self.model: str | None = self.chat.model

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIChatExtractor(base_url={self.chat.base_url!r}, model={self.model!r})"

    async def facts(self, messages: Sequence[Message]) -> str:
        """The model's ``{"facts": [...]}`` for ``messages``."""
        user = json.dumps({"messages": [message_payload(m) for m in messages]})
        return await self.chat.structured(
            prompt(f"{EXTRACT_VERSION}-facts"), user, "memsvc_facts", FACTS_SCHEMA
        )

    async def operations(self, request: ExtractionRequest) -> str:
        """The model's ``{"operations": [...]}`` for ``request``."""
        return await self.chat.structured(
            prompt(f"{EXTRACT_VERSION}-operations"),
            json.dumps(request.payload()),
            "memsvc_operations",
            operations_schema(request.allowed),
        )

    async def aclose(self) -> None:
        """Close this event loop's HTTP connections."""
        await self.chat.aclose()


class OpenAIChatSummarizer:
    """A :class:`~memsvc.extraction.protocols.Summarizer` asking a chat model.

    Same arguments and client rules as :class:`OpenAIChatExtractor`, plus
    ``max_chars``: the longest summary accepted.

    Raises (from :meth:`summarize`):
        ExtractionError: The endpoint failed, or answered without a usable summary.
    """

    name = "openai-chat"
    version = SUMMARIZE_VERSION

    def __init__(
        self,
        base_url: str | None,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        *,
        structured_output: StructuredOutput = "auto",
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        temperature: float = 0.0,
        max_chars: int = 4000,
    ) -> None:
        self.chat = ChatCompletions(
            base_url,
            model,
            api_key=api_key,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
            structured_output=structured_output,
            temperature=temperature,
        )
        self.model: str | None = self.chat.model
        self.max_chars = max_chars

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIChatSummarizer(base_url={self.chat.base_url!r}, model={self.model!r})"

    async def summarize(self, members: Sequence[SummaryMember]) -> str:
        """The model's summary of ``members``, checked."""
        shown = []
        for member in members:
            item = {"content": member.content}
            if member.created_at is not None:
                item["created_at"] = member.created_at.isoformat()
            shown.append(item)
        text = await self.chat.structured(
            prompt(SUMMARIZE_VERSION), json.dumps({"memories": shown}), "memsvc_summary",
            SUMMARY_SCHEMA,
        )
        try:
            answer = json.loads(text)
        except ValueError:
            answer = None
        summary = answer.get("summary") if isinstance(answer, dict) else None
        if not isinstance(summary, str) or not summary.strip() or "\x00" in summary:
            raise ExtractionError(f"{self.chat.where()} answered without a summary")
        if len(summary.strip()) > self.max_chars:
            raise ExtractionError(
                f"{self.chat.where()} answered a summary of {len(summary.strip())} characters, "
                f"over max_chars={self.max_chars}"
            )
        return summary.strip()

    async def aclose(self) -> None:
        """Close this event loop's HTTP connections."""
        await self.chat.aclose()
