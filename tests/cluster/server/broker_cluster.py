"""Test helpers for the broker tests (ZooKeeper is the harness's
StandaloneZooKeeper, see conftest.py): real `python -m cluster.broker`
processes, and a hand-driven "controller" that writes the topic and
leaderAndISR znodes and sends LeaderAndIsr / UpdateMetadata itself (the
broker tests do not depend on the controller component)."""
from __future__ import annotations

import itertools
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from kazoo.client import KazooClient

from cluster import admin, zkpaths
from cluster.config import render_properties
from cluster.protocol import control
from cluster.zkpaths import LeaderAndIsr, TopicAssignment
from contracts import deadline
from harness.host import free_port
from harness.zookeeper import StandaloneZooKeeper

REPO = Path(__file__).resolve().parents[3]
PYTHON = sys.executable


def wait_until(pred, timeout: float, what: str, interval: float = 0.05):
    """contracts.deadline.wait_until that fails the test when time runs out."""
    v = deadline.wait_until(pred, timeout, interval)
    if not v:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")
    return v


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


class AckedProducer:
    """An acks=all producer in a thread: numbered values to partition 0 of one
    topic, as fast as librdkafka takes them, from entering the `with` block
    until leaving it. `acked` and `errors` record what the brokers answered,
    for checking that no acknowledged value is lost across a leader change."""

    def __init__(self, bootstrap: str, topic: str, value_format: bytes, **config) -> None:
        self.config = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                       "message.timeout.ms": 30000, **config}
        self.topic = topic
        self.value_format = value_format  # e.g. b"m%06d"
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def __enter__(self) -> "AckedProducer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(60)

    def _on_delivery(self, err, msg) -> None:
        if err:
            self.errors.append(str(err))
        else:
            self.acked.append(msg.value())

    def _run(self) -> None:
        import confluent_kafka as ck
        p = ck.Producer(self.config)
        i = 0
        while not self._stop.is_set():
            try:
                p.produce(self.topic, value=self.value_format % i, partition=0,
                          on_delivery=self._on_delivery)
                i += 1
            except BufferError:
                pass
            p.poll(0.001 if i % 50 == 0 else 0)
        p.flush(40)


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


_chroots = itertools.count(1)


class Cluster:
    """Brokers of one test (or module) under their own chroot, plus a kazoo
    client on that chroot and a HandController."""

    def __init__(self, zookeeper: StandaloneZooKeeper, base: Path, n: int,
                 users: dict[str, str] | None = None, **config):
        self.chroot = f"/t{next(_chroots)}"
        root = KazooClient(zookeeper.hosts)
        root.start()
        root.ensure_path(self.chroot)
        root.stop()
        root.close()
        self.zk = KazooClient(zookeeper.hosts + self.chroot)
        self.zk.start()
        for user, password in (users or {}).items():   # before any broker needs them
            admin.set_user(self.zk, user, password)
        self.zk_hosts = zookeeper.hosts
        self.base = base
        self.config = config
        self.brokers: dict[int, BrokerProcess] = {}
        try:
            for i in range(1, n + 1):
                self.add_broker(i)
            for b in self.brokers.values():
                b.wait_registered(self.zk)
        except BaseException:
            self.close()
            raise
        self.hc = HandController(self.zk, self.brokers)
        # As a controller does when brokers start: tell them who is live.
        # Until then a broker refuses client Metadata requests. (Brokers
        # running their controller components hear it from the real one.)
        if not config.get("chaoslog.controller.enable"):
            self.hc.update_metadata(())

    def add_broker(self, i: int, start: bool = True) -> BrokerProcess:
        b = BrokerProcess(i, self.zk_hosts, self.base, chroot=self.chroot, **self.config)
        self.brokers[i] = b
        if start:
            b.start()
        return b

    def restart(self, i: int) -> BrokerProcess:
        old = self.brokers[i]
        old.kill()
        old.start()
        return old.wait_registered(self.zk)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.alive)

    def stderr(self) -> str:
        return "\n".join(f"--- broker {b.id}\n{b.stderr()[-4000:]}" for b in self.brokers.values())

    def close(self) -> None:
        for b in self.brokers.values():
            b.kill()
        self.zk.stop()
        self.zk.close()
