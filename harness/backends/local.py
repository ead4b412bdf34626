"""The local backend: ZooKeeper and brokers as processes on 127.0.0.1.

Used when there is no Docker engine, and wherever containers are not needed.
Network faults on this backend go through the Toxiproxy-compatible proxy
(`ClusterSpec.proxied`): every broker->broker, broker->ZooKeeper and
client->broker link gets a proxy of its own, so one link can be cut or
degraded without touching the others.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cluster.config import BrokerConfig, ConfigError
from contracts.abilities import (KafkaMetadata, NodeFiles, PauseResume, ProcessControl,
                                 ProxiedLinks, ZooKeeperAccess)
from harness import reaper
from harness import zookeeper as zkh
from harness.backends.base import (
    BROKER, HARNESS_BROKER_CONFIG, PAUSED, RUNNING, STOPPED, ZOOKEEPER, Cluster, ClusterError,
    ClusterSpec, NodeInfo, broker_id_of,
)
from harness.backends.links import Link, LinkTable, ProxiedLinkTable
from harness.backends.process import LocalProcess
from harness.backends.secure_cluster import ClusterSecurity
from harness.backends.worker import LocalWorker
from harness.host import free_port, state_dir

START_TIMEOUT = 90.0  # generous: a loaded 2-core machine starts a JVM slowly


@dataclass
class _Ports:
    zk_client: dict[str, int]
    zk_peer: dict[str, tuple[int, int]]
    broker: dict[str, int]
    proxy_api: int | None


class LocalCluster(Cluster, ProxiedLinkTable):
    backend = "local"
    # No NodeNetwork: the nodes share this machine's network namespace.
    ABILITIES = frozenset({ProcessControl, PauseResume, ProxiedLinks, ZooKeeperAccess,
                           NodeFiles, KafkaMetadata})
    has_state_window = True   # the built-in broker, with HARNESS_BROKER_CONFIG
    local_workers = True

    def __init__(self, spec: ClusterSpec, persistent: bool = False,
                 base_dir: Path | None = None):
        super().__init__(spec)
        self.persistent = persistent
        zkh.check_local_zookeeper_install()
        self.base_dir = Path(base_dir) if base_dir else Path(
            tempfile.mkdtemp(prefix=f"chaoslog-{spec.name}-"))
        self.marker = str(self.base_dir)  # every node's command line contains it
        self.procs: dict[str, LocalProcess] = {}
        self.links = LinkTable()
        self.ports = _Ports({}, {}, {}, None)
        self._proxy: LocalProcess | None = None
        self.workers: list[LocalWorker] = []
        self.node_env: dict[str, dict[str, str]] = {}  # set_node_env
        self.security = (ClusterSecurity(spec.security, self.base_dir, check_hostname=True)
                         if spec.security != "PLAINTEXT" else None)

    # --- layout --------------------------------------------------------
    def data_dir(self, name: str) -> Path:
        self._proc(name)
        return self.base_dir / name

    def _plan(self) -> None:
        names = self.spec.node_names()
        for n in names:
            if n.startswith("zk-"):
                self.ports.zk_client[n] = free_port()
                self.ports.zk_peer[n] = (free_port(), free_port())
            else:
                self.ports.broker[n] = free_port()
        if self.spec.proxied:
            self.ports.proxy_api = free_port()

    def _write_zookeeper(self, name: str) -> LocalProcess:
        d = self.base_dir / name
        (d / "conf").mkdir(parents=True, exist_ok=True)
        (d / "data").mkdir(exist_ok=True)
        sid = int(name.split("-")[1])
        servers = None
        if self.spec.zookeepers > 1:
            servers = {int(n.split("-")[1]): ("127.0.0.1", *self.ports.zk_peer[n])
                       for n in self.ports.zk_client}
            (d / "data" / "myid").write_text(f"{sid}\n")
        (d / "conf" / "zoo.cfg").write_text(
            zkh.zoo_cfg(d / "data", self.ports.zk_client[name], servers=servers))
        (d / "conf" / "log4j.properties").write_text(zkh.LOG4J)
        return LocalProcess(name, zkh.java_command(d / "conf"), d / "node.log", self.marker, cwd=d,
                            env=self._env_of(name))

    def _zk_connect_for(self, broker: str) -> str:
        if self.spec.proxied:
            return ",".join(l.address for l in self.links.from_node(broker) if l.dst.startswith("zk-"))
        return self.zookeeper_connect

    def _write_broker(self, name: str) -> LocalProcess:
        d = self.base_dir / name
        (d / "logs").mkdir(parents=True, exist_ok=True)
        bid = broker_id_of(name)
        port = self.ports.broker[name]
        advertised = port
        peers = ""
        if self.spec.proxied:
            advertised = self.links.get(f"client", name).listen_port
            peers = ",".join(f"{broker_id_of(l.dst)}={l.address}"
                             for l in self.links.from_node(name) if l.dst.startswith("broker-"))
        values = {
            "zookeeper.session.timeout.ms": self.spec.zk_session_timeout_ms,
            **HARNESS_BROKER_CONFIG,
            **self.spec.broker_config,
            "broker.id": bid, "host.name": "127.0.0.1", "port": port,
            "advertised.host.name": "127.0.0.1", "advertised.port": advertised,
            "zookeeper.connect": self._zk_connect_for(name),
            "log.dirs": str(d / "logs"),
            # An address the user advertises wins (a proxy of their own in front).
            **{k: v for k, v in self.spec.broker_config.items() if k.startswith("advertised.")},
        }
        if peers:
            values["chaoslog.peer.addresses"] = peers
        if self.security is not None:
            values.update(self.security.broker_config(d, str(d)))
        try:
            cfg = BrokerConfig.from_dict({k: str(v) if isinstance(v, bool) else v
                                          for k, v in values.items()})
        except ConfigError as e:
            raise ClusterError(f"broker config: {e}") from None
        (d / "server.properties").write_text(cfg.render())
        argv = [sys.executable, "-m", "cluster.broker", str(d / "server.properties")]
        return LocalProcess(name, argv, d / "node.log", self.marker, cwd=d,
                            env=self._env_of(name))

    def _env_of(self, name: str) -> dict[str, str]:
        base = {"PYTHONUNBUFFERED": "1"} if name.startswith("broker-") else {}
        return {**base, **self.node_env.get(name, {})}

    def set_node_env(self, name: str, env: dict[str, str]) -> None:
        """Extra environment variables of one node's process from its next
        start on, replacing those set before ({} removes them); callable
        before start() too. For test hooks read from the environment, e.g. a
        broker's CHAOSLOG_CONTROLLER_HALT_AFTER_STEP (local backend only)."""
        if name not in self.spec.node_names():
            raise ClusterError(f"no node {name!r} in cluster {self.spec.name!r}; "
                               f"nodes are {', '.join(self.spec.node_names())}")
        self.node_env[name] = {str(k): str(v) for k, v in env.items()}
        if name in self.procs:
            self.procs[name].env = self._env_of(name)
            self.save()

    def _start_proxy(self) -> None:
        d = self.base_dir / "proxy"
        d.mkdir(parents=True, exist_ok=True)
        # The marker on the command line: LocalProcess signals a pid only when
        # it finds the marker there (a pid the OS reused is never ours).
        argv = [sys.executable, "-m", "faults.proxy", "--host", "127.0.0.1",
                "--port", str(self.ports.proxy_api), "--label", self.marker]
        self._proxy = LocalProcess("proxy", argv, d / "proxy.log", self.marker, cwd=d)
        self._proxy.start()
        self.links.api = f"127.0.0.1:{self.ports.proxy_api}"
        self.links.wait_api(timeout=30, describe=lambda: self._tail(self._proxy))

    def _plan_links(self) -> None:
        brokers = [n for n in self.spec.node_names() if n.startswith("broker-")]
        zks = [n for n in self.spec.node_names() if n.startswith("zk-")]
        for b in brokers:
            self.links.add(Link("client", b, f"127.0.0.1:{free_port()}",
                                f"127.0.0.1:{self.ports.broker[b]}"))
            for z in zks:
                self.links.add(Link(b, z, f"127.0.0.1:{free_port()}",
                                    f"127.0.0.1:{self.ports.zk_client[z]}"))
            for other in brokers:
                if other != b:
                    self.links.add(Link(b, other, f"127.0.0.1:{free_port()}",
                                        f"127.0.0.1:{self.ports.broker[other]}"))
        self.links.create_all()

    # --- lifecycle -----------------------------------------------------
    def start(self) -> None:
        t0 = time.monotonic()
        try:
            self.base_dir.mkdir(parents=True, exist_ok=True)
            if self.security is not None:
                self.security.prepare([])   # every address is 127.0.0.1
                self.client_security = self.security.client()
            self._plan()
            if self.spec.proxied:
                self._start_proxy()
                self._plan_links()
            for name in self.spec.node_names():
                p = self._write_zookeeper(name) if name.startswith("zk-") else None
                if p:
                    self.procs[name] = p
                    p.start()
                    self.save()   # a start killed from here on leaves a state the reaper reads
            zkh.wait_zookeeper([("127.0.0.1", p) for p in self.ports.zk_client.values()],
                               START_TIMEOUT, describe=self._describe_failure)
            if self.security is not None:
                self.security.create_users(self.zookeeper_connect)
            for name in self.spec.node_names():
                if name.startswith("broker-"):
                    self.procs[name] = self._write_broker(name)
                    self.procs[name].start()
                    self.save()
            self.wait_brokers_registered()
        except BaseException:
            if not os.environ.get("CHAOSLOG_KEEP_ON_FAILURE"):
                self.destroy()
            raise
        self.startup_seconds = time.monotonic() - t0

    def wait_brokers_registered(self, names: list[str] | None = None,
                                timeout: float = START_TIMEOUT) -> None:
        names = names or [n for n in self.procs if n.startswith("broker-")]
        zkh.wait_registered(
            self.zookeeper_connect, {broker_id_of(n) for n in names}, timeout,
            describe=self._describe_failure,
            alive=lambda: all(self.procs[n].running() for n in names))

    def _tail(self, p: LocalProcess | None, lines: int = 15) -> str:
        if not p or not p.log_path.exists():
            return ""
        text = p.log_path.read_text(errors="replace").splitlines()[-lines:]
        return f"\n--- last lines of {p.log_path}:\n" + "\n".join(text)

    def _describe_failure(self) -> str:
        dead = [n for n, p in self.procs.items() if not p.running()]
        out = f"Nodes not running: {', '.join(dead) or 'none'}."
        for n in dead[:2]:
            out += self._tail(self.procs[n])
        return out

    def destroy(self) -> None:
        for w in self.workers:
            w.kill()
        for name, p in list(self.procs.items()):
            if name.startswith("broker-"):
                p.kill()
        for p in list(self.procs.values()):
            p.kill()
        if self._proxy:
            self._proxy.kill()
        state = self.state_path()
        if state.exists():
            state.unlink()
        if not os.environ.get("CHAOSLOG_KEEP_FILES"):
            shutil.rmtree(self.base_dir, ignore_errors=True)

    # --- nodes ---------------------------------------------------------
    def _proc(self, name: str) -> LocalProcess:
        if name not in self.procs:
            raise ClusterError(f"no node {name!r} in cluster {self.spec.name!r}; "
                               f"nodes are {', '.join(self.spec.node_names())}")
        return self.procs[name]

    def start_node(self, name: str) -> None:
        p = self._proc(name)
        if p.running():
            raise ClusterError(f"{name} is already running")
        p.start()
        self.save()

    def stop_node(self, name: str, timeout: float = 30.0) -> None:
        self._proc(name).stop(timeout)

    def kill_node(self, name: str) -> None:
        self._proc(name).kill()

    def pause_node(self, name: str) -> None:
        p = self._proc(name)
        if not p.running():
            raise ClusterError(f"{name} is not running; cannot pause it")
        p.freeze(True)

    def resume_node(self, name: str) -> None:
        self._proc(name).freeze(False)

    def host_pid(self, name: str) -> int | None:
        p = self.procs.get(name)
        return p.pid if p is not None and p.running() else None

    def nodes(self) -> list[NodeInfo]:
        out = []
        for name in self.spec.node_names():
            p = self.procs.get(name)
            state = STOPPED
            if p and p.running():
                state = PAUSED if p.paused() else RUNNING
            if name.startswith("zk-"):
                out.append(NodeInfo(name, ZOOKEEPER, "127.0.0.1",
                                    self.ports.zk_client.get(name, 0), state))
            else:
                port = self.ports.broker.get(name, 0)
                if self.spec.proxied and self.links.has("client", name):
                    port = self.links.get("client", name).listen_port
                out.append(NodeInfo(name, BROKER, "127.0.0.1", port, state, broker_id_of(name)))
        return out

    def logs(self, name: str) -> str:
        p = self._proc(name)
        return p.log_path.read_text(errors="replace") if p.log_path.exists() else ""

    @property
    def zookeeper_connect(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports.zk_client.values())

    def start_worker(self, name: str, module_argv: list[str], log_path: Path) -> LocalWorker:
        w = LocalWorker(name, module_argv, log_path)
        self.workers.append(w)
        return w

    def exec(self, name: str, argv: list[str]) -> tuple[int, str]:
        raise ClusterError("the local backend has no per-node network namespace: "
                           "use proxied links (--proxied) for network faults")

    # --- persistence, for `chaoslog cluster` commands in other processes --
    def state_path(self) -> Path:
        return state_dir() / f"{self.spec.name}.json"

    def save(self) -> None:
        state = {
            "backend": self.backend, "base_dir": str(self.base_dir),
            "owner": reaper.owner_token(), "persistent": self.persistent,
            "spec": {"name": self.spec.name, "brokers": self.spec.brokers,
                     "zookeepers": self.spec.zookeepers, "broker_config": self.spec.broker_config,
                     "zk_session_timeout_ms": self.spec.zk_session_timeout_ms,
                     "proxied": self.spec.proxied, "security": self.spec.security},
            "ports": {"zk_client": self.ports.zk_client, "zk_peer": self.ports.zk_peer,
                      "broker": self.ports.broker, "proxy_api": self.ports.proxy_api},
            "procs": {n: p.to_json() for n, p in self.procs.items()},
            "proxy": self._proxy.to_json() if self._proxy else None,
            "links": self.links.to_json(),
        }
        path = self.state_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(path)

    @classmethod
    def load(cls, state: dict) -> "LocalCluster":
        spec = ClusterSpec(**state["spec"])
        c = cls(spec, state.get("persistent", True), Path(state["base_dir"]))
        ports = state["ports"]
        c.ports = _Ports(ports["zk_client"], {k: tuple(v) for k, v in ports["zk_peer"].items()},
                         ports["broker"], ports["proxy_api"])
        c.procs = {n: LocalProcess.from_json(p) for n, p in state["procs"].items()}
        c._proxy = LocalProcess.from_json(state["proxy"]) if state.get("proxy") else None
        c.links = LinkTable.from_json(state.get("links") or {})
        if c.security is not None:
            c.client_security = c.security.client()
        return c
