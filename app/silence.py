"""A bound on silence for every connection Jobdesk opens to PostgreSQL (or to PgBouncer).

When the network path goes silent — a partition, a NAT or firewall entry that expired, a host that
vanished: packets dropped, no reset, no FIN — a connection sees nothing wrong. asyncpg sets no TCP
keepalive, and most statements have no client-side timeout, so a statement whose answer never comes
waits until the kernel gives up retransmitting what it sent (``tcp_retries2``: about 15 minutes), or for
ever when nothing it sent is unacknowledged (the request arrived, the answer was lost) and no keepalive
probes the peer. So every socket gets, at connect:

* TCP keepalive after :data:`KEEPALIVE_IDLE_SECS` of silence, a probe every
  :data:`KEEPALIVE_INTERVAL_SECS`, :data:`KEEPALIVE_COUNT` unanswered probes: a silent connection with
  nothing in flight is dropped after about 25 s. The kernel of a live peer answers probes whatever its
  PostgreSQL is doing, so a long statement or an idle pooled connection is not affected, and probes cost
  a few bytes every 10 s on idle connections only.
* ``TCP_USER_TIMEOUT`` of :data:`USER_TIMEOUT_SECS`: data sent and not acknowledged by the peer's kernel
  for that long drops the connection (instead of 15 minutes of retransmissions). Also only the network:
  a busy server's kernel still acknowledges.

A dropped connection fails its statement with a connection error the callers already treat as
transient (:func:`app.db.is_transient`): the worker retries or hands back, a web request gets its error
and the pool a fresh connection. These are socket options, not startup parameters, so they work the same
through PgBouncer. The worker's statements also have shorter bounds of their own, tied to the lease:
the claims, the completer's writes, the sweep's transactions, a processor's progress reports and
``ctx.files`` (:func:`app.db.answered_within`), for a path where keepalive sees nothing wrong (a proxy
or a pooler in between keeps the TCP connection alive).
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

import asyncpg

KEEPALIVE_IDLE_SECS = 10
"""Seconds without any packet from the peer before the first probe."""
KEEPALIVE_INTERVAL_SECS = 5
KEEPALIVE_COUNT = 3
USER_TIMEOUT_SECS = 30
"""Longest a sent packet may stay unacknowledged (and, on Linux, the bound keepalive aborts at once it
has started probing). Well above a retransmission or two on a lossy but working path."""


def bound_silence(sock: Any) -> None:
    """Set keepalive and ``TCP_USER_TIMEOUT`` on ``sock`` (a TCP socket; others are left alone). An option
    the platform lacks is skipped."""
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    options = [
        (socket.SOL_SOCKET, getattr(socket, "SO_KEEPALIVE", None), 1),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPIDLE", None), KEEPALIVE_IDLE_SECS),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPINTVL", None), KEEPALIVE_INTERVAL_SECS),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPCNT", None), KEEPALIVE_COUNT),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_USER_TIMEOUT", None), USER_TIMEOUT_SECS * 1000),
    ]
    for level, option, value in options:
        if option is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(level, option, value)


class SilenceBoundConnection(asyncpg.Connection):
    """An asyncpg connection whose socket has :func:`bound_silence`'s options, set as it is made (asyncpg
    has no option for them): pass it as ``connection_class`` to ``asyncpg.connect``."""

    def __init__(self, protocol: Any, transport: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(protocol, transport, *args, **kwargs)
        with contextlib.suppress(Exception):
            bound_silence(transport.get_extra_info("socket"))
