"""A TCP proxy in front of PostgreSQL that reads the client's side of the wire protocol and cuts the
connection at the Nth round trip a code path makes: a network split, or a database connection that dies,
at an exact point of a real code path against the real server.

A round trip is a message after which the client waits for the server: a simple query (``Q``: what
asyncpg sends for ``BEGIN``, ``COMMIT``, ``ROLLBACK``, a ``COPY``) or the ``Sync`` that ends an extended
query (``Parse``/``Bind``/``Execute``: every parameterised statement). Counting them counts every
statement of a code path, whichever layer sent it (SQLAlchemy, or asyncpg straight).

``arm(n, after=False)`` starts counting; at round trip ``n``:

* ``after=False`` (a split before the statement reached the server): the statement is never delivered,
  and both sides of that connection are cut. The server ends the transaction with the connection.
* ``after=True`` (the answer lost): the statement is delivered and the server runs it; the connection is
  cut as the server's answer arrives, so the client never hears it. For a ``COMMIT`` that means the
  transaction committed while the client saw its connection die: the case a retry must not double.

``disarm()`` stops counting and tells how many round trips the armed stretch made and whether it cut.
The proxy answers a client's ``SSLRequest`` with "no" itself, so that the protocol stays readable.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import make_url


def cut_plan(every: bool, most: int) -> list[tuple[bool, int]]:
    """Which cuts a test makes: ``(after, up to round trip)`` pairs, N counting up from 1 in each until a
    code path ends before its Nth round trip.

    By default every round trip is cut after the server ran its statement (the answer lost, the COMMIT
    included), and only the first before it: a cut before round trip N leaves the server where a cut
    after N - 1 does (N - 1 ran, N did not; the transaction rolls back with the connection), and the
    client meets the dead connection one exchange later, on the same path. ``every`` (``--long``) makes
    both cuts at every round trip."""
    return [(False, most), (True, most)] if every else [(False, 1), (True, most)]


_SSL_REQUEST = 80877103
_GSS_REQUEST = 80877104


@dataclass(eq=False)
class _Conn:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    cut_on_answer: bool = False
    dead: bool = False

    def kill(self) -> None:
        self.dead = True
        for writer in (self.client, self.server):
            with contextlib.suppress(Exception):
                writer.transport.abort()


@dataclass
class SplitProxy:
    target_host: str
    target_port: int
    port: int = 0
    count: int = 0
    """Round trips counted since :meth:`arm`."""
    at: int | None = None
    after: bool = False
    armed: bool = False
    cut: bool = False
    """Whether the armed stretch cut a connection."""
    cut_statement: bytes = b""
    """The first bytes of the message the cut fell on (for a failing test's message)."""
    every_cut: bool = False
    """Whether a test cuts before the statement at every round trip too (:func:`cut_plan`)."""
    _server: asyncio.Server | None = None
    _conns: set[_Conn] = field(default_factory=set)
    _loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    _thread: threading.Thread | None = None

    def start(self) -> SplitProxy:
        """Serve from a thread of its own (with its own event loop): the app under test may run its
        requests on another loop than the test's, in another thread."""
        self._thread = threading.Thread(target=self._loop.run_forever, name="split-proxy", daemon=True)
        self._thread.start()
        self._call(self._listen())
        return self

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def url(self, database_url: str) -> str:
        """``database_url`` pointed at the proxy."""
        return (
            make_url(database_url).set(host="127.0.0.1", port=self.port).render_as_string(hide_password=False)
        )

    def arm(self, at: int | None = None, *, after: bool = False) -> None:
        """Count round trips from now; cut at the ``at``-th (none: only count)."""
        self.count, self.at, self.after, self.armed, self.cut = 0, at, after, True, False
        self.cut_statement = b""

    def disarm(self) -> tuple[int, bool]:
        """Stop counting: (round trips counted, whether a connection was cut)."""
        self.armed = False
        return self.count, self.cut

    def close(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._call(self._close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
        self._loop.close()

    async def _close(self) -> None:
        for conn in list(self._conns):
            conn.kill()
        if self._server is not None:
            self._server.close()

    # --- the proxy -------------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            first = await self._startup(reader, writer)
            up_reader, up_writer = await asyncio.open_connection(self.target_host, self.target_port)
        except (OSError, asyncio.IncompleteReadError):
            writer.transport.abort()
            return
        conn = _Conn(writer, up_writer)
        self._conns.add(conn)
        up_writer.write(first)
        try:
            await asyncio.gather(
                self._client_to_server(reader, conn), self._server_to_client(up_reader, conn)
            )
        finally:
            conn.kill()
            self._conns.discard(conn)

    async def _startup(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
        """The startup message, after declining any SSL or GSS encryption request."""
        while True:
            head = await reader.readexactly(8)
            length, code = struct.unpack("!ii", head)
            if code in (_SSL_REQUEST, _GSS_REQUEST):
                writer.write(b"N")
                continue
            return head + await reader.readexactly(length - 8)

    async def _client_to_server(self, reader: asyncio.StreamReader, conn: _Conn) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, ConnectionError):
            while not conn.dead:
                head = await reader.readexactly(5)
                kind, length = head[:1], struct.unpack("!i", head[1:])[0]
                message = head + await reader.readexactly(length - 4)
                if kind in (b"Q", b"S") and self.armed:
                    self.count += 1
                    if self.at is not None and self.count == self.at:
                        self.cut = True
                        self.cut_statement = message[5:80]
                        if not self.after:
                            conn.kill()
                            return
                        conn.cut_on_answer = True
                conn.server.write(message)
                await conn.server.drain()
        conn.kill()

    async def _server_to_client(self, reader: asyncio.StreamReader, conn: _Conn) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await reader.read(65536):
                if conn.cut_on_answer:
                    conn.kill()
                    return
                conn.client.write(data)
                await conn.client.drain()
        conn.kill()  # the server closed its side: so does the client's (it may wait for that)
