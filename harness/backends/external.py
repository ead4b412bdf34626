"""The external target: a Kafka-protocol cluster the harness did not start.

A user points chaoslog at their own cluster with bootstrap addresses and,
optionally, a command file: the shell commands that kill, stop, start,
pause and resume one broker of their deployment (docs/targets.md,
"External clusters"). The harness then knows the cluster only as a Kafka
client does:

- the brokers are those the Metadata answer lists, named `broker-<id>` and
  reached at the addresses they advertise (which must be reachable from
  this machine: the workload's clients run here, as local processes);
- roles (leader, follower, controller, coordinator) come from Metadata and
  FindCoordinator (faults/targets.py MetadataRoles), "registered" means
  "answers, and Metadata lists it" (Cluster.broker_live);
- topics are created with the Kafka AdminClient, like every run's.

It starts and removes nothing of the cluster: `destroy()` ends the
workload's processes only. What needs control it was not given is refused
before a run starts (`refuses`), never skipped: a process fault whose
command is missing, network and link faults (the harness cannot reach the
nodes' network), disk faults (nor their files), ZooKeeper faults and the
admin operations that write ZooKeeper.
"""
from __future__ import annotations

import shlex
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.deadline import wait_until
from harness.backends.base import (BROKER, PAUSED, RUNNING, STOPPED, Cluster, ClusterError,
                                   ClusterSpec, NodeInfo, broker_id_of)
from harness.backends.worker import LocalWorker

SYSTEM = "external"
# What a command file may say, and what each process fault needs of it.
ACTIONS = ("kill", "stop", "start", "pause", "resume", "logs")
NEEDS = {"kill": ("kill", "start"), "stop": ("stop", "start"), "pause": ("pause", "resume"),
         "hard-bounce": ("kill", "start"), "clean-bounce": ("stop", "start")}
PLACEHOLDERS = ("node", "id", "host", "port")
COMMAND_TIMEOUT_S = 120.0
METADATA_TIMEOUT_S = 10.0
REGISTER_TIMEOUT_S = 90.0

REFUSED_FAMILIES = {
    "zookeeper": "the harness reaches no ZooKeeper of an external cluster",
    "disk": "the harness cannot reach the brokers' log files",
    "partition": ("the harness cannot cut the network of nodes it did not start (no iptables "
                  "in their namespace, no proxy on their links)"),
    "link": "the harness cannot put the proxy on the links of nodes it did not start",
    "admin": ("the injectors act through the built-in cluster's ZooKeeper layout "
              "(faults/injectors/admin.py)"),
}
ZOOKEEPER_ROLES = ("zk-leader", "zk-follower", "zk-random", "zk-all")


@dataclass
class ExternalSpec(ClusterSpec):
    """Bootstrap addresses and the command file's commands. `broker_ids` is
    what Metadata listed when the spec was made (`discover`): node names
    must be known before a run starts, to check its targets."""
    zookeepers: int = 0
    bootstrap: str = ""
    commands: dict[str, str] = field(default_factory=dict)             # action -> template
    node_commands: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> overrides
    broker_ids: list[int] = field(default_factory=list)

    def validate(self) -> None:
        addresses(self.bootstrap)
        if self.zookeepers:
            raise ClusterError("an external cluster's ZooKeeper is not the harness's: "
                               "zookeepers must be 0")
        if self.broker_config:
            raise ClusterError("the harness does not configure an external cluster's brokers "
                               f"({', '.join(sorted(self.broker_config))})")
        if self.proxied:
            raise ClusterError("the external target has no proxied links")
        check_commands(self.commands, "the command file")
        for node, cmds in self.node_commands.items():
            check_commands(cmds, f"the command file's [nodes.{node}]")
        if not self.name or not all(c.isalnum() or c in "-_" for c in self.name):
            raise ClusterError(f"cluster name {self.name!r}: use letters, digits, '-' and '_'")

    def node_names(self) -> list[str]:
        return [f"broker-{i}" for i in sorted(self.broker_ids)]


def addresses(bootstrap: str) -> list[tuple[str, int]]:
    """HOST:PORT,... as (host, port) pairs; ClusterError saying what is wrong."""
    out = []
    for item in filter(None, (a.strip() for a in bootstrap.split(","))):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ClusterError(f"bootstrap address {item!r}: expected HOST:PORT")
        out.append((host, int(port)))
    if not out:
        raise ClusterError("an external cluster needs --bootstrap HOST:PORT[,HOST:PORT...]")
    return out


def check_commands(commands: dict[str, Any], where: str) -> None:
    for action, template in commands.items():
        if action not in ACTIONS:
            raise ClusterError(f"{where}: unknown action {action!r}; actions are "
                               f"{', '.join(ACTIONS)}")
        if not isinstance(template, str) or not template.strip():
            raise ClusterError(f"{where}: {action} must be a non-empty command string")
        try:
            template.format(**{p: "" for p in PLACEHOLDERS})
        except (KeyError, IndexError, ValueError) as e:
            raise ClusterError(f"{where}: {action} = {template!r}: placeholders are "
                               f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)} ({e})") from None


def load_commands(path: str | Path) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """A command file (TOML): top-level ACTION = "shell command" entries, and
    `[nodes.broker-N]` tables overriding them for one node. ClusterError
    naming the file and what is wrong."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except OSError as e:
        raise ClusterError(f"command file {p}: cannot read it ({e.strerror})") from None
    except tomllib.TOMLDecodeError as e:
        raise ClusterError(f"command file {p}: not TOML ({e})") from None
    nodes = data.pop("nodes", {})
    if not isinstance(nodes, dict) or not all(isinstance(v, dict) for v in nodes.values()):
        raise ClusterError(f"command file {p}: [nodes.broker-N] must be tables of commands")
    check_commands(data, f"command file {p}")
    for node, cmds in nodes.items():
        if not node.startswith("broker-") or not node[7:].isdigit():
            raise ClusterError(f"command file {p}: [nodes.{node}]: nodes are named broker-N")
        check_commands(cmds, f"command file {p} [nodes.{node}]")
    return dict(data), {k: dict(v) for k, v in nodes.items()}


def discover(bootstrap: str, timeout: float = METADATA_TIMEOUT_S) -> dict[int, tuple[str, int]]:
    """The brokers the cluster's Metadata lists: id -> advertised (host, port),
    asked of the bootstrap addresses in turn. ClusterError when none answers."""
    from harness import kafka_wire
    errors = []
    for host, port in addresses(bootstrap):
        try:
            conn = kafka_wire.KafkaConnection(host, port, client_id="chaoslog-harness",
                                              timeout=timeout)
            try:
                md = kafka_wire.metadata(conn, [])
            finally:
                conn.close()
        except (OSError, kafka_wire.WireError) as e:
            errors.append(f"{host}:{port}: {e}")
            continue
        if md.brokers:
            return dict(md.brokers)
        errors.append(f"{host}:{port}: Metadata lists no broker")
    raise ClusterError("no bootstrap address answers a Kafka Metadata request ("
                       + "; ".join(errors) + "): is the cluster up, and are these its client "
                       "addresses?")


class ExternalCluster(Cluster):
    """A cluster reached through its bootstrap addresses, acted on through
    the command file. Node states are what the harness's own commands made
    them (a broker the user's deployment restarts by itself is not seen)."""

    backend = "external"
    system = SYSTEM
    local_workers = True

    def __init__(self, spec: ExternalSpec):
        if not spec.broker_ids:
            spec.broker_ids = sorted(discover(spec.bootstrap))
        spec.brokers = len(spec.broker_ids)
        super().__init__(spec)
        self.spec: ExternalSpec = spec
        self.advertised: dict[str, tuple[str, int]] = {}
        self.states = {name: RUNNING for name in spec.node_names()}
        self.workers: list[LocalWorker] = []

    # --- what this target can do ---------------------------------------
    def refuses(self, fault: str, target: str | None = None) -> str | None:
        from faults.injectors import kind
        family = kind(fault).family
        why = REFUSED_FAMILIES.get(family)
        if why is None and fault in NEEDS:
            missing = sorted({a for a in NEEDS[fault]
                              for n in self.spec.node_names() if not self._template(n, a)})
            if missing:
                why = (f"the command file has no {' or '.join(missing)} command "
                       f"(needed for every broker)")
        if why is None and (target or "").partition(":")[0] in ZOOKEEPER_ROLES:
            why = f"target {target!r} is a ZooKeeper node, which the harness does not reach"
        return None if why is None else f"the external target cannot run {fault}: {why}"

    # --- lifecycle -----------------------------------------------------
    def start(self) -> None:
        """Nothing is started: the brokers Metadata lists must be the spec's,
        and each must answer."""
        found = discover(self.spec.bootstrap)
        if sorted(found) != sorted(self.spec.broker_ids):
            raise ClusterError(f"the cluster lists brokers {sorted(found)}, the run was made "
                               f"for {sorted(self.spec.broker_ids)}")
        self.advertised = {f"broker-{i}": addr for i, addr in found.items()}
        self.wait_brokers_registered()

    def destroy(self) -> None:
        """The workload's processes end; the cluster is not the harness's."""
        for w in self.workers:
            w.kill()

    def wait_brokers_registered(self, names: list[str] | None = None,
                                timeout: float = REGISTER_TIMEOUT_S) -> None:
        names = names or self.spec.node_names()
        if not wait_until(lambda: all(self.broker_live(n) for n in names), timeout, 0.5,
                          retry_on=(Exception,)):
            late = [n for n in names if not self.broker_live(n)]
            raise ClusterError(f"brokers {', '.join(late)} do not answer or are not listed in "
                               f"Metadata after {timeout:g} s")

    # --- per node ------------------------------------------------------
    def start_node(self, name: str) -> None:
        self._run(name, "start")
        self.states[name] = RUNNING

    def stop_node(self, name: str, timeout: float = 30.0) -> None:
        self._run(name, "stop")
        self.states[name] = STOPPED

    def kill_node(self, name: str) -> None:
        self._run(name, "kill")
        self.states[name] = STOPPED

    def pause_node(self, name: str) -> None:
        self._run(name, "pause")
        self.states[name] = PAUSED

    def resume_node(self, name: str) -> None:
        self._run(name, "resume")
        self.states[name] = RUNNING

    def nodes(self) -> list[NodeInfo]:
        out = []
        for name in self.spec.node_names():
            host, port = self.advertised.get(name, ("", 0))
            out.append(NodeInfo(name, BROKER, host, port, self.states[name], broker_id_of(name)))
        return out

    def logs(self, name: str) -> str:
        self.node(name)
        if not self._template(name, "logs"):
            return "(chaoslog: the command file has no logs command)\n"
        return self._run(name, "logs")

    def data_dir(self, name: str) -> Path:
        raise ClusterError("the harness cannot reach an external cluster's files")

    def start_worker(self, name: str, module_argv: list[str], log_path: Path) -> LocalWorker:
        w = LocalWorker(name, module_argv, log_path)
        self.workers.append(w)
        return w

    @property
    def zookeeper_connect(self) -> str:
        """The harness reads no ZooKeeper of an external cluster: empty."""
        return ""

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "bootstrap": self.spec.bootstrap}

    # --- commands --------------------------------------------------------
    def _template(self, name: str, action: str) -> str | None:
        return self.spec.node_commands.get(name, {}).get(action) or self.spec.commands.get(action)

    def _run(self, name: str, action: str) -> str:
        """The command file's `action` for node `name`, through /bin/sh; its
        stdout. ClusterError with its output when it fails."""
        n = self.node(name)
        template = self._template(name, action)
        if not template:
            raise ClusterError(f"the command file has no {action} command for {name}")
        command = template.format(node=name, id=n.broker_id, host=shlex.quote(n.host),
                                  port=n.port)
        try:
            done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True,
                                  timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ClusterError(f"{action} {name}: `{command}` did not finish within "
                               f"{COMMAND_TIMEOUT_S:g} s") from None
        if done.returncode != 0:
            raise ClusterError(f"{action} {name}: `{command}` exited {done.returncode}: "
                               f"{(done.stderr or done.stdout).strip()[-500:]}")
        return done.stdout
