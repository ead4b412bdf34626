"""Invariant oracles: the design's definitions checked at every sample of a
run, wherever and whenever a violation shows (docs/anomalies.md).

Two kinds of evidence, both in observations.jsonl:

  * `broker-state`: one broker's own replicas at one moment, from the
    built-in broker's test-only state window (docs/architecture.md, "State
    window"): leader, epoch, ISR, HW, LEO, the leader's view of each
    follower's LEO, the last committed batch;
  * `metadata`: ZooKeeper about every second (leaderAndISR with its znode
    version, live brokers, pending reassignments).

Each function takes the samples in time order and returns anomaly
instances (dicts with topic, partition, `time` and what was seen). What a
configuration does not promise is not checked in it: the callers pass the
run's configuration (docs/design.md#guarantees).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from reports.figures import fault_windows
from reports.observations import MAX_SAMPLE_GAP_NS, NS, Observed

STATE = "broker-state"


def _replicas(states: Iterable[dict]):
    """(sample, replica) of every broker-state sample, in order."""
    for s in states:
        for p in s.get("partitions", ()):
            yield s, p


def isr_behind_hw(states: Iterable[dict]) -> list[dict]:
    """docs/design.md#isr, #high-watermark: every ISR member holds every
    committed record. At each leader sample, a follower in the ISR whose LEO
    as the leader knows it (from its last fetch; unknown right after a
    leader change) is below the HW breaks it: it joined too early, or the
    HW passed a record it lacks. (With `hw` truncation a follower of a new
    leader may truncate below that leader's HW while in its ISR: Kafka
    0.8's design, KIP-101's cause; the caller checks `leader-epoch` runs.)"""
    out = []
    for s, p in _replicas(states):
        if p["leader"] != s["broker"]:
            continue
        for follower, leo in sorted((p.get("followers") or {}).items()):
            if int(follower) in p["isr"] and 0 <= leo < p["hw"]:
                out.append({"topic": p["topic"], "partition": p["partition"], "time": s["time"],
                            "leader": s["broker"], "leader_epoch": p["epoch"],
                            "follower": int(follower), "follower_leo": leo, "hw": p["hw"],
                            "isr": p["isr"]})
    return out


def hw_regression(states: Iterable[dict]) -> list[dict]:
    """docs/design.md#high-watermark: a leader's HW never goes back while it
    leads in one leader epoch (one broker incarnation), and no replica's HW
    passes its own LEO."""
    out = []
    last: dict[tuple, tuple[int, int]] = {}
    for s, p in _replicas(states):
        tp = (p["topic"], p["partition"])
        base = {"topic": tp[0], "partition": tp[1], "time": s["time"], "broker": s["broker"],
                "leader_epoch": p["epoch"]}
        if p["hw"] > p["leo"]:
            out.append({**base, "rule": "HW past the LEO", "hw": p["hw"], "leo": p["leo"]})
        if p["leader"] != s["broker"]:
            continue
        key = (tp, p.get("topic_id"), s["broker"], s["start_epoch"], p["epoch"])
        prev = last.get(key)
        if prev is not None and p["hw"] < prev[0]:
            out.append({**base, "rule": "leader HW went back", "hw": p["hw"],
                        "previous": prev[0], "previous_time": prev[1]})
        last[key] = (max(p["hw"], prev[0]) if prev else p["hw"], s["time"])
    return out


def committed_divergence(states: Iterable[dict]) -> list[dict]:
    """docs/design.md#g-replicas-agree, sampled: a committed batch is the same
    on every replica at every moment. Each sample names the batch holding
    its replica's last committed offset (base, last offset, leader epoch,
    CRC); two samples naming a different batch at the same base offset of
    one topic incarnation saw replicas that disagree below the HW."""
    seen: dict[tuple, tuple] = {}
    out = []
    for s, p in _replicas(states):
        batch = p.get("committed")
        if not batch:
            continue
        key = (p["topic"], p["partition"], p.get("topic_id"), batch[0])
        first = seen.setdefault(key, (tuple(batch), s["broker"], s["time"]))
        if first[0] != tuple(batch):
            out.append({"topic": p["topic"], "partition": p["partition"], "time": s["time"],
                        "offset": batch[0], "broker": s["broker"], "batch": list(batch),
                        "other_broker": first[1], "other_batch": list(first[0]),
                        "other_time": first[2]})
            seen[key] = (tuple(batch), s["broker"], s["time"])   # report each change once
    return out


def _versions(samples: Iterable[dict]):
    """(previous, current, sample) for each partition whose leaderAndISR
    znode moved by exactly one version between two consecutive samples
    close enough to be evidence: the current state was written over the
    previous one. A partition missing from a sample (its topic deleted,
    perhaps created again) starts afresh."""
    last: dict[tuple, tuple[dict, int]] = {}
    for s in samples:
        seen = {}
        for p in s["partitions"]:
            tp = (p["topic"], p["partition"])
            seen[tp] = (p, s["time"])
            prev = last.get(tp)
            if (prev is not None and p["zk_version"] == prev[0]["zk_version"] + 1
                    and p["leader_epoch"] >= prev[0]["leader_epoch"]
                    and s["time"] - prev[1] <= MAX_SAMPLE_GAP_NS):
                yield prev[0], p, s
        last = seen


def unclean_election(samples: Iterable[dict]) -> list[dict]:
    """docs/design.md#leader-selection with unclean.leader.election.enable
    off: a new leader is always a member of the ISR it was elected from.
    Judged where two samples show consecutive leaderAndISR versions, so the
    earlier ISR is the one the election read."""
    out = []
    for prev, cur, s in _versions(samples):
        if cur["leader"] >= 0 and cur["leader"] != prev["leader"] and cur["leader"] not in prev["isr"]:
            out.append({"topic": cur["topic"], "partition": cur["partition"], "time": s["time"],
                        "leader": cur["leader"], "leader_epoch": cur["leader_epoch"],
                        "previous_leader": prev["leader"], "previous_isr": prev["isr"]})
    return out


def dead_isr_member(samples: Iterable[dict], grace_s: float, controller: bool) -> list[dict]:
    """docs/design.md#broker-failure, #isr, #reassignment: once the
    controller (in V2, the leader, by the lag rule) has had `grace_s` to
    act, the ISR of a partition with a live leader names no unregistered
    broker, and no broker outside its replicas (the assignment, and a
    running reassignment's targets). Time without a controller (controller
    mode) and gaps between samples do not count."""
    out = []
    since: dict[tuple, int] = {}
    last_time = None
    for s in samples:
        if last_time is not None and s["time"] - last_time > MAX_SAMPLE_GAP_NS:
            since.clear()
        last_time = s["time"]
        if controller and s.get("controller") is None:
            since.clear()
            continue
        live = set(s["live_brokers"])
        current = set()
        for p in s["partitions"]:
            if p["leader"] not in live:
                continue
            replicas = set(p.get("replicas") or ())
            replicas |= set(s.get("reassigning", {}).get(f"{p['topic']}/{p['partition']}", ()))
            for b in p["isr"]:
                if b not in live:
                    rule = "unregistered"
                elif replicas and b not in replicas:
                    rule = "outside the assignment"
                else:
                    continue
                key = (p["topic"], p["partition"], b, rule)
                current.add(key)
                t0 = since.setdefault(key, s["time"])
                if s["time"] - t0 > grace_s * NS:
                    out.append({"topic": p["topic"], "partition": p["partition"],
                                "time": s["time"], "broker": b, "rule": rule, "since": t0,
                                "isr": p["isr"], "replicas": sorted(replicas),
                                "leader": p["leader"],
                                "seconds": round((s["time"] - t0) / NS, 1)})
                    since[key] = s["time"]   # once per grace period
        for key in set(since) - current:
            del since[key]
    return out


def reassignment_unsynced(samples: Iterable[dict], lag_s: float,
                          disturbed: Callable[[int, int], bool]) -> list[dict]:
    """docs/design.md#reassignment: a reassignment finishes only
    once every new replica is in the ISR. At the first sample after one
    finished (the pending entry gone, the assignment its targets), every
    live target is still in the ISR: none could have fallen out within a
    sample of the finish unless it was already lagging for
    replica.lag.time.max.ms, which a target being waited for cannot be.
    Targets that a fault hit around the finish (`disturbed(broker, time)`)
    are left out: a fault may take one out in between."""
    out = []
    pending: dict[str, tuple[list[int], int]] = {}
    for s in samples:
        live = set(s["live_brokers"])
        by_tp = {f"{p['topic']}/{p['partition']}": p for p in s["partitions"]}
        for tp, (targets, t_last) in list(pending.items()):
            if tp in s["reassigning"]:
                continue
            del pending[tp]
            p = by_tp.get(tp)
            if (p is None or sorted(p["replicas"]) != sorted(targets)
                    or s["time"] - t_last > min(MAX_SAMPLE_GAP_NS, lag_s * NS / 2)):
                continue   # cancelled, deleted, or no close evidence
            missing = [b for b in targets if b in live and b not in p["isr"]
                       and not disturbed(b, s["time"])]
            if missing:
                out.append({"topic": p["topic"], "partition": p["partition"], "time": s["time"],
                            "targets": targets, "isr": p["isr"], "missing": missing})
        for tp, targets in s["reassigning"].items():
            pending[tp] = (list(targets), s["time"])
    return out


# -- what a run's configuration promises (docs/anomalies.md, "Invariant oracles") ----------------

# The built-in broker's defaults of the keys that decide the oracles
# (cluster/config.py DEFAULTS; reports reads histories only, it does not
# import cluster).
DEFAULTS = {"replication.truncation": "hw", "unclean.leader.election.enable": True,
            "replica.lag.time.max.ms": 10000, "zookeeper.session.timeout.ms": 6000,
            "coordination": "controller"}
# The faults that damage a replica's files (faults/injectors, family "disk"):
# a replica may then hold another batch below the HW until it is repaired.
DISK_FAULTS = frozenset({"truncate-tail", "bitflip", "bad-offset", "lose-unfsynced"})
# dead-isr-member: what the controller (or the V2 leader) may take besides
# replica.lag.time.max.ms and the ZooKeeper session timeout.
DEAD_ISR_SLACK_S = 10.0
# reassignment-unsynced: a fault hit a target this close to a reassignment's
# end (and for EFFECT_TAIL_S after the fault healed): it may be out for it.
EFFECT_TAIL_S = 10.0
# Operations, not failures (faults/injectors, family "admin"): they take no
# replica out of sync.
ADMIN_FAULTS = frozenset({"elect-preferred", "move-leader", "reassign", "add-partitions",
                          "recreate-topic"})
STATE_TYPES = ("isr-behind-hw", "hw-regression", "committed-divergence")
METADATA_TYPES = ("unclean-election", "dead-isr-member", "reassignment-unsynced")


def _flag(v) -> bool:
    return v.strip().lower() not in ("false", "0", "no", "off") if isinstance(v, str) else bool(v)


@dataclass(frozen=True)
class Promises:
    """What a run's configuration promises, from run.json (its cluster's
    broker_config over the built-in broker's defaults) and the faults that
    ran (the nemesis events): which oracles apply, with which bounds."""

    system: str
    truncation: str
    unclean: bool
    lag_s: float
    session_s: float
    controller: bool
    disk_faults: tuple[str, ...]
    windows: tuple = ()          # fault windows: (start, stop, broker ids hit)

    @classmethod
    def of(cls, run_json: dict, nemesis: list[dict], end_time: int) -> "Promises":
        cluster = run_json.get("cluster") or {}
        config = {**DEFAULTS, **(cluster.get("broker_config") or {})}
        spec_session = ((run_json.get("spec") or {}).get("cluster") or {}).get("zk_session_timeout_ms")
        session = (cluster.get("broker_config") or {}).get("zookeeper.session.timeout.ms", spec_session)
        ran = fault_windows(nemesis, end_time)
        planned = {f for f in run_json.get("faults") or () if isinstance(f, str)}
        windows = tuple((w["start"], w["stop"], _broker_ids(w["targets"])) for w in ran
                        if w["fault"] not in ADMIN_FAULTS)
        return cls(system=str(cluster.get("system") or "chaoslog"),
                   truncation=str(config["replication.truncation"]),
                   unclean=_flag(config["unclean.leader.election.enable"]),
                   lag_s=float(config["replica.lag.time.max.ms"]) / 1000,
                   session_s=float(session if session is not None
                                   else DEFAULTS["zookeeper.session.timeout.ms"]) / 1000,
                   controller=str(config["coordination"]) != "v2",
                   disk_faults=tuple(sorted(({w["fault"] for w in ran} | planned) & DISK_FAULTS)),
                   windows=windows)

    def not_promised(self, name: str) -> str | None:
        """Why the configuration does not promise what oracle `name` checks (None: it does)."""
        if self.system != "chaoslog":
            return f"{self.system}: the design's definitions are the built-in broker's"
        if name in ("isr-behind-hw", "committed-divergence") and self.truncation != "leader-epoch":
            return f"replication.truncation={self.truncation}"
        if name == "committed-divergence" and self.disk_faults:
            return f"disk faults ({', '.join(self.disk_faults)})"
        if name == "unclean-election" and self.unclean:
            return "unclean.leader.election.enable=true"
        return None

    def disturbed(self, broker: int, time: int) -> bool:
        """A fault hit `broker` around `time` (reassignment-unsynced): from
        EFFECT_TAIL_S before it started to EFFECT_TAIL_S after it healed."""
        tail = EFFECT_TAIL_S * NS
        return any((hit is None or broker in hit) and start - tail <= time <= stop + tail
                   for start, stop, hit in self.windows)


def _broker_ids(targets) -> frozenset | None:
    """The broker ids a fault's targets name ("broker-3": 3); None when it
    hit a ZooKeeper member: every broker may feel it."""
    ids = set()
    for t in targets or ():
        name = str(t)
        if name.startswith("zk"):
            return None
        if name.startswith("broker-") and name[7:].isdigit():
            ids.add(int(name[7:]))
    return frozenset(ids)


# -- the oracles as the checkers run them: Observed and Promises -> instances -------------------

# summary.json `oracles` status of an oracle the run's configuration does not
# promise: nothing to check, and nothing missing (suites read it so).
NOT_PROMISED = "not promised by the configuration"

ORACLES: dict[str, Callable[[Observed, Promises], list[dict]]] = {
    "isr-behind-hw": lambda obs, p: isr_behind_hw(obs.states),
    "hw-regression": lambda obs, p: hw_regression(obs.states),
    "committed-divergence": lambda obs, p: committed_divergence(obs.states),
    "unclean-election": lambda obs, p: unclean_election(obs.versioned),
    "dead-isr-member": lambda obs, p: dead_isr_member(
        obs.versioned, p.lag_s + p.session_s + DEAD_ISR_SLACK_S, p.controller),
    "reassignment-unsynced": lambda obs, p: reassignment_unsynced(obs.versioned, p.lag_s, p.disturbed),
}


def found(name: str, obs: Observed, promises: Promises) -> list[dict]:
    """Oracle `name`'s instances in a run, where its configuration promises
    what the oracle checks (else none). Both checkers call this: the samples
    are few (about one per broker, and one of ZooKeeper, a second), read on
    the driver like every observation."""
    return [] if promises.not_promised(name) else ORACLES[name](obs, promises)


def status(obs: Observed, promises: Promises) -> dict[str, str]:
    """summary.json `oracles` of these types: "checked", or why not."""
    out = {}
    for name in ORACLES:
        why = promises.not_promised(name)
        if why:
            out[name] = f"{NOT_PROMISED}: {why}"
        elif name in STATE_TYPES and not obs.states:
            out[name] = "no input: no broker-state samples (the built-in broker's state window)"
        elif name in METADATA_TYPES and len(obs.versioned) < 2:
            out[name] = "no input: fewer than two ZooKeeper metadata samples"
        else:
            out[name] = "checked"
    return out
