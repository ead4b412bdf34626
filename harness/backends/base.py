"""The one Cluster interface that both backends (docker, local) implement.

A cluster is ZooKeeper (one node or a three-node ensemble) plus N brokers.
Nodes are named `zk-1`.. and `broker-1`..; broker `broker-N` has broker.id N.
The harness knows a broker only as "a process with a config file, listening
on a port, registering in ZooKeeper": it never reaches into broker internals.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.zk_probe import zk_mode

BROKER = "broker"
ZOOKEEPER = "zookeeper"

RUNNING = "running"
STOPPED = "stopped"
PAUSED = "paused"


class ClusterError(RuntimeError):
    """Something about a cluster cannot be done; the message says what to do."""


@dataclass
class ClusterSpec:
    """What to bring up. `broker_config` applies to every broker."""
    name: str = "chaoslog"
    brokers: int = 3
    zookeepers: int = 1
    broker_config: dict[str, Any] = field(default_factory=dict)
    # Session timeout short enough for chaos tests, long enough for a loaded
    # 2-core machine (Kafka's default is 6 s).
    zk_session_timeout_ms: int = 6000
    # Route broker->broker and broker->ZooKeeper links through the
    # Toxiproxy-compatible proxy so that single links can be cut or degraded.
    proxied: bool = False

    def validate(self) -> None:
        if self.brokers < 0:  # 0: ZooKeeper alone (the `zookeeper` fixture)
            raise ClusterError(f"the number of brokers cannot be negative ({self.brokers})")
        if self.zookeepers not in (1, 3):
            raise ClusterError(f"ZooKeeper runs as 1 node or a 3-node ensemble, not {self.zookeepers}")
        if not self.name or not all(c.isalnum() or c in "-_" for c in self.name):
            raise ClusterError(f"cluster name {self.name!r}: use letters, digits, '-' and '_'")

    def node_names(self) -> list[str]:
        return ([f"zk-{i}" for i in range(1, self.zookeepers + 1)]
                + [f"broker-{i}" for i in range(1, self.brokers + 1)])


@dataclass
class NodeInfo:
    name: str
    kind: str                 # BROKER or ZOOKEEPER
    host: str                 # address clients on this machine use
    port: int
    state: str                # RUNNING, STOPPED or PAUSED
    broker_id: int | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "address": self.address,
                "state": self.state, "broker_id": self.broker_id}


def broker_id_of(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


class Cluster(abc.ABC):
    """A running (or startable) cluster. All node operations take node names."""

    backend: str = "?"

    def __init__(self, spec: ClusterSpec):
        spec.validate()
        self.spec = spec

    # --- whole cluster -------------------------------------------------
    @abc.abstractmethod
    def start(self) -> None:
        """Bring ZooKeeper and every broker up; return when all brokers are registered."""

    @abc.abstractmethod
    def destroy(self) -> None:
        """Remove every process, container, network and file this cluster made."""

    @abc.abstractmethod
    def wait_brokers_registered(self, names: list[str] | None = None,
                                timeout: float = 90.0) -> None:
        """Until the named brokers (default: all) are registered in ZooKeeper."""

    # --- per node ------------------------------------------------------
    @abc.abstractmethod
    def start_node(self, name: str) -> None: ...

    @abc.abstractmethod
    def stop_node(self, name: str, timeout: float = 30.0) -> None:
        """SIGTERM and wait (a broker does a controlled shutdown)."""

    @abc.abstractmethod
    def kill_node(self, name: str) -> None:
        """SIGKILL."""

    @abc.abstractmethod
    def pause_node(self, name: str) -> None:
        """Freeze (docker pause / SIGSTOP): the process does not notice."""

    @abc.abstractmethod
    def resume_node(self, name: str) -> None: ...

    @abc.abstractmethod
    def nodes(self) -> list[NodeInfo]: ...

    def host_pid(self, name: str) -> int | None:
        """The node's main process as this host sees it (its /proc entry, for
        resource samples), or None when it is not running or the backend
        cannot tell."""
        return None

    @abc.abstractmethod
    def logs(self, name: str) -> str: ...

    @abc.abstractmethod
    def data_dir(self, name: str) -> Path:
        """Host path of a node's data directory."""

    def log_dir(self, name: str) -> Path:
        """Host path of a broker's log.dirs: `<data_dir>/logs` on every backend."""
        return Path(self.data_dir(name)) / "logs"

    @abc.abstractmethod
    def start_worker(self, name: str, module_argv: list[str], log_path: Path):
        """Start `python -m *module_argv` as a workload worker beside the cluster
        (a process, or a container on the cluster's network) with its stderr in
        `log_path`; returns a harness.backends.worker.Worker. Removed by destroy()."""

    # --- addresses -----------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.address for n in self.nodes() if n.kind == BROKER)

    @property
    @abc.abstractmethod
    def zookeeper_connect(self) -> str:
        """Connect string usable from this machine (the harness, admin tools)."""

    def node(self, name: str) -> NodeInfo:
        for n in self.nodes():
            if n.name == name:
                return n
        raise ClusterError(f"no node {name!r} in cluster {self.spec.name!r}; "
                           f"nodes are {', '.join(self.spec.node_names())}")

    def zookeeper_mode(self, name: str) -> str | None:
        """'leader', 'follower' or 'standalone' for a ZooKeeper node that
        serves; None when it does not answer."""
        n = self.node(name)
        return zk_mode(n.host, n.port)

    def brokers(self) -> list[NodeInfo]:
        return [n for n in self.nodes() if n.kind == BROKER]

    def describe(self) -> dict[str, Any]:
        return {"name": self.spec.name, "backend": self.backend,
                "bootstrap_servers": self.bootstrap_servers,
                "zookeeper": self.zookeeper_connect,
                "nodes": {n.name: n.to_json() for n in self.nodes()}}

    def __enter__(self) -> "Cluster":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.destroy()
