"""What memsvc's clients of OpenAI-compatible HTTP APIs share (embeddings, chat).

The API root they take, the POST retried on transient failures, the wait a
server asks for before a retry, and the error text it sent. httpx is
imported by the clients that need it (the ``openai`` extra).
"""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import os
import random
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from memsvc.core.errors import EmbeddingError, ExtractionError, ValidationError

if TYPE_CHECKING:
    import httpx


def base_url(value: str | None) -> str:
    """The API root (``value``, else ``OPENAI_BASE_URL``), checked: ``http(s)://...``.

    memsvc names no endpoint of its own: the deployment says where.
    """
    url = value if value is not None else os.environ.get("OPENAI_BASE_URL")
    if not isinstance(url, str) or not url.strip():
        raise ValidationError(
            "base_url", "required: the API root ending in /v1 (or set OPENAI_BASE_URL)"
        )
    url = url.strip().rstrip("/")
    if not re.match(r"https?://[^/\s]+", url):
        raise ValidationError("base_url", "must be an http:// or https:// URL")
    import httpx

    try:
        httpx.URL(url)  # httpx's InvalidURL is no HTTPError: refuse it here
    except httpx.InvalidURL as exc:
        raise ValidationError("base_url", f"not a valid URL: {exc}") from exc
    return url


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The wait a server asked for (``retry-after-ms``; ``retry-after`` as seconds or a date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def server_message(response: httpx.Response) -> str:
    """The error text a server sent (OpenAI's ``{"error": {"message"}}`` and kin), shortened."""
    try:
        body = response.json()
    except ValueError:
        text = response.text
    else:
        error = body.get("error", body) if isinstance(body, dict) else body
        if isinstance(error, dict):
            error = error.get("message", error)
        text = str(error)
    text = " ".join(text.split())
    return text[:200] + ("..." if len(text) > 200 else "")


class Retrying(Protocol):
    """What :func:`post_retrying` reads of a client: its retry settings."""

    timeout_s: float
    max_retries: int
    backoff_s: float
    max_backoff_s: float


# Statuses worth another try besides 5xx (501 Not Implemented never changes).
RETRYABLE_STATUSES = frozenset({408, 429})


async def post_retrying(
    client: httpx.AsyncClient,
    url: str,
    payload: dict[str, Any],
    settings: Retrying,
    error: type[EmbeddingError] | type[ExtractionError],
    where: str,
) -> httpx.Response:
    """POST ``payload``; a 2xx response, or ``error`` after the retries ``settings`` allow.

    ``where`` names the endpoint in the errors' messages.

    Timeouts, connection failures, 408, 429 and 5xx (but 501) are retried with
    exponential backoff and full jitter, or after what ``Retry-After`` asks:
    a server asking for longer than ``max_backoff_s`` fails the call at once
    (retryable), rather than hang it.
    """
    import httpx

    for attempt in itertools.count():
        wait: float | None = None
        cause: Exception | None = None
        try:
            response = await client.post(url, json=payload)
        except httpx.TimeoutException as exc:
            failure = error(
                f"{where} did not answer within {settings.timeout_s:g}s", retryable=True
            )
            cause = exc
        except httpx.HTTPError as exc:
            failure = error(
                f"could not reach {where}: {type(exc).__name__}: {exc}", retryable=True
            )
            cause = exc
        else:
            status = response.status_code
            if 200 <= status < 300:
                return response
            retryable = status in RETRYABLE_STATUSES or (status >= 500 and status != 501)
            detail = server_message(response)
            if status in (401, 403):
                detail = f"check the API key ({detail})"
            failure = error(
                f"{where} answered HTTP {status}: {detail}", status=status, retryable=retryable
            )
            wait = retry_after(response.headers) if retryable else None
        if not failure.retryable or attempt >= settings.max_retries:
            raise failure from cause
        if wait is not None and wait > settings.max_backoff_s:
            raise error(
                f"{where} asked to retry after {wait:g}s, "
                f"longer than max_backoff_s={settings.max_backoff_s:g}",
                status=failure.status,
                retryable=True,
            ) from cause
        if wait is None:
            # Full jitter between half and all of the exponential step, so
            # many clients throttled together do not come back together.
            step = min(settings.max_backoff_s, settings.backoff_s * 2.0**attempt)
            wait = random.uniform(step / 2, step)
        await asyncio.sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover
