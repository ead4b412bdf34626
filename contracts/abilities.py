"""What a cluster can do for the fault injectors, one small protocol each.

As in Jepsen's core (DB, Process, Pause, Net), an ability is a protocol; a
cluster says which it implements in `abilities` (harness/backends: each
backend's ABILITIES), and an injector says which it needs in `NEEDS`
(faults/injectors). A fault a cluster cannot do is refused from those two
declarations, never found out by probing for attributes. Every cluster
offers `Cluster`; the others are optional.

A need is one ability, or a tuple of abilities any one of which will do
(a network partition needs iptables inside the nodes or the proxy).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Collection, Protocol, Union

Need = Union[type, tuple[type, ...]]


class Node(Protocol):
    """One node as the cluster reports it now."""
    name: str               # broker-1, zk-1, ...
    kind: str               # "broker", "zookeeper", ...
    state: str              # "running", "stopped" or "paused"


class NodeNames(Protocol):
    def node_names(self) -> list[str]: ...


class Cluster(Protocol):
    """What every cluster offers: its nodes, and the abilities it implements."""
    spec: NodeNames

    @property
    def abilities(self) -> frozenset[type]: ...

    def nodes(self) -> list[Node]: ...

    def node(self, name: str) -> Node: ...


class ProcessControl(Protocol):
    """Kill (SIGKILL), stop (SIGTERM: a broker's controlled shutdown) and start nodes."""

    def kill_node(self, name: str) -> None: ...

    def stop_node(self, name: str, timeout: float = 30.0) -> None: ...

    def start_node(self, name: str) -> None: ...


class PauseResume(Protocol):
    """Freeze a node without its noticing (SIGSTOP, docker pause), and thaw it."""

    def pause_node(self, name: str) -> None: ...

    def resume_node(self, name: str) -> None: ...


class NodeNetwork(Protocol):
    """Each node has a network namespace of its own to run iptables in."""

    def exec(self, name: str, argv: list[str]) -> tuple[int, str]:
        """(exit code, output) of `argv` inside the node."""

    def node_ip(self, name: str) -> str: ...


class Link(Protocol):
    """One directed connection through the proxy (`client` or a node -> a node)."""
    src: str
    dst: str
    proxy_name: str


class ProxiedLinks(Protocol):
    """Connections between nodes (and from clients) run through the
    Toxiproxy-compatible proxy, one proxy per directed link."""

    def proxied_links(self) -> list[Link]: ...

    def proxy_client(self) -> Any:
        """A toxiproxy-python client of the cluster's proxy."""


class ZooKeeperAccess(Protocol):
    """The cluster keeps its metadata in a ZooKeeper of its own nodes, in the
    layout of cluster.zkpaths, which the harness reads and writes."""

    @property
    def zookeeper_connect(self) -> str: ...

    @property
    def coordination(self) -> str:
        """`controller` or `v2` (docs/design.md#v2): who carries admin operations out."""

    def zookeeper_mode(self, name: str) -> str | None:
        """`leader`, `follower` or `standalone` of a serving ZooKeeper node, else None."""


class NodeFiles(Protocol):
    """A broker's files are reachable from this machine (disk faults, session files)."""

    def log_dir(self, name: str) -> Path: ...


class KafkaMetadata(Protocol):
    """What a Kafka client can learn: addresses, Metadata, coordinators."""

    @property
    def bootstrap_servers(self) -> str: ...

    def kafka_metadata(self, topics: list[str] | None = None) -> Any:
        """A Metadata answer: brokers (id -> address), controller, partitions."""

    def group_coordinator(self, group: str) -> int: ...

    def broker_live(self, name: str) -> bool:
        """Whether the cluster counts the broker as live (answers, and is listed)."""


class Recorder(Protocol):
    """Where a fault's start and stop are written (harness.history.HistoryRecorder)."""

    @property
    def closed(self) -> bool: ...

    def nemesis(self, fault: str, phase: str, targets: list[str] | tuple[str, ...] = (),
                detail: str | None = None) -> Any: ...


ABILITIES: tuple[type, ...] = (ProcessControl, PauseResume, NodeNetwork, ProxiedLinks,
                               ZooKeeperAccess, NodeFiles, KafkaMetadata)

# A network partition's need: iptables inside the nodes, or the proxy.
NETWORK: Need = (NodeNetwork, ProxiedLinks)


def met(need: Need, abilities: Collection[type]) -> bool:
    """Whether `abilities` meet one need (an ability, or any of a tuple of them)."""
    return any(a in abilities for a in (need if isinstance(need, tuple) else (need,)))


def missing(needs: Collection[Need], abilities: Collection[type]) -> list[Need]:
    """The needs that `abilities` do not meet, in order."""
    return [n for n in needs if not met(n, abilities)]


def can(cluster: Cluster, need: Need) -> bool:
    """Whether `cluster` declares what `need` asks for."""
    return met(need, cluster.abilities)
