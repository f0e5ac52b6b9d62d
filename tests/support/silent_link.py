"""A network path that really goes silent, down to TCP: the client's packets are dropped by the kernel,
so nothing acknowledges them (a user-space proxy that stops forwarding cannot do that: its kernel still
acknowledges every byte, and TCP's own timers never fire).

A network namespace joined to this one by a veth pair, with a forwarder inside it; the test connects to
the forwarder, which connects (through a :class:`~tests.support.netproxy.TcpProxy` listening on this
side of the pair) to PostgreSQL. :meth:`SilentLink.cut` takes the namespace's end of the pair down: what
the client sends from then on is dropped without a trace, and no answer comes. Needs root and ``ip``
(the test skips otherwise); everything is removed at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

from sqlalchemy.engine import make_url

from tests.support.netproxy import TcpProxy

FORWARDER = """
import asyncio, sys
listen_host, target_host, target_port = sys.argv[1], sys.argv[2], int(sys.argv[3])
async def pump(r, w):
    try:
        while data := await r.read(65536):
            w.write(data); await w.drain()
    except Exception:
        pass
    finally:
        w.close()
async def handle(r, w):
    ur, uw = await asyncio.open_connection(target_host, target_port)
    await asyncio.gather(pump(r, uw), pump(ur, w))
async def main():
    server = await asyncio.start_server(handle, listen_host, 15432)
    print("ready", flush=True)
    await server.serve_forever()
asyncio.run(main())
"""


def available() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


class SilentLink:
    def __init__(self, target_host: str, target_port: int) -> None:
        n = os.getpid() % 250
        self.ns = f"jdsilent{os.getpid()}"
        self.outer = f"jdso{os.getpid() % 100000}"
        self.inner = f"jdsi{os.getpid() % 100000}"
        self.outer_ip, self.inner_ip = f"10.213.{n}.1", f"10.213.{n}.2"
        self.proxy = TcpProxy(target_host, target_port, listen_host=self.outer_ip)
        self.forwarder: subprocess.Popen[bytes] | None = None

    def start(self) -> SilentLink:
        _ip("netns", "add", self.ns)
        _ip("link", "add", self.outer, "type", "veth", "peer", "name", self.inner)
        _ip("link", "set", self.inner, "netns", self.ns)
        _ip("addr", "add", f"{self.outer_ip}/30", "dev", self.outer)
        _ip("link", "set", self.outer, "up")
        _ip("-n", self.ns, "addr", "add", f"{self.inner_ip}/30", "dev", self.inner)
        _ip("-n", self.ns, "link", "set", self.inner, "up")
        _ip("-n", self.ns, "link", "set", "lo", "up")
        self.proxy.start()
        self.forwarder = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, sys.executable, "-c", FORWARDER]
            + [self.inner_ip, self.outer_ip, str(self.proxy.port)],
            stdout=subprocess.PIPE,
        )
        assert self.forwarder.stdout is not None
        assert self.forwarder.stdout.readline().strip() == b"ready"
        time.sleep(0.1)
        return self

    def url(self, database_url: str) -> str:
        return (
            make_url(database_url).set(host=self.inner_ip, port=15432).render_as_string(hide_password=False)
        )

    def cut(self) -> None:
        """From now on, packets to the forwarder are dropped (and it sends none back)."""
        _ip("-n", self.ns, "link", "set", self.inner, "down")

    def close(self) -> None:
        if self.forwarder is not None:
            self.forwarder.kill()
            self.forwarder.wait(5)
        self.proxy.close()
        subprocess.run(["ip", "link", "del", self.outer], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, timeout=10)
