"""What the cluster's processes hold over a run: `resources` observations.

A broker that leaks memory, file descriptors or threads, or a ZooKeeper whose
watch count only grows, passes a two-minute test and fails a night. Every
`period_s` the sampler reads, for each node whose process this host can see
(Cluster.host_pid: a local process, or a container's main process), its
resident memory, open file descriptors and threads from /proc, and asks each
ZooKeeper server for its watch count (`zk_watch_count` of the `mntr`
four-letter word: data and child watches; `wchs` counts data watches only). The
report plots them; flat lines over a long run are the soak's verdict
(docs/history-format.md, "observations.jsonl").

A node that is down, paused or cut off is left out of that sample: a gap,
never a made-up value.
"""
from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any

from harness.observer import Observations, PeriodicSampler

PERIOD_S = 10.0
ZK_TIMEOUT_S = 2.0
_WATCHES = re.compile(rb"^zk_watch_count\s+(\d+)", re.M)


def process_sample(pid: int | None) -> dict[str, int] | None:
    """{rss_kb, fds, threads} of a live process, or None."""
    if not pid:
        return None
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    try:
        return {"rss_kb": int(fields["VmRSS"].split()[0]), "fds": fds,
                "threads": int(fields["Threads"])}
    except (KeyError, ValueError, IndexError):
        return None   # a zombie has no VmRSS


def rss_kb(pid: int | None) -> int | None:
    sample = process_sample(pid)
    return sample["rss_kb"] if sample else None


def zk_watches(host: str, port: int, timeout: float = ZK_TIMEOUT_S) -> int | None:
    """The server's watch count, data and child watches (`mntr`), or None
    when it does not answer."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"mntr")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
    except OSError:
        return None
    m = _WATCHES.search(data)
    return int(m.group(1)) if m else None


def _servers(connect: str) -> list[tuple[str, int]]:
    out = []
    for part in connect.split("/", 1)[0].split(","):
        host, _, port = part.strip().rpartition(":")
        if host and port.isdigit():
            out.append((host, int(port)))
    return out


class ResourceSampler(PeriodicSampler):
    """A `resources` observation every `period_s` while running:
    `nodes` {name: {rss_kb, fds, threads}} and `zk_watches` (the sum over the
    servers that answered; null when none did)."""

    def __init__(self, cluster: Any, observations: Observations, period_s: float = PERIOD_S):
        super().__init__("resource-sampler", period_s)
        self.cluster = cluster
        self.observations = observations

    def sample(self) -> dict[str, Any] | None:
        t = self.observations.clock()
        nodes: dict[str, dict[str, int]] = {}
        for name in self.cluster.spec.node_names():
            try:
                got = process_sample(self.cluster.host_pid(name))
            except Exception:  # noqa: BLE001 - the backend could not tell: a gap
                got = None
            if got is not None:
                nodes[name] = got
        counts = [zk_watches(h, p) for h, p in _servers(self.cluster.zookeeper_connect)]
        known = [c for c in counts if c is not None]
        if not nodes and not known:
            return None
        self.samples += 1
        return self.observations.write("resources", time=t, nodes=nodes,
                                       zk_watches=sum(known) if known else None)
