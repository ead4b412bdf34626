"""Which addresses the proxy may listen on, and the warning when it listens beyond loopback.

The proxy has two kinds of listeners: its HTTP API (whoever reaches it can
inject faults into every proxied link, point a proxy anywhere and read every
proxy's settings) and each proxy's data listener (whoever reaches it
connects through to that proxy's upstream). By default both bind loopback
addresses only (127.0.0.0/8, ::1, a name that resolves to one of them); any
other address, the wildcard ones (``0.0.0.0``, ``::``, an empty host) above
all, is refused before anything is bound. ``--allow-non-loopback``
(``Exposure(allow_non_loopback=True)``) lets them bind, and then each
listener beyond loopback prints one warning line on stderr (the data
listeners one line per address, not one per proxy). ``--bind-reason TEXT``
says why in that line; the docker backend gives one, since inside the proxy
container binding the container's interface is the point (faults/proxy/README.md,
"Control surfaces").
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from typing import Callable

FLAG = "--allow-non-loopback"
DOCS = "faults/proxy/README.md, \"Control surfaces\""

API = "api"
PROXY = "proxy"
# What one who reaches a listener can do, by role: in a refusal (one
# listener, not bound) and in a warning (bound; the data listeners together).
WOULD = {
    API: "anyone who could reach it could inject faults into every proxied link, point "
         "proxies at any address and read their settings",
    PROXY: "anyone who could reach it would connect through it to its upstream",
}
CAN = {
    API: "anyone who can reach it can inject faults into every proxied link, point proxies "
         "at any address and read their settings",
    PROXY: "anyone who can reach them connects through to their upstreams (brokers, ZooKeeper)",
}


def is_loopback(host: str) -> bool:
    """Whether ``host``, an address (not a name), is a loopback address;
    IPv4-mapped IPv6 addresses count as their IPv4 address."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def resolves_to_loopback(host: str) -> bool | None:
    """Whether every address ``host`` (an address or a name) resolves to is
    loopback; None when the name does not resolve. An empty host is every
    interface: False."""
    if host == "":
        return False
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return None
    return bool(infos) and all(is_loopback(info[4][0]) for info in infos)


def describe(host: str) -> str:
    """``host`` as a warning names it: the wildcard addresses say so."""
    if host == "":
        return "every interface"
    if host == "::":
        return "[::] (every interface)"
    if host == "0.0.0.0":
        return "0.0.0.0 (every IPv4 interface)"
    return f"[{host}]" if ":" in host else host


def _wildcard(host: str) -> str:
    return {"::": " (every interface)", "0.0.0.0": " (every IPv4 interface)"}.get(host, "")


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Exposure:
    """The bind policy of one proxy server: loopback only unless
    ``allow_non_loopback``; ``warn`` (one line on stderr by default) is told
    of every role and address bound beyond loopback, once each."""

    def __init__(self, allow_non_loopback: bool = False, reason: str = "",
                 warn: Callable[[str], None] | None = None):
        if reason and not allow_non_loopback:
            raise ValueError("a bind reason without allow_non_loopback")
        self.allow_non_loopback = allow_non_loopback
        self.reason = reason
        self._warn = warn or _to_stderr
        self._warned: set[tuple[str, str]] = set()

    def refusal(self, role: str, host: str) -> str | None:
        """None if a listener of ``role`` may bind ``host`` (the address about
        to be bound), else the reason it may not (one line)."""
        if self.allow_non_loopback or is_loopback(host):
            return None
        what = "the proxy's API" if role == API else "a proxy listener"
        return (f"{describe(host)} is not a loopback address, and {what} binds loopback only: "
                f"{WOULD[role]}; "
                f"start the proxy with {FLAG} to bind it anyway ({DOCS})")

    def bound(self, role: str, address: str, host: str, name: str = "") -> None:
        """Warn that a listener of ``role`` bound ``address`` (host ``host``)
        beyond loopback, once per role and host."""
        if is_loopback(host) or (role, host) in self._warned:
            return
        self._warned.add((role, host))
        if role == API:
            what = f"the fault proxy's API listens on {address}{_wildcard(host)}"
        else:
            first = f" (first {name} on {address})" if name else f" ({address})"
            what = f"proxy listeners bind {describe(host)}{first}"
        why = f"{FLAG}: {self.reason}" if self.reason else FLAG
        self._warn(f"chaoslog proxy: WARNING: {what}, not loopback: {CAN[role]} "
                   f"[{why}]")
