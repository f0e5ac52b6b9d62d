"""The httpx transport of ``http.request`` jobs and callbacks: each request's host resolved once, its
addresses checked by :class:`~app.processors.addresses.AddressPolicy`, the connection pinned to the chosen
address. Imported when the first request is made (it needs httpx at import, see
:mod:`app.processors.addresses`)."""

from __future__ import annotations

import httpx

from app.formatting import url_host
from app.processors.addresses import DEFAULT_PORTS, AddressPolicy, Resolver, Target, resolve


class PinnedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that resolves each request's host once, lets :class:`AddressPolicy` check the
    addresses, and connects to the chosen address while the request keeps the name (``Host`` header,
    TLS SNI and certificate check). Connections are not kept for reuse, so a connection made for one
    name never carries a request for another."""

    def __init__(self, policy: AddressPolicy, resolver: Resolver | None = None) -> None:
        self._policy = policy
        self._resolver = resolver or resolve
        # No proxy is given, so none is used; the environment still names extra CA certificates
        # (SSL_CERT_FILE / SSL_CERT_DIR).
        self._inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        target = Target.of(request.url)
        if target.scheme not in DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(f"Request URL has an unsupported protocol '{target.scheme}://'.")
        # What submission checks (a host or port no request can reach, Jobdesk's own pages by name, an
        # address literal or localhost) first, in the same words: refused without asking the resolver.
        self._policy.refuse_before_resolving(target, request.url.path)
        try:
            # By the name without a final dot, as every check reads it: the system's resolver does not
            # read ``127.0.0.1.`` as that address.
            addresses = await self._resolver(target.name, target.port)
        except OSError as exc:
            raise httpx.ConnectError(
                f"{url_host(target.host)} cannot be resolved ({exc})", request=request
            ) from None
        if not addresses:
            raise httpx.ConnectError(f"{url_host(target.host)} resolves to no address", request=request)
        address = self._policy.choose(target, addresses, request.url.path)
        extensions = dict(request.extensions)
        if target.scheme == "https" and target.name != str(address):
            # By the name without its final dot, as the Host header below: a TLS server name may not end
            # with a dot (RFC 6066), and certificates name the host without it.
            extensions["sni_hostname"] = target.name
        headers = request.headers
        if target.name != target.host:
            # ``example.com.`` is the same host as ``example.com``; servers route by the name without the
            # dot, and many answer a Host header with it by a 400 or their default site.
            headers = headers.copy()
            port = "" if request.url.port is None else f":{request.url.port}"
            headers["Host"] = f"{target.name}{port}"
        pinned = httpx.Request(
            request.method,
            request.url.copy_with(host=str(address)),
            headers=headers,
            stream=request.stream,
            extensions=extensions,
        )
        return await self._inner.handle_async_request(pinned)

    async def aclose(self) -> None:
        await self._inner.aclose()
