"""A real HTTP server on 127.0.0.1 speaking the OpenAI embeddings API.

It answers ``POST /v1/embeddings`` with deterministic vectors (feature hashing
of each input), records every request, and can be told to misbehave for the
next requests: an error status, a delay, or a raw body of its own.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memsvc import HashingEmbedder


@dataclass
class Reply:
    """What the server does with one request instead of answering normally."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None  # None: the normal JSON answer (when status is 200)
    delay_s: float = 0.0
    transform: Any = None  # a function rewriting the normal JSON answer


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class FakeEmbeddingsServer:
    """Serve the embeddings endpoint in a thread; ``base_url`` ends in /v1."""

    def __init__(self, dim: int = 8) -> None:
        self.dim = dim
        self.requests: list[Recorded] = []
        self.script: list[Reply] = []
        self._lock = threading.Lock()
        self._hashing = HashingEmbedder(dim)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests.append(
                        Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                    reply = server.script.pop(0) if server.script else Reply()
                time.sleep(reply.delay_s)
                payload = reply.body
                if payload is None and reply.status == 200:
                    answer = server.answer(body)
                    if reply.transform is not None:
                        answer = reply.transform(answer)
                    payload = json.dumps(answer).encode()
                payload = payload or b""
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in reply.headers.items():
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

    def vector(self, text: str) -> list[float]:
        """The vector the server returns for ``text``."""
        return [float(x) for x in self._hashing.embed_one(text)]

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        texts = body["input"]
        return {
            "object": "list",
            "model": body["model"],
            "data": [
                {"object": "embedding", "index": i, "embedding": self.vector(text)}
                for i, text in enumerate(texts)
            ],
            "usage": {"prompt_tokens": 0, "total_tokens": 0},
        }

    def then(self, *replies: Reply) -> None:
        """Use these replies, in order, for the next requests."""
        with self._lock:
            self.script.extend(replies)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def serving(dim: int = 8) -> Iterator[FakeEmbeddingsServer]:
    server = FakeEmbeddingsServer(dim)
    server.start()
    try:
        yield server
    finally:
        server.stop()
