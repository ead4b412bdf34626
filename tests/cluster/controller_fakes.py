"""Fake brokers for controller tests: real TCP servers that decode control
requests with the real codec, record them, reject stale controller epochs as
a broker must, and register themselves in ZooKeeper like a broker."""
from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError

from cluster import zkpaths
from cluster.config import BrokerConfig
from cluster.controller import Controller
from cluster.protocol import control
from cluster.protocol import errors as E
from cluster.zkpaths import BrokerRegistration, LeaderAndIsr
from contracts import deadline


def wait_until(cond: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05,
               what: str = "condition") -> Any:
    """contracts.deadline.wait_until that fails the test when time runs out."""
    v = deadline.wait_until(cond, timeout, interval)
    if not v:
        raise AssertionError(f"timed out waiting for {what}")
    return v


class FakeBroker:
    def __init__(self, broker_id: int, zk_hosts: str, *, catch_up: bool = True,
                 session_timeout: float = 4.0) -> None:
        self.id = broker_id
        self.zk_hosts = zk_hosts
        self.catch_up = catch_up  # followers join the ISR in ZooKeeper themselves
        self.session_timeout = session_timeout
        self.requests: list[tuple[float, Any]] = []
        self.max_epoch = 0
        self.reject_below = 0  # tests can pretend a newer controller was seen
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.stopped = False
        self.zk: KazooClient | None = None
        threading.Thread(target=self._accept, daemon=True).start()

    # -- ZooKeeper ------------------------------------------------------------
    def register(self, zk: KazooClient | None = None) -> KazooClient:
        if zk is None:
            zk = KazooClient(self.zk_hosts, timeout=self.session_timeout)
            zk.start(timeout=10)
        self.zk = zk
        for p in zkpaths.PERSISTENT_PATHS:
            zk.ensure_path(p)
        zk.create(zkpaths.broker_path(self.id),
                  BrokerRegistration(self.id, "127.0.0.1", self.port, 1).encode(), ephemeral=True)
        return zk

    # -- requests -------------------------------------------------------------
    def _accept(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while not self.stopped:
                try:
                    head = self._recv(conn, 4)
                    (size,) = struct.unpack(">i", head)
                    frame = self._recv(conn, size)
                except (OSError, ConnectionError):
                    return
                header, body = control.decode_request(frame)
                resp = self.handle(body)
                try:
                    conn.sendall(control.encode_response(resp, header.correlation_id))
                except OSError:
                    return

    @staticmethod
    def _recv(conn: socket.socket, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            c = conn.recv(n - len(buf))
            if not c:
                raise ConnectionError()
            buf += c
        return buf

    def handle(self, body: Any) -> Any:
        with self.lock:
            epoch = getattr(body, "controller_epoch", None)
            if epoch is not None and (epoch < self.max_epoch or epoch < self.reject_below):
                self.requests.append((time.time(), ("rejected", body)))
                return control.response_for(body, E.STALE_CONTROLLER_EPOCH)
            if epoch is not None:
                self.max_epoch = max(self.max_epoch, epoch)
            self.requests.append((time.time(), body))
        if isinstance(body, control.LeaderAndIsrRequest) and self.catch_up:
            for s in body.partition_states:
                if s.leader not in (self.id, -1) and self.id not in s.isr:
                    threading.Thread(target=self._join_isr, args=(s.topic, s.partition, s.leader_epoch),
                                     daemon=True).start()
        return control.response_for(body, E.NONE)

    def _join_isr(self, topic: str, partition: int, leader_epoch: int) -> None:
        """Pretend the leader saw us catch up: add ourselves to the ISR.

        Only within the leader epoch that made us a follower, as a real leader
        only expands the ISR of the epoch it leads: once the controller has
        moved on (a new leader, or this replica reassigned away) it says so in
        a newer LeaderAndIsr, and joining the newer epoch's ISR would undo it.
        """
        time.sleep(0.05)
        zk = self.zk
        path = zkpaths.leader_and_isr_path(topic, partition)
        for _ in range(50):
            try:
                data, stat = zk.get(path)
                lai = LeaderAndIsr.decode(data)
                if self.id in lai.isr or lai.leader < 0 or lai.leader_epoch != leader_epoch:
                    return
                new = LeaderAndIsr(lai.leader, lai.leader_epoch, lai.isr + (self.id,), lai.controller_epoch)
                zk.set(path, new.encode(), version=stat.version)
                zk.create(zkpaths.ISR_CHANGE_PREFIX, zkpaths.encode_partition_list([(topic, partition)]),
                          sequence=True, makepath=True)
                return
            except BadVersionError:
                time.sleep(0.02)
            except (NoNodeError, Exception):
                return

    def of_type(self, cls: type, include_rejected: bool = False) -> list[Any]:
        with self.lock:
            out = [b for _, b in self.requests if isinstance(b, cls)]
        return out

    def rejected(self) -> list[Any]:
        with self.lock:
            return [b[1] for _, b in self.requests if isinstance(b, tuple)]

    def clear(self) -> None:
        with self.lock:
            self.requests.clear()

    def leader_states(self) -> dict[tuple[str, int], control.PartitionState]:
        """Latest LeaderAndIsr state this broker received per partition."""
        out = {}
        for r in self.of_type(control.LeaderAndIsrRequest):
            for s in r.partition_states:
                cur = out.get((s.topic, s.partition))
                if cur is None or s.leader_epoch >= cur.leader_epoch:
                    out[(s.topic, s.partition)] = s
        return out

    def close_socket(self) -> None:
        self.stopped = True
        try:
            self.sock.close()
        except OSError:
            pass

    def stop(self) -> None:
        self.close_socket()
        if self.zk is not None:
            try:
                self.zk.stop()
                self.zk.close()
            except Exception:
                pass


class Node:
    """A fake broker plus the Controller it runs, sharing one ZooKeeper
    session, as in a real broker process."""

    def __init__(self, broker_id: int, zk_hosts: str, *, register: bool = True,
                 start_controller: bool = True, session_timeout: float = 4.0,
                 config: dict | None = None, halt_after_step: int | None = None,
                 catch_up: bool = True) -> None:
        self.broker = FakeBroker(broker_id, zk_hosts, catch_up=catch_up,
                                 session_timeout=session_timeout)
        self.zk = KazooClient(zk_hosts, timeout=session_timeout)
        self.zk.start(timeout=10)
        self.broker.zk = self.zk
        cfg = {"broker.id": broker_id, "zookeeper.session.timeout.ms": int(session_timeout * 1000),
               "controller.socket.timeout.ms": 5000, "reassignment.agent.interval.ms": 1000}
        cfg.update(config or {})
        self.config = BrokerConfig.from_dict(cfg)
        self.controller = Controller(self.config, self.zk, broker_id, halt_after_step=halt_after_step)
        if register:
            self.broker.register(self.zk)
        if start_controller:
            self.controller.startup()

    @property
    def id(self) -> int:
        return self.broker.id

    def expire_session(self) -> None:
        sid, pw = self.zk.client_id
        other = KazooClient(self.broker.zk_hosts, client_id=(sid, pw))
        other.start(timeout=10)
        other.stop()
        other.close()

    def kill(self) -> None:
        """Die without controlled shutdown: the session ends, ephemerals vanish."""
        self.controller.events.stopping = True
        self.broker.close_socket()
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:
            pass
        self.controller.shutdown(timeout=5)

    def stop(self) -> None:
        try:
            self.controller.shutdown(timeout=10)
        finally:
            self.broker.stop()
