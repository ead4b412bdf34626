"""ZooKeeper faults: expire a broker's session on demand.

The broker keeps its session id and password in `<log.dirs>/zk-session.json`
(docs/architecture.md). Opening a second client on that session and closing
it makes ZooKeeper end the session: the broker's ephemeral znodes
(/brokers/ids/N, and /controller if it was the controller) vanish within
about 0.1 s and the broker sees its session expire (measured with kazoo 2.11
and ZooKeeper 3.8). Healing
waits until the broker has registered again with a new session.

Pausing or killing ensemble members needs nothing special: zk-pause and
zk-kill are the process injectors aimed at zk-* targets (their roles, such as
zk-leader, are read through the cluster's ZooKeeperAccess).
"""
from __future__ import annotations

import json
from pathlib import Path

from contracts.abilities import NodeFiles, ZooKeeperAccess
from faults.injectors.base import FaultError, Injector, is_broker, wait_registered
from faults.injectors.process import Kill, Pause

SESSION_FILE = "zk-session.json"


def session_file(cluster: NodeFiles, name: str) -> Path:
    return cluster.log_dir(name) / SESSION_FILE


def read_session(cluster: NodeFiles, name: str) -> tuple[int, bytes]:
    path = session_file(cluster, name)
    try:
        d = json.loads(path.read_text())
        return int(d["session_id"]), bytes.fromhex(d["password"])
    except FileNotFoundError:
        raise FaultError(f"{name} has not published its ZooKeeper session ({path} missing)") from None
    except (ValueError, KeyError, TypeError) as e:
        raise FaultError(f"{path}: unreadable session file ({e})") from None


def expire_session(hosts: str, session_id: int, password: bytes, timeout: float = 10.0) -> None:
    """Join the session with a second client, then close it: ZooKeeper ends
    the session for every client holding it."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=timeout)
    try:
        zk.start(timeout=timeout)
    finally:
        zk.stop()
        zk.close()


class ExpireSession(Injector):
    fault = "zk-expire"
    NEEDS = (ZooKeeperAccess, NodeFiles)

    def _resolve(self) -> list[str]:
        names = super()._resolve()
        bad = [n for n in names if not is_broker(n)]
        if bad:
            raise FaultError(f"zk-expire expires a broker's session; {', '.join(bad)} is not a broker")
        return names

    def _start(self) -> None:
        hosts = self.ctx.cluster.zookeeper_connect
        for n in self.targets:
            sid, pw = read_session(self.ctx.cluster, n)
            expire_session(hosts, sid, pw)
            self.notes.append(f"{n} session 0x{sid:x} expired")

    def _stop(self) -> None:
        late = [n for n in self.targets if not wait_registered(self.ctx, n)]
        if late:
            self.notes.append(f"not registered again: {','.join(late)}")


class PauseMember(Pause):
    """zk-pause: freeze a ZooKeeper member (or the single server)."""
    fault = "zk-pause"
    NEEDS = (*Pause.NEEDS, ZooKeeperAccess)


class KillMember(Kill):
    """zk-kill: SIGKILL a ZooKeeper member, restart it on heal."""
    fault = "zk-kill"
    NEEDS = (*Kill.NEEDS, ZooKeeperAccess)
