"""This machine, as the harness uses it: chaoslog's home directory (state
files of clusters and hand-applied faults) and free loopback ports.

It sits below the backends, the reaper and the ZooKeeper launcher, which all
need these and must not import each other for them."""
from __future__ import annotations

import os
import socket
from pathlib import Path


def chaoslog_home() -> Path:
    """$CHAOSLOG_HOME, default ~/.chaoslog."""
    return Path(os.environ.get("CHAOSLOG_HOME", Path.home() / ".chaoslog"))


def state_dir() -> Path:
    """Where each cluster's state file lives (`chaoslog cluster up` in one
    process, `chaoslog cluster down` or the reaper in another)."""
    return chaoslog_home() / "clusters"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
