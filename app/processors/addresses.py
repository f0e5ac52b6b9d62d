"""Where an ``http.request`` job (and a callback) may connect: the target of a request, whether an
address is public, name resolution, and :class:`AddressPolicy` (see :mod:`app.processors.http_request`).

httpx is imported where a URL is parsed, not here: every worker loads this module with the processors
as it starts, and importing httpx (with its command line's rich and click) cost that start 30-50 ms
(``python -X importtime``) before its first claim, for the first request of a job that may never come.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import posixpath
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from app.formatting import host_port, url_host
from app.processors import PermanentError
from app.settings import allowed_host

if TYPE_CHECKING:
    import httpx

DEFAULT_PORTS = {"http": 80, "https": 443}
OWN_API_PREFIX = "/api/"
OWN_OPEN_PATHS = (OWN_API_PREFIX, "/static/", "/healthz", "/readyz")
"""The only paths of Jobdesk's own address a job may request: the JSON API, which takes a Bearer token
and ignores cookies (so a job there acts only with a token its owner put in the job), the static files
and the health checks, which no session changes. Every other path is a page or a form for browsers
(sign-in, account, job forms): a job sending them would act as a browser from the worker's address —
e.g. wrong passwords for someone's e-mail address until the sign-in limit locks out everyone who signs
in from that address."""

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]


@dataclass(frozen=True)
class Target:
    """Where one request goes: scheme, host (lower case, IDNA-encoded, no brackets) and port."""

    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: httpx.URL) -> Target:
        scheme = url.scheme.lower()
        host = url.raw_host.decode("ascii").lower().strip("[]")
        # ``is None``, not falsy: a URL's written port 0 is port 0 (refused by :func:`target_problem`),
        # not the scheme's default.
        port = url.port if url.port is not None else DEFAULT_PORTS.get(scheme, 0)
        return cls(scheme, host, port)

    @property
    def name(self) -> str:
        """The host without the trailing dot of a fully qualified name (``jobs.example.com.`` is
        ``jobs.example.com``)."""
        return self.host.rstrip(".")


def _on_this_host(address: IPAddress) -> bool:
    """Loopback or the unspecified address: wherever Jobdesk listens on this machine, these reach it."""
    return (
        address.is_loopback
        or address.is_unspecified
        or bool(
            isinstance(address, ipaddress.IPv6Address)
            and address.ipv4_mapped
            and (address.ipv4_mapped.is_loopback or address.ipv4_mapped.is_unspecified)
        )
    )


_SHORT_IPV4 = re.compile(r"(?:0[xX][0-9a-fA-F]+|[0-9]+)(?:\.(?:0[xX][0-9a-fA-F]+|[0-9]+)){0,3}")
"""The old spellings of an IPv4 address the system's resolver still reads as one: fewer parts
(``127.1``, ``10.1``), one number (``2130706433``, ``0``), octal and hex parts (``0x7f.1``)."""


LOOPBACK = ipaddress.IPv4Address("127.0.0.1")


def always_local(name: str) -> bool:
    """Whether ``name`` (without a final dot) is one that always means this machine: ``localhost`` and
    every name under it (RFC 6761), whatever a resolver would answer."""
    return name == "localhost" or name.endswith(".localhost")


def known_address(name: str) -> IPAddress | None:
    """The address ``name`` (without a final dot) reaches, known without asking a resolver: the address
    it spells (:func:`_literal`), or loopback for a name that is :func:`always_local`. What a check at
    submission reads as the URL's address; ``None`` for a name only a resolver can answer for."""
    literal = _literal(name)
    if literal is None and always_local(name):
        return LOOPBACK
    return literal


_NOT_IN_NAMES = re.compile(r"[\x00-\x2c/:-@\[-^`{-\x7f]")
"""An ASCII character that no host name a resolver looks up has: of ASCII, letters, digits, ``-``, ``.``
and ``_`` (found in real names, though not in RFC 1123's) are all there is."""


def target_problem(target: Target) -> str | None:
    """Why no request can ever reach ``target``, or ``None``: a port outside 1-65535, or a host name no
    resolver can look up (a part longer than 63 characters, an empty part, more than 253 characters).
    The same words at submission (:meth:`AddressPolicy.check_url`) and when the job runs
    (:meth:`AddressPolicy.refuse_before_resolving`), where such a URL, e.g. from a ``$ref``, failed in the IDNA
    codec and was retried as if the next attempt could do better."""
    if not 1 <= target.port <= 65535:
        return f"port {target.port} is out of range: a web address's port is a number from 1 to 65535"
    name = target.name
    if ":" in name or _literal(name) is not None:
        return None
    shown = name if len(name) <= 80 else name[:77] + "…"
    labels = name.split(".")
    if any(len(label) > 63 for label in labels):
        return f"the host name {shown} has a part longer than 63 characters, which no web address can have"
    if len(name) > 253:
        return f"the host name {shown} is longer than 253 characters, which no web address can be"
    if not all(labels):
        return f"the host name {shown} has an empty part (two dots in a row, or a dot at its start)"
    try:
        spelled = name.encode("idna").decode("ascii")
    except UnicodeError:
        return f"the host name {shown} cannot be looked up: it is not a valid host name"
    # A character no host name has (``exa%20mple.com``, ``exa<mple.com``) passes the IDNA codec as it
    # is: such a job asked the resolver at every attempt and was retried for half an hour.
    # The URL's host comes percent-encoded (``<`` as ``%3c``): said as the person wrote it.
    written = unquote(spelled)
    odd = _NOT_IN_NAMES.search(written)
    if odd:
        shown = written if len(written) <= 80 else written[:77] + "…"
        return f"the host name {shown} cannot be looked up: a host name has no {odd.group()!r} in it"
    if written != spelled:
        return f"the host name {shown} cannot be looked up: it is not a valid host name"
    if not all(map(_a_label_ok, labels)):
        return f"the host name {shown} cannot be looked up: it is not a valid host name"
    return None


def _a_label_ok(label: str) -> bool:
    """Whether ``label`` is no internationalised label, or one whose Punycode spells some non-ASCII
    text: ``xn--`` alone or ``xn--zz`` is no name anyone can register, and httpx's ``URL.host``
    raises on it. Read as leniently as IDNA 2003 (an emoji name such as ``xn--ls8h`` passes)."""
    if not label.lower().startswith("xn--"):
        return True
    try:
        text = label[4:].encode("ascii").decode("punycode")
    except UnicodeError:
        return False
    return not text.isascii()


def _literal(host: str) -> IPAddress | None:
    """``host`` as the address it spells, or ``None`` for a name. Besides the usual forms, the old IPv4
    spellings the resolver reads as addresses (:data:`_SHORT_IPV4`): a URL to ``http://127.1/`` reaches
    127.0.0.1, so a check at submission must read it so too."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if not _SHORT_IPV4.fullmatch(host):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def _open_path(path: str) -> bool:
    """Whether ``path`` (percent-decoded) is one of :data:`OWN_OPEN_PATHS` (a prefix ending in ``/``, or
    exactly a name) and stays there: no ``.`` or ``..`` segment that a server would resolve to a page
    outside it."""
    segments = path.split("/")
    if "." in segments or ".." in segments or posixpath.normpath(path) != path.rstrip("/"):
        return False
    return any(path.startswith(p) if p.endswith("/") else path == p for p in OWN_OPEN_PATHS)


def is_public(address: IPAddress) -> bool:
    """Whether ``address`` is a public unicast address, also looking inside IPv6 forms that carry an
    IPv4 address (mapped, 6to4, NAT64)."""
    if address.is_multicast or not address.is_global:
        return False
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in ipaddress.IPv6Network("64:ff9b::/96"):
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return is_public(embedded)
    return True


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to (an address literal is itself), in the resolver's order.

    Raises:
        OSError: the name does not resolve.
    """
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    return list(dict.fromkeys(found))


class AddressPolicy:
    """Which targets may reach addresses that are not public (see the module docstring)."""

    @classmethod
    def of(cls, settings: Any) -> AddressPolicy:
        """The policy of ``settings``, made once per distinct value of the three settings it reads: the
        submission checks run it for every row of a batch, where making it each time was most of a
        10,000-row batch's checks."""
        return _policy(
            bool(settings.http_request_allow_private),
            str(settings.jobdesk_base_url),
            tuple(str(h) for h in settings.http_request_allowed_hosts),
        )

    def __init__(self, settings: Any) -> None:
        self.allow_private = bool(settings.http_request_allow_private)
        import httpx  # here, not at the top: see the module docstring

        self.base = Target.of(httpx.URL(settings.jobdesk_base_url))
        self.base_literal = _literal(self.base.name)
        self.base_local = always_local(self.base.name) or bool(
            self.base_literal and _on_this_host(self.base_literal)
        )
        self.hosts: set[str] = set()
        self.host_ports: set[tuple[str, int]] = set()
        for entry in settings.http_request_allowed_hosts:
            self._allow(str(entry))

    def _allow(self, entry: str) -> None:
        host, port = allowed_host(entry)
        if port is not None:
            self.host_ports.add((host, port))
        elif host:
            self.hosts.add(host)

    def is_own(self, target: Target, address: IPAddress | None = None) -> bool:
        """Whether ``target`` (connecting to ``address``, once resolved) is Jobdesk itself: its own name
        and port under either scheme, or its port at its own literal address, or — when Jobdesk is on
        this machine — its port at any loopback address or under ``localhost`` (or a name under it),
        which reach the same server whatever the base URL calls it. (Being Jobdesk restricts the paths;
        only the base URL's own scheme, name and port may reach a loopback address, :meth:`exempt`.)"""
        if target.port != self.base.port:
            return False
        if target.name == self.base.name:
            return True
        for candidate in (_literal(target.name), address):
            if candidate is None:
                continue
            if candidate == self.base_literal or (self.base_local and _on_this_host(candidate)):
                return True
        return self.base_local and always_local(target.name)

    def own_page_problem(self, target: Target, path: str, address: IPAddress | None = None) -> str | None:
        """Why a request to ``path`` (percent-decoded) at ``target`` may not be sent, or ``None``: at
        Jobdesk's own address only the JSON API, static files and health checks (:data:`OWN_OPEN_PATHS`)
        may be requested."""
        if not self.is_own(target, address) or _open_path(path):
            return None
        return (
            f"{host_port(target.host, target.port)} is Jobdesk itself; jobs may call only its JSON API there "
            f"(addresses starting with {OWN_API_PREFIX}, with an Authorization: Bearer token), its "
            f"/static/ files, /healthz and /readyz, not its pages or forms ({path[:100] or '/'})."
        )

    def refuse_own_page(self, target: Target, path: str, addresses: list[IPAddress] | None = None) -> None:
        """Raise if ``path`` at ``target`` (by its name, or at any of ``addresses``) is one of Jobdesk's
        own pages (:meth:`own_page_problem`).

        Raises:
            PermanentError: saying why.
        """
        for address in [None, *(addresses or [])]:
            problem = self.own_page_problem(target, path, address)
            if problem:
                raise PermanentError(problem)

    def problem_before_resolving(self, target: Target, path: str) -> str | None:
        """Why a request to ``path`` (percent-decoded) at ``target`` may not be sent, as far as it is
        known without asking a resolver, or ``None``: :func:`target_problem`, :meth:`own_page_problem`,
        and :meth:`address_problem` for the address the host is known to reach (:func:`known_address`:
        a literal, or loopback for ``localhost``). The one check of a URL at submission
        (:meth:`check_url`) and of each request when the job runs (:meth:`refuse_before_resolving`),
        so that a URL refused by one is refused by the other in the same words."""
        unusable = target_problem(target)
        if unusable:
            return unusable[0].upper() + unusable[1:] + "."
        known = known_address(target.name)
        problem = self.own_page_problem(target, path, known)
        return problem or (self.address_problem(target, known) if known is not None else None)

    def refuse_before_resolving(self, target: Target, path: str) -> None:
        """Raise if :meth:`problem_before_resolving` finds a problem: the job fails at once, without
        asking the resolver, and is not retried (no attempt can do better).

        Raises:
            PermanentError: saying why.
        """
        problem = self.problem_before_resolving(target, path)
        if problem:
            raise PermanentError(problem)

    def check_url(self, url: str) -> str | None:
        """Why a URL known before anything is resolved (at submission) may not be requested, or
        ``None`` (:meth:`problem_before_resolving`). Any other host name is checked when it is
        resolved, at each attempt: what it resolves to may change."""
        import httpx  # here, not at the top: see the module docstring

        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, ValueError):
            return None  # the input's own checks say what is wrong with it
        # ``raw_host``: ``host`` decodes the name's IDNA and raises on a malformed one (``xn--``),
        # which is for :func:`target_problem` to refuse in words.
        if parsed.scheme not in DEFAULT_PORTS or not parsed.raw_host:
            return None
        return self.problem_before_resolving(Target.of(parsed), parsed.path)

    def exempt(self, target: Target) -> bool:
        """Whether ``target`` may reach a local or private address."""
        return (
            self.allow_private
            # By name: ``127.0.0.1.`` and ``jobs.example.com.`` are the base URL's host as it is written.
            or (target.scheme, target.name, target.port) == (self.base.scheme, self.base.name, self.base.port)
            or target.name in self.hosts
            or (target.name, target.port) in self.host_ports
        )

    def choose(self, target: Target, addresses: list[IPAddress], path: str | None = None) -> IPAddress:
        """The address to connect to for ``target``, out of those its host resolved to, for a request
        to ``path`` (percent-decoded; ``None``: the address alone is checked).

        Raises:
            PermanentError: one of the addresses is not public and ``target`` is not exempt, or the
                request goes to one of Jobdesk's own pages (:meth:`own_page_problem`).
        """
        if path is not None:
            self.refuse_own_page(target, path, addresses)
        for address in addresses:
            problem = self.address_problem(target, address)
            if problem:
                raise PermanentError(problem)
        return addresses[0]

    def address_problem(self, target: Target, address: IPAddress) -> str | None:
        """Why ``target`` may not connect to ``address``, or ``None``: an address that is not public
        (:func:`is_public`) unless ``target`` is :meth:`exempt`. The one rule for an address literal
        at submission (:meth:`check_url`) and for every address a name resolves to when the job runs
        (:meth:`choose`)."""
        if is_public(address) or self.exempt(target):
            return None
        host = url_host(target.host)
        said = f"{host} is" if _literal(target.name) == address else f"{host} is {address},"
        return (
            f"{said} a local or private address that jobs may not reach "
            f"(port {target.port}). An admin can allow it with HTTP_REQUEST_ALLOWED_HOSTS."
        )


@functools.lru_cache(maxsize=8)
def _policy(allow_private: bool, base_url: str, allowed_hosts: tuple[str, ...]) -> AddressPolicy:
    return AddressPolicy(
        SimpleNamespace(
            http_request_allow_private=allow_private,
            jobdesk_base_url=base_url,
            http_request_allowed_hosts=allowed_hosts,
        )
    )
