"""Controller benchmarks (issue 4): controlled shutdown, broker failure and
controller failover with many partitions, against Kafka's published figures.

    .venv/bin/python bench/bench_controller.py [--partitions 10000]
        [--failover-partitions 100000] [--partitions-per-topic 100]
        [--cases 1,2,3] [--quick] [--out FILE]

Cases:
 1. Controlled shutdown of a broker that leads every one of --partitions
    partitions (3 brokers, RF 3): from the ControlledShutdown call to the
    controller's answer (0 partitions remaining), and to the moment the
    surviving brokers have received a LeaderAndIsr naming a new leader for
    every one of them. Kafka 1.0: 6.5 min, 1.1: 3 s.
 2. Hard failure of a broker leading a third of --partitions partitions
    (3 brokers, RF 3): its ZooKeeper session is closed (its /brokers/ids
    node goes away at once, as after a SIGKILL once the session expired; the
    session timeout itself is not counted) and its TCP server closed. From
    the kill to the survivors having received LeaderAndIsr with a new live
    leader for every partition it led. No published Kafka figure; the seed
    (000, discussion) estimates 4 ms per unbatched ZooKeeper write.
 3. Controller failover loading --failover-partitions partitions: ZooKeeper is
    pre-populated (assignments and leaderAndISR znodes, 3 live brokers, RF
    3); a new controller starts; from startup() to the controller's
    "failover done" log line (its own read-phase time is reported too), and
    to every live broker having received its LeaderAndIsr INIT.
    Kafka 1.0: 28 s, 1.1: 14 s.

What is real and what is fake:
 * real: ZooKeeper 3.8 (a java subprocess, fsync on unless --zk-no-fsync),
   the Controller (cluster.controller, in this process, with the config
   defaults of a broker), its channel manager and the TCP control protocol
   (cluster.protocol.control) on loopback.
 * fake: the brokers. One subprocess runs a TCP server per broker that
   decodes every control request with the real codec and answers it with no
   error (a per-partition response, as a broker does); it keeps no replica
   logs. Each broker's registration (ephemeral /brokers/ids/N) is held by a
   kazoo session in this process; the controller shares broker 1's session,
   as in a broker process. Broker 1 hosts the controller and is never the
   victim. The ControlledShutdown request is a direct call of
   Controller.handle_controlled_shutdown (what the broker's request handler
   calls), so the one loopback round trip of that request is not counted.
 * the initial state is written straight into ZooKeeper (kazoo multi
   transactions of 100 ops, committed asynchronously), as a previous
   controller would have left it.

Times are time.monotonic() (CLOCK_MONOTONIC, comparable across the processes
of this machine). Every case checks its outcome in ZooKeeper after the clock
stopped. Writes runs/bench/controller-<date>.json (or --out); in it
event_handler_s is the controller's own "<event> took" log line, which it
writes only for events over 1 s (null: under 1 s). Logs (the controller
at INFO, like a broker) go to a temporary file, removed at the end unless
--keep-logs.
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import logging
import math
import multiprocessing
import os
import platform
import re
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.paths import RAW  # noqa: E402
from cluster.protocol import control  # noqa: E402
from cluster.protocol import errors as E  # noqa: E402
from harness.zookeeper import StandaloneZooKeeper  # noqa: E402

KAFKA = {  # Kafka's published figures (references.md, "Numbers to beat")
    1: "1.1: 3 s (1.0: 6.5 min)",
    2: "none published (seed: 4 ms/write unbatched)",
    3: "1.1: 14 s (1.0: 28 s)",
}


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def machine() -> dict:
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), platform.processor())
    mem_kb = int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")))
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_kb / 2**20, 1),
            "kernel": platform.release(), "python": platform.python_version(),
            "loadavg_at_start": open("/proc/loadavg").read().split()[:3]}


def _die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL if this process dies (even by SIGKILL)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


# ----------------------------------------------------------------- ZooKeeper

def zookeeper_server(workdir: Path, fsync: bool) -> StandaloneZooKeeper:
    """The harness's standalone ZooKeeper, tuned as deployed rather than for a
    quick start: a 1 GiB heap and the JVM's default GC and JIT. It dies with
    this process, and its logs stay in workdir (kept on --keep-logs)."""
    return StandaloneZooKeeper(workdir / "zookeeper", fsync=fsync, heap_mb=1024, jvm_opts=(),
                               preexec_fn=_die_with_parent)


# -------------------------------------------------------------- fake brokers
# Everything below up to FakeBrokers runs in the fake-broker subprocess.

class _FakeState:
    """Shared by the fake brokers' server threads (one lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.servers: dict[int, socket.socket] = {}
        self.conns: dict[int, list[socket.socket]] = {}
        self.received: dict[int, list[tuple]] = {}  # bid -> [(t_recv, t_decoded, kind, init, n)]
        self.latest: dict[tuple[str, int], tuple[int, int]] = {}  # tp -> (leader_epoch, leader)
        # the partitions of a victim that must get a new leader (see mark)
        self.victim: int | None = None
        self.survivors: set[int] = set()
        self.target: set[tuple[str, int]] = set()
        self.moved: set[tuple[str, int]] = set()
        self.moved_at: float | None = None

    def on_request(self, bid: int, t_recv: float, body: Any) -> None:
        t_dec = time.monotonic()
        kind = type(body).__name__.replace("Request", "")
        states = getattr(body, "partition_states", ())
        n = len(states) if states else len(getattr(body, "partitions", ()))
        with self.lock:
            self.received.setdefault(bid, []).append((t_recv, t_dec, kind,
                                                      bool(getattr(body, "init", False)), n))
            if not isinstance(body, control.LeaderAndIsrRequest):
                return
            latest = self.latest
            for s in states:
                tp = (s.topic, s.partition)
                cur = latest.get(tp)
                if cur is None or s.leader_epoch >= cur[0]:
                    latest[tp] = (s.leader_epoch, s.leader)
            if self.victim is not None and bid in self.survivors and self.moved_at is None:
                bad = (self.victim, -1)
                for s in states:
                    tp = (s.topic, s.partition)
                    if s.leader not in bad and tp in self.target:
                        self.moved.add(tp)
                if len(self.moved) == len(self.target):
                    self.moved_at = t_recv


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        c = conn.recv(min(n - len(buf), 1 << 20))
        if not c:
            raise ConnectionError("closed")
        buf += c
    return bytes(buf)


def _serve(st: _FakeState, bid: int, conn: socket.socket) -> None:
    with conn:
        while True:
            try:
                (size,) = struct.unpack(">i", _recv_exact(conn, 4))
                frame = _recv_exact(conn, size)
            except (OSError, ConnectionError):
                return
            t_recv = time.monotonic()
            header, body = control.decode_request(frame)
            st.on_request(bid, t_recv, body)
            try:
                conn.sendall(control.encode_response(control.response_for(body, E.NONE),
                                                     header.correlation_id))
            except OSError:
                return


def _accept(st: _FakeState, bid: int, srv: socket.socket) -> None:
    while True:
        try:
            conn, _ = srv.accept()
        except OSError:
            return
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with st.lock:
            st.conns.setdefault(bid, []).append(conn)
        threading.Thread(target=_serve, args=(st, bid, conn), daemon=True).start()


def fake_broker_main(pipe) -> None:
    """The fake-broker process: answers commands from the bench on `pipe`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    st = _FakeState()
    while True:
        try:
            cmd, *args = pipe.recv()
        except EOFError:
            return
        if cmd == "start":  # ids -> {id: port}
            ports = {}
            for bid in args[0]:
                srv = socket.socket()
                srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                srv.bind(("127.0.0.1", 0))
                srv.listen(16)
                st.servers[bid] = srv
                ports[bid] = srv.getsockname()[1]
                threading.Thread(target=_accept, args=(st, bid, srv), daemon=True).start()
            pipe.send(ports)
        elif cmd == "stop":  # close one broker's server and connections
            bid = args[0]
            with st.lock:
                srv = st.servers.pop(bid, None)
                conns = st.conns.pop(bid, [])
            for s in [srv, *conns]:
                if s is not None:
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    s.close()
            pipe.send(True)
        elif cmd == "reset":  # stop every server, forget everything
            for bid in list(st.servers):
                srv = st.servers.pop(bid)
                srv.close()
                for c in st.conns.pop(bid, []):
                    try:
                        c.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    c.close()
            with st.lock:
                old = st
            st = _FakeState()
            del old
            pipe.send(True)
        elif cmd == "mark":  # victim, survivors: watch for new leaders of its partitions
            victim, survivors = args
            with st.lock:
                st.victim = victim
                st.survivors = set(survivors)
                st.target = {tp for tp, (_, leader) in st.latest.items() if leader == victim}
                st.moved = set()
                st.moved_at = None
                pipe.send(len(st.target))
        elif cmd == "moved":
            with st.lock:
                pipe.send((st.moved_at, len(st.moved), len(st.target)))
        elif cmd == "received":  # bid -> [(t_recv, t_decoded, kind, init, n)]
            with st.lock:
                pipe.send({b: list(r) for b, r in st.received.items()})
        elif cmd == "quit":
            pipe.send(True)
            return


class FakeBrokers:
    """The bench's handle on the fake-broker subprocess."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.pipe, child = ctx.Pipe()
        self.proc = ctx.Process(target=fake_broker_main, args=(child,), daemon=True,
                                name="fake-brokers")
        self.proc.start()
        self._lock = threading.Lock()

    def call(self, *cmd: Any) -> Any:
        with self._lock:
            self.pipe.send(cmd)
            if not self.pipe.poll(120):
                raise RuntimeError(f"fake brokers did not answer {cmd[0]}")
            return self.pipe.recv()

    def close(self) -> None:
        try:
            if self.proc.is_alive():
                self.call("quit")
        except Exception:
            pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


# --------------------------------------------------------- ZooKeeper contents

def make_layout(partitions: int, per_topic: int, prefix: str, leader_of=None
                ) -> tuple[dict[str, dict[int, tuple[int, ...]]], int]:
    """{topic: {p: AR}} over brokers 1-3, RF 3. Default: the preferred replica
    (the leader) rotates over the brokers, Kafka's assignment; leader_of(i)
    overrides the first replica of the i-th partition."""
    from cluster.controller.assignment import assign_replicas
    topics: dict[str, dict[int, tuple[int, ...]]] = {}
    n_topics = math.ceil(partitions / per_topic)
    i = 0
    for t in range(n_topics):
        count = min(per_topic, partitions - t * per_topic)
        ar = assign_replicas([1, 2, 3], count, 3, start_index=t % 3, replica_shift=t % 2)
        name = f"{prefix}-{t:05d}"
        topics[name] = {}
        for p in range(count):
            replicas = tuple(ar[p])
            if leader_of is not None:
                first = leader_of(i)
                replicas = (first,) + tuple(b for b in replicas if b != first)
            topics[name][p] = replicas
            i += 1
    return topics, i


def populate(zk, topics: dict[str, dict[int, tuple[int, ...]]], what: str,
             chunk: int = 100, window: int = 64) -> float:
    """Write topic assignments and leaderAndISR znodes (leader = first replica,
    ISR = all replicas, leader epoch 0) in multi transactions of `chunk` ops,
    `window` of them in flight. Returns the seconds it took."""
    from cluster import zkpaths
    from cluster.zkpaths import LeaderAndIsr, TopicAssignment

    def ops():
        for t, parts in topics.items():
            yield zkpaths.topic_path(t), TopicAssignment(parts).encode()
            for p, ar in parts.items():
                yield zkpaths.partition_path(t, p), b""
                yield zkpaths.leader_and_isr_path(t, p), LeaderAndIsr(ar[0], 0, ar, 0).encode()

    total = sum(1 + 2 * len(parts) for parts in topics.values())
    t0 = time.monotonic()
    last_report = t0
    inflight: list = []
    done = 0

    def settle(a) -> None:
        res = a.get(timeout=120)
        bad = [r for r in res if isinstance(r, Exception)]
        if bad:
            raise RuntimeError(f"populating ZooKeeper failed: {bad[0]!r}")

    tx, n = zk.transaction(), 0
    for path, data in ops():
        tx.create(path, data)
        n += 1
        if n == chunk:
            inflight.append((tx.commit_async(), n))
            tx, n = zk.transaction(), 0
            if len(inflight) >= window:
                a, k = inflight.pop(0)
                settle(a)
                done += k
                now = time.monotonic()
                if now - last_report > 2.0:
                    last_report = now
                    progress(f"  {what}: {done:,}/{total:,} znodes "
                             f"({done / (now - t0):,.0f}/s)")
    if n:
        inflight.append((tx.commit_async(), n))
    for a, k in inflight:
        settle(a)
        done += k
    el = time.monotonic() - t0
    progress(f"  {what}: {done:,} znodes in {el:.1f}s ({done / el:,.0f}/s)")
    return el


def read_leaders(zk, topics: dict[str, dict[int, tuple[int, ...]]]):
    """tp -> LeaderAndIsr, pipelined (used to check outcomes, off the clock)."""
    from cluster import zkpaths
    from cluster.zkpaths import LeaderAndIsr
    out = {}
    tps = [(t, p) for t, parts in topics.items() for p in parts]
    for i in range(0, len(tps), 2000):
        pend = [(tp, zk.get_async(zkpaths.leader_and_isr_path(*tp))) for tp in tps[i:i + 2000]]
        for tp, a in pend:
            data, stat = a.get(timeout=60)
            out[tp] = LeaderAndIsr.decode(data, stat.version)
    return out


# ------------------------------------------------------------ a test cluster

class ControllerLog(logging.Handler):
    """Catches the controller's "failover done" and "<event> took" lines."""
    FAILOVER = re.compile(r"failover done in ([\d.]+)s \(read state ([\d.]+)s\)")
    TOOK = re.compile(r"controller \d+: (\w+) took ([\d.]+)s")

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.failovers: list[tuple[float, float, float]] = []  # (t, total, read)
        self.took: list[tuple[float, str, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        now = time.monotonic()
        msg = record.getMessage()
        m = self.FAILOVER.search(msg)
        if m:
            self.failovers.append((now, float(m.group(1)), float(m.group(2))))
        m = self.TOOK.search(msg)
        if m:
            self.took.append((now, m.group(1), float(m.group(2))))

    def reset(self) -> None:
        self.failovers.clear()
        self.took.clear()


class Bench:
    """One case's world: a ZooKeeper chroot, three fake brokers registered in
    it, and (once started) the controller of broker 1."""

    def __init__(self, zk_server: StandaloneZooKeeper, fakes: FakeBrokers, name: str,
                 catcher: ControllerLog) -> None:
        from kazoo.client import KazooClient
        self.hosts = f"{zk_server.hosts}/{name}"
        root = KazooClient(zk_server.hosts)
        root.start(timeout=15)
        root.ensure_path(f"/{name}")
        root.stop()
        root.close()
        self.fakes = fakes
        self.catcher = catcher
        self.clients: dict[int, Any] = {}
        self.ports: dict[int, int] = {}
        self.controller = None
        self.admin = KazooClient(self.hosts, timeout=15)
        self.admin.start(timeout=15)
        from cluster import zkpaths
        for p in zkpaths.PERSISTENT_PATHS:
            self.admin.ensure_path(p)

    def register_brokers(self, ids=(1, 2, 3)) -> None:
        from kazoo.client import KazooClient

        from cluster import zkpaths
        from cluster.zkpaths import BrokerRegistration
        self.ports = self.fakes.call("start", list(ids))
        for b in ids:
            c = KazooClient(self.hosts, timeout=6.0)
            c.start(timeout=15)
            c.create(zkpaths.broker_path(b),
                     BrokerRegistration(b, "127.0.0.1", self.ports[b], 1).encode(), ephemeral=True)
            self.clients[b] = c

    def start_controller(self) -> None:
        from cluster.config import BrokerConfig
        from cluster.controller import Controller
        cfg = BrokerConfig.from_dict({"broker.id": 1, "zookeeper.connect": self.hosts,
                                      "port": self.ports[1]})
        self.controller = Controller(cfg, self.clients[1], 1)
        self.controller.startup()

    def ready_to_move(self, topics: dict[str, dict[int, tuple[int, ...]]], victim: int,
                      survivors: list[int]) -> int:
        """The setup of the cases that move leaderships off a victim broker:
        the state a previous controller left, the brokers registered, a ready
        controller, and the fake survivors watching for a new leader of every
        partition the victim leads. Returns how many partitions they watch."""
        populate(self.admin, topics, "populate")
        self.register_brokers()
        self.catcher.reset()
        self.start_controller()
        self.wait_ready()
        target = self.fakes.call("mark", victim, survivors)
        self.catcher.reset()  # the clock starts now: forget the startup's log lines
        return target

    def init_received(self, ids=(1, 2, 3)) -> dict[int, tuple]:
        """bid -> the first LeaderAndIsr INIT it received (t_recv, t_decoded, kind, init, n)."""
        got = self.fakes.call("received")
        out = {}
        for b in ids:
            for r in got.get(b, []):
                if r[2] == "LeaderAndIsr" and r[3]:
                    out[b] = r
                    break
        return out

    def wait_ready(self, timeout: float = 600) -> None:
        """Until the failover is done, every broker has its INIT and the
        controller's queue stayed empty for a moment."""
        deadline = time.monotonic() + timeout
        while not (self.controller.is_active and self.catcher.failovers
                   and len(self.init_received()) == 3):
            if time.monotonic() > deadline:
                raise RuntimeError("controller did not become ready in time")
            time.sleep(0.1)
        self.wait_idle(max(1.0, deadline - time.monotonic()), quiet=1.0)

    def idle(self) -> bool:
        """The controller's queue is empty and its event thread is waiting
        for the next event (not inside a handler)."""
        c = self.controller
        if c.events.queue_size():
            return False
        t = c.events.thread
        frame = sys._current_frames().get(t.ident) if t is not None else None
        while frame is not None:
            if frame.f_code.co_name == "_take":
                return True
            frame = frame.f_back
        return False

    def wait_idle(self, timeout: float = 300, quiet: float = 0.5) -> None:
        """Until the controller stayed idle and handled no event for `quiet` s."""
        deadline = time.monotonic() + timeout
        since, handled = None, -1
        while time.monotonic() < deadline:
            n = self.controller.events.events_handled
            if self.idle() and n == handled:
                since = since or time.monotonic()
                if time.monotonic() - since >= quiet:
                    return
            else:
                since = None
            handled = n
            time.sleep(0.05)
        raise RuntimeError("controller did not become idle in time")

    def wait_moved(self, timeout: float = 600) -> tuple[float, int, int]:
        deadline = time.monotonic() + timeout
        while True:
            at, moved, target = self.fakes.call("moved")
            if at is not None:
                return at, moved, target
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {moved}/{target} partitions got a new leader in time")
            time.sleep(0.02)

    def close(self) -> None:
        if self.controller is not None:
            try:
                self.controller.shutdown(timeout=30)
            except Exception:
                logging.exception("controller shutdown")
        for c in [*self.clients.values(), self.admin]:
            try:
                c.stop()
                c.close()
            except Exception:
                pass
        try:
            self.fakes.call("reset")
        except Exception:
            pass


# --------------------------------------------------------------------- cases

def case_controlled_shutdown(zk_server, fakes, catcher, n: int, per_topic: int) -> dict:
    victim = 2
    progress(f"case 1: controlled shutdown of broker {victim} leading {n:,} partitions")
    topics, total = make_layout(n, per_topic, "cs", leader_of=lambda i: victim)
    b = Bench(zk_server, fakes, "case1", catcher)
    try:
        target = b.ready_to_move(topics, victim, [1, 3])
        assert target == total, (target, total)
        progress(f"  ControlledShutdown({victim}) ...")
        t0 = time.monotonic()
        fut = b.controller.handle_controlled_shutdown(victim, 1)
        err, remaining = fut.result(timeout=900)
        t_answer = time.monotonic() - t0
        at, moved, _ = b.wait_moved()
        t_moved = at - t0
        b.wait_idle()
        handler = next((d for _, name, d in catcher.took if name == "ControlledShutdown"), None)
        leaders = read_leaders(b.admin, topics)
        still = sum(1 for lai in leaders.values() if lai.leader == victim)
        dead_leader = sum(1 for lai in leaders.values() if lai.leader not in (1, 3))
        in_isr = sum(1 for lai in leaders.values() if victim in lai.isr)
        ok = err == E.NONE and not remaining and still == 0 and dead_leader == 0
        progress(f"  answer after {t_answer:.2f}s (error {err}, {len(remaining)} remaining); "
                 f"new leaders delivered to brokers 1 and 3 after {t_moved:.2f}s; "
                 f"ZooKeeper: {still} still led by {victim}, {in_isr} ISRs still with {victim}")
        return {"case": 1, "name": "controlled shutdown", "partitions": total,
                "topics": len(topics), "victim_led": total,
                "answer_s": round(t_answer, 3), "leaders_delivered_s": round(t_moved, 3),
                "event_handler_s": handler, "error": err, "remaining": len(remaining),
                "zk_still_led_by_victim": still, "zk_isr_with_victim": in_isr,
                "ok": ok, "figure_s": round(t_answer, 3)}
    finally:
        b.close()


def case_broker_failure(zk_server, fakes, catcher, n: int, per_topic: int) -> dict:
    victim = 3
    topics, total = make_layout(n, per_topic, "kf")
    led = sum(1 for parts in topics.values() for ar in parts.values() if ar[0] == victim)
    progress(f"case 2: broker {victim} (leading {led:,} of {total:,} partitions) loses its "
             "ZooKeeper session")
    b = Bench(zk_server, fakes, "case2", catcher)
    try:
        target = b.ready_to_move(topics, victim, [1, 2])
        assert target == led, (target, led)
        progress(f"  killing broker {victim} (closing its session) ...")
        c = b.clients.pop(victim)
        t0 = time.monotonic()
        c.stop()  # closeSession: /brokers/ids/3 is gone when this returns
        t_session_closed = time.monotonic() - t0
        fakes.call("stop", victim)
        c.close()
        at, moved, _ = b.wait_moved()
        t_moved = at - t0
        # the event goes on after the send (ISR shrinks were already written,
        # state-change log flush): wait for it to finish, off the clock
        b.wait_idle()
        handler = next((d for _, name, d in catcher.took if name == "BrokerChange"), None)
        leaders = read_leaders(b.admin, topics)
        bad_leader = sum(1 for lai in leaders.values() if lai.leader not in (1, 2))
        in_isr = sum(1 for lai in leaders.values() if victim in lai.isr)
        ok = bad_leader == 0
        progress(f"  new leaders for {moved:,} partitions delivered to brokers 1 and 2 after "
                 f"{t_moved:.2f}s; ZooKeeper: {bad_leader} partitions without a live leader, "
                 f"{in_isr} ISRs still with {victim}")
        return {"case": 2, "name": "broker failure (session closed)", "partitions": total,
                "topics": len(topics), "victim_led": led,
                "session_close_s": round(t_session_closed, 3),
                "leaders_delivered_s": round(t_moved, 3), "event_handler_s": handler,
                "zk_without_live_leader": bad_leader, "zk_isr_with_victim": in_isr,
                "ok": ok, "figure_s": round(t_moved, 3)}
    finally:
        b.close()


def case_failover(zk_server, fakes, catcher, n: int, per_topic: int) -> dict:
    progress(f"case 3: controller failover loading {n:,} partitions")
    topics, total = make_layout(n, per_topic, "fo")
    b = Bench(zk_server, fakes, "case3", catcher)
    try:
        populate_s = populate(b.admin, topics, "populate")
        b.register_brokers()
        catcher.reset()
        progress("  starting the controller ...")
        t0 = time.monotonic()
        b.start_controller()
        deadline = time.monotonic() + 900
        while not catcher.failovers or len(b.init_received()) < 3:
            if time.monotonic() > deadline:
                raise RuntimeError("failover did not finish in time")
            time.sleep(0.05)
        t_log, own_total, own_read = catcher.failovers[0]
        inits = b.init_received()
        t_init = max(r[0] for r in inits.values()) - t0
        t_init_decoded = max(r[1] for r in inits.values()) - t0
        sizes = {bid: r[4] for bid, r in inits.items()}
        ok = all(s == total for s in sizes.values())
        progress(f"  failover done after {t_log - t0:.2f}s from startup (controller's own "
                 f"figure {own_total:.2f}s, read phase {own_read:.2f}s); LeaderAndIsr INIT "
                 f"received by all 3 brokers after {t_init:.2f}s ({sizes})")
        return {"case": 3, "name": "controller failover", "partitions": total,
                "topics": len(topics), "znodes_populated": total * 2 + len(topics),
                "populate_s": round(populate_s, 2),
                "startup_to_failover_done_s": round(t_log - t0, 3),
                "controller_failover_s": own_total, "controller_read_phase_s": own_read,
                "init_delivered_s": round(t_init, 3),
                "init_decoded_by_brokers_s": round(t_init_decoded, 3),
                "init_partitions_per_broker": sizes, "ok": ok,
                "figure_s": round(t_log - t0, 3)}
    finally:
        b.close()


# ---------------------------------------------------------------------- main

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=10000,
                    help="partitions in cases 1 and 2 (default 10000)")
    ap.add_argument("--failover-partitions", type=int, default=100000,
                    help="partitions in case 3 (default 100000)")
    ap.add_argument("--partitions-per-topic", type=int, default=100,
                    help="partitions per topic (default 100; the controller reads one "
                         "assignment znode per topic)")
    ap.add_argument("--cases", default="1,2,3")
    ap.add_argument("--quick", action="store_true", help="1/10 of the sizes")
    ap.add_argument("--zk-no-fsync", action="store_true",
                    help="ZooKeeper forceSync=no (default: fsync, as deployed)")
    ap.add_argument("--keep-logs", action="store_true")
    ap.add_argument("--out", type=Path, default=None,
                    help="results file (default runs/bench/controller-<date>.json)")
    a = ap.parse_args()
    cases = sorted({int(c) for c in a.cases.split(",") if c.strip()})
    if not set(cases) <= {1, 2, 3}:
        ap.error("--cases takes 1, 2 and 3")
    n1 = a.partitions // 10 if a.quick else a.partitions
    n3 = a.failover_partitions // 10 if a.quick else a.failover_partitions

    # SIGTERM/SIGHUP unwind through the finally blocks below
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: sys.exit(128 + s))

    work = Path(tempfile.mkdtemp(prefix="chaoslog-bench-controller-"))
    log_file = work / "bench.log"
    fmt = "%(asctime)s %(levelname)s %(name)s [%(threadName)s]: %(message)s"
    fh = logging.FileHandler(log_file)
    fh.setFormatter(logging.Formatter(fmt))
    root = logging.getLogger()
    root.setLevel(logging.INFO)  # as a broker: controller and state-change log at INFO
    root.addHandler(fh)
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    catcher = ControllerLog()
    logging.getLogger("chaoslog.controller").addHandler(catcher)

    info = machine()
    progress(f"machine: {info['cpu']}, {info['cores']} cores, load {' '.join(info['loadavg_at_start'])}")
    zk_server = zookeeper_server(work, fsync=not a.zk_no_fsync)
    fakes = None
    results: list[dict] = []
    failed = None
    try:
        fakes = FakeBrokers()
        zk_server.start()
        progress(f"ZooKeeper 3.8 on {zk_server.hosts} (fsync {'off' if a.zk_no_fsync else 'on'}); "
                 f"fake brokers in process {fakes.proc.pid}; logs in {log_file}")
        runners = {1: (case_controlled_shutdown, n1), 2: (case_broker_failure, n1),
                   3: (case_failover, n3)}
        for c in cases:
            fn, n = runners[c]
            try:
                results.append(fn(zk_server, fakes, catcher, n, a.partitions_per_topic))
            except Exception as e:
                logging.exception("case %d failed", c)
                progress(f"case {c} FAILED: {e!r}")
                results.append({"case": c, "error": repr(e), "ok": False})
                failed = failed or e
    finally:
        if fakes is not None:
            fakes.close()
        zk_server.stop()
        fh.close()
        root.removeHandler(fh)

    print()
    print(f"{'case':44s} {'chaoslog':>10s}   Kafka")
    for r in results:
        c = r["case"]
        if "figure_s" not in r:
            label = {1: "controlled shutdown", 2: "broker failure", 3: "failover"}[c]
            print(f"{c}. {label:41s} {'FAILED':>10s}   {KAFKA[c]}")
            continue
        if c == 1:
            label = f"controlled shutdown, {r['victim_led']:,} leaders"
        elif c == 2:
            label = f"broker failure, {r['victim_led']:,} of {r['partitions']:,} leaders"
        else:
            label = f"failover, {r['partitions']:,} partitions"
        flag = "" if r.get("ok") else " (CHECK FAILED)"
        print(f"{c}. {label:41s} {r['figure_s']:>9.2f}s   {KAFKA[c]}{flag}")
        if c == 1:
            print(f"   {'new leaders delivered to the survivors':41s} {r['leaders_delivered_s']:>9.2f}s")
        if c == 3:
            print(f"   {'controller read phase (its own figure)':41s} {r['controller_read_phase_s']:>9.2f}s")
            print(f"   {'controller failover (its own figure)':41s} {r['controller_failover_s']:>9.2f}s")
            print(f"   {'INIT LeaderAndIsr delivered to 3 brokers':41s} {r['init_delivered_s']:>9.2f}s")
    out = (a.out or RAW / f"controller-{datetime.date.today()}.json").resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "machine": info,
           "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "setup": {"zookeeper": f"3.8 standalone subprocess, forceSync="
                                  f"{'no' if a.zk_no_fsync else 'yes'}, tickTime 500 ms",
                     "controller": "cluster.controller.Controller in the bench process, "
                                   "broker config defaults, logging at INFO to a file",
                     "brokers": "3 fake brokers (TCP servers decoding control requests with "
                                "the real codec, answering no error) in one subprocess; "
                                "registrations held by kazoo sessions in the bench process",
                     "replication_factor": 3, "partitions_per_topic": a.partitions_per_topic,
                     "quick": a.quick},
           "kafka": {"1": "controlled shutdown, 10,000 partitions: 1.1.0 3 s, 1.0.0 6.5 min",
                     "3": "failover loading 100,000 partitions: 1.1.0 14 s, 1.0.0 28 s"},
           "results": results}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\nwritten to {out.relative_to(REPO) if out.is_relative_to(REPO) else out}")
    if a.keep_logs or failed:
        print(f"logs kept in {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
