"""The tansu target: tansu brokers over one PostgreSQL, in containers.

tansu (https://tansu.io, crates.io `tansu`) is a Kafka-protocol broker in
Rust that keeps no log of its own: every broker is stateless and reads and
writes one storage engine. With the PostgreSQL engine several brokers share
one database and so serve one cluster; that is the shape built here:

  postgres-1            PostgreSQL 17 from Debian's packages (the storage;
                        tansu 0.6.0 needs 16 or later)
  broker-1 .. broker-N  `tansu broker`, each advertising its container address

from the `chaoslog-tansu` and `chaoslog-tansu-postgres` images (`chaoslog
images --target tansu`; see harness/images.py), on a private bridge network,
with chaoslog's labels so that what a killed session leaves is reaped like
any docker cluster's. The
container plumbing (node operations, logs, workers, exec for iptables) is
the docker backend's, so kill/stop/start/pause/resume, `exec` and `node_ip`
behave exactly as they do there; `backend` is therefore "docker" and
`system` says which broker runs.

What differs from the built-in broker, and what a run must therefore refuse
(`refuses`), follows from tansu's design, not from this harness:
- no ZooKeeper: no zk-* faults, no ZooKeeper-read oracles or recovery checks,
  and no role targets read from ZooKeeper (leader, follower, controller ...);
- no replicas and no leaders of its own: tansu 0.6.0 answers Metadata with
  one broker, node 111, at the address of the node asked, leading every
  partition (`metadata_view`). "The leader" of a partition is whichever
  node a client talks to, so leader-aimed faults have no meaning here;
- no replica files: the records are rows in PostgreSQL, so no disk faults;
- no admin operations on placement (reassignment, elections).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from contracts.abilities import (KafkaMetadata, NodeFiles, NodeNetwork, PauseResume,
                                 ProcessControl, ProxiedLinks, ZooKeeperAccess)
from harness.backends.base import (BROKER, PAUSED, RUNNING, STOPPED, ClusterError, ClusterSpec,
                                   NodeInfo, broker_id_of)
from harness.backends.docker import DockerCluster
from harness.backends.worker import DockerWorker

SYSTEM = "tansu"
KAFKA_PORT = 9092
PG_PORT = 5432
STORAGE = "storage"                 # NodeInfo.kind of the PostgreSQL node
POSTGRES = "postgres-1"
CLUSTER_ID = "chaoslog"
START_TIMEOUT = 90.0
PG_ISREADY = "$(ls -d /usr/lib/postgresql/*/bin | tail -n 1)/pg_isready -q -h 127.0.0.1 -U postgres"

# Why tansu lacks the abilities (contracts/abilities.py) some faults need:
# a fault whose injector needs one of them is refused with its reason.
LACKS = {
    ZooKeeperAccess: "tansu has no ZooKeeper",
    NodeFiles: "tansu nodes keep no replica files: every record is a row in PostgreSQL",
    ProxiedLinks: "the tansu target does not route its links through the proxy (no proxied cluster)",
}
NO_PLACEMENT = ("tansu 0.6.0 has no replica placement to act on (every node serves every "
                "partition from PostgreSQL): no preferred election, move or reassignment")
# Faults refused for what its abilities do not say, or with a closer reason.
REFUSED_FAULTS = {
    "elect-preferred": NO_PLACEMENT, "move-leader": NO_PLACEMENT, "reassign": NO_PLACEMENT,
    "partition-zk": "tansu has no ZooKeeper",
    "add-partitions": ("the injector adds the partition in ZooKeeper and waits for its leader "
                       "there (faults/injectors/admin.py, cluster.admin)"),
    "recreate-topic": ("the injector reads the topic's assignment and deletion in ZooKeeper "
                       "(faults/injectors/admin.py, cluster.admin)"),
    "hard-bounce": ("each round waits until the cluster stops listing the killed broker, and "
                    "tansu lists only node 111"),
    "clean-bounce": ("each round waits until the cluster stops listing the killed broker, and "
                     "tansu lists only node 111"),
}
# Role targets read from Metadata (faults/targets.py MetadataRoles), where
# tansu names node 111 for every role, and ZooKeeper's.
METADATA_ROLES = ("controller", "leader", "follower", "out-of-isr", "coordinator", "live",
                  "zk-leader", "zk-follower", "zk-random", "zk-all")


def refusal(fault: str, target: str | None = None) -> str | None:
    """Why fault `fault` of the catalogue (aimed at `target`, a role or a node
    name) cannot run against tansu, or None if it can. The message names the
    target system and the fault: a run must refuse such a fault before it
    starts, never skip it. An unknown fault is the catalogue's FaultError."""
    from faults.injectors import lacking, why_not
    lacks = lacking(fault, TansuCluster.ABILITIES)
    why = REFUSED_FAULTS.get(fault)
    if why is None and lacks:
        why = LACKS.get(lacks[0]) or why_not(fault, TansuCluster.ABILITIES)
    role = (target or "").partition(":")[0]
    if why is None and role in METADATA_ROLES:
        why = (f"target {target!r}: tansu's Metadata names node 111, the node asked, for "
               "every role, and tansu has no ZooKeeper")
    return None if why is None else f"the tansu target cannot run {fault}: {why}"


@dataclass
class TansuSpec(ClusterSpec):
    """N tansu brokers and their PostgreSQL. No ZooKeeper, no broker config
    (tansu takes its settings on the command line: this target sets them),
    no proxied links."""
    zookeepers: int = 0
    storage: str = "postgres"

    def validate(self) -> None:
        if self.brokers < 1:
            raise ClusterError(f"a tansu cluster needs at least one broker, not {self.brokers}")
        if self.zookeepers:
            raise ClusterError("tansu has no ZooKeeper: zookeepers must be 0")
        if self.storage != "postgres":
            raise ClusterError(f"tansu storage {self.storage!r}: this target builds only "
                               "'postgres' (shared by all brokers)")
        if self.broker_config:
            raise ClusterError("tansu brokers take no chaoslog broker config "
                               f"({', '.join(sorted(self.broker_config))})")
        if self.proxied:
            raise ClusterError("the tansu target has no proxied links")
        if not self.name or not all(c.isalnum() or c in "-_" for c in self.name):
            raise ClusterError(f"cluster name {self.name!r}: use letters, digits, '-' and '_'")

    def node_names(self) -> list[str]:
        return [POSTGRES] + [f"broker-{i}" for i in range(1, self.brokers + 1)]


class TansuCluster(DockerCluster):
    """A started tansu cluster: `start()` brings PostgreSQL up, then the
    brokers, and returns when every broker answers Metadata; `destroy()`
    removes every container and the network, also after a failed start."""

    system = SYSTEM
    has_state_window = False   # tansu's brokers have no such window
    keeps_replicas = False
    # The docker backend's node plumbing; no ZooKeeper, no replica files, no proxy.
    ABILITIES = frozenset({ProcessControl, PauseResume, NodeNetwork, KafkaMetadata})

    def __init__(self, spec: TansuSpec | None = None, **kwargs: Any):
        super().__init__(spec or TansuSpec(name="tansu"), **kwargs)
        self.image: str | None = None
        self.worker_image: str | None = None

    # --- what this target can do ---------------------------------------
    def refuses(self, fault: str, target: str | None = None) -> str | None:
        """Why `fault` aimed at `target` cannot run against this cluster (see
        `refusal`), or None."""
        return refusal(fault, target)

    # --- lifecycle -----------------------------------------------------
    def start(self) -> None:
        from harness.images import TANSU_BUILD_HINT, ensure_images, tansu_image_built, tansu_tags
        from testcontainers.core.network import Network
        t0 = time.monotonic()
        tags = tansu_tags()
        if not tansu_image_built():
            raise ClusterError(f"the tansu images ({tags.tansu}, {tags.postgres}) are not "
                               f"built: run `{TANSU_BUILD_HINT}` (compiles tansu, many "
                               "minutes the first time)")
        self.image = tags.tansu
        # Workload workers run in the broker image: it holds the Kafka clients.
        self.worker_image = ensure_images().broker
        try:
            net = Network(docker_network_kw={"labels": self.labels(), "driver": "bridge"})
            net.name = self.network_name
            self.network = net.create()
            self.containers[POSTGRES] = self._container(
                POSTGRES, tags.postgres, [POSTGRES], cap_add=["NET_ADMIN"], init=True)
            self._wait_postgres()
            brokers = [n for n in self.spec.node_names() if n.startswith("broker-")]
            for name in brokers:
                self._run_broker(name)
            self.wait_brokers_registered(brokers)
        except BaseException:
            self.destroy()
            raise
        self.startup_seconds = time.monotonic() - t0

    def _run_broker(self, name: str) -> None:
        (self.base_dir / name).mkdir(parents=True, exist_ok=True)
        self.containers[name] = self._container(
            name, self.image, [name], cap_add=["NET_ADMIN"], init=True,
            env={"CLUSTER_ID": CLUSTER_ID, "RUST_LOG": "warn",
                 "STORAGE_ENGINE": f"postgres://postgres@{POSTGRES}:{PG_PORT}/postgres"
                                   "?sslmode=disable"})

    def _wait_postgres(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code, _ = self.exec(POSTGRES, ["sh", "-c", PG_ISREADY])
            if code == 0:
                return
            if self._status(POSTGRES) != "running":
                break
            time.sleep(0.5)
        raise ClusterError(f"PostgreSQL did not start within {timeout:g}s:\n"
                           + self._describe_failure())

    def wait_brokers_registered(self, names: list[str] | None = None,
                                timeout: float = START_TIMEOUT) -> None:
        """tansu registers nowhere: a broker counts as up once it answers a
        Metadata request for every topic (which reads PostgreSQL)."""
        names = names or [n for n in self.containers if n.startswith("broker-")]
        deadline = time.monotonic() + timeout
        waiting = list(names)
        while waiting:
            waiting = [n for n in waiting if not self.broker_live(n)]
            if not waiting:
                return
            dead = [n for n in waiting if self._status(n) != "running"]
            if dead or time.monotonic() > deadline:
                why = f"{', '.join(dead)} stopped" if dead else f"no answer within {timeout:g}s"
                raise ClusterError(f"tansu brokers {', '.join(waiting)} not up ({why}):\n"
                                   + self._describe_failure())
            time.sleep(0.5)

    wait_ready = wait_brokers_registered

    def broker_live(self, name: str) -> bool:
        """tansu's Metadata lists only node 111: a broker is live when it answers."""
        return self.answers(name)

    def metadata_view(self, name: str, topics: list[str] | None = None,
                      timeout: float = 5.0) -> Any:
        """Broker `name`'s own Metadata answer (harness.kafka_wire.ClusterMetadata)."""
        from harness import kafka_wire
        return self.ask(lambda conn: kafka_wire.metadata(conn, topics), [name], timeout)

    def client_connections(self, name: str) -> int:
        """How many Kafka connections broker `name` holds now from outside the
        cluster (the workload's clients): on tansu, the broker a client uses
        is the one its Metadata named, so this says whom a fault hits."""
        if self.node(name).state != RUNNING:
            return 0
        code, out = self.exec(name, ["ss", "-Htn", "state", "established",
                                     f"( sport = :{KAFKA_PORT} )"])
        if code != 0:
            return 0
        nodes = {n.host for n in self.nodes() if n.host}
        peers = [line.split()[-1].rsplit(":", 1)[0] for line in out.splitlines() if line.strip()]
        return sum(1 for ip in peers if ip not in nodes)

    def busiest_broker(self) -> str:
        """The running broker holding the most client connections now (the
        first by name on a tie): on tansu the nearest thing to "the leader",
        the broker whose loss the clients feel."""
        running = [n.name for n in self.brokers() if n.state == RUNNING]
        if not running:
            raise ClusterError("no tansu broker is running")
        return max(running, key=lambda n: (self.client_connections(n), -broker_id_of(n)))

    # --- nodes ---------------------------------------------------------
    def nodes(self) -> list[NodeInfo]:
        out = []
        for name in self.spec.node_names():
            st = self._status(name) if name in self.containers else "missing"
            state = {"running": RUNNING, "paused": PAUSED}.get(st, STOPPED)
            ip = self._ip(name) if state != STOPPED and name in self.containers else ""
            if name == POSTGRES:
                out.append(NodeInfo(name, STORAGE, ip, PG_PORT, state))
            else:
                out.append(NodeInfo(name, BROKER, ip, KAFKA_PORT, state, broker_id_of(name)))
        return out

    def start_worker(self, name: str, module_argv: list[str], log_path) -> DockerWorker:
        """A workload worker: a container of the chaoslog broker image (it holds
        the project and the Kafka clients) on this cluster's network."""
        from harness import reaper
        if self.network is None or self.worker_image is None:
            raise ClusterError("the tansu cluster is not started")
        c = self.client.containers.run(
            self.worker_image, entrypoint=["python", "-m"], command=module_argv, detach=True,
            network=self.network_name, cap_add=["NET_ADMIN"],
            name=f"{self.network_name}-worker-{name}", hostname=name,
            labels={**self.labels(), reaper.NODE_LABEL: f"worker-{name}"})
        w = DockerWorker(name, c, log_path)
        self.workers.append(w)
        return w

    @property
    def zookeeper_connect(self) -> str:
        """tansu has no ZooKeeper: empty."""
        return ""

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "image": self.image}

    def save(self) -> None:
        """Not kept for `chaoslog cluster` in other processes (attach() knows
        only the built-in clusters): nothing is written."""
