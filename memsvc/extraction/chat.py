"""A client of an OpenAI-compatible ``/chat/completions`` endpoint asking for JSON.

Structured output is asked for in one of two ways: a JSON schema
``response_format`` (OpenAI, vLLM, recent Ollama, LiteLLM) or a forced tool
call whose arguments follow the schema (servers without the former). With
``structured_output="auto"`` the client tries the JSON schema first and
falls back to the tool call when the server refuses the request (HTTP 400,
404, 415, 422, 501) or answers without JSON, then keeps to the way that
worked. Retries and errors follow :class:`~memsvc.embedding.OpenAIEmbedder`:
timeouts, connection failures, 408, 429 and 5xx (but 501) are retried with
exponential backoff and jitter, or after what ``Retry-After`` asks; every
failure is an :class:`~memsvc.core.errors.ExtractionError` naming the
endpoint and model, never the key.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from memsvc import openai_compat
from memsvc.core.errors import ExtractionError, ValidationError

if TYPE_CHECKING:
    import httpx

StructuredOutput = Literal["auto", "json_schema", "tool"]
STRUCTURED_OUTPUTS: tuple[str, ...] = ("auto", "json_schema", "tool")

# Statuses with which a server says it does not take this kind of request.
_UNSUPPORTED_STATUSES = frozenset({400, 404, 415, 422, 501})


def _positive(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(field, "must be a positive number")
    # An int is finite however large (math.isfinite would overflow on it).
    if (isinstance(value, float) and not math.isfinite(value)) or value <= 0:
        raise ValidationError(field, "must be positive and finite")
    return float(value)


def _parses(text: str | None) -> bool:
    if text is None:
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


class ChatCompletions:
    """Structured answers from one model of one chat completions endpoint.

    Args:
        base_url: The API root ending in ``/v1``; None: ``OPENAI_BASE_URL``.
        model: The model name the server knows.
        api_key: Sent as a bearer token; None: ``OPENAI_API_KEY`` (a local
            server may need none).
        timeout_s: Deadline of one request.
        max_retries: Further attempts after a retryable failure.
        backoff_s: First backoff; doubles with each retry.
        max_backoff_s: Longest single wait; a server asking for longer fails the call.
        structured_output: ``auto``, ``json_schema`` or ``tool``.
        temperature: Sampling temperature (0: as repeatable as the server allows).
        max_tokens: Most tokens of an answer (None: the server's default).
    """

    def __init__(
        self,
        base_url: str | None,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        structured_output: StructuredOutput = "auto",
        temperature: float = 0.0,
        max_tokens: int | None = None,
    ) -> None:
        if importlib.util.find_spec("httpx") is None:
            raise ExtractionError("the OpenAI chat clients need httpx: install memsvc[openai]")
        if not isinstance(model, str) or not model.strip():
            raise ValidationError("model", "must be a non-empty string")
        self.model = model.strip()
        self.base_url = openai_compat.base_url(base_url)
        self._api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout_s = _positive(timeout_s, "timeout_s")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValidationError("max_retries", "must be a non-negative integer")
        self.max_retries = max_retries
        self.backoff_s = _positive(backoff_s, "backoff_s")
        self.max_backoff_s = _positive(max_backoff_s, "max_backoff_s")
        if structured_output not in STRUCTURED_OUTPUTS:
            raise ValidationError(
                "structured_output", f"must be one of {', '.join(STRUCTURED_OUTPUTS)}"
            )
        self.structured_output: StructuredOutput = structured_output
        if isinstance(temperature, bool) or not isinstance(temperature, int | float):
            raise ValidationError("temperature", "must be a number")
        self.temperature = float(temperature)
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise ValidationError("max_tokens", "must be a positive integer")
        self.max_tokens = max_tokens
        # The way that worked with this server, once one has (auto mode).
        self.confirmed: StructuredOutput | None = None
        # An httpx client belongs to the event loop it first ran on.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient]
        self._clients = weakref.WeakKeyDictionary()

    def where(self) -> str:
        """The endpoint and model, for messages (never the key)."""
        url = f"{self.base_url}/chat/completions"
        return f"the chat completions endpoint {url} (model {self.model!r})"

    async def structured(self, system: str, user: str, name: str, schema: dict[str, Any]) -> str:
        """The JSON text the model answers ``user`` with, following ``schema``.

        Returns whatever text the model wrote (the caller validates it); an
        empty string when it wrote none.
        """
        if self.structured_output != "auto":
            ways: list[StructuredOutput] = [self.structured_output]
        elif self.confirmed is not None:
            ways = [self.confirmed]
        else:
            ways = ["json_schema", "tool"]
        text: str | None = None
        for number, way in enumerate(ways):
            last = number == len(ways) - 1
            try:
                body = await self._post(self._body(way, system, user, name, schema))
            except ExtractionError as exc:
                if not last and exc.status in _UNSUPPORTED_STATUSES:
                    continue
                raise
            text = self._answer_text(body)
            if _parses(text):
                if self.structured_output == "auto":
                    self.confirmed = way
                return text or ""
            if last:
                break
        return text or ""

    def _body(
        self, way: StructuredOutput, system: str, user: str, name: str, schema: dict[str, Any]
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "temperature": self.temperature,
        }
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if way == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": name, "strict": True, "schema": schema},
            }
        else:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": name, "description": "Record the answer.",
                                 "parameters": schema},
                }
            ]
            body["tool_choice"] = {"type": "function", "function": {"name": name}}
        return body

    def _answer_text(self, body: object) -> str | None:
        """The model's JSON text: the message content, or the first tool call's arguments."""
        choices = body.get("choices") if isinstance(body, Mapping) else None
        first = choices[0] if isinstance(choices, list) and choices else None
        message = first.get("message") if isinstance(first, Mapping) else None
        if not isinstance(message, Mapping):
            raise ExtractionError(f"{self.where()} answered without a message")
        calls = message.get("tool_calls")
        if isinstance(calls, list) and calls and isinstance(calls[0], Mapping):
            function = calls[0].get("function")
            arguments = function.get("arguments") if isinstance(function, Mapping) else None
            if isinstance(arguments, str):
                return arguments
            if isinstance(arguments, Mapping):
                return json.dumps(arguments)
        content = message.get("content")
        if isinstance(content, str):
            return content
        refusal = message.get("refusal")
        return refusal if isinstance(refusal, str) else None

    # ------------------------------------------------------------ transport

    def _http(self) -> httpx.AsyncClient:
        import httpx

        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            headers = {"Accept": "application/json"}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            client = httpx.AsyncClient(
                headers=headers, timeout=self.timeout_s, follow_redirects=False
            )
            self._clients[loop] = client
        return client

    async def aclose(self) -> None:
        """Close this event loop's HTTP connections (reopened if called again)."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    async def _post(self, payload: dict[str, Any]) -> Any:
        url = f"{self.base_url}/chat/completions"
        response = await openai_compat.post_retrying(
            self._http(), url, payload, self, ExtractionError, self.where()
        )
        try:
            return response.json()
        except ValueError as exc:
            raise ExtractionError(f"{self.where()} answered with something not JSON") from exc
