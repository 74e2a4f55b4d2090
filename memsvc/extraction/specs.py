"""Extractors and summarizers named by a setting (``MEMSVC_EXTRACTOR``, ``MEMSVC_SUMMARIZER``)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace

from memsvc.core.errors import ValidationError
from memsvc.extraction.chat import STRUCTURED_OUTPUTS, StructuredOutput
from memsvc.extraction.extractive import ExtractiveSummarizer
from memsvc.extraction.openai_chat import OpenAIChatExtractor, OpenAIChatSummarizer
from memsvc.extraction.protocols import Extractor, Summarizer


@dataclass(frozen=True)
class _ClientOptions:
    """An OpenAI chat client's options, as ``<prefix>_*`` variables set them."""

    base_url: str | None
    api_key: str | None
    timeout_s: float = 30.0
    max_retries: int = 3
    structured_output: StructuredOutput = "auto"


def _client_options(prefix: str, environ: Mapping[str, str]) -> _ClientOptions:
    base_url = environ.get(f"{prefix}_BASE_URL") or environ.get("OPENAI_BASE_URL")
    api_key = environ.get(f"{prefix}_API_KEY") or environ.get("OPENAI_API_KEY")
    options = _ClientOptions(base_url, api_key)
    timeout = environ.get(f"{prefix}_TIMEOUT_S", "").strip()
    if timeout:
        try:
            options = replace(options, timeout_s=float(timeout))
        except ValueError as exc:
            raise ValidationError("timeout_s", "must be a number of seconds") from exc
    retries = environ.get(f"{prefix}_MAX_RETRIES", "").strip()
    if retries:
        if not retries.isdigit():
            raise ValidationError("max_retries", "must be a non-negative integer")
        options = replace(options, max_retries=int(retries))
    way = environ.get(f"{prefix}_STRUCTURED_OUTPUT", "").strip().lower()
    if way:
        if way not in STRUCTURED_OUTPUTS:
            raise ValidationError(
                "structured_output", f"must be one of {', '.join(STRUCTURED_OUTPUTS)}"
            )
        options = replace(options, structured_output=way)  # type: ignore[arg-type]
    return options


def _parse(spec: object, field: str) -> tuple[str, bool, str]:
    if not isinstance(spec, str):
        raise ValidationError(field, "must be a string")
    kind, colon, argument = spec.strip().partition(":")
    return kind.strip().lower(), bool(colon), argument.strip()


@contextmanager
def _naming(field: str) -> Iterator[None]:
    """Name what the user set in a ValidationError: the spec, or its variable."""
    try:
        yield
    except ValidationError as exc:
        name = field if exc.field == "model" else f"{field}_{exc.field}"
        raise ValidationError(name, exc.reason) from exc


def extractor_from_spec(spec: str, *, env: Mapping[str, str] | None = None) -> Extractor | None:
    """The extractor a setting names (``MEMSVC_EXTRACTOR``); None for ``""`` or ``none``.

    Specs:
        ``openai:<model>``: :class:`~memsvc.extraction.OpenAIChatExtractor`;
            ``MEMSVC_EXTRACTOR_BASE_URL`` (else ``OPENAI_BASE_URL``) is the
            API root, ``MEMSVC_EXTRACTOR_API_KEY`` (else ``OPENAI_API_KEY``)
            the key; ``MEMSVC_EXTRACTOR_TIMEOUT_S``,
            ``MEMSVC_EXTRACTOR_MAX_RETRIES`` and
            ``MEMSVC_EXTRACTOR_STRUCTURED_OUTPUT`` set those options.

    Raises:
        ValidationError: The spec names no extractor memsvc ships (field
            ``extractor``), or a variable above is malformed (``extractor_<option>``).
        ExtractionError: httpx is not installed (``memsvc[openai]``).
    """
    environ = os.environ if env is None else env
    kind, colon, argument = _parse(spec, "extractor")
    if kind in ("", "none") and not colon:
        return None
    if kind == "openai":
        if not argument:
            raise ValidationError("extractor", "'openai' needs a model: 'openai:<model>'")
        with _naming("extractor"):
            o = _client_options("MEMSVC_EXTRACTOR", environ)
            return OpenAIChatExtractor(
                o.base_url, argument, o.api_key, o.timeout_s, o.max_retries,
                structured_output=o.structured_output,
            )
    raise ValidationError(
        "extractor", f"unknown extractor {spec!r}; memsvc ships: openai:<model> (or none)"
    )


def summarizer_from_spec(spec: str, *, env: Mapping[str, str] | None = None) -> Summarizer:
    """The summarizer a setting names (``MEMSVC_SUMMARIZER``).

    Specs:
        ``extractive``: :class:`~memsvc.extraction.ExtractiveSummarizer` (no model).
        ``openai:<model>``: :class:`~memsvc.extraction.OpenAIChatSummarizer`,
            configured by ``MEMSVC_SUMMARIZER_*`` variables as the extractor is
            by ``MEMSVC_EXTRACTOR_*``.

    Raises:
        ValidationError: The spec names no summarizer memsvc ships (field
            ``summarizer``), or a variable is malformed.
    """
    environ = os.environ if env is None else env
    kind, colon, argument = _parse(spec, "summarizer")
    if kind == "extractive" and not colon:
        return ExtractiveSummarizer()
    if kind == "openai":
        if not argument:
            raise ValidationError("summarizer", "'openai' needs a model: 'openai:<model>'")
        with _naming("summarizer"):
            o = _client_options("MEMSVC_SUMMARIZER", environ)
            return OpenAIChatSummarizer(
                o.base_url, argument, o.api_key, o.timeout_s, o.max_retries,
                structured_output=o.structured_output,
            )
    raise ValidationError(
        "summarizer", f"unknown summarizer {spec!r}; memsvc ships: extractive, openai:<model>"
    )
