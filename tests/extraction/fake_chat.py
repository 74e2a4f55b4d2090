"""A real HTTP server on 127.0.0.1 speaking the OpenAI chat completions API.

It answers ``POST /v1/chat/completions`` the way a model asked for
structured output does: the answer's JSON goes in the message content (a
``json_schema`` response format) or in a forced tool call's arguments (a
``tools`` request), as the request asks. Which of the two it accepts is
configurable (``supports``); a request of the other kind gets HTTP 400, as
servers without that feature answer.

Unscripted, it acts as a simple rule-based extractor: every sentence a user
says is a fact; a fact already held word for word by a related memory is a
NOOP, any other is an ADD; a summary joins the memories' texts. Tests script
the next answers with :meth:`FakeChatServer.then`: a JSON answer of their
own (good, hallucinated refs, oversized content...), raw model text
(malformed), a raw HTTP body, an error status with headers (429 with
``Retry-After``, 5xx), or a delay (slow).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# The step a request is for, by the schema (or tool) name the clients use.
STEPS = {"memsvc_facts": "facts", "memsvc_operations": "operations", "memsvc_summary": "summary"}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass
class Reply:
    """What the server does with one request instead of its own answer.

    ``answer`` is the model's answer as a JSON value; ``content`` raw model
    text in its place; ``body`` a raw HTTP body. A status other than 200
    sends an OpenAI-style error (unless ``body`` is given).
    """

    answer: Any = None
    content: str | None = None
    body: bytes | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    finish_reason: str = "stop"


@dataclass
class Recorded:
    """One request the server received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def way(self) -> str:
        """``json_schema`` or ``tool``: how the request asked for structured output."""
        return "tool" if "tools" in self.body else "json_schema"

    @property
    def step(self) -> str:
        """``facts``, ``operations`` or ``summary``."""
        if "tools" in self.body:
            name = self.body["tools"][0]["function"]["name"]
        else:
            name = self.body.get("response_format", {}).get("json_schema", {}).get("name", "")
        return STEPS.get(name, name)

    @property
    def payload(self) -> Any:
        """The JSON the client sent as the user message."""
        return json.loads(self.body["messages"][-1]["content"])

    @property
    def system(self) -> str:
        """The system prompt."""
        return str(self.body["messages"][0]["content"])


def _plain(text: str) -> str:
    return text.strip().rstrip(".!?").casefold()


def rule_answer(step: str, payload: dict[str, Any]) -> Any:
    """The unscripted answer: sentences of user messages as facts, ADD what is new."""
    if step == "facts":
        facts: list[str] = []
        for message in payload["messages"]:
            if message["role"] == "user":
                facts.extend(s.strip() for s in _SENTENCE_END.split(message["content"]))
        return {"facts": [f for f in dict.fromkeys(facts) if f]}
    if step == "operations":
        memories = {m["ref"]: m["content"] for m in payload["memories"]}
        operations = []
        for fact in payload["facts"]:
            held = any(_plain(memories[ref]) == _plain(fact["fact"]) for ref in fact["related"])
            operations.append(noop() if held else add(fact["fact"]))
        return {"operations": operations}
    if step == "summary":
        return {"summary": " ".join(m["content"] for m in payload["memories"])}
    raise AssertionError(f"no rule for step {step!r}")


# Builders of answers, in the shape a strict JSON schema makes models write.


def facts(*texts: str) -> dict[str, Any]:
    return {"facts": list(texts)}


def operations(*items: dict[str, Any]) -> dict[str, Any]:
    return {"operations": list(items)}


def _op(op: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "op": op, "ref": None, "content": None, "metadata": None, "importance": None,
        "valid_from": None, "at": None,
    }
    return {**base, **fields}


def add(content: str, **fields: Any) -> dict[str, Any]:
    return _op("ADD", content=content, **fields)


def update(ref: str, content: str) -> dict[str, Any]:
    return _op("UPDATE", ref=ref, content=content)


def supersede(ref: str, content: str, valid_from: str | None = None) -> dict[str, Any]:
    return _op("SUPERSEDE", ref=ref, content=content, valid_from=valid_from)


def invalidate(ref: str, at: str | None = None) -> dict[str, Any]:
    return _op("INVALIDATE", ref=ref, at=at)


def noop() -> dict[str, Any]:
    return _op("NOOP")


class FakeChatServer:
    """Serve the chat completions endpoint in a thread; ``base_url`` ends in /v1.

    Args:
        supports: The structured-output ways it accepts (``json_schema``, ``tool``).
        answerer: Its unscripted answer for (step, payload); default :func:`rule_answer`.
    """

    def __init__(
        self,
        *,
        supports: tuple[str, ...] = ("json_schema", "tool"),
        answerer: Callable[[str, dict[str, Any]], Any] = rule_answer,
    ) -> None:
        self.supports = supports
        self.answerer = answerer
        self.requests: list[Recorded] = []
        self.script: list[Reply] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                recorded = Recorded(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                status, headers, payload = server.respond(recorded)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def then(self, *replies: Reply) -> None:
        """Use these replies, in order, for the next requests it accepts."""
        with self._lock:
            self.script.extend(replies)

    def steps(self) -> list[str]:
        """The step of every request received, in order."""
        return [r.step for r in self.requests]

    def respond(self, request: Recorded) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            self.requests.append(request)
            if request.path != "/v1/chat/completions":
                return 404, {}, _error("not found")
            if request.way not in self.supports:
                return 400, {}, _error(f"this server does not support {request.way} requests")
            reply = self.script.pop(0) if self.script else Reply()
        time.sleep(reply.delay_s)
        if reply.body is not None:
            return reply.status, reply.headers, reply.body
        if reply.status != 200:
            return reply.status, reply.headers, _error(f"scripted HTTP {reply.status}")
        if reply.content is not None:
            text = reply.content
        else:
            answer = reply.answer
            if answer is None:
                answer = self.answerer(request.step, request.payload)
            text = json.dumps(answer)
        return 200, reply.headers, json.dumps(_completion(request, text, reply)).encode()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _error(message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "invalid_request_error"}}).encode()


def _completion(request: Recorded, text: str, reply: Reply) -> dict[str, Any]:
    if request.way == "tool":
        name = request.body["tools"][0]["function"]["name"]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": name, "arguments": text}}
            ],
        }
    else:
        message = {"role": "assistant", "content": text}
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.body.get("model"),
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


@contextmanager
def serving(**options: Any) -> Iterator[FakeChatServer]:
    server = FakeChatServer(**options)
    server.start()
    try:
        yield server
    finally:
        server.stop()
