"""What the chaos suites share: watching ZooKeeper and the acknowledgements
while a scenario runs, reading what a run recorded, reading replica logs.

The suites drive scripted scenarios: a step often waits for the cluster to
do something (the ISR to shrink, a new leader to be elected) before the next
fault. `wait_for` polls such a condition and fails the test with a message
that says which step did not happen, so a scenario that did not play out is
never mistaken for a verdict.
"""
from __future__ import annotations

import json
import os
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from cluster import zkpaths
from contracts.deadline import wait_until
from reports.invariants import NOT_PROMISED
from reports.summary import GROUP_TYPES, INCARNATION_TYPES, TRANSACTION_TYPES

# The length of one fault run of test_suite_faults.py: issue 5 asks for 60 s
# (the `slow` variant); the CI default keeps the whole suites/ folder within
# its ~15 minutes on 2 cores (23 fault kinds x (10 s + ~6 s of set-up and
# final reads)).
SUITE_SECONDS = float(os.environ.get("CHAOSLOG_SUITE_SECONDS", "10"))
# The cluster's ZooKeeper session timeout (ClusterSpec's default).
SESSION_TIMEOUT_S = 6.0

# The configuration every fix of the seed design's anomalies together: no
# acks=all write acknowledged by fewer than two replicas, no election of an
# out-of-sync replica, truncation by leader epochs (KIP-101/KIP-279).
SAFE = {"min.insync.replicas": 2, "unclean.leader.election.enable": False,
        "replication.truncation": "leader-epoch"}


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll until `predicate()` returns something truthy and return it; fail
    with "`what` did not happen within N s" otherwise. A ZooKeeper hiccup
    inside the predicate counts as "not yet"."""
    last_error: list[Exception] = []

    def attempt() -> Any:
        try:
            return predicate()
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last_error[:] = [e]
            return None

    value = wait_until(attempt, timeout, interval)
    if not value:
        extra = f" (last error: {last_error[0]!r})" if last_error else ""
        raise AssertionError(f"{what} did not happen within {timeout:g} s{extra}")
    return value


def expire_broker_session(run: Any, broker: int) -> None:
    """Expire `broker`'s ZooKeeper session now, as ZooKeeper does once it has
    not heard from it for a session timeout: the controller handles it as
    failed now. A broker that can reach ZooKeeper registers again at once."""
    from faults.injectors.zookeeper import expire_session, read_session
    session, password = read_session(run.cluster, f"broker-{broker}")
    expire_session(run.cluster.zookeeper_connect, session, password)


def crash_broker(run: Any, nemesis: Any, broker: int) -> Any:
    """Kill `broker` (SIGKILL) and expire its ZooKeeper session at once, as
    ZooKeeper itself does a session timeout later: the controller handles
    the failure now, not SESSION_TIMEOUT_S from now. Returns the injector
    (its stop() restarts the broker)."""
    from faults.injectors.zookeeper import expire_session, read_session
    session, password = read_session(run.cluster, f"broker-{broker}")  # before the kill
    killed = nemesis.inject("kill", f"broker-{broker}")
    expire_session(run.cluster.zookeeper_connect, session, password)
    return killed


def assert_valid(run: Any, checker: str | None = None) -> dict[str, Any]:
    """The run's verdict must be valid: no fatal anomaly, final reads
    complete, and every oracle that has an input here checked (an invariant
    oracle the configuration does not promise has nothing to check). On failure
    the message names each fatal anomaly type with its first instances, the
    seed and the run directory (its report.html says the rest)."""
    summary = run.verdict(checker)
    # The group oracles judge a consumer group (--sub-via subscribe): a run
    # whose consumers assign their own partitions has none for them to read;
    # `resurrected` judges topics deleted and created again (recreate-topic),
    # if any was.
    # The transaction types judge a transactional run (`transactions`), the
    # eos types its pipeline.
    workload = run.meta.get("workload") or {}
    grouped = workload.get("sub_via") == "subscribe"
    expected = {k for k in TRANSACTION_TYPES if workload.get("transactions")
                and (not k.startswith("eos-") or workload.get("pipeline"))}
    problems = []
    for kind in summary.get("fatal", []):
        first = summary["anomalies"].get(kind, [])[:3]
        problems.append(f"{kind} ({summary['anomaly_counts'].get(kind, len(first))}): {first}")
    if summary["valid"] is None:
        problems.append(f"final reads incomplete: {summary.get('warnings')}")
    unchecked = {k: v for k, v in summary.get("oracles", {}).items()
                 if v != "checked" and (grouped or k not in GROUP_TYPES)
                 and (k in expected or k not in TRANSACTION_TYPES)
                 and k not in INCARNATION_TYPES and not v.startswith(NOT_PROMISED)}
    if unchecked:
        problems.append(f"oracles without input: {unchecked}")
    assert not problems, (f"run {run.run_dir} (seed {run.seed}) is not valid:\n  "
                          + "\n  ".join(problems))
    return summary


def broker(broker_id: int) -> str:
    return f"broker-{broker_id}"


def broker_id(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


class ZkView:
    """The ZooKeeper state the scenarios watch (seed layout, cluster.zkpaths)."""

    def __init__(self, zk: Any):
        self.zk = zk

    def lai(self, topic: str = "t", partition: int = 0) -> zkpaths.LeaderAndIsr:
        return zkpaths.read_leader_and_isr(self.zk, topic, partition)

    def elected(self, topic: str = "t", partition: int = 0) -> zkpaths.LeaderAndIsr | None:
        """lai() once its leader has written it, else None. In V2 a replica
        takes the lock before it writes its epoch's ISR: a read in between
        shows the new leader with the old ISR (docs/design.md#v2-election)."""
        data, stat = self.zk.get(zkpaths.leader_and_isr_path(topic, partition))
        state = zkpaths.LeaderAndIsr.decode(data, stat.version)
        lai = self.lai(topic, partition)
        return lai if (lai.leader, lai.leader_epoch) == (state.leader, state.leader_epoch) else None

    def controller(self) -> int | None:
        try:
            data, _ = self.zk.get(zkpaths.CONTROLLER)
        except Exception:  # noqa: BLE001 - NoNode: an election is under way
            return None
        d = zkpaths.loads(data) or {}
        return int(d["brokerid"]) if "brokerid" in d else None

    def controller_epoch(self) -> int:
        return int(self.zk.get(zkpaths.CONTROLLER_EPOCH)[0])

    def registered(self) -> set[int]:
        return {int(c) for c in self.zk.get_children(zkpaths.BROKER_IDS)}

    def assignment(self, topic: str) -> dict[int, tuple[int, ...]]:
        data, _ = self.zk.get(zkpaths.topic_path(topic))
        return dict(zkpaths.TopicAssignment.decode(data).partitions)

    def fully_replicated(self, topics: dict[str, int]) -> bool:
        """Every partition of `topics` has a leader and all its replicas in the ISR."""
        for t, n in topics.items():
            plan = self.assignment(t)
            for p in range(n):
                lai = self.lai(t, p)
                if lai.leader == zkpaths.NO_LEADER or set(lai.isr) != set(plan[p]):
                    return False
        return True


class MetadataView:
    """What `ZkView` tells a suite, for a target without ZooKeeper: read
    from the brokers' Metadata answers (harness.backends.base.Cluster)."""

    def __init__(self, cluster: Any):
        self.cluster = cluster

    def registered(self) -> set[int]:
        return {n.broker_id for n in self.cluster.brokers() if self.cluster.broker_live(n.name)}

    def fully_replicated(self, topics: dict[str, int]) -> bool:
        """Every partition of `topics` has a leader and all its replicas in the ISR."""
        md = self.cluster.kafka_metadata(sorted(topics))
        for t, n in topics.items():
            for p in range(n):
                pm = md.partitions.get((t, p))
                if pm is None or pm.leader < 0 or set(pm.isr) != set(pm.replicas):
                    return False
        return True


def cluster_view(run: Any) -> "ZkView | MetadataView":
    """The view of a run's cluster a suite waits on: ZooKeeper where the
    cluster keeps its metadata there, else the brokers' Metadata."""
    return ZkView(run.zk) if run.cluster.has_zookeeper else MetadataView(run.cluster)


def caught_up(cluster: Any, topics: dict[str, int]) -> bool:
    """Every partition of `topics` (name -> partition count) in sync for
    real, as its leader's state window shows it (docs/architecture.md,
    "State window"): every assigned replica in the ISR and each follower's
    LEO, as the leader knows it from its last fetch, at or past the HW. The
    ISR in ZooKeeper is not enough: with `hw` truncation a replica that
    restarted with a shorter log is still listed until it falls behind by
    the lag time (docs/design.md#not-guaranteed)."""
    from harness import kafka_wire
    leaders: dict[tuple[str, int], dict] = {}
    for name in cluster.spec.node_names():
        if not name.startswith("broker-"):
            continue
        node = cluster.node(name)
        try:
            conn = kafka_wire.KafkaConnection(node.host, node.port, client_id="chaoslog-suite",
                                              timeout=5.0, security=cluster.client_security)
        except OSError:
            return False
        try:
            state = kafka_wire.state_window(conn)
        except OSError:
            return False
        finally:
            conn.close()
        for p in state["partitions"]:
            if p["topic"] in topics and p["leader"] == state["broker"] and not p["fenced"]:
                leaders[(p["topic"], p["partition"])] = p
    if set(leaders) != {(t, i) for t, n in topics.items() for i in range(n)}:
        return False
    return all(sorted(p["isr"]) == sorted(p["replicas"])
               and len(p.get("followers") or {}) == len(p["replicas"]) - 1
               and all(leo >= p["hw"] for leo in p["followers"].values())
               for p in leaders.values())


@dataclass(frozen=True)
class Ack:
    time: int          # ns since the run started (the history's clock)
    topic: str
    partition: int
    offset: int
    value: int


class AckWatch:
    """Subscribed to the history recorder: every acknowledged send and every
    send completion's error, with its time, as they happen."""

    def __init__(self, recorder: Any):
        self.recorder = recorder
        self.acks: list[Ack] = []
        self.errors: list[tuple[int, str, str]] = []   # (time, type, error)
        recorder.subscribe(self)

    def __call__(self, e: dict[str, Any]) -> None:  # runs under the recorder's lock: keep it cheap
        if e["f"] != "send" or e["type"] == "invoke":
            return
        if e["type"] == "ok":
            self.acks.append(Ack(e["time"], e["topic"], e["partition"], e["offset"], e["value"]))
        elif e.get("error"):
            self.errors.append((e["time"], e["type"], e["error"]))

    def now(self) -> int:
        return self.recorder.now()

    def since(self, t: int, tp: tuple[str, int] | None = None, until: int | None = None) -> list[Ack]:
        return [a for a in list(self.acks) if a.time >= t and (until is None or a.time < until)
                and (tp is None or (a.topic, a.partition) == tp)]

    def count(self, t: int = 0, tp: tuple[str, int] | None = None, until: int | None = None) -> int:
        return len(self.since(t, tp, until))

    def error_counts(self, t: int = 0, until: int | None = None) -> Counter:
        return Counter(err for time_, _typ, err in list(self.errors)
                       if time_ >= t and (until is None or time_ < until))

    def wait_acks(self, n: int, since: int, timeout: float, what: str,
                  tp: tuple[str, int] | None = None) -> list[Ack]:
        return wait_for(lambda: len(self.since(since, tp)) >= n and self.since(since, tp), timeout,
                        f"{n} acknowledged writes {what}")


S = 1_000_000_000  # ns per second


# -- reading a finished run ------------------------------------------------------

def events(run_dir: Path) -> list[dict[str, Any]]:
    with open(Path(run_dir) / "history.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def ack_times(evs: Iterable[dict[str, Any]]) -> dict[int, tuple[int, int]]:
    """value -> (time of its ok send, acknowledged offset)."""
    return {e["value"]: (e["time"], e["offset"]) for e in evs
            if e["f"] == "send" and e["type"] == "ok"}


def reads(evs: Iterable[dict[str, Any]], topic: str = "t", partition: int = 0
          ) -> list[tuple[int, int, int]]:
    """(time, offset, value) of every record an ok poll returned."""
    return [(e["time"], off, val) for e in evs
            if e["f"] == "poll" and e["type"] == "ok" and e["topic"] == topic
            and e["partition"] == partition for off, val in e.get("records") or []]


def anomaly_counts(summary: dict[str, Any]) -> dict[str, int]:
    return {k: len(v) for k, v in summary["anomalies"].items() if v}


def describe(summary: dict[str, Any]) -> str:
    """For assertion messages: verdict, counts, anomalies, and the first
    instance of each fatal type (what a CI log must show to be read)."""
    c = summary.get("counts", {})
    first = "".join(f"\n  {k}: {summary['anomalies'][k][0]}" for k in summary.get("fatal", [])
                    if summary["anomalies"].get(k))
    return (f"valid={summary.get('valid')} sends={c.get('send')} acknowledged={c.get('acknowledged')} "
            f"read={c.get('read')} anomalies={anomaly_counts(summary)}{first}")


# -- replica logs ------------------------------------------------------------------

_BATCH_HEAD = struct.Struct(">qi")


def replica_log(data_dir: Path, topic: str, partition: int) -> dict[int, int]:
    """offset -> value of one replica's log, read from its segment files
    (RecordBatch v2; values are the workload's decimal integers). Reads
    whole batches only: a batch being written at the tail is left out.
    The broker may be running; nothing is written."""
    import warnings
    with warnings.catch_warnings():  # kafka-python's importlib.resources deprecations
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatch

    d = Path(data_dir) / "logs" / f"{topic}-{partition}"
    if not d.is_dir():
        d = Path(data_dir) / f"{topic}-{partition}"
    out: dict[int, int] = {}
    for seg in sorted(d.glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + 12 <= len(data):
            _base, length = _BATCH_HEAD.unpack_from(data, pos)
            end = pos + 12 + length
            if length <= 0 or end > len(data):
                break
            for rec in DefaultRecordBatch(data[pos:end]):
                out[rec.offset] = int(rec.value)
            pos = end
    return out


def divergence(a: dict[int, int], b: dict[int, int]) -> list[tuple[int, int, int]]:
    """(offset, value in a, value in b) where both logs hold the offset with different values."""
    return [(o, a[o], b[o]) for o in sorted(set(a) & set(b)) if a[o] != b[o]]


def fault_window(evs: Iterable[dict[str, Any]], fault: str) -> tuple[int, int, list[str]]:
    """(start time, stop time, targets) of the first window of `fault` in a history."""
    start = stop = None
    targets: list[str] = []
    for e in evs:
        if e["f"] != "nemesis" or e["fault"] != fault:
            continue
        if e["phase"] == "start" and start is None:
            start, targets = e["time"], e["targets"]
        elif e["phase"] == "stop" and start is not None and stop is None:
            stop = e["time"]
    if start is None or stop is None:
        raise AssertionError(f"no complete {fault} window in the history")
    return start, stop, targets
