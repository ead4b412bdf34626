"""The docker backend: ZooKeeper and brokers in containers, through testcontainers.

With `proxied` links, a proxy container (the Toxiproxy-compatible server)
carries every client->broker, broker->broker and broker->ZooKeeper link.

Each cluster gets a bridge network of its own. Brokers and ZooKeeper nodes
run with NET_ADMIN so that network faults can use iptables inside them, and with their data
directory bind-mounted from the host, so the harness can read their logs and
damage their segment files while they are down. A broker advertises its
container address, which both the host and the other containers reach.

Everything carries chaoslog's labels (harness/reaper.py): a cluster left
behind by a killed process is removed at the next start.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from cluster.config import BrokerConfig, ConfigError
from contracts.abilities import (KafkaMetadata, NodeFiles, NodeNetwork, PauseResume,
                                 ProcessControl, ProxiedLinks, ZooKeeperAccess)
from contracts.deadline import wait_until
from harness import reaper
from harness import zookeeper as zkh
from harness.backends.base import (
    BROKER, HARNESS_BROKER_CONFIG, PAUSED, RUNNING, STOPPED, ZOOKEEPER, Cluster, ClusterError,
    ClusterSpec, NodeInfo, broker_id_of,
)
from harness.backends.links import Link, LinkTable, ProxiedLinkTable
from harness.backends.secure_cluster import ClusterSecurity
from harness.backends.worker import DockerWorker
from harness.docker_engine import docker_client
from harness.host import state_dir

START_TIMEOUT = 90.0
# How long pause_node tries again when the cgroup freezer gives up under load.
PAUSE_RETRY_S = 10.0
BROKER_PORT = 9092
ZK_PORT = 2181
PROXY_API_PORT = 8474
# The proxy container listens on its interface on the cluster's network (the
# brokers and ZooKeeper reach it there, in containers of their own): beyond
# loopback on purpose, so it says so and why (faults/proxy/README.md,
# "Control surfaces"). The warning goes to the container's log.
PROXY_BIND_REASON = ("inside the proxy container of a chaoslog cluster: its interface on the "
                     "cluster's own bridge network, which the host and the cluster's containers "
                     "reach; no port published")


def proxy_command(api_port: int = PROXY_API_PORT) -> list[str]:
    """The proxy container's command: the API and every link on all the
    container's interfaces, allowed explicitly."""
    return ["python", "-m", "faults.proxy", "--host", "0.0.0.0", "--port", str(api_port),
            "--allow-non-loopback", "--bind-reason", PROXY_BIND_REASON]


# The broker advertises the address the container has on the cluster network;
# it is known only once the container runs, so a tiny wrapper writes it into
# the config before starting the broker (on every start: it may change).
BROKER_ENTRY = (
    'ip=$(python -c "import socket; print(socket.gethostbyname(socket.gethostname()))") && '
    'sed -i "s/^advertised.host.name=.*/advertised.host.name=$ip/" /data/server.properties && '
    "exec python -m cluster.broker /data/server.properties"
)


class DockerCluster(Cluster, ProxiedLinkTable):
    backend = "docker"
    ABILITIES = frozenset({ProcessControl, PauseResume, NodeNetwork, ProxiedLinks,
                           ZooKeeperAccess, NodeFiles, KafkaMetadata})
    has_state_window = True   # the built-in broker, with HARNESS_BROKER_CONFIG

    def __init__(self, spec: ClusterSpec, persistent: bool = False,
                 base_dir: Path | None = None):
        super().__init__(spec)
        self.client = docker_client()
        self.persistent = persistent
        self.base_dir = Path(base_dir) if base_dir else Path(
            tempfile.mkdtemp(prefix=f"chaoslog-{spec.name}-"))
        self.uid = uuid.uuid4().hex[:8]
        self.network_name = f"chaoslog-{spec.name}-{self.uid}"
        self.network = None
        self.containers: dict[str, object] = {}  # node name -> docker-py Container
        self.links = LinkTable()
        self.workers: list[DockerWorker] = []
        self.security = (ClusterSecurity(spec.security, self.base_dir, check_hostname=False)
                         if spec.security != "PLAINTEXT" else None)

    # --- labels --------------------------------------------------------
    def labels(self) -> dict[str, str]:
        return reaper.labels(self.spec.name, self.base_dir, self.persistent)

    # --- lifecycle -----------------------------------------------------
    def start(self) -> None:
        from harness.images import ensure_images
        from testcontainers.core.network import Network
        t0 = time.monotonic()
        tags = ensure_images()
        try:
            if self.security is not None:
                self.security.prepare([*self.spec.node_names(), "proxy"])
                self.client_security = self.security.client()
            net = Network(docker_network_kw={"labels": self.labels(), "driver": "bridge"})
            net.name = self.network_name
            self.network = net.create()
            if self.spec.proxied:
                self._run_proxy(tags.broker)
            zk_names = [n for n in self.spec.node_names() if n.startswith("zk-")]
            for n in zk_names:
                self._run_zookeeper(n, tags.zookeeper, zk_names)
            zkh.wait_zookeeper([(self._ip(n), ZK_PORT) for n in zk_names], START_TIMEOUT,
                               describe=self._describe_failure)
            if self.security is not None:
                self.security.create_users(self.zookeeper_connect)
            brokers = [n for n in self.spec.node_names() if n.startswith("broker-")]
            for n in brokers:
                self._run_broker(n, tags.broker, zk_names)
            self.save()
            self.wait_brokers_registered(brokers)
        except BaseException:
            if not os.environ.get("CHAOSLOG_KEEP_ON_FAILURE"):
                self.destroy()
            raise
        self.startup_seconds = time.monotonic() - t0

    def _container(self, name: str, image: str, aliases: list[str], **kwargs):
        from testcontainers.core.container import DockerContainer
        c = (DockerContainer(image, command=[])
             .with_network(self.network)
             .with_network_aliases(*aliases)
             .with_name(f"{self.network_name}-{name}"))
        volumes = kwargs.pop("volumes", {})
        for host, target in volumes.items():
            c = c.with_volume_mapping(host, target, "rw")
        for k, v in kwargs.pop("env", {}).items():
            c = c.with_env(k, v)
        # with_kwargs replaces earlier kwargs: everything else in one call.
        c = c.with_kwargs(labels={**self.labels(), reaper.NODE_LABEL: name}, hostname=name, **kwargs)
        c.start()
        return c.get_wrapped_container()

    def _run_zookeeper(self, name: str, image: str, zk_names: list[str]) -> None:
        env = {"ZK_MYID": name.split("-")[1]}
        if len(zk_names) > 1:
            env["ZK_SERVERS"] = ",".join(f"{z.split('-')[1]}={z}" for z in zk_names)
        # NET_ADMIN as the brokers have: a partition between two ensemble
        # members needs iptables in one of them.
        self.containers[name] = self._container(name, image, [name], env=env,
                                                cap_add=["NET_ADMIN"])

    def _run_proxy(self, image: str) -> None:
        """The proxy runs in a container of its own on the cluster network; every
        link gets a port on it (the node name "proxy" resolves to it)."""
        self.containers["proxy"] = self._container(
            "proxy", image, ["proxy"],
            entrypoint=proxy_command())
        proxy_ip = self._ip("proxy")
        self.links.api = f"{proxy_ip}:{PROXY_API_PORT}"
        self.links.wait_api(60, describe=lambda: self.logs("proxy")[-2000:])
        brokers = [n for n in self.spec.node_names() if n.startswith("broker-")]
        zks = [n for n in self.spec.node_names() if n.startswith("zk-")]
        port = iter(range(PROXY_API_PORT + 1, PROXY_API_PORT + 10000))

        def link(src: str, dst: str, upstream: str, connect_host: str) -> None:
            p = next(port)
            self.links.add(Link(src, dst, f"0.0.0.0:{p}", upstream, f"{connect_host}:{p}"))

        for b in brokers:
            # Clients on the host and in worker containers both reach the proxy's address.
            link("client", b, f"{b}:{BROKER_PORT}", proxy_ip)
            for z in zks:
                link(b, z, f"{z}:{ZK_PORT}", "proxy")
            for other in brokers:
                if other != b:
                    link(b, other, f"{other}:{BROKER_PORT}", "proxy")
        self.links.create_all()

    def _run_broker(self, name: str, image: str, zk_names: list[str]) -> None:
        d = self.base_dir / name
        (d / "logs").mkdir(parents=True, exist_ok=True)
        values = {
            "zookeeper.session.timeout.ms": self.spec.zk_session_timeout_ms,
            **HARNESS_BROKER_CONFIG,
            **self.spec.broker_config,
            "broker.id": broker_id_of(name), "host.name": "0.0.0.0", "port": BROKER_PORT,
            "advertised.host.name": name, "advertised.port": BROKER_PORT,
            "zookeeper.connect": ",".join(f"{z}:{ZK_PORT}" for z in zk_names),
            "log.dirs": "/data/logs",
        }
        entry = ["sh", "-c", BROKER_ENTRY]
        if self.spec.proxied:
            client = self.links.get("client", name)
            host, port = client.address.rsplit(":", 1)
            values.update({
                "advertised.host.name": host, "advertised.port": int(port),
                "zookeeper.connect": ",".join(l.address for l in self.links.from_node(name)
                                              if l.dst.startswith("zk-")),
                "chaoslog.peer.addresses": ",".join(
                    f"{broker_id_of(l.dst)}={l.address}" for l in self.links.from_node(name)
                    if l.dst.startswith("broker-"))})
            entry = ["python", "-m", "cluster.broker", "/data/server.properties"]
        if self.security is not None:
            values.update(self.security.broker_config(d, "/data"))
        try:
            cfg = BrokerConfig.from_dict(values)
        except ConfigError as e:
            raise ClusterError(f"broker config: {e}") from None
        (d / "server.properties").write_text(cfg.render())
        self.containers[name] = self._container(
            name, image, [name], volumes={str(d): "/data"}, entrypoint=entry,
            cap_add=["NET_ADMIN"])

    def wait_brokers_registered(self, names: list[str] | None = None,
                                timeout: float = START_TIMEOUT) -> None:
        names = names or [n for n in self.containers if n.startswith("broker-")]
        zkh.wait_registered(self.zookeeper_connect, {broker_id_of(n) for n in names}, timeout,
                            describe=self._describe_failure,
                            alive=lambda: all(self._status(n) == "running" for n in names))

    def _describe_failure(self) -> str:
        out = []
        for n in self.containers:
            st = self._status(n)
            if st != "running":
                tail = "\n".join(self.logs(n).splitlines()[-15:])
                out.append(f"{n} is {st}; last lines of its log:\n{tail}")
        return "\n".join(out) or "All containers are running."

    def destroy(self) -> None:
        for w in self.workers:
            w.remove()
        self.workers.clear()
        for name, c in list(self.containers.items()):
            try:
                c.remove(force=True, v=True)
            except Exception:
                pass
        self.containers.clear()
        if self.network is not None:
            try:
                self.network.remove()
            except Exception:
                pass
            self.network = None
        state = self.state_path()
        if state.exists():
            state.unlink()
        if not os.environ.get("CHAOSLOG_KEEP_FILES"):
            shutil.rmtree(self.base_dir, ignore_errors=True)

    # --- nodes ---------------------------------------------------------
    def _get(self, name: str):
        if name not in self.containers:
            raise ClusterError(f"no node {name!r} in cluster {self.spec.name!r}; "
                               f"nodes are {', '.join(self.spec.node_names())}")
        c = self.containers[name]
        c.reload()
        return c

    def _status(self, name: str) -> str:
        try:
            return self._get(name).status
        except ClusterError:
            raise
        except Exception:
            return "missing"

    def _ip(self, name: str) -> str:
        c = self._get(name)
        nets = c.attrs["NetworkSettings"]["Networks"]
        ip = nets.get(self.network_name, {}).get("IPAddress") or ""
        return ip

    def node_ip(self, name: str) -> str:
        ip = self._ip(name)
        if not ip:
            raise ClusterError(f"{name} has no address: it is not running")
        return ip

    def start_node(self, name: str) -> None:
        c = self._get(name)
        if c.status == "running":
            raise ClusterError(f"{name} is already running")
        c.start()

    def stop_node(self, name: str, timeout: float = 30.0) -> None:
        c = self._get(name)
        if c.status == "paused":
            c.unpause()
        if c.status in ("running", "paused"):
            c.stop(timeout=int(timeout))

    def kill_node(self, name: str) -> None:
        c = self._get(name)
        if c.status == "paused":
            c.unpause()
        if c.status == "running":
            c.kill()
            c.wait(timeout=30)

    def pause_node(self, name: str) -> None:
        """Freeze the container's processes (the cgroup freezer). On a loaded
        machine the freezer can give up ("unable to freeze": a process was
        mid-transition when runc looked); trying again is the remedy, for up
        to PAUSE_RETRY_S."""
        from docker.errors import APIError
        c = self._get(name)
        if c.status != "running":
            raise ClusterError(f"{name} is {c.status}; cannot pause it")
        failure: list[str] = []

        def paused() -> bool:
            try:
                c.pause()
                return True
            except APIError as e:
                if "unable to freeze" not in str(e):
                    raise
                failure[:] = [str(e)]
                return False
        if not wait_until(paused, PAUSE_RETRY_S, 0.5):
            raise ClusterError(f"docker could not freeze {name}'s processes within "
                               f"{PAUSE_RETRY_S:g} s ({failure[0]}); is the machine overloaded?")

    def resume_node(self, name: str) -> None:
        c = self._get(name)
        if c.status == "paused":
            c.unpause()

    def host_pid(self, name: str) -> int | None:
        try:
            c = self._get(name)
        except Exception:  # noqa: BLE001 - gone, or the engine did not answer
            return None
        return c.attrs.get("State", {}).get("Pid") or None

    def nodes(self) -> list[NodeInfo]:
        out = []
        for name in self.spec.node_names():
            st = self._status(name) if name in self.containers else "missing"
            state = {"running": RUNNING, "paused": PAUSED}.get(st, STOPPED)
            ip = self._ip(name) if state != STOPPED else ""
            if name.startswith("zk-"):
                out.append(NodeInfo(name, ZOOKEEPER, ip, ZK_PORT, state))
            elif self.spec.proxied and self.links.has("client", name):
                host, port = self.links.get("client", name).address.rsplit(":", 1)
                out.append(NodeInfo(name, BROKER, host, int(port), state, broker_id_of(name)))
            else:
                out.append(NodeInfo(name, BROKER, ip, BROKER_PORT, state, broker_id_of(name)))
        return out

    def logs(self, name: str) -> str:
        try:
            return self._get(name).logs().decode(errors="replace")
        except ClusterError:
            raise
        except Exception as e:
            return f"(no logs: {e})"

    def data_dir(self, name: str) -> Path:
        self._get(name)
        return self.base_dir / name

    def start_worker(self, name: str, module_argv: list[str], log_path: Path) -> DockerWorker:
        brokers = [c for n, c in self.containers.items() if n.startswith("broker-")]
        if not brokers:
            raise ClusterError("this cluster has no brokers to run workers beside")
        # The image the brokers run: it holds the project and the Kafka clients.
        c = self.client.containers.run(
            brokers[0].attrs["Config"]["Image"], entrypoint=["python", "-m"], command=module_argv,
            detach=True, network=self.network_name, cap_add=["NET_ADMIN"],
            name=f"{self.network_name}-worker-{name}", hostname=name,
            # A secure cluster's CA and the harness's password file, at their host paths.
            volumes=({str(self.security.dir): {"bind": str(self.security.dir), "mode": "ro"}}
                     if self.security is not None else {}),
            labels={**self.labels(), reaper.NODE_LABEL: f"worker-{name}"})
        w = DockerWorker(name, c, log_path)
        self.workers.append(w)
        return w

    def exec(self, name: str, argv: list[str]) -> tuple[int, str]:
        """(exit code, output) of `argv` in the node's container; 126 and the
        engine's reason when the container cannot run it (paused or dead: a
        partition then puts its rules on the other side, faults/injectors/net.py)."""
        from docker.errors import APIError
        c = self._get(name)
        if c.status != "running":
            return 126, f"{name} is {c.status}"
        try:
            code, out = c.exec_run(argv)
        except APIError as e:  # paused or stopped since the status was read
            if e.status_code != 409:
                raise
            return 126, f"{name}: {e.explanation}"
        return code, out.decode(errors="replace")

    @property
    def zookeeper_connect(self) -> str:
        return ",".join(f"{self._ip(n)}:{ZK_PORT}" for n in self.spec.node_names()
                        if n.startswith("zk-") and n in self.containers)

    # --- persistence, for `chaoslog cluster` commands in other processes --
    def state_path(self) -> Path:
        return state_dir() / f"{self.spec.name}.json"

    def save(self) -> None:
        state = {"backend": self.backend, "base_dir": str(self.base_dir), "uid": self.uid,
                 "network": self.network_name, "persistent": self.persistent,
                 "spec": {"name": self.spec.name, "brokers": self.spec.brokers,
                          "zookeepers": self.spec.zookeepers,
                          "broker_config": self.spec.broker_config,
                          "zk_session_timeout_ms": self.spec.zk_session_timeout_ms,
                          "proxied": self.spec.proxied, "security": self.spec.security},
                 "containers": {n: c.id for n, c in self.containers.items()},
                 "links": self.links.to_json()}
        path = self.state_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(path)

    @classmethod
    def load(cls, state: dict) -> "DockerCluster":
        import docker.errors
        c = cls(ClusterSpec(**state["spec"]), persistent=state.get("persistent", True),
                base_dir=Path(state["base_dir"]))
        c.uid = state["uid"]
        c.network_name = state["network"]
        try:
            c.network = c.client.networks.get(c.network_name)
        except docker.errors.NotFound:
            c.network = None
        c.links = LinkTable.from_json(state.get("links") or {})
        for n, cid in state["containers"].items():
            try:
                c.containers[n] = c.client.containers.get(cid)
            except docker.errors.NotFound:
                pass
        if c.security is not None:
            c.client_security = c.security.client()
        return c
