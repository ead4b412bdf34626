"""Test helpers for the broker tests: a real ZooKeeper 3.8 (Debian's
libzookeeper-java) as a java subprocess, real `python -m cluster.broker`
processes, and a hand-driven "controller" that writes the topic and
leaderAndISR znodes and sends LeaderAndIsr / UpdateMetadata itself (the
broker tests do not depend on the controller component)."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kazoo.client import KazooClient

from cluster import zkpaths
from cluster.config import render_properties
from cluster.protocol import control
from cluster.zkpaths import LeaderAndIsr, TopicAssignment

REPO = Path(__file__).resolve().parents[3]
PYTHON = sys.executable

ZK_JARS = ["zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-log4j12.jar",
           "log4j-1.2.jar", "netty-handler.jar", "netty-transport.jar", "netty-common.jar",
           "netty-buffer.jar", "netty-codec.jar", "netty-resolver.jar",
           "netty-transport-native-epoll.jar", "netty-transport-native-unix-common.jar",
           "metrics-core.jar", "commons-cli.jar", "commons-io.jar", "snappy-java.jar"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(pred, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class ZooKeeper:
    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="chaoslog-broker-zk-"))
        self.port = free_port()
        self.proc = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> "ZooKeeper":
        conf, data = self.dir / "conf", self.dir / "data"
        conf.mkdir()
        data.mkdir()
        (conf / "zoo.cfg").write_text(
            f"tickTime=500\ndataDir={data}\nclientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
            "4lw.commands.whitelist=*\nmaxClientCnxns=0\nminSessionTimeout=1000\n"
            "forceSync=no\n")
        (conf / "log4j.properties").write_text(
            "log4j.rootLogger=WARN, F\nlog4j.appender.F=org.apache.log4j.FileAppender\n"
            f"log4j.appender.F.File={self.dir}/zookeeper.log\n"
            "log4j.appender.F.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.F.layout.ConversionPattern=%d %p [%t] %c: %m%n\n")
        cp = ":".join([str(conf)] + [f"/usr/share/java/{j}" for j in ZK_JARS
                                     if os.path.exists(f"/usr/share/java/{j}")])
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             f"-Dlog4j.configuration=file:{conf}/log4j.properties", "-cp", cp,
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(conf / "zoo.cfg")],
            stdout=subprocess.DEVNULL, stderr=open(self.dir / "stderr.log", "wb"),
            start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("ZooKeeper exited: "
                                   + (self.dir / "stderr.log").read_text()[-2000:])
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"ruok")
                    if s.recv(4) == b"imok":
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("ZooKeeper did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class BrokerProcess:
    def __init__(self, broker_id: int, zk_hosts: str, base_dir: Path, chroot: str = "",
                 **overrides):
        self.id = broker_id
        self.port = free_port()
        self.dir = base_dir / f"broker-{broker_id}"
        self.log_dir = self.dir / "logs"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = {
            "broker.id": broker_id, "host.name": "127.0.0.1", "port": self.port,
            "advertised.host.name": "127.0.0.1", "zookeeper.connect": zk_hosts + chroot,
            "log.dirs": str(self.log_dir), "zookeeper.session.timeout.ms": 4000,
            "controlled.shutdown.enable": False, "chaoslog.controller.enable": False,
            "replica.high.watermark.checkpoint.interval.ms": 500,
            **overrides}
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.stderr_path = self.dir / "stderr.log"

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "BrokerProcess":
        self.starts += 1  # each start bumps /brokers/start_epochs/<id> by one
        cfg = self.dir / "broker.properties"
        cfg.write_text(render_properties(self.config))
        self.proc = subprocess.Popen([PYTHON, "-m", "cluster.broker", str(cfg)], cwd=REPO,
                                     stdout=subprocess.DEVNULL,
                                     stderr=open(self.stderr_path, "ab"),
                                     start_new_session=True)
        return self

    def wait_registered(self, zk: KazooClient, timeout: float = 30) -> "BrokerProcess":
        def ok():
            if self.proc.poll() is not None:
                raise AssertionError(f"broker {self.id} exited {self.proc.returncode}:\n"
                                     + self.stderr()[-3000:])
            # This incarnation's registration: a killed predecessor's znode
            # lingers until its session expires.
            try:
                reg = zkpaths.BrokerRegistration.decode(
                    self.id, zk.get(zkpaths.broker_path(self.id))[0])
            except Exception:
                return False
            return reg.start_epoch >= self.starts
        wait_until(ok, timeout, f"broker {self.id} registration")
        return self

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def terminate(self, timeout: float = 30) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def send_frame(addr, frame: bytes, timeout: float = 10) -> bytes | None:
    """Send one request frame; return the response frame (no size), or None
    if the broker closed the connection."""
    with socket.create_connection(addr, timeout=timeout) as s:
        s.sendall(frame)
        return read_frame(s)


def read_frame(s: socket.socket) -> bytes | None:
    head = _recv_exactly(s, 4)
    if head is None:
        return None
    (n,) = struct.unpack(">i", head)
    return _recv_exactly(s, n)


def _recv_exactly(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


class HandController:
    """Plays the controller by hand: znodes + control requests over sockets."""

    def __init__(self, zk: KazooClient, brokers: dict[int, BrokerProcess], controller_id: int = 99,
                 controller_epoch: int = 1):
        self.zk = zk
        self.brokers = brokers
        self.controller_id = controller_id
        self.controller_epoch = controller_epoch
        self.corr = 0

    def send(self, broker_id: int, request):
        self.corr += 1
        frame = control.encode_request(request, self.corr, "hand-controller")
        raw = send_frame(self.brokers[broker_id].address, frame)
        assert raw is not None, f"broker {broker_id} closed the connection"
        return control.decode_response(request.API_KEY, raw)

    def live_endpoints(self):
        return tuple(control.BrokerEndpoint(b.id, *b.address)
                     for b in self.brokers.values() if b.alive)

    def create_topic(self, topic: str, assignment: dict[int, tuple[int, ...]]) -> None:
        self.zk.create(zkpaths.topic_path(topic), TopicAssignment(assignment).encode(),
                       makepath=True)
        states = []
        for p, replicas in assignment.items():
            lai = LeaderAndIsr(replicas[0], 0, tuple(replicas), self.controller_epoch)
            path = zkpaths.leader_and_isr_path(topic, p)
            self.zk.create(path, lai.encode(), makepath=True)
            states.append(self.state(topic, p))
        self.push(states)

    def state(self, topic: str, p: int) -> control.PartitionState:
        data, stat = self.zk.get(zkpaths.leader_and_isr_path(topic, p))
        lai = LeaderAndIsr.decode(data, stat.version)
        a = TopicAssignment.decode(self.zk.get(zkpaths.topic_path(topic))[0])
        return control.PartitionState(topic, p, lai.leader, lai.leader_epoch, lai.isr,
                                      stat.version, a.partitions[p])

    def push(self, states, to: set[int] | None = None) -> dict[int, object]:
        """LeaderAndIsr to the live replicas of each partition, then
        UpdateMetadata to every live broker."""
        out = {}
        live = {b.id for b in self.brokers.values() if b.alive}
        per_broker: dict[int, list] = {}
        for s in states:
            for r in s.replicas:
                if r in live and (to is None or r in to):
                    per_broker.setdefault(r, []).append(s)
        leaders = self.live_endpoints()
        for b, ss in per_broker.items():
            out[b] = self.send(b, control.LeaderAndIsrRequest(
                self.controller_id, self.controller_epoch, False, tuple(ss), leaders))
        self.update_metadata(states)
        return out

    def update_metadata(self, states) -> None:
        for b in self.brokers.values():
            if b.alive:
                self.send(b.id, control.UpdateMetadataRequest(
                    self.controller_id, self.controller_epoch, tuple(states),
                    self.live_endpoints()))

    def elect(self, topic: str, p: int, leader: int, isr: tuple[int, ...]):
        """Write a new leader (epoch + 1) conditionally, then tell the brokers."""
        path = zkpaths.leader_and_isr_path(topic, p)
        data, stat = self.zk.get(path)
        cur = LeaderAndIsr.decode(data, stat.version)
        new = LeaderAndIsr(leader, cur.leader_epoch + 1, tuple(isr), self.controller_epoch)
        self.zk.set(path, new.encode(), version=stat.version)
        return self.push([self.state(topic, p)])
