"""The extractive summarizer, and extractors and summarizers named by settings."""

from __future__ import annotations

import pytest

from memsvc import (
    ExtractiveSummarizer,
    OpenAIChatExtractor,
    OpenAIChatSummarizer,
    Settings,
    ValidationError,
    extractor_from_spec,
    summarizer_from_spec,
)
from memsvc.extraction import Extractor, Summarizer, SummaryMember
from memsvc.extraction.extractive import medoid_index

ENV = {"OPENAI_BASE_URL": "http://localhost:9/v1", "OPENAI_API_KEY": "sk-openai"}


async def test_the_extractive_summary_is_the_medoid_with_the_terms_it_lacks() -> None:
    members = [
        SummaryMember("Ana moved to Berlin with Eva", embedding=[1.0, 0.1, 0.0]),
        SummaryMember("Ana lives in Berlin now", embedding=[1.0, 0.0, 0.0]),
        SummaryMember("Ana's flat in Berlin is in Kreuzberg", embedding=[0.9, 0.0, 0.1]),
    ]
    assert medoid_index(members) == 1
    summary = await ExtractiveSummarizer().summarize(members)
    assert summary == "Ana lives in Berlin now (also: moved, eva, ana's, flat, kreuzberg)"
    assert await ExtractiveSummarizer(max_terms=2).summarize(members) == (
        "Ana lives in Berlin now (also: moved, eva)"
    )


async def test_without_embeddings_the_medoid_is_found_by_shared_words() -> None:
    members = [
        SummaryMember("deploy the bridge service on Friday"),
        SummaryMember("the bridge service deploy needs a review"),
        SummaryMember("lunch is at noon"),
    ]
    assert medoid_index(members) in (0, 1)
    assert await ExtractiveSummarizer(max_terms=0).summarize(members) == members[
        medoid_index(members)
    ].content
    with pytest.raises(ValidationError):
        await ExtractiveSummarizer().summarize([])


def test_the_shipped_clients_satisfy_the_protocols() -> None:
    assert isinstance(OpenAIChatExtractor("http://localhost:9/v1", "m"), Extractor)
    assert isinstance(OpenAIChatSummarizer("http://localhost:9/v1", "m"), Summarizer)
    assert isinstance(ExtractiveSummarizer(), Summarizer)


def test_extractor_specs_build_the_extractor_with_its_variables() -> None:
    assert extractor_from_spec("", env=ENV) is None
    assert extractor_from_spec("none", env=ENV) is None
    built = extractor_from_spec(
        "openai:gpt-4o-mini",
        env={
            **ENV,
            "MEMSVC_EXTRACTOR_BASE_URL": "http://llm.internal:8000/v1",
            "MEMSVC_EXTRACTOR_TIMEOUT_S": "12.5",
            "MEMSVC_EXTRACTOR_MAX_RETRIES": "1",
            "MEMSVC_EXTRACTOR_STRUCTURED_OUTPUT": "tool",
        },
    )
    assert isinstance(built, OpenAIChatExtractor)
    assert (built.chat.base_url, built.model) == ("http://llm.internal:8000/v1", "gpt-4o-mini")
    assert (built.chat.timeout_s, built.chat.max_retries) == (12.5, 1)
    assert built.chat.structured_output == "tool"
    fallback = extractor_from_spec("openai:m", env=ENV)
    assert isinstance(fallback, OpenAIChatExtractor)
    assert fallback.chat.base_url == ENV["OPENAI_BASE_URL"]


@pytest.mark.parametrize(
    ("spec", "env", "field"),
    [
        ("hashing", ENV, "extractor"),
        ("openai", ENV, "extractor"),
        ("openai:", ENV, "extractor"),
        ("openai:m", {}, "extractor_base_url"),
        ("openai:m", {**ENV, "MEMSVC_EXTRACTOR_TIMEOUT_S": "soon"}, "extractor_timeout_s"),
        ("openai:m", {**ENV, "MEMSVC_EXTRACTOR_MAX_RETRIES": "-1"}, "extractor_max_retries"),
        (
            "openai:m",
            {**ENV, "MEMSVC_EXTRACTOR_STRUCTURED_OUTPUT": "xml"},
            "extractor_structured_output",
        ),
    ],
)
def test_a_bad_extractor_spec_names_what_the_user_set(
    spec: str, env: dict[str, str], field: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        extractor_from_spec(spec, env=env)
    assert raised.value.field == field


def test_summarizer_specs() -> None:
    assert isinstance(summarizer_from_spec("extractive", env={}), ExtractiveSummarizer)
    built = summarizer_from_spec(
        "openai:m", env={**ENV, "MEMSVC_SUMMARIZER_BASE_URL": "http://sum:1/v1"}
    )
    assert isinstance(built, OpenAIChatSummarizer) and built.chat.base_url == "http://sum:1/v1"
    for spec in ("openai", "medoid"):
        with pytest.raises(ValidationError) as raised:
            summarizer_from_spec(spec, env=ENV)
        assert raised.value.field == "summarizer"


def test_the_settings_name_the_extractor_and_summarizer(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().extractor is None and Settings().summarizer == "extractive"
    monkeypatch.setenv("MEMSVC_EXTRACTOR", "openai:gpt-4o-mini")
    monkeypatch.setenv("MEMSVC_SUMMARIZER", "openai:gpt-4o-mini")
    settings = Settings()
    assert (settings.extractor, settings.summarizer) == ("openai:gpt-4o-mini",) * 2
