"""MEMSVC_EMBEDDER: the spec strings that pick an embedder."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

from memsvc import (
    EmbeddingError,
    HashingEmbedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    ValidationError,
    embedder_from_spec,
)
from memsvc.cli import main
from tests.embedders.fake_openai import serving

HAS_SENTENCE_TRANSFORMERS = importlib.util.find_spec("sentence_transformers") is not None


@pytest.mark.parametrize("spec", ["hashing", " Hashing ", "HASHING"])
def test_hashing_spec(spec: str) -> None:
    embedder = embedder_from_spec(spec, 96, env={})
    assert isinstance(embedder, HashingEmbedder) and embedder.dim == 96


def test_openai_spec_reads_its_settings_from_the_environment() -> None:
    env = {
        "MEMSVC_EMBEDDER_BASE_URL": "http://127.0.0.1:9/v1/",
        "MEMSVC_EMBEDDER_API_KEY": "sk-memsvc",
        "OPENAI_API_KEY": "sk-openai",
        "MEMSVC_EMBEDDER_DIMENSIONS": "256",
    }
    embedder = embedder_from_spec("openai:text-embedding-3-small", 256, env=env)
    assert isinstance(embedder, OpenAIEmbedder)
    assert embedder.model == "text-embedding-3-small"
    assert embedder.base_url == "http://127.0.0.1:9/v1"
    assert embedder.dimensions == 256
    assert embedder._api_key == "sk-memsvc"
    fallback = embedder_from_spec(
        "openai:m", 8, env={"OPENAI_API_KEY": "sk-openai", "OPENAI_BASE_URL": "http://h:1/v1"}
    )
    assert isinstance(fallback, OpenAIEmbedder)
    assert (fallback._api_key, fallback.base_url, fallback.dimensions) == (
        "sk-openai",
        "http://h:1/v1",
        None,
    )


async def test_an_openai_spec_embeds_through_the_endpoint() -> None:
    with serving(dim=8) as server:
        embedder = embedder_from_spec(
            "openai:Org/Model-Name", 8, env={"MEMSVC_EMBEDDER_BASE_URL": server.base_url}
        )
        [vector] = await embedder(["hello there"])
    assert server.requests[0].body["model"] == "Org/Model-Name"  # case kept
    np.testing.assert_allclose(vector, server.vector("hello there"), rtol=1e-6)


@pytest.mark.skipif(
    not HAS_SENTENCE_TRANSFORMERS,
    reason="sentence-transformers is not installed (extra memsvc[local])",
)
def test_local_spec_keeps_the_path_as_written() -> None:
    embedder = embedder_from_spec("local:/models/My-Model:v2", 384, env={})
    assert isinstance(embedder, SentenceTransformerEmbedder)
    assert embedder.model_name_or_path == "/models/My-Model:v2"
    assert embedder.device is None
    on_cpu = embedder_from_spec(
        "LOCAL:all-MiniLM-L6-v2", 384, env={"MEMSVC_EMBEDDER_DEVICE": "cpu"}
    )
    assert isinstance(on_cpu, SentenceTransformerEmbedder) and on_cpu.device == "cpu"


@pytest.mark.skipif(
    HAS_SENTENCE_TRANSFORMERS, reason="checks the message shown without sentence-transformers"
)
def test_local_spec_without_the_extra_names_it() -> None:
    with pytest.raises(EmbeddingError, match=r"memsvc\[local\]"):
        embedder_from_spec("local:all-MiniLM-L6-v2", 384, env={})


@pytest.mark.parametrize(
    ("spec", "env", "field"),
    [
        ("", {}, "embedder"),
        ("   ", {}, "embedder"),
        ("bert", {}, "embedder"),
        ("hashing:384", {}, "embedder"),
        ("openai", {}, "embedder"),
        ("openai:", {}, "embedder"),
        ("openai:  ", {}, "embedder"),
        ("local:", {}, "embedder"),
        (":model", {}, "embedder"),
        (None, {}, "embedder"),
        ("openai:m", {"MEMSVC_EMBEDDER_DIMENSIONS": "lots"}, "embedder_dimensions"),
        (
            "openai:m",
            {"MEMSVC_EMBEDDER_DIMENSIONS": "0", "MEMSVC_EMBEDDER_BASE_URL": "http://h:1/v1"},
            "embedder_dimensions",
        ),
        ("openai:m", {}, "embedder_base_url"),
        ("openai:m", {"MEMSVC_EMBEDDER_BASE_URL": "ftp://h/v1"}, "embedder_base_url"),
    ],
)
def test_bad_specs_are_validation_errors(spec: Any, env: dict[str, str], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        embedder_from_spec(spec, 384, env=env)
    assert caught.value.field == field


def _demo(dsn: str, **env: str) -> Result:
    environment = {"MEMSVC_DATABASE_URL": dsn, "MEMSVC_AUTO_MIGRATE": "false", **env}
    return CliRunner().invoke(main, ["demo"], env=environment)


async def test_the_demo_embeds_through_the_endpoint_memsvc_embedder_names(
    memsvc_database_url: str,
) -> None:
    with serving(dim=384) as server:
        result = await asyncio.to_thread(
            _demo,
            memsvc_database_url,
            MEMSVC_EMBEDDER="openai:demo-embed",
            MEMSVC_EMBEDDER_BASE_URL=server.base_url,
            MEMSVC_EMBEDDER_API_KEY="sk-demo",
        )
    assert result.exit_code == 0, result.output
    assert server.requests, "the demo never called the endpoint"
    assert {r.body["model"] for r in server.requests} == {"demo-embed"}
    assert {r.headers["authorization"] for r in server.requests} == {"Bearer sk-demo"}


async def test_the_demo_refuses_a_bad_spec_without_a_traceback(memsvc_database_url: str) -> None:
    result = await asyncio.to_thread(_demo, memsvc_database_url, MEMSVC_EMBEDDER="openai:")
    assert result.exit_code == 1
    assert "ValidationError: embedder: 'openai' needs a model" in result.output
    assert "Traceback" not in result.output
