"""The prompts the shipped model clients send, and the JSON schemas of their answers.

Each prompt is a file of the package (``prompts/<version>-<step>.md``), so a
change of wording is a new version, recorded in every memory's provenance.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

from memsvc.extraction.operations import OPERATION_NAMES

EXTRACT_VERSION = "extract-v2"
SUMMARIZE_VERSION = "summarize-v1"


@functools.cache
def prompt(name: str) -> str:
    """The text of ``prompts/<name>.md``."""
    return resources.files("memsvc.extraction").joinpath(f"prompts/{name}.md").read_text("utf-8")


def _nullable(kind: str) -> dict[str, Any]:
    return {"type": [kind, "null"]}


FACTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"facts": {"type": "array", "items": {"type": "string"}}},
    "required": ["facts"],
    "additionalProperties": False,
}

# Strict JSON schemas (OpenAI's ``strict: true``) need every property listed
# and required, with no free-form objects: fields an op does not use are
# null, and metadata is a list of key/value pairs.
_PAIR: dict[str, Any] = {
    "type": "object",
    "properties": {"key": {"type": "string"}, "value": {"type": "string"}},
    "required": ["key", "value"],
    "additionalProperties": False,
}
_OPERATION_FIELDS: dict[str, Any] = {
    "op": {"type": "string", "enum": list(OPERATION_NAMES)},
    "ref": _nullable("string"),
    "content": _nullable("string"),
    "metadata": {"type": ["array", "null"], "items": _PAIR},
    "importance": _nullable("number"),
    "valid_from": _nullable("string"),
    "at": _nullable("string"),
}


def operations_schema(allowed: tuple[str, ...] = OPERATION_NAMES) -> dict[str, Any]:
    """The schema of an operations answer, offering only the ``allowed`` ops."""
    fields = {**_OPERATION_FIELDS, "op": {"type": "string", "enum": list(allowed)}}
    operation = {
        "type": "object",
        "properties": fields,
        "required": list(fields),
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {"operations": {"type": "array", "items": operation}},
        "required": ["operations"],
        "additionalProperties": False,
    }


SUMMARY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"summary": {"type": "string"}},
    "required": ["summary"],
    "additionalProperties": False,
}
