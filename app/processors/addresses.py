"""Where an ``http.request`` job (and a callback) may connect: the target of a request, whether an
address is public, name resolution, and :class:`AddressPolicy` (see :mod:`app.processors.http_request`).

httpx is imported where a URL is parsed, not here: every worker loads this module with the processors
as it starts, and importing httpx (with its command line's rich and click) cost that start 30-50 ms
(``python -X importtime``) before its first claim, for the first request of a job that may never come.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.processors import PermanentError

if TYPE_CHECKING:
    import httpx

DEFAULT_PORTS = {"http": 80, "https": 443}

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
        return cls(scheme, host, url.port or DEFAULT_PORTS.get(scheme, 0))


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

    def __init__(self, settings: Any) -> None:
        self.allow_private = bool(settings.http_request_allow_private)
        import httpx  # here, not at the top: see the module docstring

        self.base = Target.of(httpx.URL(settings.jobdesk_base_url))
        self.hosts: set[str] = set()
        self.host_ports: set[tuple[str, int]] = set()
        for entry in settings.http_request_allowed_hosts:
            self._allow(str(entry).strip().lower())

    def _allow(self, entry: str) -> None:
        if entry.startswith("["):
            host, _, rest = entry[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else ""
        elif entry.count(":") == 1:
            host, _, port = entry.partition(":")
        else:
            host, port = entry, ""
        if port.isdigit():
            self.host_ports.add((host, int(port)))
        elif host:
            self.hosts.add(host)

    def exempt(self, target: Target) -> bool:
        """Whether ``target`` may reach a local or private address."""
        return (
            self.allow_private
            or target == self.base
            or target.host in self.hosts
            or (target.host, target.port) in self.host_ports
        )

    def choose(self, target: Target, addresses: list[IPAddress]) -> IPAddress:
        """The address to connect to for ``target``, out of those its host resolved to.

        Raises:
            PermanentError: one of the addresses is not public and ``target`` is not exempt.
        """
        if not self.exempt(target):
            for address in addresses:
                if not is_public(address):
                    raise PermanentError(
                        f"{target.host} is {address}, a local or private address that jobs may not reach "
                        f"(port {target.port}). An admin can allow it with HTTP_REQUEST_ALLOWED_HOSTS."
                    )
        return addresses[0]
