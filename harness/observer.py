"""Watching the cluster itself while a run goes on: observations.jsonl.

The history says what clients saw; several guarantees of the design can only
be checked against what the cluster said about itself (docs/design.md
#guarantees): the leader is in the ISR, epochs only grow, no acks=all write is
acknowledged while the ISR is below min.insync.replicas, the cluster recovers
after the faults heal, the brokers serve what ZooKeeper says, the replicas
agree. The observer records that evidence, on the history's clock, for the
checker (docs/history-format.md, "observations.jsonl"):

  MetadataSampler     a `metadata` sample of ZooKeeper about every second (of
                      the brokers' Metadata on a target without ZooKeeper)
  StateSampler        a `broker-state` sample of each broker's own state about
                      every second, from the built-in broker's test-only
                      window (docs/architecture.md, "State window")
  await_recovery      after the final heal: until every broker is registered
                      and every partition has a live leader and its full ISR
                      (or the bound passes): one `recovery` observation; read
                      from ZooKeeper, or from the brokers' Metadata on a
                      target without it (`metadata_state`)
  observe_brokers     at the end: each broker's own Metadata answer
  observe_replicas    at the end: every replica's files (harness/replicas.py)

It judges nothing: the checker does.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Callable

from cluster import zkpaths
from contracts.deadline import wait_until
from harness import kafka_wire
from harness.replicas import read_broker

OBSERVATIONS = "observations.jsonl"


class Observations:
    """observations.jsonl: whole lines, appended under a lock, each with the
    `time` of the history's clock (`clock()`: ns since the run started)."""

    def __init__(self, path: Path, clock: Callable[[], int]):
        self.path = Path(path)
        self.clock = clock
        self._lock = threading.Lock()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)

    def write(self, kind: str, time: int | None = None, **fields: Any) -> dict[str, Any]:
        obs = {"kind": kind, "time": self.clock() if time is None else time, **fields}
        line = (json.dumps(obs, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._fd is not None:
                os.write(self._fd, line)
        return obs

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd = None


# -- ZooKeeper ------------------------------------------------------------------------------

def zookeeper_state(zk: Any) -> dict[str, Any]:
    """One reading of the design's ZooKeeper layout (docs/design.md#zk-layout):
    controller and its epoch, live brokers, pending reassignments, and every
    partition's assignment and leaderAndISR. Raises on any read error: a
    sample is whole or not at all."""
    from kazoo.exceptions import NoNodeError
    try:
        controller = (zkpaths.loads(zk.get(zkpaths.CONTROLLER)[0]) or {}).get("brokerid")
    except NoNodeError:
        controller = None
    try:
        controller_epoch = int(zk.get(zkpaths.CONTROLLER_EPOCH)[0])
    except NoNodeError:
        controller_epoch = None
    live = sorted(int(b) for b in zk.get_children(zkpaths.BROKER_IDS))
    try:
        reassigning = {f"{t}/{p}": list(r) for (t, p), r in zkpaths.decode_reassignment(
            zk.get(zkpaths.REASSIGN_PARTITIONS)[0]).items()}
    except NoNodeError:
        reassigning = {}
    reassigning.update(_v2_marks(zk))
    partitions, unelected = [], []
    for topic in sorted(zk.get_children(zkpaths.TOPICS)):
        try:
            assignment = zkpaths.TopicAssignment.decode(zk.get(zkpaths.topic_path(topic))[0])
        except NoNodeError:
            continue  # deleted between the two reads
        for p, replicas in sorted(assignment.partitions.items()):
            if reassigning.get(f"{topic}/{p}") == list(replicas):
                del reassigning[f"{topic}/{p}"]  # a V2 mark of a move just done
            try:
                lai = zkpaths.read_leader_and_isr(zk, topic, p)
            except NoNodeError:
                unelected.append(f"{topic}/{p}")  # assigned, no leader elected yet
                continue
            partitions.append({"topic": topic, "partition": p, "replicas": list(replicas),
                               "leader": lai.leader, "leader_epoch": lai.leader_epoch,
                               "isr": sorted(lai.isr), "zk_version": lai.zk_version,
                               "controller_epoch": lai.controller_epoch})
    return {"controller": controller, "controller_epoch": controller_epoch,
            "live_brokers": live, "reassigning": reassigning, "partitions": partitions,
            "unelected": unelected}


def _v2_marks(zk: Any) -> dict[str, list[int]]:
    """V2's pending reassignments: the marks with new replicas under
    /brokers/partitions_reassigned (docs/design.md#v2-reassignment); a
    deletion's empty mark is none."""
    from kazoo.exceptions import NoNodeError
    out = {}
    try:
        topics = zk.get_children(zkpaths.PARTITIONS_REASSIGNED)
    except NoNodeError:
        return out
    for t in topics:
        try:
            for p in zk.get_children(zkpaths.partitions_reassigned_path(t)):
                mark = zkpaths.loads(zk.get(zkpaths.partitions_reassigned_path(t, int(p)))[0])
                if mark:
                    out[f"{t}/{p}"] = [int(b) for b in mark]
        except NoNodeError:
            continue  # done between the reads
    return out


class PeriodicSampler:
    """A thread that calls `sample()` every `period_s` from start() to stop()."""

    def __init__(self, name: str, period_s: float):
        self.period_s = period_s
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period_s)

    def sample(self) -> dict[str, Any] | None:
        raise NotImplementedError

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)


class MetadataSampler(PeriodicSampler):
    """A `metadata` observation every `period_s` while running, of the
    readings `state()` returns (`zookeeper_state`, or `metadata_state` on a
    target without ZooKeeper). Samples that fail (ZooKeeper paused, cut off,
    a session moving, no broker answering) are skipped: a gap in the samples
    is a gap in the evidence, never a made-up state."""

    def __init__(self, state: Callable[[], dict[str, Any]], observations: Observations,
                 period_s: float = 1.0):
        super().__init__("metadata-sampler", period_s)
        self.state = state
        self.observations = observations
        self.failures = 0

    def sample(self) -> dict[str, Any] | None:
        t = self.observations.clock()
        try:
            state = self.state()
        except Exception:  # noqa: BLE001 - no whole sample this time
            self.failures += 1
            return None
        self.samples += 1
        return self.observations.write("metadata", time=t, **state)


class StateSampler(PeriodicSampler):
    """A `broker-state` observation of every broker that answers, every
    `period_s`: its replicas of the run's topics (`topics()`) as its state
    window shows them at one moment, and the controller's view on the
    active controller. A broker that does not answer within `timeout_s`
    (down, paused, cut off) is skipped that round: a gap, never a made-up
    state. One connection a broker, opened again after a failure."""

    def __init__(self, cluster: Any, observations: Observations, topics: Callable[[], set[str]],
                 period_s: float = 1.0, timeout_s: float = 2.0):
        super().__init__("state-sampler", period_s)
        self.cluster = cluster
        self.observations = observations
        self.topics = topics
        self.timeout_s = timeout_s
        self.failures = 0
        self._conns: dict[str, kafka_wire.KafkaConnection] = {}

    def sample(self) -> None:
        topics = self.topics()
        for name in self.cluster.spec.node_names():
            if name.startswith("broker-"):
                self._sample(name, topics)

    def _sample(self, name: str, topics: set[str]) -> None:
        try:
            conn = self._conns.get(name)
            if conn is None:
                node = self.cluster.node(name)
                conn = self._conns[name] = kafka_wire.KafkaConnection(
                    node.host, node.port, client_id="chaoslog-state", timeout=self.timeout_s,
                    security=self.cluster.client_security)
            state = kafka_wire.state_window(conn)
        except Exception:  # noqa: BLE001 - down, paused, cut off, or no window here
            self.failures += 1
            dropped = self._conns.pop(name, None)
            if dropped is not None:
                dropped.close()
            return
        state["partitions"] = [p for p in state.get("partitions", []) if p.get("topic") in topics]
        self.samples += 1
        self.observations.write("broker-state", **state)

    def stop(self) -> None:
        super().stop()
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()


# -- the end of a run ---------------------------------------------------------------------------

def _not_recovered(state: dict[str, Any], brokers: list[int], controller: bool = True
                   ) -> list[str]:
    """What keeps the cluster from full health in one ZooKeeper state
    (`controller`: the cluster has one; V2 coordination has none)."""
    live = set(state["live_brokers"])
    wrong = [f"broker {b} not registered" for b in brokers if b not in live]
    if controller and state["controller"] is None:
        wrong.append("no controller")
    for tp in state["reassigning"]:
        wrong.append(f"{tp}: reassignment pending")
    for tp in state.get("unelected", ()):
        wrong.append(f"{tp}: assigned, but no leader was ever elected")
    for p in state["partitions"]:
        tp = f"{p['topic']}/{p['partition']}"
        if p["leader"] not in live:
            wrong.append(f"{tp}: leader {p['leader']} is not a live broker")
        elif set(p["isr"]) != set(p["replicas"]):
            wrong.append(f"{tp}: ISR {p['isr']} of replicas {p['replicas']}")
    return wrong


def metadata_state(cluster: Any, topics: set[str], *, probe: bool = False) -> dict[str, Any]:
    """What `zookeeper_state` reads, for the run's `topics`, from one
    broker's Metadata answer (a target without ZooKeeper; `source`
    "kafka"): live are the brokers it lists (with `probe`, also those the
    cluster counts as live, Cluster.broker_live: tansu lists only itself).
    A client sees no epochs, versions or pending reassignments, so a sample
    has none: the checker's oracles that need them say "no input"."""
    md = cluster.kafka_metadata(sorted(topics))
    live = set(md.brokers)
    if probe:
        live |= {n.broker_id for n in cluster.brokers()
                 if n.broker_id is not None and cluster.broker_live(n.name)}
    controller = md.controller if md.controller is not None and md.controller >= 0 else None
    partitions = [{"topic": p.topic, "partition": p.partition, "replicas": list(p.replicas),
                   "leader": p.leader, "isr": sorted(p.isr)}
                  for p in sorted(md.partitions.values(), key=lambda p: (p.topic, p.partition))
                  if not p.error or p.leader >= 0]
    return {"source": "kafka", "controller": controller, "live_brokers": sorted(live),
            "reassigning": {}, "partitions": partitions}


def await_recovery(state: Callable[[], dict[str, Any]], observations: Observations,
                   brokers: list[int], *, healed_at: int, bound_s: float,
                   controller: bool = True) -> dict[str, Any]:
    """After the final heal: wait until every broker is registered, there is
    a controller (unless the cluster has none: `controller`), no
    reassignment is pending and every partition has a live leader and its
    full ISR, in the readings `state()` returns (`zookeeper_state` or
    `metadata_state`); at most `bound_s`. Writes and returns the `recovery`
    observation."""
    last: list[str] = ["the cluster's state could not be read"]

    def healthy() -> bool:
        nonlocal last
        last = _not_recovered(state(), brokers, controller)
        return not last

    ok = wait_until(healthy, bound_s, 0.5, retry_on=(Exception,))
    return observations.write("recovery", healed_at=healed_at, bound_s=bound_s,
                              recovered=bool(ok), recovered_at=observations.clock() if ok else None,
                              detail="; ".join(last[:20]))


def _brokers_agree(cluster: Any, zk: Any, topics: set[str]) -> tuple[bool, list[dict[str, Any]]]:
    """Each broker's Metadata answer, and whether all match ZooKeeper."""
    zk_parts = {(p["topic"], p["partition"]): p for p in zookeeper_state(zk)["partitions"]
                if p["topic"] in topics}
    answers, agree = [], True
    for node in cluster.brokers():
        try:
            conn = kafka_wire.KafkaConnection(node.host, node.port, client_id="chaoslog-observer",
                                              timeout=5, security=cluster.client_security)
            try:
                md = kafka_wire.metadata(conn, sorted(topics))
            finally:
                conn.close()
        except kafka_wire.WireError as e:
            answers.append({"broker": node.name, "topics": sorted(topics), "error": str(e)})
            agree = False
            continue
        parts = [{"topic": p.topic, "partition": p.partition, "leader": p.leader, "isr": p.isr,
                  "replicas": p.replicas, "error": p.error} for p in md.partitions.values()]
        answers.append({"broker": node.name, "topics": sorted(topics), "brokers": sorted(md.brokers),
                        "partitions": parts})
        for p in parts:
            z = zk_parts.get((p["topic"], p["partition"]))
            if z is None or (p["leader"], sorted(p["isr"]), p["replicas"]) != (
                    z["leader"], z["isr"], z["replicas"]):
                agree = False
        if set(zk_parts) - {(p["topic"], p["partition"]) for p in parts}:
            agree = False
    return agree, answers


def observe_brokers(cluster: Any, zk: Any, observations: Observations, topics: set[str], *,
                    bound_s: float = 15.0) -> bool:
    """Ask every broker for Metadata until all answer what ZooKeeper says (a
    broker learns of changes a little after ZooKeeper does) or `bound_s`
    passes; writes the last round as `broker-metadata` observations. True
    when they agreed."""
    last: list[dict[str, Any]] = []

    def agreed() -> bool:
        nonlocal last
        ok, last = _brokers_agree(cluster, zk, topics)
        return ok

    ok = bool(wait_until(agreed, bound_s, 1.0, retry_on=(Exception,)))
    t = observations.clock()
    for answer in last:
        observations.write("broker-metadata", time=t, **answer)
    return ok


def observe_replicas(cluster: Any, observations: Observations, topics: set[str]) -> int:
    """Every replica of `topics` on every broker, read from its files; the
    number of `replica` observations written."""
    n = 0
    t = observations.clock()
    for node in cluster.brokers():
        for replica in read_broker(cluster.log_dir(node.name), topics):
            observations.write("replica", time=t, broker=node.name, **replica)
            n += 1
    return n

