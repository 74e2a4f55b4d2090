"""What memsvc's clients of OpenAI-compatible HTTP APIs share (embeddings, chat).

The API root they take, the wait a server asks for before a retry, and the
error text it sent. httpx is imported by the clients that need it (the
``openai`` extra).
"""

from __future__ import annotations

import email.utils
import os
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from memsvc.core.errors import ValidationError

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
