"""The two coordination modes side by side (issue 20): a broker failure at
1K and 10K partitions, and what each mode costs ZooKeeper.

    .venv/bin/python bench/bench_coordination.py [--partitions 1000,10000]
        [--modes controller,v2] [--partitions-per-topic 100] [--out FILE]

For each partition count, each mode in turn on one ZooKeeper (3 brokers,
RF 3, the preferred replica rotating over the brokers, so broker 3 leads a
third of the partitions):

  steady state   ZooKeeper's watch count (data and child watches, `mntr`)
                 with every partition led, and its writes per second over 5
                 idle seconds (the zxid advances by one per write transaction).
  broker failure broker 3 loses its ZooKeeper session (closed, as after a
                 crash once the session expired; the session timeout itself is
                 not counted). From the close to every partition it led having
                 a new leader applied by a surviving broker; the ZooKeeper
                 writes that took, and their rate.
  V2 only        startup (from the brokers' start to every partition led: V2
                 elects them one by one) and how long until a surviving broker
                 that does not lead a moved partition has its new leader in
                 the metadata it gives clients (docs/design.md#v2-broker,
                 "Metadata").

What is real and what is fake:
 * real, both modes: ZooKeeper 3.8 (a java subprocess, fsync on), kazoo.
 * controller mode: as bench/bench_controller.py case 2: the real Controller
   (cluster.controller) in this process and the real control protocol to
   three fake brokers, which decode every request and keep no logs. A fake
   broker sets no ZooKeeper watch; a real one adds one (on /controller).
 * V2: three broker processes, each with the real V2 component
   (cluster/v2/coordinator.py: elections, lock watches, state-change queue,
   metadata reads) on its own ZooKeeper session and thread, driving a
   recording ReplicaManager (no logs, no fetchers): "applied" is the moment
   the component hands the ReplicaManager the LeaderAndIsr that makes it
   leader.

Writes runs/bench/coordination-<date>.json (or --out); progress on stderr.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import logging
import multiprocessing
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench.paths import RAW  # noqa: E402
from bench_controller import (Bench, ControllerLog, FakeBrokers, _die_with_parent,  # noqa: E402
                              machine, make_layout, populate, progress, read_leaders,
                              zookeeper_server)
from contracts.deadline import wait_until  # noqa: E402
from harness.resources import zk_watches as zk_watch_count  # noqa: E402
from harness.zk_probe import four_letter  # noqa: E402

VICTIM = 3
SURVIVORS = (1, 2)
BROKERS = (1, 2, 3)
IDLE_S = 5.0


# ------------------------------------------------------------ ZooKeeper's numbers

def zk_watches(port: int) -> int:
    """Data and child watches (`mntr`), -1 when ZooKeeper does not say."""
    n = zk_watch_count("127.0.0.1", port)
    return -1 if n is None else n


def zk_zxid(port: int) -> int:
    m = re.search(r"Zxid:\s*0x([0-9a-fA-F]+)", four_letter("127.0.0.1", port, "srvr"))
    return int(m.group(1), 16) & 0xFFFFFFFF if m else -1   # the counter, without the epoch


def idle_writes_per_s(port: int) -> float:
    before = zk_zxid(port)
    time.sleep(IDLE_S)
    return round((zk_zxid(port) - before) / IDLE_S, 2)


# ---------------------------------------------------------------- controller mode

def controller_case(zk_server, fakes, catcher, n: int, per_topic: int) -> dict:
    port = zk_server.port
    topics, total = make_layout(n, per_topic, f"c{n}")
    b = Bench(zk_server, fakes, f"controller-{n}", catcher)
    try:
        led = b.ready_to_move(topics, VICTIM, list(SURVIVORS))
        watches, idle = zk_watches(port), idle_writes_per_s(port)
        progress(f"  controller mode, {total:,} partitions: {watches:,} watches, "
                 f"{idle} writes/s idle; closing broker {VICTIM}'s session ...")
        z0 = zk_zxid(port)
        c = b.clients.pop(VICTIM)
        t0 = time.monotonic()
        c.stop()
        fakes.call("stop", VICTIM)
        c.close()
        at, moved, _ = b.wait_moved()
        leaders_s = at - t0
        z1 = zk_zxid(port)
        b.wait_idle()
        writes = zk_zxid(port) - z0
        bad = sum(1 for lai in read_leaders(b.admin, topics).values()
                  if lai.leader not in SURVIVORS)
        progress(f"  new leaders for {moved:,} partitions after {leaders_s:.2f}s "
                 f"({writes:,} ZooKeeper writes); {bad} without a live leader")
        return {"mode": "controller", "partitions": total, "victim_led": led,
                "watches": watches, "idle_writes_per_s": idle,
                "leaders_s": round(leaders_s, 3),
                "writes_until_leaders": z1 - z0, "writes_in_failover": writes,
                "writes_per_s_until_leaders": round((z1 - z0) / max(leaders_s, 1e-3), 1),
                "without_live_leader": bad, "ok": bad == 0}
    finally:
        b.close()


# ---------------------------------------------------------------------------- V2
# Everything up to V2Broker runs in a V2 broker's process.

class LeadershipRecorder:
    """The ReplicaManager as the V2 component sees it, recording leadership
    instead of keeping logs. Called on the component's event loop only."""

    class Replica:
        def __init__(self, epoch: int, is_leader: bool):
            self.epoch, self.is_leader = epoch, is_leader

    def __init__(self, broker_id: int, metadata) -> None:
        self.broker_id = broker_id
        self.metadata = metadata
        self.replicas: dict[tuple[str, int], LeadershipRecorder.Replica] = {}
        self.victim: int | None = None
        self.target: set[tuple[str, int]] = set()
        self.led_at: dict[tuple[str, int], float] = {}    # target partitions led here, when
        self.known: set[tuple[str, int]] = set()          # targets with a live leader in metadata
        self.known_at: float | None = None

    def partition(self, tp):
        return self.replicas.get(tp)

    def handle_leader_and_isr(self, req) -> None:
        now = time.monotonic()
        for s in req.partition_states:
            tp = (s.topic, s.partition)
            r = self.replicas.get(tp)
            if r is not None and s.leader_epoch <= r.epoch:
                continue                      # as the ReplicaManager: not newer
            self.replicas[tp] = self.Replica(s.leader_epoch, s.leader == self.broker_id)
            if s.leader == self.broker_id and tp in self.target:
                self.led_at.setdefault(tp, now)

    def handle_stop_replica(self, req) -> None:
        for tp in req.partitions:
            self.replicas.pop((tp.topic, tp.partition), None)

    def handle_update_metadata(self, req) -> None:
        self.metadata.update(req)
        for s in req.partition_states:
            tp = (s.topic, s.partition)
            if tp in self.target:
                if s.leader >= 0 and s.leader != self.victim:
                    self.known.add(tp)
                else:
                    self.known.discard(tp)
        if self.target and self.known_at is None and len(self.known) == len(self.target):
            self.known_at = time.monotonic()

    def leading(self) -> list[tuple[str, int]]:
        return [tp for tp, r in self.replicas.items() if r.is_leader]

    def mark(self, victim: int, target: set[tuple[str, int]]) -> None:
        self.victim, self.target = victim, target
        self.led_at, self.known, self.known_at = {}, set(), None


def v2_broker_main(pipe, broker_id: int, hosts: str, log_file: str) -> None:
    """A V2 broker without a data plane, answering the bench on `pipe`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(filename=log_file, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    from cluster import zkpaths
    from cluster.config import BrokerConfig
    from cluster.server.metadata_cache import MetadataCache
    from cluster.server.zk_client import ZkClient
    from cluster.v2.coordinator import Coordinator

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def on_loop(fn, timeout: float = 1800):
        async def call():
            r = fn()
            return await r if asyncio.iscoroutine(r) else r
        return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout)

    cfg = BrokerConfig.from_dict({"broker.id": broker_id, "zookeeper.connect": hosts,
                                  "coordination": "v2", "port": 9000 + broker_id})
    zk = ZkClient(hosts, 6000, 15000)
    zk.start(loop)
    metadata = MetadataCache(broker_id, ("127.0.0.1", 9000 + broker_id))
    rm = LeadershipRecorder(broker_id, metadata)
    coordinator = Coordinator(cfg, zk, rm, metadata)
    while True:
        try:
            cmd, *args = pipe.recv()
        except EOFError:
            return
        if cmd == "start":
            t0 = time.monotonic()
            on_loop(coordinator.start)
            zk.kazoo.create(zkpaths.broker_path(broker_id),
                            zkpaths.BrokerRegistration(broker_id, "127.0.0.1", 9000 + broker_id,
                                                       1).encode(), ephemeral=True)
            pipe.send(t0)
        elif cmd == "leading":
            pipe.send(on_loop(rm.leading))
        elif cmd == "mark":
            pipe.send(on_loop(lambda: rm.mark(*args)))
        elif cmd == "moved":
            pipe.send(on_loop(lambda: (dict(rm.led_at), rm.known_at)))
        elif cmd == "crash":         # the session goes, as after a crash once it expired
            t0 = time.monotonic()
            zk.kazoo.stop()
            pipe.send(t0)
        elif cmd == "quit":
            try:
                on_loop(coordinator.shutdown, 30)
                zk.stop()
            finally:
                pipe.send(True)
            return


class V2Broker:
    """The bench's handle on one V2 broker process."""

    def __init__(self, broker_id: int, hosts: str, work: Path) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.pipe, child = ctx.Pipe()
        log_file = str(work / f"v2-broker-{broker_id}.log")
        self.proc = ctx.Process(target=_v2_child, args=(child, broker_id, hosts, log_file),
                                daemon=True,
                                name=f"v2-broker-{broker_id}")
        self.proc.start()

    def call(self, *cmd: Any, timeout: float = 1800) -> Any:
        self.pipe.send(cmd)
        if not self.pipe.poll(timeout):
            raise RuntimeError(f"V2 broker process did not answer {cmd[0]}")
        return self.pipe.recv()

    def close(self) -> None:
        try:
            if self.proc.is_alive():
                self.call("quit", timeout=60)
        except Exception:
            pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


def _v2_child(pipe, broker_id: int, hosts: str, log_file: str) -> None:
    _die_with_parent()
    v2_broker_main(pipe, broker_id, hosts, log_file)


def v2_case(zk_server, work: Path, n: int, per_topic: int) -> dict:
    from kazoo.client import KazooClient

    from cluster import zkpaths
    port = zk_server.port
    name = f"v2-{n}"
    root = KazooClient(zk_server.hosts)
    root.start(timeout=15)
    root.ensure_path(f"/{name}")
    root.stop()
    root.close()
    hosts = f"{zk_server.hosts}/{name}"
    (work / name).mkdir()
    admin = KazooClient(hosts, timeout=15)
    admin.start(timeout=15)
    brokers: dict[int, V2Broker] = {}
    try:
        for p in zkpaths.PERSISTENT_PATHS:
            admin.ensure_path(p)
        topics, total = make_layout(n, per_topic, f"v{n}")
        populate(admin, topics, "populate")      # assignments and leaderAndISR, no locks
        brokers = {b: V2Broker(b, hosts, work / name) for b in BROKERS}
        progress(f"  V2, {total:,} partitions: starting 3 brokers (each elects its "
                 "preferred partitions) ...")
        t0 = time.monotonic()
        threads = [threading.Thread(target=brokers[b].call, args=("start",)) for b in BROKERS]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        leading: dict[int, list] = {}

        def all_led() -> bool:
            leading.update({b: brokers[b].call("leading") for b in BROKERS})
            return sum(len(v) for v in leading.values()) == total
        if not wait_until(all_led, 1800, 0.2):
            raise RuntimeError(f"V2 startup: {sum(len(v) for v in leading.values())} of "
                               f"{total} partitions led after 30 minutes")
        startup_s = time.monotonic() - t0
        target = {tuple(tp) for tp in leading[VICTIM]}
        time.sleep(2.0)                          # let the metadata reads settle
        watches, idle = zk_watches(port), idle_writes_per_s(port)
        progress(f"  V2 startup: every partition led after {startup_s:.1f}s; {watches:,} "
                 f"watches, {idle} writes/s idle; closing broker {VICTIM}'s session ...")
        for b in SURVIVORS:
            brokers[b].call("mark", VICTIM, target)
        z0 = zk_zxid(port)
        t_crash = brokers[VICTIM].call("crash")
        moved: dict = {}
        known: dict[int, float | None] = {}

        def all_moved() -> bool:
            for b in SURVIVORS:
                led_at, known[b] = brokers[b].call("moved")
                moved[b] = led_at
            return len(set().union(*moved.values())) == len(target)
        if not wait_until(all_moved, 1800, 0.05):
            raise RuntimeError(f"V2: only {len(set().union(*moved.values()))} of {len(target)} "
                               "partitions got a new leader in 30 minutes")
        at = max(min(moved[b][tp] for b in SURVIVORS if tp in moved[b]) for tp in target)
        leaders_s = at - t_crash
        z1 = zk_zxid(port)
        wait_until(lambda: all_moved() and all(known[b] is not None for b in SURVIVORS), 300, 0.2)
        metadata_s = {b: (round(known[b] - t_crash, 3) if known[b] is not None else None)
                      for b in SURVIVORS}
        time.sleep(2.0)
        writes = zk_zxid(port) - z0
        split = sum(1 for tp in target if all(tp in moved[b] for b in SURVIVORS))
        progress(f"  V2: new leaders for {len(target):,} partitions after {leaders_s:.2f}s "
                 f"({z1 - z0:,} ZooKeeper writes); in every survivor's metadata after "
                 f"{max(v for v in metadata_s.values() if v is not None):.2f}s; "
                 f"{split} partitions led by both survivors")
        return {"mode": "v2", "partitions": total, "victim_led": len(target),
                "startup_s": round(startup_s, 3), "watches": watches,
                "idle_writes_per_s": idle, "leaders_s": round(leaders_s, 3),
                "writes_until_leaders": z1 - z0, "writes_in_failover": writes,
                "writes_per_s_until_leaders": round((z1 - z0) / max(leaders_s, 1e-3), 1),
                "metadata_s": metadata_s, "led_by_both_survivors": split,
                "preferred_replica_wait_ms": 500, "ok": split == 0}
    finally:
        for br in brokers.values():
            br.close()
        admin.stop()
        admin.close()


# --------------------------------------------------------------------------- picture

def failover_svg(results: list[dict]) -> str:
    """A bar per (partitions, mode): seconds until every partition of the
    failed broker had a new leader, on a log scale (the modes differ tenfold)."""
    import math
    rows = [r for r in results if "leaders_s" in r]
    width, left, bar, gap = 860, 250, 26, 14
    height = 70 + len(rows) * (bar + gap)
    top = max(r["leaders_s"] for r in rows)
    decades = range(-1, math.ceil(math.log10(top)) + 1)
    span = len(decades) - 1

    def x(v: float) -> float:
        return left + (math.log10(max(v, 0.1)) + 1) / span * (width - left - 200)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="sans-serif" font-size="13">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           '<text x="10" y="22" font-size="15" font-weight="bold">A broker leading a third of '
           'the partitions fails: seconds until all have a new leader</text>']
    for d in decades:
        v = 10.0 ** d
        out.append(f'<line x1="{x(v):.1f}" y1="34" x2="{x(v):.1f}" y2="{height - 20}" '
                   'stroke="#ddd"/>')
        out.append(f'<text x="{x(v):.1f}" y="{height - 5}" text-anchor="middle" '
                   f'fill="#666">{v:g} s</text>')
    for i, r in enumerate(rows):
        y = 44 + i * (bar + gap)
        color = "#4878a8" if r["mode"] == "controller" else "#d08a38"
        label = f'{r["mode"]}, {r["partitions"]:,} partitions'
        out.append(f'<text x="{left - 8}" y="{y + bar * 0.7:.1f}" text-anchor="end">{label}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{x(r["leaders_s"]) - left:.1f}" '
                   f'height="{bar}" fill="{color}"/>')
        out.append(f'<text x="{x(r["leaders_s"]) + 6:.1f}" y="{y + bar * 0.7:.1f}">'
                   f'{r["leaders_s"]:.2f} s, {r["writes_until_leaders"]:,} writes</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- main

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", default="1000,10000",
                    help="comma-separated partition counts (default 1000,10000)")
    ap.add_argument("--modes", default="controller,v2")
    ap.add_argument("--partitions-per-topic", type=int, default=100)
    ap.add_argument("--out", type=Path, default=None,
                    help="results file (default runs/bench/coordination-<date>.json)")
    ap.add_argument("--svg", type=Path, default=None,
                    help="also draw the failover times into this SVG file")
    ap.add_argument("--svg-from", type=Path, default=None, metavar="JSON",
                    help="only draw --svg from an earlier results file, run nothing")
    a = ap.parse_args()
    if a.svg_from is not None:
        if a.svg is None:
            ap.error("--svg-from needs --svg")
        try:
            a.svg.write_text(failover_svg(json.loads(a.svg_from.read_text())["results"]))
        except (OSError, ValueError, KeyError) as e:
            ap.error(f"cannot draw from {a.svg_from}: {e}")
        print(f"drawn to {a.svg}")
        return 0
    try:
        counts = [int(x) for x in a.partitions.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--partitions takes comma-separated numbers, not {a.partitions!r}")
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if not counts or min(counts) < 3:
        ap.error("--partitions: at least 3 partitions per run")
    if not modes or not set(modes) <= {"controller", "v2"}:
        ap.error("--modes takes controller and v2")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: sys.exit(128 + s))

    work = Path(tempfile.mkdtemp(prefix="chaoslog-bench-coordination-"))
    fh = logging.FileHandler(work / "bench.log")
    fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(fh)
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    catcher = ControllerLog()
    logging.getLogger("chaoslog.controller").addHandler(catcher)

    info = machine()
    progress(f"machine: {info['cpu']}, {info['cores']} cores, load "
             f"{' '.join(info['loadavg_at_start'])}; logs in {work}")
    zk_server = zookeeper_server(work, fsync=True)
    fakes = None
    results: list[dict] = []
    failed = False
    try:
        zk_server.start()
        if "controller" in modes:
            fakes = FakeBrokers()
        for n in counts:
            for mode in modes:
                progress(f"{mode}, {n:,} partitions")
                try:
                    results.append(controller_case(zk_server, fakes, catcher, n,
                                                   a.partitions_per_topic)
                                   if mode == "controller" else
                                   v2_case(zk_server, work, n, a.partitions_per_topic))
                except Exception as e:
                    logging.exception("%s at %d partitions failed", mode, n)
                    progress(f"  FAILED: {e!r}")
                    results.append({"mode": mode, "partitions": n, "error": repr(e),
                                    "ok": False})
                    failed = True
    finally:
        if fakes is not None:
            fakes.close()
        zk_server.stop()
        fh.close()
        root.removeHandler(fh)

    print(f"\n{'mode':11s} {'partitions':>10s} {'moved':>6s} {'leaders':>9s} {'writes':>7s} "
          f"{'writes/s':>9s} {'watches':>8s} {'metadata':>9s}")
    for r in results:
        if "error" in r:
            print(f"{r['mode']:11s} {r['partitions']:>10,} FAILED: {r['error']}")
            continue
        md = max((v for v in (r.get("metadata_s") or {}).values() if v is not None),
                 default=None)
        print(f"{r['mode']:11s} {r['partitions']:>10,} {r['victim_led']:>6,} "
              f"{r['leaders_s']:>8.2f}s {r['writes_until_leaders']:>7,} "
              f"{r['writes_per_s_until_leaders']:>9,.0f} {r['watches']:>8,} "
              f"{(f'{md:.2f}s' if md is not None else '-'):>9s}")
    out = (a.out or RAW / f"coordination-{datetime.date.today()}.json").resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "machine": info,
           "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "setup": {"zookeeper": "3.8 standalone subprocess, forceSync=yes, tickTime 500 ms",
                     "brokers": 3, "replication_factor": 3,
                     "partitions_per_topic": a.partitions_per_topic, "victim": VICTIM},
           "results": results}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\nwritten to {out}")
    if a.svg is not None and any("leaders_s" in r for r in results):
        a.svg.write_text(failover_svg(results))
        print(f"drawn to {a.svg}")
    if failed:
        print(f"logs kept in {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
