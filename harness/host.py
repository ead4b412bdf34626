"""This machine, as the harness uses it: chaoslog's home directory (state
files of clusters and hand-applied faults) and free loopback ports.

It sits below the backends, the reaper and the ZooKeeper launcher, which all
need these and must not import each other for them."""
from __future__ import annotations

import os
import random
import socket
from pathlib import Path

# Ports handed out below the kernel's ephemeral range: the range an outgoing
# connection (a client, docker-proxy, ZooKeeper's own sockets) takes its
# local port from. A port picked there can be taken by such a connection
# between free_port() and the server's bind ("address already in use": two
# CI failures). LOWEST_PORT keeps clear of the well-known services below it.
LOWEST_PORT = 20000
_given: set[int] = set()
_pick = random.Random(os.urandom(8))  # not the global random a run seeds


def chaoslog_home() -> Path:
    """$CHAOSLOG_HOME, default ~/.chaoslog."""
    return Path(os.environ.get("CHAOSLOG_HOME", Path.home() / ".chaoslog"))


def state_dir() -> Path:
    """Where each cluster's state file lives (`chaoslog cluster up` in one
    process, `chaoslog cluster down` or the reaper in another)."""
    return chaoslog_home() / "clusters"


def ephemeral_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux's
    default where the file is missing)."""
    try:
        low, high = open(path).read().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, outside the
    ephemeral range, and not handed out before by this process (the caller
    may not have bound it yet)."""
    low, _ = ephemeral_range()
    top = max(low, LOWEST_PORT + 1000)
    for _ in range(200):
        port = _pick.randrange(LOWEST_PORT, top)
        if port not in _given and _bindable(port):
            _given.add(port)
            return port
    raise OSError(f"no free TCP port on 127.0.0.1 in {LOWEST_PORT}-{top - 1} after 200 tries")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
