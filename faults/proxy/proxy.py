"""A proxy: one listening address, one upstream, its toxics and live connections.

State changes follow Toxiproxy's ``Proxy``: ``start`` binds the listen
address and then reports the address actually bound (so ``127.0.0.1:0``
becomes ``127.0.0.1:<port>`` and a later re-enable binds the same port);
``stop`` closes the listener and every connection; ``update`` restarts the
proxy when listen or upstream change.

All methods run on the server's event loop; the toxic edits are synchronous,
so a connection is either built before an edit (and then edited) or after it.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from .exposure import PROXY, Exposure
from .link import Connection
from .toxics import STREAMS, ToxicSpec

LOOPBACK_ONLY = Exposure()


class ListenError(OSError):
    """The listen address cannot be parsed or bound; ``reason`` says why."""

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = reason or message


def split_host_port(address: Any) -> tuple[str, int]:
    """Parse ``host:port`` / ``[v6]:port`` as Go's net.SplitHostPort does."""
    if not isinstance(address, str):
        raise ValueError("address must be a string")
    if address.startswith("["):
        end = address.find("]")
        if end < 0 or address[end + 1:end + 2] != ":":
            raise ValueError(f"address {address}: missing port in address")
        host, port = address[1:end], address[end + 2:]
    else:
        host, sep, port = address.rpartition(":")
        if not sep:
            raise ValueError(f"address {address}: missing port in address")
        if ":" in host:
            raise ValueError(f"address {address}: too many colons in address")
    if not port.isdigit() or int(port) > 65535:
        raise ValueError(f"address {address}: invalid port")
    return host, int(port)


def format_address(sockname: tuple) -> str:
    host, port = sockname[0], sockname[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_listener(address: str, exposure: Exposure = LOOPBACK_ONLY,
                  role: str = PROXY) -> socket.socket:
    """A listening socket for ``address`` (one socket, first resolved address).

    One socket even for names resolving to several addresses, so that port 0
    gives one port to report.  An empty host means every interface, as in
    Go: dual-stack ``[::]`` when the kernel allows it.  An address that is
    not loopback is refused (``ListenError``, before binding) unless
    ``exposure`` allows it (faults/proxy/exposure.py); ``role`` (API or
    PROXY) says what the listener exposes.
    """
    try:
        host, port = split_host_port(address)
    except ValueError as exc:
        raise ListenError(str(exc)) from None
    candidates: list[tuple[int, tuple]] = []
    if host == "":
        if socket.has_ipv6:
            candidates.append((socket.AF_INET6, ("::", port)))
        candidates.append((socket.AF_INET, ("0.0.0.0", port)))
    else:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
        except socket.gaierror as exc:
            raise ListenError(f"listen tcp {address}: {exc.strerror}", exc.strerror) from None
        candidates = [(info[0], info[4]) for info in infos[:1]]
    for _family, sockaddr in candidates:
        refused = exposure.refusal(role, sockaddr[0])
        if refused:
            raise ListenError(f"listen tcp {address}: {refused}", refused)
    error: OSError | None = None
    for family, sockaddr in candidates:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and host == "":
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(sockaddr)
            sock.listen(128)
            sock.setblocking(False)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    reason = (error.strerror or str(error)) if error else "failed"
    raise ListenError(f"listen tcp {address}: {reason}", reason)


class Proxy:
    """A named TCP proxy with its toxic chains (one list per stream)."""

    def __init__(self, name: str, listen: str, upstream: str,
                 exposure: Exposure = LOOPBACK_ONLY):
        self.name = name
        self.exposure = exposure
        self.listen = listen
        self.upstream = upstream
        self.enabled = False
        self.toxics: dict[str, list[ToxicSpec]] = {s: [] for s in STREAMS}
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[Connection] = set()
        self._dialing: set[asyncio.Task] = set()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "toxics": self.toxic_list(),
        }

    # -- listener

    async def start(self) -> None:
        """Bind and accept; no-op when already enabled (Toxiproxy's
        ErrProxyAlreadyStarted is ignored by every caller that matters)."""
        if self.enabled:
            return
        sock = bind_listener(self.listen, self.exposure, PROXY)
        self.listen = format_address(sock.getsockname())
        self.exposure.bound(PROXY, self.listen, sock.getsockname()[0], self.name)
        self._server = await asyncio.start_server(self._accepted, sock=sock)
        self.enabled = True

    def stop(self) -> None:
        """Close the listener (new connections are refused) and every connection."""
        if not self.enabled:
            return
        self.enabled = False
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._dialing):
            task.cancel()
        for conn in list(self._connections):
            conn.kill()

    async def update(self, listen: str, upstream: str, enabled: bool) -> None:
        if listen != self.listen or upstream != self.upstream:
            self.stop()
            self.listen = listen
            self.upstream = upstream
        if enabled and not self.enabled:
            await self.start()
        elif not enabled:
            self.stop()

    def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.get_running_loop().create_task(self._connect(reader, writer))
        self._dialing.add(task)
        task.add_done_callback(self._dialing.discard)

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Dial upstream for a new client; on failure just close the client,
        as Toxiproxy does."""
        try:
            host, port = split_host_port(self.upstream)
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except asyncio.CancelledError:
            writer.transport.abort()
            raise
        except (OSError, ValueError):
            writer.transport.abort()
            return
        if not self.enabled:
            up_writer.transport.abort()
            writer.transport.abort()
            return
        conn = Connection(self.name, (reader, writer), (up_reader, up_writer), self.forget)
        self._connections.add(conn)
        conn.start(self.toxics)

    def forget(self, conn: Connection) -> None:
        self._connections.discard(conn)

    @property
    def connections(self) -> frozenset[Connection]:
        return frozenset(self._connections)

    # -- toxics

    def toxic_list(self) -> list[dict[str, Any]]:
        """Upstream toxics first, then downstream, each in chain order (as Toxiproxy)."""
        return [spec.to_json() for stream in STREAMS for spec in self.toxics[stream]]

    def find_toxic(self, name: str) -> ToxicSpec | None:
        for stream in STREAMS:
            for spec in self.toxics[stream]:
                if spec.name == name:
                    return spec
        return None

    def add_toxic(self, spec: ToxicSpec) -> None:
        self.toxics[spec.stream].append(spec)
        for conn in list(self._connections):
            conn.links[spec.stream].add_stage(spec)

    def update_toxic(self, spec: ToxicSpec) -> None:
        chain = self.toxics[spec.stream]
        for i, old in enumerate(chain):
            if old.name == spec.name:
                chain[i] = spec
        for conn in list(self._connections):
            conn.links[spec.stream].update_stage(spec)

    def remove_toxic(self, name: str) -> None:
        spec = self.find_toxic(name)
        if spec is None:
            return
        self.toxics[spec.stream].remove(spec)
        for conn in list(self._connections):
            conn.links[spec.stream].remove_stage(name)

    def reset_toxics(self) -> None:
        for stream in STREAMS:
            for spec in list(self.toxics[stream]):
                self.remove_toxic(spec.name)
