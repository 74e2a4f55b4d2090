"""A TCP fault-injection proxy for the reliability tests.

It listens on a loopback port and forwards every connection to an upstream
(PostgreSQL's unix socket, or a Redis TCP port), and can be told, at any time,
to misbehave the way networks do:

- ``latency``: every chunk is delayed by a fixed time in both directions;
- ``black_hole``: bytes are read and dropped (a partition: nothing answers,
  nothing fails), and new connections are accepted but never forwarded;
- ``reset``: every live connection is closed on both sides at once;
- ``reset_on_reply``: the next time the upstream answers, both sides are cut
  (the request ran on the server, the client never hears: an unknown outcome).

It is test code: plain asyncio, one task per direction, no buffering beyond
asyncio's own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

Opener = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]

_CHUNK = 64 * 1024


def postgres_socket_path(dsn: str) -> str:
    """The unix socket of a ``postgresql://...?host=/dir`` DSN: ``<dir>/.s.PGSQL.<port>``."""
    parts = urlsplit(dsn)
    query = parse_qs(parts.query)
    host = query.get("host", [parts.hostname or ""])[0]
    if not host.startswith("/"):
        raise ValueError("the DSN does not name a unix-socket directory (host=/dir)")
    port = query.get("port", [str(parts.port or 5432)])[0]
    return f"{host}/.s.PGSQL.{port}"


def unix_upstream(path: str) -> Opener:
    """Connect each proxied connection to a unix socket."""

    async def open_() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_unix_connection(path)

    return open_


def tcp_upstream(host: str, port: int) -> Opener:
    """Connect each proxied connection to a TCP address."""

    async def open_() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(host, port)

    return open_


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def cut(self) -> None:
        for writer in (self.client, self.server):
            if writer is not None:
                writer.transport.abort()
        for task in self.tasks:
            task.cancel()


class FaultProxy:
    """A loopback TCP proxy in front of one upstream, with switchable faults.

    Example:
        async with FaultProxy(unix_upstream(path)) as proxy:
            dsn = f"postgresql://postgres@127.0.0.1:{proxy.port}/db"
            proxy.black_hole = True
    """

    def __init__(self, upstream: Opener) -> None:
        self._upstream = upstream
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self.latency_s = 0.0
        self.black_hole = False
        self.reset_on_reply = False
        self.connections_accepted = 0

    @property
    def port(self) -> int:
        """The loopback port the proxy listens on."""
        if self._server is None:
            raise RuntimeError("the proxy is not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self) -> FaultProxy:
        """Listen on a free loopback port."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    def heal(self) -> None:
        """Stop injecting faults (live connections stay as they are)."""
        self.latency_s = 0.0
        self.black_hole = False
        self.reset_on_reply = False

    def reset(self) -> int:
        """Close every live connection on both sides; returns how many were cut."""
        links = list(self._links)
        for link in links:
            self._drop(link)
        return len(links)

    @property
    def live_connections(self) -> int:
        """Connections currently proxied (or held in the black hole)."""
        return len(self._links)

    async def close(self) -> None:
        """Stop listening and cut every connection."""
        self.reset()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ plumbing

    def _drop(self, link: _Link) -> None:
        self._links.discard(link)
        link.cut()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections_accepted += 1
        link = _Link(client=writer)
        self._links.add(link)
        try:
            if self.black_hole:
                # Accepted, never forwarded: swallow whatever the client sends.
                while await reader.read(_CHUNK):
                    pass
                return
            try:
                up_reader, up_writer = await self._upstream()
            except OSError:
                return
            link.server = up_writer
            link.tasks = [
                asyncio.create_task(self._pump(reader, up_writer, link, replies=False)),
                asyncio.create_task(self._pump(up_reader, writer, link, replies=True)),
            ]
            await asyncio.gather(*link.tasks, return_exceptions=True)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._drop(link)

    async def _pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        link: _Link,
        *,
        replies: bool,
    ) -> None:
        try:
            while True:
                chunk = await source.read(_CHUNK)
                if not chunk:
                    break
                if self.black_hole:
                    continue  # dropped on the floor
                if replies and self.reset_on_reply:
                    self.reset_on_reply = False
                    self._drop(link)
                    return
                if self.latency_s:
                    await asyncio.sleep(self.latency_s)
                sink.write(chunk)
                await sink.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._drop(link)
