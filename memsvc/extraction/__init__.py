"""Extractors and summarizers: what decides which facts a conversation holds.

The :class:`Extractor` and :class:`Summarizer` protocols, the operations an
extractor answers with (:class:`ADD`, :class:`UPDATE`, :class:`SUPERSEDE`,
:class:`INVALIDATE`, :class:`NOOP`), the strict checks of its answers
(:mod:`memsvc.extraction.answers`), and the implementations memsvc ships:
:class:`OpenAIChatExtractor` and :class:`OpenAIChatSummarizer` (any
OpenAI-compatible chat completions endpoint, extra ``openai``) and
:class:`ExtractiveSummarizer` (no model). Nothing here touches the database:
``svc.remember`` (:mod:`memsvc.remember`) applies what an extractor decides.

May import: ``memsvc.core``, ``memsvc.embedding`` (its HTTP helpers).
"""

from __future__ import annotations

from memsvc.extraction.answers import Limits
from memsvc.extraction.extractive import ExtractiveSummarizer
from memsvc.extraction.messages import Message
from memsvc.extraction.openai_chat import OpenAIChatExtractor, OpenAIChatSummarizer
from memsvc.extraction.operations import (
    ADD,
    INVALIDATE,
    NOOP,
    SUPERSEDE,
    UPDATE,
    Operation,
    Rejected,
)
from memsvc.extraction.protocols import (
    Candidate,
    ExtractionRequest,
    Extractor,
    Fact,
    Summarizer,
    SummaryMember,
)
from memsvc.extraction.specs import extractor_from_spec, summarizer_from_spec

__all__ = [
    "ADD",
    "INVALIDATE",
    "NOOP",
    "SUPERSEDE",
    "UPDATE",
    "Candidate",
    "ExtractionRequest",
    "ExtractiveSummarizer",
    "Extractor",
    "Fact",
    "Limits",
    "Message",
    "OpenAIChatExtractor",
    "OpenAIChatSummarizer",
    "Operation",
    "Rejected",
    "Summarizer",
    "SummaryMember",
    "extractor_from_spec",
    "summarizer_from_spec",
]
