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
workload's processes (and the proxy below) only. What needs control it was
not given is refused before a run starts (`refuses`), never skipped: a
process fault whose command is missing, network faults other than those on
the clients' links, disk faults (the harness cannot reach the nodes' files),
ZooKeeper faults and the admin operations that write ZooKeeper.

The clients' links: with a `[proxy.broker-N]` table for every broker in the
command file (`listen`: the address broker N advertises; `upstream`: where
it really listens), the harness runs the Toxiproxy-compatible proxy
(faults/proxy) on this machine between the clients and the brokers, so that
`partition-clients` and the link faults (latency, bandwidth, slicer,
reset-peer, link-timeout) act on the clients' connections. The brokers must
advertise the `listen` addresses: clients follow what Metadata says. The
proxy's API is on 127.0.0.1; a `listen` address that is not loopback needs
`allow_non_loopback = "why"` in its table, and a warning says so when the
proxy starts (faults/proxy/README.md, "Control surfaces").
"""
from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.abilities import (NETWORK, KafkaMetadata, NodeFiles, PauseResume,
                                 ProcessControl, ProxiedLinks, ZooKeeperAccess)
from contracts.deadline import wait_until
from harness.backends.base import (BROKER, PAUSED, RUNNING, STOPPED, Cluster, ClusterError,
                                   ClusterSpec, NodeInfo, ask_first, broker_id_of)
from harness.backends.links import Link, LinkTable, ProxiedLinkTable
from harness.backends.process import LocalProcess
from harness.backends.worker import LocalWorker

SYSTEM = "external"
# What a command file may say, and what each process fault needs of it.
ACTIONS = ("kill", "stop", "start", "pause", "resume", "logs")
COMMANDS_NEEDED = {"kill": ("kill", "start"), "stop": ("stop", "start"),
                   "pause": ("pause", "resume"), "hard-bounce": ("kill", "start"),
                   "clean-bounce": ("stop", "start")}
PLACEHOLDERS = ("node", "id", "host", "port")
# The key of a [proxy.broker-N] table that lets its proxy listen beyond loopback.
ALLOW_KEY = "allow_non_loopback"
COMMAND_TIMEOUT_S = 120.0
METADATA_TIMEOUT_S = 10.0
REGISTER_TIMEOUT_S = 90.0

# Why this target lacks the abilities (contracts/abilities.py) some faults
# need: a fault whose injector needs one of them is refused with its reason.
LACKS = {
    ZooKeeperAccess: "the harness reaches no ZooKeeper of an external cluster",
    NodeFiles: "the harness cannot reach the brokers' log files",
    NETWORK: ("the harness cannot cut the links between nodes it did not start (no "
              "iptables in their namespace, no proxy between them)"),
    ProxiedLinks: ("the command file has no [proxy.broker-N] tables, so the clients' links do "
                   "not go through the harness's proxy"),
}
# Admin operations need ZooKeeper for a closer reason than reaching it.
ADMIN_REFUSAL = ("the injectors act through the built-in cluster's ZooKeeper layout "
                 "(faults/injectors/admin.py)")
# The faults that act on the clients' links, the only ones its proxy carries:
# partition-clients needs that proxy, the other partitions links between nodes.
ON_CLIENT_LINKS = ("partition-clients", "latency", "bandwidth", "slicer", "reset-peer",
                   "link-timeout")
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
    # node -> {"listen": advertised HOST:PORT, "upstream": real HOST:PORT}; `proxied` when set
    proxies: dict[str, dict[str, str]] = field(default_factory=dict)

    def validate(self) -> None:
        addresses(self.bootstrap)
        if self.zookeepers:
            raise ClusterError("an external cluster's ZooKeeper is not the harness's: "
                               "zookeepers must be 0")
        if self.broker_config:
            raise ClusterError("the harness does not configure an external cluster's brokers "
                               f"({', '.join(sorted(self.broker_config))})")
        if self.proxied != bool(self.proxies):
            raise ClusterError("an external cluster is proxied exactly when its command file "
                               "has [proxy.broker-N] tables")
        check_proxies(self.proxies, self.node_names() if self.broker_ids else None,
                      "the command file")
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


def listens_on_loopback(listen: str) -> bool:
    """Whether the proxy would bind `listen` (HOST:PORT) on loopback only; a
    name that does not resolve here counts as loopback (the proxy refuses it
    when it binds, if it is not)."""
    from faults.proxy.exposure import resolves_to_loopback
    host = listen.rpartition(":")[0]
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return resolves_to_loopback(host) is not False


def exposed_listeners(proxies: dict[str, dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """node -> (listen, reason) of the tables whose proxy listens beyond loopback."""
    out = {}
    for node, p in sorted(proxies.items()):
        allow = p.get(ALLOW_KEY, False)
        if allow and not listens_on_loopback(str(p["listen"])):
            out[node] = (str(p["listen"]),
                         allow if isinstance(allow, str) else "allowed by the command file")
    return out


def proxy_argv(api_port: int, label: str, proxies: dict[str, dict[str, Any]]) -> list[str]:
    """The proxy's command: its API on 127.0.0.1; listeners beyond loopback
    allowed only for the tables that allow them (check_proxies), with their reasons."""
    argv = [sys.executable, "-m", "faults.proxy", "--host", "127.0.0.1",
            "--port", str(api_port), "--label", label]
    exposed = exposed_listeners(proxies)
    if exposed:
        argv += ["--allow-non-loopback", "--bind-reason",
                 "; ".join(f"{node}: {why}" for node, (_, why) in exposed.items())]
    return argv


def exposure_warning(proxies: dict[str, dict[str, Any]]) -> str | None:
    """The one line the harness prints when the proxy listens beyond loopback."""
    exposed = exposed_listeners(proxies)
    if not exposed:
        return None
    where = ", ".join(f"{listen} ({node}: {why})" for node, (listen, why) in exposed.items())
    return (f"chaoslog: WARNING: the proxy in front of the brokers listens beyond loopback on "
            f"{where}: anyone who can reach those addresses connects through to the brokers "
            f"[{ALLOW_KEY} in the command file]")


def check_node_name(node: str, where: str) -> None:
    if not node.startswith("broker-") or not node[7:].isdigit():
        raise ClusterError(f"{where}: nodes are named broker-N")


def check_proxies(proxies: dict[str, Any], brokers: list[str] | None, where: str) -> None:
    """[proxy.broker-N] tables: `listen` and `upstream` addresses, for every
    broker (`brokers`, when known) or for none; a `listen` address that is
    not loopback only with `allow_non_loopback = "why"` (or true)."""
    for node, p in proxies.items():
        check_node_name(node, f"{where}: [proxy.{node}]")
        if (not isinstance(p, dict) or not {"listen", "upstream"} <= set(p)
                or not set(p) <= {"listen", "upstream", ALLOW_KEY}):
            raise ClusterError(f"{where}: [proxy.{node}] needs listen = \"HOST:PORT\" (what "
                               "the broker advertises) and upstream = \"HOST:PORT\" (where it "
                               f"listens), nothing else but {ALLOW_KEY} = \"why\"")
        for key in ("listen", "upstream"):
            try:
                addresses(str(p[key]))
            except ClusterError:
                raise ClusterError(f"{where}: [proxy.{node}] {key} = {p[key]!r}: expected "
                                   "HOST:PORT") from None
        allow = p.get(ALLOW_KEY, False)
        if not (allow is True or allow is False or (isinstance(allow, str) and allow.strip())):
            raise ClusterError(f"{where}: [proxy.{node}] {ALLOW_KEY} = {allow!r}: a reason "
                               "(a non-empty string) or true")
        if not allow and not listens_on_loopback(str(p["listen"])):
            raise ClusterError(
                f"{where}: [proxy.{node}] listen = {p['listen']!r} is not a loopback address: "
                f"the harness's proxy would listen there, and anyone who can reach it connects "
                f"through to {node}; the clients run on this machine, so 127.0.0.1:PORT does "
                f"for them (if the brokers must reach it too, add {ALLOW_KEY} = \"why\" to the "
                "table: docs/targets.md)")
    missing = sorted(set(brokers or ()) - set(proxies)) if proxies else []
    if missing:
        raise ClusterError(f"{where}: no [proxy.{missing[0]}]: the proxy goes in front of every "
                           "broker or of none")


def load_commands(path: str | Path) -> tuple[dict[str, str], dict[str, dict[str, str]],
                                             dict[str, dict[str, str]]]:
    """A command file (TOML): top-level ACTION = "shell command" entries,
    `[nodes.broker-N]` tables overriding them for one node, and
    `[proxy.broker-N]` tables placing the proxy in front of broker N.
    Returns (commands, per-node commands, proxies); ClusterError naming the
    file and what is wrong."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except OSError as e:
        raise ClusterError(f"command file {p}: cannot read it ({e.strerror})") from None
    except tomllib.TOMLDecodeError as e:
        raise ClusterError(f"command file {p}: not TOML ({e})") from None
    nodes = data.pop("nodes", {})
    proxies = data.pop("proxy", {})
    if not isinstance(nodes, dict) or not all(isinstance(v, dict) for v in nodes.values()):
        raise ClusterError(f"command file {p}: [nodes.broker-N] must be tables of commands")
    if not isinstance(proxies, dict):
        raise ClusterError(f"command file {p}: [proxy.broker-N] must be tables of addresses")
    check_commands(data, f"command file {p}")
    for node, cmds in nodes.items():
        check_node_name(node, f"command file {p}: [nodes.{node}]")
        check_commands(cmds, f"command file {p} [nodes.{node}]")
    check_proxies(proxies, None, f"command file {p}")
    return (dict(data), {k: dict(v) for k, v in nodes.items()},
            {k: {"listen": str(v["listen"]), "upstream": str(v["upstream"]),
                 **({ALLOW_KEY: v[ALLOW_KEY] if isinstance(v[ALLOW_KEY], str)
                     else "allowed by the command file"} if v.get(ALLOW_KEY) else {})}
             for k, v in proxies.items()})


def discover(bootstrap: str, timeout: float = METADATA_TIMEOUT_S,
             security: Any = None) -> dict[int, tuple[str, int]]:
    """The brokers the cluster's Metadata lists: id -> advertised (host, port),
    asked of the bootstrap addresses in turn (with the run's client settings,
    harness/security.py). ClusterError when none answers."""
    from harness import kafka_wire

    def brokers(conn: Any) -> dict[int, tuple[str, int]]:
        listed = kafka_wire.metadata(conn, []).brokers
        if not listed:
            raise kafka_wire.WireError("Metadata lists no broker")
        return dict(listed)

    return ask_first([(f"{h}:{p}", h, p) for h, p in addresses(bootstrap)], brokers, timeout,
                     nobody="no bootstrap address answers a Kafka Metadata request",
                     hint=": is the cluster up, and are these its client addresses?",
                     security=security)


class ExternalCluster(Cluster, ProxiedLinkTable):
    """A cluster reached through its bootstrap addresses, acted on through
    the command file. Node states are what the harness's own commands made
    them (a broker the user's deployment restarts by itself is not seen)."""

    backend = "external"
    system = SYSTEM
    local_workers = True
    # Through the command file and Kafka clients only; the proxy (with
    # [proxy.broker-N] tables) carries the clients' links alone.
    ABILITIES = frozenset({ProcessControl, PauseResume, ProxiedLinks, KafkaMetadata})

    def __init__(self, spec: ExternalSpec):
        if not spec.broker_ids:
            # With the proxy in front of every broker, the command file names
            # them all; a cluster that reaches itself through the proxy does
            # not answer Metadata before the proxy is up.
            spec.broker_ids = (sorted(broker_id_of(n) for n in spec.proxies) if spec.proxies
                               else sorted(discover(spec.bootstrap)))
        spec.brokers = len(spec.broker_ids)
        super().__init__(spec)
        self.spec: ExternalSpec = spec
        self.advertised: dict[str, tuple[str, int]] = {}
        self.states = {name: RUNNING for name in spec.node_names()}
        self.workers: list[LocalWorker] = []
        # The proxy on the clients' links (with [proxy.broker-N] tables).
        self.links = LinkTable()
        self.base_dir: Path | None = None
        self._proxy: LocalProcess | None = None

    # --- what this target can do ---------------------------------------
    def refuses(self, fault: str, target: str | None = None) -> str | None:
        """Why `fault` aimed at `target` cannot run here, or None: what its
        injector needs that this cluster lacks (ABILITIES), then what the
        command file lacks, then a ZooKeeper target."""
        from faults.injectors import kind, lacking
        family = kind(fault).family
        lacks = lacking(fault, self.abilities)
        if fault in ON_CLIENT_LINKS:
            why = None if ProxiedLinks in self.abilities else LACKS[ProxiedLinks]
        elif family == "partition":   # between nodes: the proxy never is
            why = LACKS[NETWORK]
        elif lacks:
            why = ADMIN_REFUSAL if family == "admin" else LACKS[lacks[0]]
        else:
            why = None
        if why is None and fault in COMMANDS_NEEDED:
            missing = sorted({a for a in COMMANDS_NEEDED[fault]
                              for n in self.spec.node_names() if not self._template(n, a)})
            if missing:
                why = (f"the command file has no {' or '.join(missing)} command "
                       f"(needed for every broker)")
        if why is None and (target or "").partition(":")[0] in ZOOKEEPER_ROLES:
            why = f"target {target!r} is a ZooKeeper node, which the harness does not reach"
        return None if why is None else f"the external target cannot run {fault}: {why}"

    # --- lifecycle -----------------------------------------------------
    def start(self) -> None:
        """Nothing of the cluster is started (only the proxy, when the command
        file places one): the brokers Metadata lists must be the spec's, and
        each must answer."""
        try:
            if self.spec.proxies:
                self._start_proxy()
            found = self._discover()
            if sorted(found) != sorted(self.spec.broker_ids):
                raise ClusterError(f"the cluster lists brokers {sorted(found)}, the run was made "
                                   f"for {sorted(self.spec.broker_ids)}")
            self.advertised = {f"broker-{i}": addr for i, addr in found.items()}
            self._check_advertised()
            self.wait_brokers_registered()
        except BaseException:
            self.destroy()
            raise

    def _discover(self) -> dict[int, tuple[str, int]]:
        """discover(), waiting a while when the proxy has just come up: a
        cluster that reaches itself through it answers Metadata only then."""
        security = self.client_security
        if not self.spec.proxies:
            return discover(self.spec.bootstrap, security=security)
        found = wait_until(lambda: discover(self.spec.bootstrap, security=security),
                           REGISTER_TIMEOUT_S, 0.5, retry_on=(ClusterError,))
        # the last try's error, if none
        return found or discover(self.spec.bootstrap, security=security)

    def _check_advertised(self) -> None:
        """Clients go where Metadata sends them: through the proxy only if each
        broker advertises its [proxy.broker-N] listen address."""
        for name, (host, port) in sorted(self.advertised.items()):
            listen = (self.spec.proxies.get(name) or {}).get("listen")
            if listen and f"{host}:{port}" != listen:
                raise ClusterError(f"{name} advertises {host}:{port}, not its [proxy.{name}] "
                                   f"listen address {listen}: clients would bypass the proxy "
                                   "(set the broker's advertised listener)")

    def _start_proxy(self) -> None:
        """The proxy between the clients and every broker: it listens where
        the broker advertises itself and forwards to where it listens."""
        from harness.host import free_port
        self.base_dir = Path(tempfile.mkdtemp(prefix=f"chaoslog-{self.spec.name}-"))
        api = f"127.0.0.1:{free_port()}"
        argv = proxy_argv(int(api.rsplit(":", 1)[1]), str(self.base_dir), self.spec.proxies)
        warning = exposure_warning(self.spec.proxies)
        if warning:
            print(warning, file=sys.stderr, flush=True)
        self._proxy = LocalProcess("proxy", argv, self.base_dir / "proxy.log",
                                   str(self.base_dir), cwd=self.base_dir)
        self._proxy.start()
        self._save()
        self.links = LinkTable(api)
        for name, p in sorted(self.spec.proxies.items()):
            self.links.add(Link("client", name, p["listen"], p["upstream"]))
        self.links.wait_api(timeout=30)
        self.links.create_all()

    def _state_path(self) -> Path:
        from harness.host import state_dir
        return state_dir() / f"{self.spec.name}.json"

    def _save(self) -> None:
        """What the reaper needs to stop the proxy if this process dies."""
        from harness import reaper
        path = self._state_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"backend": self.backend, "owner": reaper.owner_token(),
                                    "base_dir": str(self.base_dir),
                                    "proxy": self._proxy.to_json() if self._proxy else None}))

    def destroy(self) -> None:
        """The workload's processes and the proxy end; the cluster is not the
        harness's."""
        for w in self.workers:
            w.kill()
        if self._proxy is not None:
            self._proxy.kill()
            self._proxy = None
            self._state_path().unlink(missing_ok=True)
        if self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None

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
