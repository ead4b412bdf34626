"""The one Cluster interface every target implements: the built-in broker on
the docker and local backends, tansu, an external cluster (docs/targets.md).

The built-in cluster is ZooKeeper (one node or a three-node ensemble) plus N
brokers. Nodes are named `zk-1`.. and `broker-1`..; broker `broker-N` has
broker.id N. The harness knows a broker only as "a process with a config
file, listening on a port, registering in ZooKeeper": it never reaches into
broker internals. A target without a ZooKeeper the harness reads is known
through the Kafka protocol alone (`kafka_metadata`, `broker_live`).

Each backend declares in ABILITIES which protocols of contracts/abilities.py
it implements; the fault injectors' NEEDS are checked against them, and
`refuses` says which faults it cannot run, from that declaration.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, TypeVar

from cluster import modes
from cluster.coordination import Coordination
from cluster.protocol.sasl import SECURITY_PROTOCOLS
from contracts.abilities import ProxiedLinks, ZooKeeperAccess
from harness.zk_probe import zk_mode

BROKER = "broker"
ZOOKEEPER = "zookeeper"

T = TypeVar("T")

RUNNING = "running"
STOPPED = "stopped"
PAUSED = "paused"


def coordination_of(broker_config: dict) -> Coordination:
    """The coordination mode a built-in broker config asks for
    (docs/design.md#coordination-modes)."""
    return modes.of(str(broker_config.get("coordination", "controller")))


def mode_refusal(mode: Coordination) -> Callable[[str, str | None], str | None] | None:
    """What a coordination mode refuses of the faults (None: nothing)."""
    return None if mode.has_controller else v2_refusal


def v2_refusal(fault: str, target: str | None = None) -> str | None:
    """Why `fault` cannot run against the built-in broker in V2 coordination
    (docs/design.md#v2), which has no controller: nothing to aim at there,
    and a topic re-created waits for every replica to take its
    start-replica, so with a broker down the run's topic would stay deleted.
    A recipe is judged by the faults it is made of."""
    from faults.recipes import faults_of
    if (target or "").partition(":")[0] == "controller":
        return f"V2 coordination cannot run {fault} at the controller: it has none"
    if "recreate-topic" in faults_of([fault]):
        return (f"V2 coordination cannot run {fault}: a V2 topic creation waits for every "
                "replica, so with a broker down the run's topic would stay deleted")
    return None


class ClusterError(RuntimeError):
    """Something about a cluster cannot be done; the message says what to do."""


# Harness hooks every built-in broker the harness starts gets (a spec's
# broker_config may still turn them off).
HARNESS_BROKER_CONFIG = {"chaoslog.state.window.enable": True}


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
    # The built-in brokers' listener: PLAINTEXT, SSL, SASL_PLAINTEXT or
    # SASL_SSL (harness/backends/secure_cluster.py makes what it needs).
    security: str = "PLAINTEXT"

    def validate(self) -> None:
        if self.brokers < 0:  # 0: ZooKeeper alone (the `zookeeper` fixture)
            raise ClusterError(f"the number of brokers cannot be negative ({self.brokers})")
        if self.zookeepers not in (1, 3):
            raise ClusterError(f"ZooKeeper runs as 1 node or a 3-node ensemble, not {self.zookeepers}")
        if self.security not in SECURITY_PROTOCOLS:
            raise ClusterError(f"security {self.security!r}: use one of {', '.join(SECURITY_PROTOCOLS)}")
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


def ask_first(addresses: list[tuple[str, str, int]], request: Callable[[Any], T],
              timeout: float = 5.0, *, nobody: str = "no broker answers", hint: str = "",
              security: Any = None) -> T:
    """`request(conn)` (conn: a harness.kafka_wire.KafkaConnection) on the
    first of `addresses` ((label, host, port) each) that answers: a failed
    connection or a WireError from `request` moves on to the next.
    ClusterError `nobody`, each address's failure and `hint` when none answers."""
    from harness import kafka_wire
    errors = []
    for label, host, port in addresses:
        try:
            conn = kafka_wire.KafkaConnection(host, port, client_id="chaoslog-harness",
                                              timeout=timeout, security=security)
            try:
                return request(conn)
            finally:
                conn.close()
        except (OSError, kafka_wire.WireError) as e:
            errors.append(f"{label}: {e}")
    raise ClusterError(nobody + (f" ({'; '.join(errors)})" if errors else ": none is running")
                       + hint)


def broker_id_of(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


class Cluster(abc.ABC):
    """A running (or startable) cluster. All node operations take node names."""

    backend: str = "?"
    # Which broker runs: the built-in one, or another Kafka-protocol system.
    system: str = "chaoslog"
    # Workload workers are processes of this machine (not containers).
    local_workers: bool = False
    # Whether the brokers keep replicas of their own (a replication factor
    # above 1 means something); tansu's brokers share one storage instead.
    keeps_replicas: bool = True
    # What the backend implements of contracts/abilities.py (ProxiedLinks:
    # when started with proxied links).
    ABILITIES: ClassVar[frozenset[type]] = frozenset()

    # What the harness's own clients connect with (harness/security.py):
    # None for a PLAINTEXT cluster.
    client_security: Any = None

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

    @property
    def abilities(self) -> frozenset[type]:
        """What this cluster implements of contracts/abilities.py: its
        backend's ABILITIES, the proxied links only when it was started with them."""
        if self.spec.proxied:
            return self.ABILITIES
        return self.ABILITIES - {ProxiedLinks}

    @property
    def has_zookeeper(self) -> bool:
        """Whether this cluster keeps its metadata in a ZooKeeper the harness
        reads (roles, registrations, recovery). Without it the harness asks
        the brokers through the Kafka protocol (`kafka_metadata`)."""
        return ZooKeeperAccess in self.abilities

    @property
    def has_state_window(self) -> bool:
        """Whether the brokers answer the built-in broker's test-only state
        window (docs/architecture.md, "State window"): the harness's own
        clusters of the built-in broker turn it on (HARNESS_BROKER_CONFIG);
        a system nobody here wrote has none."""
        return False

    @property
    def coordination(self) -> str:
        """The brokers' coordination mode's name (cluster.modes,
        docs/design.md#coordination-modes): admin faults ask the controller
        or the leaders."""
        return coordination_of(self.spec.broker_config).name

    def refuses(self, fault: str, target: str | None = None) -> str | None:
        """Why `fault` of the catalogue (or a recipe: the faults it is made
        of), aimed at `target`, cannot run against this cluster, or None. A
        run refuses such a fault before it starts; it never skips it. A
        fault is refused when its injector needs an ability this cluster
        does not declare; also what its coordination mode refuses
        (`mode_refusal`)."""
        from faults.injectors import why_not
        from faults.recipes import faults_of
        for f in sorted(faults_of([fault])):
            why = why_not(f, self.abilities)
            if why:
                return why
        by_mode = mode_refusal(coordination_of(self.spec.broker_config))
        return by_mode(fault, target) if by_mode else None

    # --- the Kafka protocol's view -------------------------------------
    def ask(self, request: Callable[[Any], T], names: list[str] | None = None,
            timeout: float = 5.0) -> T:
        """`request(conn)` on the first of the running brokers `names`
        (default: all) that answers (`ask_first`)."""
        running = [(n.name, n.host, n.port) for n in self.brokers()
                   if (names is None or n.name in names) and n.state == RUNNING and n.host]
        return ask_first(running, request, timeout, security=self.client_security)

    def kafka_metadata(self, topics: list[str] | None = None) -> Any:
        """A Metadata answer (harness.kafka_wire.ClusterMetadata) as a Kafka
        client sees it: live brokers, the controller, each partition's
        leader, ISR and replicas. Where there is no ZooKeeper to read, roles
        and recovery come from here."""
        from harness import kafka_wire
        return self.ask(lambda conn: kafka_wire.metadata(conn, topics))

    def group_coordinator(self, group: str) -> int:
        """The broker id coordinating consumer group `group` (FindCoordinator)."""
        from harness import kafka_wire

        def find(conn: Any) -> int:
            error, node_id, _, _ = kafka_wire.find_coordinator(conn, group)
            if error:
                raise kafka_wire.WireError(f"FindCoordinator: error {error}")
            return node_id
        return self.ask(find)

    def answers(self, name: str, timeout: float = 3.0) -> bool:
        """Whether broker `name` answers a Metadata request itself now."""
        from harness import kafka_wire
        try:
            self.ask(lambda conn: kafka_wire.metadata(conn, []), [name], timeout)
            return True
        except ClusterError:
            return False

    def broker_live(self, name: str) -> bool:
        """For a cluster without ZooKeeper: whether it counts broker `name` as
        live now, as its registration in ZooKeeper would say: the broker
        answers Metadata itself, and the brokers' Metadata lists it."""
        if not self.answers(name):
            return False
        try:
            return broker_id_of(name) in self.kafka_metadata([]).brokers
        except ClusterError:
            return False

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
        out = {"name": self.spec.name, "backend": self.backend, "system": self.system,
               "bootstrap_servers": self.bootstrap_servers,
               "zookeeper": self.zookeeper_connect,
               "nodes": {n.name: n.to_json() for n in self.nodes()}}
        if self.client_security is not None:   # how to connect: the password's file, not it
            out["client"] = self.client_security.to_json()
        return out

    def __enter__(self) -> "Cluster":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.destroy()
