"""Asking a ZooKeeper server how it is, with its four-letter words.

`srvr` tells whether a server serves and in which mode (leader, follower,
standalone); `ruok` whether it runs at all. The backends use them to know
when ZooKeeper is up, the fault targets to find the ensemble's leader."""
from __future__ import annotations

import socket


def four_letter(host: str, port: int, word: str, timeout: float = 2.0) -> str:
    """Send a four-letter word (srvr, ruok, ...) and return the answer."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(word.encode())
        chunks = []
        while True:
            b = s.recv(4096)
            if not b:
                break
            chunks.append(b)
    return b"".join(chunks).decode(errors="replace")


def zk_mode(host: str, port: int, timeout: float = 2.0) -> str | None:
    """'leader', 'follower' or 'standalone' when the server serves; None
    when it does not answer (down, paused, cut off) or has no quorum."""
    try:
        out = four_letter(host, port, "srvr", timeout)
    except OSError:
        return None
    for line in out.splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None
