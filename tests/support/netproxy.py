"""A TCP proxy the test owns, in front of PostgreSQL (or any TCP server), to cut a client off the network.

It runs its own event loop in a thread, so it keeps forwarding whatever the test's loop is doing.

* ``cut("drop")`` closes every connection and stops listening: new connections are refused at once
  (like a server host that is down, or a firewall answering with a reset).
* ``cut("blackhole")`` keeps every connection open but forwards nothing, in either direction, and accepts
  new connections without ever connecting them through (like a network partition: packets vanish, and
  the client only notices through its own timeouts).
* ``restore()`` closes the connections the cut left behind (their streams are out of step) and forwards
  new connections again.

:class:`BlackholeProxy` is simpler and runs in the test's own loop: it freezes the connections open at the
moment, and connects new ones through normally (a path that drops one connection's packets). With
``answers_only`` it lets what the client sends on them through and holds back only what the server
answers (a request that arrives and runs, its answer lost or slow); ``sever()`` then resets them (the
answer is lost for good, and the client sees its connection cut).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from sqlalchemy.engine import make_url


class TcpProxy:
    """Listens on ``listen_host:<port>`` and forwards to ``target_host:target_port``."""

    def __init__(self, target_host: str, target_port: int, listen_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.listen_host = listen_host
        self.port = 0
        self.mode: str | None = None
        """``None`` while forwarding, else the kind of cut."""
        self.accepted = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)

    # --- the test's side (any thread) ------------------------------------------------------------

    def start(self) -> TcpProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def url(self, database_url: str) -> str:
        """``database_url`` pointed at the proxy."""
        return (
            make_url(database_url)
            .set(host=self.listen_host, port=self.port)
            .render_as_string(hide_password=False)
        )

    def cut(self, mode: str = "blackhole") -> None:
        if mode not in ("drop", "blackhole"):
            raise ValueError(f"unknown cut {mode!r}")
        self._call(self._cut(mode))

    def restore(self) -> None:
        self._call(self._restore())

    def close(self) -> None:
        if self._thread.is_alive():
            self._call(self._close_all(stop_listening=True))
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    # --- the proxy's loop ------------------------------------------------------------------------

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, self.listen_host, self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _cut(self, mode: str) -> None:
        self.mode = mode
        if mode == "drop":
            await self._close_all(stop_listening=True)

    async def _restore(self) -> None:
        await self._close_all(stop_listening=False)
        self.mode = None
        if self._server is None:
            await self._listen()

    async def _close_all(self, *, stop_listening: bool) -> None:
        if stop_listening and self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._conns):
            _abort(writer)
        self._conns.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._conns.add(writer)
        if self.mode is not None:  # blackhole: hold the connection, never connect it through
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _abort(writer)
            return
        self._conns.add(up_writer)
        asyncio.create_task(self._pump(reader, up_writer))
        asyncio.create_task(self._pump(up_reader, writer))

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                if self.mode is None:
                    writer.write(data)
                    await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            if self.mode is None:
                _abort(writer)
                self._conns.discard(writer)


def _abort(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.transport.abort()


class BlackholeProxy:
    """A TCP proxy to PostgreSQL whose open connections can be frozen: bytes stop flowing but no socket
    closes — a half-open connection, as when a network path silently drops packets."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.frozen = False
        self.answers_only = False
        """While frozen, forward the client's bytes and hold back only the server's."""
        self.server: asyncio.Server | None = None
        self.port = 0
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, born_frozen: bool, answers: bool
    ) -> None:
        with contextlib.suppress(Exception):
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if self.frozen and not born_frozen and (answers or not self.answers_only):
                    continue  # swallow: the peer never hears back, and nothing is closed
                writer.write(data)
                await writer.drain()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers += [writer, up_writer]
        born_frozen = self.frozen  # connections made after the freeze work normally
        await asyncio.gather(
            self._pipe(reader, up_writer, born_frozen, False),
            self._pipe(up_reader, writer, born_frozen, True),
        )

    def sever(self) -> None:
        """Reset every connection open now, both ways (what the server answered and was held back is
        lost with it), and forward whatever connects from now on."""
        for w in self._writers:
            _abort(w)
        self._writers.clear()
        self.frozen = False

    async def close(self) -> None:
        for w in self._writers:
            w.close()
        if self.server:
            self.server.close()
