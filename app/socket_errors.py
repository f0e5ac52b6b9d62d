"""Which ``OSError`` is a network connection's, and which a file's.

Python raises both as ``OSError``: a connection to PostgreSQL refused, reset, timed out or its host out
of reach, and the files folder unreadable, a file gone or the disk full. Only the first is an outage of
the database, to be waited out (:func:`app.db.is_transient`) or answered 503 (``app.server``); a file's
error retried as an outage would be retried for ever and reported as "database unavailable".

What the driver raises when the database is away (asyncpg on asyncio's loop and on uvloop's alike):

* a refused TCP connection: ``ConnectionRefusedError``; an unreachable host or network: ``OSError`` with
  ``EHOSTUNREACH``/``ENETUNREACH`` ("Connect call failed"); several addresses failing differently:
  a plain ``OSError("Multiple exceptions: ...")`` with no errno;
* a Unix socket whose server is not there: ``FileNotFoundError`` (``ENOENT``) naming no file — the
  socket's path is not given to the error, unlike every file function's;
* a name that does not resolve (yet): ``socket.gaierror``; a connect or a read timing out:
  ``TimeoutError``; a TLS session broken: ``ssl.SSLError``;
* a connection lost during a statement: asyncpg's ``ConnectionDoesNotExistError`` (its cause the
  socket's ``ConnectionResetError``/``TimeoutError``, or none), then ``InterfaceError`` on the next use —
  both asyncpg's own types, not ``OSError``s.

A file's error names its file (``filename``): ``open``, ``os.*``, ``shutil``, ``pathlib`` all set it. The
one that does not, a write to a full disk (``ENOSPC``, or ``EDQUOT``, ``EIO``, ``EROFS``), carries an errno
no socket gives a connection.
"""

from __future__ import annotations

import errno
import socket
import ssl

_CONNECTION_ERRNOS = frozenset(
    {
        errno.ENOENT,  # a Unix socket's file absent: the server is not running (yet); names no file
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.EHOSTDOWN,
        errno.ENETDOWN,
        errno.ENETRESET,
        errno.ENOTCONN,
        errno.ESHUTDOWN,
        errno.EADDRNOTAVAIL,  # no local port left for a new connection, until some are released
        errno.EAGAIN,  # a Unix socket's backlog full: the server is not accepting as fast as asked
        errno.ENOBUFS,
        # Out of descriptors for a new socket (a file's open names its file): the process's or the
        # system's limit, freed as connections and files close, so waited out like an outage rather
        # than stopping the worker, whose restart would meet the same limit on a busy host.
        errno.EMFILE,
        errno.ENFILE,
    }
)


_GROUPED = "Multiple exceptions: "
"""How asyncio's and uvloop's ``create_connection`` begin the plain ``OSError`` they raise when each of a
host's addresses failed its own way (no errno of its own: each address's error is in its words)."""


def is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` (an ``OSError``) is a network connection's failure rather than a file's: it names
    no file, and it is a ``ConnectionError``, a timeout, a name lookup's or TLS's failure, the event
    loop's grouped connect failure, or carries an errno only a socket gives."""
    if not isinstance(exc, OSError):
        return False
    if exc.filename is not None or exc.filename2 is not None:
        return False
    if isinstance(exc, ConnectionError | TimeoutError | socket.gaierror | socket.herror | ssl.SSLError):
        return True
    if type(exc) is OSError and exc.errno is None and str(exc).startswith(_GROUPED):
        return True
    return exc.errno in _CONNECTION_ERRNOS
