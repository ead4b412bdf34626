"""The two coordination modes side by side: the controller design (the
default) and V2 (`coordination=v2`, no controller: each partition's replicas
elect a leader through a ZooKeeper lock; docs/design.md#v2), on real
clusters: the docker backend, a real ZooKeeper, real Kafka clients.

    .venv/bin/python bench/compare_modes.py [--out DIR] [--duration S] [--seed N] [--only ...]
    .venv/bin/python bench/compare_modes.py --out DIR --only ...   # run these cells again in DIR
    .venv/bin/python bench/compare_modes.py --recheck DIR   # the numbers again from DIR's runs

`--only` keeps some of: the modes (controller, v2), the configurations
(seed-faithful, fixed), the fault kinds (kill, partition-isolate, pause,
isr-shrink-then-leader-loss) and the topic-deletion check (deleted-topic);
an axis none of whose items is named stays whole (`--only v2 kill` is the
V2 kill runs of both configurations; `--only v2` is every V2 run and the V2
deleted-topic check).

What is measured, per mode:

1. Acknowledged writes lost, per configuration and fault kind. One chaos run
   per (mode, configuration, fault), a RunSpec (harness/run.py) checked by
   RunSpec.validate as `chaoslog run` checks its options, played by
   harness.run.execute, then checked by the reference checker (the same as
   `chaoslog run ... --no-analysis` and `chaoslog analyze RUN_DIR --checker
   reference`; each cell keeps the command that replays its run, `chaoslog
   run --spec RUN_DIR`). One topic of 3
   partitions, replication factor 3, 100 sends/s from 2 producers, one
   consumer; the fault aims at the leader of partition t/0 (`--target
   FAULT=leader`); the same seed, so the same schedule, for both modes.
   Besides the three single faults, the recipe isr-shrink-then-leader-loss
   (faults/recipes.py: partition-isolate of the leader among the brokers
   only, until the ISR is the leader alone, then a kill of that leader):
   Jepsen 2013's chain. A partition-isolate alone cuts the leader off
   ZooKeeper too, so it cannot shrink the ISR to itself and acknowledges no
   acks=all write alone; only the chain reaches the state where the
   seed-faithful configuration loses acks=all writes. (The V2 recipe cells
   of 2026-11-27 replayed the recipe's drawn schedule with `--schedule`,
   kept in schedules/: `chaoslog run --faults RECIPE` failed in V2 then, a
   harness bug fixed since.)
   Configurations:
     seed-faithful  min.insync.replicas=1, unclean.leader.election.enable=true,
                    replication.truncation=hw, one acks=all and one acks=1
                    producer (`--mix all,1`; seed-faithful.toml)
     fixed          min.insync.replicas=2, unclean.leader.election.enable=false,
                    replication.truncation=leader-epoch, acks=all (fixed.toml)
   both with replica.lag.time.max.ms=3000 (suites/test_suite_call_me_maybe.py).
   Reported: the acknowledged writes missing from the complete final reads
   (the log no longer holds them), counted from the history by the acks of
   their producer; and from the checker's summary.json: valid, the fatal
   anomaly types, `lost` and `unseen` (acks=all), `lost-unreplicated` (acks=1:
   the design promises nothing for them, never fatal), `inconsistent-offset`,
   duplicates, writes acknowledged, whether each fault took effect. The
   first count is the table's: with a live consumer, an acknowledged write
   read before it was truncated away is no `lost` for the checker but an
   `inconsistent-offset` (docs/anomalies.md), and it is gone all the same.
2. Unavailability after a fault of the leader, from history.jsonl and
   observations.jsonl, counting only the sends of acks=all producers (an
   acks=1 write acknowledged by a leader cut off from the others says
   nothing about the partition being available). For each fault window
   (summary.json `fault_windows`) and each partition its target (the leader
   of t/0 at the start) led at the fault's start (the last `metadata` sample
   before it): the longest gap between two consecutive acknowledged (`ok`)
   sends of that partition that overlaps the fault's window (however late
   the later ack came: in the fixed configuration a partition whose ISR
   shrank to a killed leader stays without acks until that broker is back
   and caught up), and how long after the fault's start that later ack came
   (writes resumed). A gap overlapping two faults is counted for each.
   summary.json also has the time from the fault's start to the first ack
   of a send invoked after it, which is not used in the table: the nemesis
   records a fault's start just before it applies it (a docker kill or the
   iptables rules of four containers take a few hundred ms on this
   machine), so that ack often precedes the fault's effect.
3. Split leadership, in the partition-isolate runs: a probe beside the run
   (hooked in through execute's `on_start`) asks each broker itself, every
   100 ms, with a ListOffsets request (harness/kafka_wire.py) over a socket to
   its client address (the container's address on the docker network: the
   host reaches it, and a partition-isolate leaves the host's links alone)
   whether it leads each partition: a leader answers, any other broker
   NOT_LEADER_FOR_PARTITION (no answer counts as not leading). A split is a
   time when two brokers both answer as leader of one partition. Each
   broker's answer holds until its next answer; `total_s` and `longest_s`
   add up those overlaps (an upper bound, at most about one probe period
   too long per window), `confirmed_s` only the overlaps of spans from a
   broker's first to its last consecutive leader answer (a lower bound). The
   samples are kept in the run directory as `leader-probe.jsonl`.
4. ZooKeeper watches in steady state: the runs' `resources` observations
   (ZooKeeper's `wchs` total, every 10 s) taken while no fault was active
   (from 5 s after the clients' first op to the final heal, outside [start,
   stop + 2 s] of every fault window; or from 2 s after the cluster
   recovered from the final heal); the median per run and per mode. The
   same cluster shape in every run: 1 ZooKeeper, 3 brokers, topic t (3
   partitions) and __consumer_offsets (10 partitions, made when the consumer
   looks up a coordinator), 3 replicas each, and the harness's own
   ZooKeeper client. Also read on the quiet cluster of check 5 (topic t
   only, no clients, no faults, no harness sampler), every 8 s from its
   topic's creation on.
5. A broker that comes back after a topic deletion: 3 brokers, a topic of 3
   partitions with a replica on every broker (created with the Kafka
   AdminClient), one broker stopped (SIGTERM; not the controller in the
   controller mode), once its partitions have live leaders again (and 2 s
   more) the topic deleted with the AdminClient's DeleteTopics (both modes
   serve it), the broker started again; then for 30 s after it
   registered: are its replica directories still on disk, when did they go
   (seconds after the start and after the registration), does any broker's
   own Metadata answer list the topic again, does /brokers/topics/T come
   back. In V2 also how many requests the broker's state-change queue held
   while it was down.

What is real: clusters, ZooKeeper, faults (SIGKILL, iptables, docker pause),
clients (confluent-kafka workers), the checker's verdicts, the probe's Kafka
requests. What is not: one seed and one short run per cell, so each number
is one sample of a random process (a cell that lost nothing may lose
something on another seed); the machine is small and shared (its load is in
summary.json), which moves every timing.

Writes DIR/summary.json (command, commit, machine, every number; per cell
the commit and broker image it ran, since the image is built from the
working tree when a cluster starts), DIR/table.md (the table to read) and
keeps the run directories under DIR/runs/ (a cell run again leaves its
earlier one as RUN_DIR.earlier-N) and the deleted-topic clusters' logs and
ZooKeeper trees under DIR/deleted-topic-MODE/. DIR defaults to
runs/bench/compare-modes-<date> (-b, -c ... when taken). Every cluster
it starts is removed at the end, also on failure, Ctrl-C and SIGTERM.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.paths import RAW  # noqa: E402
from cluster import admin, zkpaths  # noqa: E402
from cluster.v2.state_queue import StateChangeQueue  # noqa: E402
from contracts.deadline import wait_until  # noqa: E402
from faults import recipes  # noqa: E402
from harness import kafka_wire  # noqa: E402
from harness.backends import make_cluster  # noqa: E402
from harness.backends.base import ClusterSpec  # noqa: E402
from harness.history import collect_logs, dump_zookeeper  # noqa: E402
from harness.images import current_tags  # noqa: E402
from harness.progress import Progress  # noqa: E402
from harness.resources import zk_watches  # noqa: E402
from harness.run import Draw, RunSpec, execute, log_line, mix_of  # noqa: E402
from harness.workload import WorkloadSpec  # noqa: E402
from harness.workload.clients import ProducerSettings  # noqa: E402
from reports.exit_codes import EXIT_INTERRUPTED, EXIT_OK, EXIT_UNKNOWN  # noqa: E402
from harness.topics import create_topics  # noqa: E402

MODES = {"controller": {}, "v2": {"coordination": "v2"}}
COMMON = {"replica.lag.time.max.ms": 3000}
CONFIGS = {
    "seed-faithful": ({**COMMON, "min.insync.replicas": 1, "unclean.leader.election.enable": "true",
                       "replication.truncation": "hw"}, ["all", "1"]),     # producers' kinds (mix)
    "fixed": ({**COMMON, "min.insync.replicas": 2, "unclean.leader.election.enable": "false",
               "replication.truncation": "leader-epoch"}, []),            # acks=all for all
}
# The recipe is Jepsen 2013's chain (the leader cut off from the brokers
# until the ISR is itself, then killed): a single fault never shrinks the
# ISR to a leader that still reaches ZooKeeper, so only it shows what the
# seed-faithful configuration does to acks=all writes.
JEPSEN = "isr-shrink-then-leader-loss"
FAULTS = ("kill", "partition-isolate", "pause", JEPSEN)
DELETED_TOPIC = "deleted-topic"
TOPIC, PARTITIONS = "t", 3
PROBE_PERIOD_S = 0.1
PROBE_FILE = "leader-probe.jsonl"
SETTLE_AFTER_FAULT_S = 2.0  # watches: samples this close after a fault are not steady
CLIENTS_SETTLE_S = 5.0      # watches: nor this close after the clients started
OBSERVE_RETURN_S = 30.0     # deleted topic: how long the returned broker is watched
QUIET_READINGS, QUIET_READING_EVERY_S = 4, 8.0   # watches of the quiet cluster
NS = 1e9


def say(msg: str) -> None:
    print(f"compare-modes: {msg}", file=sys.stderr, flush=True)


# -- the chaos runs ----------------------------------------------------------------------------

def run_spec(mode: str, config: str, fault: str, duration: float, seed: int,
             out: Path) -> RunSpec:
    """The run of one cell (its schedule drawn from the seed), validated as
    `chaoslog run` validates its options (RunSpec.validate)."""
    broker_config, kinds = CONFIGS[config]
    # A recipe aims its steps itself.
    aim = {} if fault in recipes.RECIPES else {fault: "leader"}
    producer = ProducerSettings(acks="all")
    return RunSpec(
        cluster=ClusterSpec(brokers=3, broker_config={**broker_config, **MODES[mode]}),
        backend="docker", replication_factor=3,
        workload=WorkloadSpec({TOPIC: PARTITIONS}, rate=100, producers=2, consumers=1,
                              producer=producer, mix=mix_of(kinds, producer)),
        schedule=Draw(faults=[fault], targets=aim, seed=seed, duration_s=duration,
                      interval_s=(8, 10), fault_duration_s=(8, 10)),
        quiet_s=10, checker=None, out=out).validate()


class LeaderProbe:
    """Asks every broker itself, every PROBE_PERIOD_S, whether it leads each
    partition of the topic (ListOffsets: a leader answers, others say
    NOT_LEADER_FOR_PARTITION). One thread per broker, so a broker that does
    not answer holds up no other. Times are on the run's history clock."""

    def __init__(self, cluster: Any, clock: Any):
        self.clock = clock
        self.samples: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # Addresses read once: a partition-isolate restarts no container.
        self._threads = [threading.Thread(target=self._ask, args=(b.broker_id, b.host, b.port),
                                          daemon=True, name=f"probe-{b.name}")
                         for b in cluster.brokers()]

    def start(self) -> "LeaderProbe":
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)

    def _ask(self, broker_id: int, host: str, port: int) -> None:
        conn = None
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if conn is None:
                    conn = kafka_wire.KafkaConnection(host, port, timeout=1.0,
                                                      client_id="compare-modes-probe")
                for p in range(PARTITIONS):
                    error, _ = kafka_wire.list_offset(conn, TOPIC, p, -1)
                    self._record(broker_id, p, error == 0, error)
            except Exception as e:  # noqa: BLE001 - down, paused, cut off: not leading now
                if conn is not None:
                    conn.close()
                conn = None
                for p in range(PARTITIONS):
                    self._record(broker_id, p, False, f"no answer: {type(e).__name__}")
            self._stop.wait(max(0.0, PROBE_PERIOD_S - (time.monotonic() - started)))
        if conn is not None:
            conn.close()

    def _record(self, broker: int, partition: int, leader: bool, error: Any) -> None:
        with self._lock:
            self.samples.append({"time": self.clock(), "broker": broker, "partition": partition,
                                 "leader": leader, "error": error})


def play(name: str, spec: RunSpec, run_dir: Path, probe: bool) -> dict[str, Any]:
    """One chaos run, the leader probe beside it when asked, then its numbers."""
    hooked: dict[str, Any] = {}

    def on_start(run: Any) -> None:
        hooked["progress"] = Progress(run).start()
        if probe:
            hooked["probe"] = LeaderProbe(run.cluster, run.recorder.now).start()

    t0 = time.monotonic()
    try:
        result = execute(spec, log=log_line, on_start=on_start)
    finally:
        if "progress" in hooked:
            hooked["progress"].stop()
        if "probe" in hooked:
            hooked["probe"].stop()
    if result.exit_code == EXIT_INTERRUPTED:
        raise KeyboardInterrupt
    cell: dict[str, Any] = {"run_dir": str(run_dir), "exit_code": result.exit_code,
                            "command": f".venv/bin/chaoslog run --spec {run_dir}",
                            "check": f".venv/bin/chaoslog analyze {run_dir} --checker reference",
                            "seconds": round(time.monotonic() - t0, 1)}
    if "probe" in hooked:
        with open(run_dir / PROBE_FILE, "w") as f:
            f.writelines(json.dumps(s) + "\n" for s in hooked["probe"].samples)
    if result.exit_code not in (EXIT_OK, EXIT_UNKNOWN):
        why = (result.outcome or {}).get("error") or "see the log above"
        cell["error"] = f"the run failed (exit {result.exit_code}): {why}"
        return cell
    return {**cell, **measure(name, run_dir)}


def measure(name: str, run_dir: Path) -> dict[str, Any]:
    """Every number of one run directory: the reference checker's verdict,
    then what this script derives from the history and observations."""
    from reports import analyze

    say(f"{name}: checking the history (reference checker)")
    (verdict,) = analyze([str(run_dir)], checker="reference")
    if verdict.summary is None:
        return {"error": f"the checker could not judge it: {verdict.verdict}: {verdict.error}"}
    summary = verdict.summary
    out = {"writes": lost_writes(summary, run_dir),
           "unavailability": unavailability(summary, run_dir),
           "zk_watches": steady_watches(summary, run_dir)}
    if (run_dir / PROBE_FILE).exists():
        out["split"] = split_leadership(read_jsonl(run_dir / PROBE_FILE))
    return out


# -- 1. acknowledged writes lost -------------------------------------------------------------

def missing_from_final_reads(run_dir: Path) -> dict[str, int]:
    """Acknowledged values the complete final reads did not return (the log
    no longer holds them), by the acks of the producer that sent them. A
    live consumer may have read such a value before it was truncated away:
    the checker then reports an `inconsistent-offset` (or `truncated-read`)
    instead of `lost`, but the write is gone all the same."""
    events = read_jsonl(run_dir / "history.jsonl")
    clients = json.loads((run_dir / "run.json").read_text())["workload"].get("clients", {})
    node_of = {e["op"]: e.get("node") for e in events if e["type"] == "invoke" and e["f"] == "send"}
    final = {v for e in events if e["type"] == "ok" and e["f"] == "poll" and e.get("final")
             for _, v in e.get("records") or []}
    missing = {"acks_all": 0, "acks_1": 0}
    for e in events:
        if e["type"] == "ok" and e["f"] == "send" and e["value"] not in final:
            acks = str(clients.get(node_of.get(e["op"]), {}).get("acks"))
            missing["acks_all" if acks in ("all", "-1") else "acks_1"] += 1
    return missing


def lost_writes(summary: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    counts = summary.get("anomaly_counts") or {k: len(v) for k, v in summary["anomalies"].items()}
    outcome = json.loads((run_dir / "run.json").read_text()).get("result", {})
    windows = [w for w in summary.get("fault_windows", []) if w.get("fault") != "final-heal"]
    complete = (outcome.get("final_reads") or {}).get("complete")
    missing = missing_from_final_reads(run_dir) if complete else None
    return {"valid": summary.get("valid"), "acknowledged": summary["counts"].get("acknowledged"),
            "missing_acks_all": missing and missing["acks_all"],
            "missing_acks1": missing and missing["acks_1"],
            "inconsistent_offsets": counts.get("inconsistent-offset", 0),
            "lost": counts.get("lost", 0), "unseen": counts.get("unseen", 0),
            "lost_acks1": counts.get("lost-unreplicated", 0),
            "duplicated": counts.get("duplicate", 0),
            "fatal": summary.get("fatal", []),
            "final_reads_complete": complete,
            "faults": [{"fault": w["fault"], "targets": w.get("targets"),
                        "start_s": round(w["start"] / NS, 1),
                        "stop_s": round(w["stop"] / NS, 1) if w.get("stop") else None,
                        "took_effect": w.get("took_effect"), "observed": w.get("observed")}
                       for w in windows]}


# -- 2. unavailability -------------------------------------------------------------------------

def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def acks_all_producers(run_dir: Path) -> set[str]:
    clients = json.loads((run_dir / "run.json").read_text())["workload"].get("clients", {})
    return {n for n, c in clients.items() if c.get("role") == "producer"
            and str(c.get("acks")) in ("all", "-1")}


def leader_before(samples: list[dict[str, Any]], t: int, tp: tuple[str, int]) -> int | None:
    """The leader of `tp` in the last metadata sample at or before `t`."""
    before = [s for s in samples if s["time"] <= t]
    return next((p["leader"] for p in (before[-1]["partitions"] if before else [])
                 if (p["topic"], p["partition"]) == tp), None)


def unavailability(summary: dict[str, Any], run_dir: Path) -> list[dict[str, Any]]:
    """Per fault window, on the sends of acks=all producers: for each
    partition the fault's target led at the start, the longest gap between
    consecutive acks that overlaps the fault, when that gap ended, and the
    first ack of a send invoked after the start; and the longest such gap of
    any partition."""
    events = read_jsonl(run_dir / "history.jsonl")
    samples = sorted((o for o in read_jsonl(run_dir / "observations.jsonl")
                      if o["kind"] == "metadata"), key=lambda o: o["time"])
    producers = acks_all_producers(run_dir)
    invoked = {e["op"]: e["time"] for e in events if e["type"] == "invoke" and e["f"] == "send"
               and e.get("node") in producers}
    acks: dict[int, list[tuple[int, int]]] = {}     # partition -> [(invoked, acked)] by ack
    for e in events:
        if e["type"] == "ok" and e["f"] == "send" and e["op"] in invoked:
            acks.setdefault(e["partition"], []).append((invoked[e["op"]], e["time"]))
    ack_times = {p: [a for _, a in pairs] for p, pairs in acks.items()}
    run_end = events[-1]["time"]
    out = []
    for w in summary.get("fault_windows", []):
        if w.get("fault") == "final-heal" or not w.get("targets"):
            continue
        start, stop = w["start"], w.get("stop") or summary.get("duration_ns", w["start"])
        # The fault aimed at the leader of t/0; a partition's event names every
        # node of its grudge, a kill or pause only its target.
        t0_leader = leader_before(samples, start, (TOPIC, 0))
        target = (w["targets"][0] if len(w["targets"]) == 1 else
                  f"broker-{t0_leader}" if t0_leader is not None else None)
        if target is None:
            continue
        target_id = int(target.rsplit("-", 1)[1])
        led = [p for p in range(PARTITIONS)
               if leader_before(samples, start, (TOPIC, p)) == target_id]
        gaps = {p: g for p, times in ack_times.items()
                if (g := longest_gap(times, start, stop, run_end))}
        partitions = {}
        for p in led:
            after = [a for i, a in acks.get(p, []) if i > start]
            gap = gaps.get(p)
            partitions[p] = {
                "first_ack_after_start_s": round((min(after) - start) / NS, 2) if after else None,
                "longest_gap_s": round(((gap[1] or run_end) - gap[0]) / NS, 2) if gap else None,
                "resumed_after_start_s": (round((gap[1] - start) / NS, 2)
                                          if gap and gap[1] is not None else None),
                "no_ack_until_the_end": bool(gap) and gap[1] is None}
        worst = max(gaps, key=lambda p: (gaps[p][1] or run_end) - gaps[p][0], default=None)
        out.append({"fault": w["fault"], "target": target, "t0_leader_at_start": t0_leader,
                    "start_s": round(start / NS, 1), "stop_s": round(stop / NS, 1),
                    "led": partitions, "longest_gap_partition": worst,
                    "longest_gap_any_partition_s": (
                        round(((gaps[worst][1] or run_end) - gaps[worst][0]) / NS, 2)
                        if worst is not None else None)})
    return out


def longest_gap(times: list[int], start: int, stop: int,
                run_end: int) -> tuple[int, int | None] | None:
    """The longest (earlier, later) pair of consecutive ack times (in ack
    order) that overlaps [start, stop], however late the later one came;
    later is None when no ack came after the earlier one before `run_end`."""
    pairs: list[tuple[int, int | None]] = [*zip(times, times[1:]), *[(t, None) for t in times[-1:]]]
    overlapping = [(a, b) for a, b in pairs if a <= stop and (b is None or b >= start)]
    return max(overlapping, key=lambda ab: (ab[1] or run_end) - ab[0], default=None)


# -- 3. split leadership -----------------------------------------------------------------------

def leader_spans(answers: list[dict[str, Any]], hold: bool) -> list[tuple[int, int]]:
    """One broker's spans of leadership of one partition, from its answers in
    time order: held until its next answer (`hold`), or only from its first to
    its last consecutive leader answer."""
    spans, begin, last = [], None, None
    for i, a in enumerate(answers):
        if a["leader"] and begin is None:
            begin = a["time"]
        if a["leader"]:
            last = answers[i + 1]["time"] if hold and i + 1 < len(answers) else a["time"]
        if not a["leader"] and begin is not None:
            spans.append((begin, last))
            begin = None
    if begin is not None:
        spans.append((begin, last))
    return [s for s in spans if s[1] > s[0]]


def overlaps(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(max(x0, y0), min(x1, y1)) for x0, x1 in a for y0, y1 in b
            if max(x0, y0) < min(x1, y1)]


def split_leadership(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Windows in which two brokers both answered as leader of one partition."""
    by = {}
    for s in sorted(samples, key=lambda s: s["time"]):
        by.setdefault((s["partition"], s["broker"]), []).append(s)
    windows, confirmed = [], 0.0
    for p in range(PARTITIONS):
        brokers = sorted(b for q, b in by if q == p)
        for i, x in enumerate(brokers):
            for y in brokers[i + 1:]:
                held = overlaps(leader_spans(by[(p, x)], True), leader_spans(by[(p, y)], True))
                for s0, s1 in held:
                    windows.append({"partition": p, "brokers": [x, y], "from_s": round(s0 / NS, 2),
                                    "to_s": round(s1 / NS, 2), "seconds": round((s1 - s0) / NS, 2)})
                confirmed += sum(s1 - s0 for s0, s1 in overlaps(
                    leader_spans(by[(p, x)], False), leader_spans(by[(p, y)], False))) / NS
    return {"total_s": round(sum(w["seconds"] for w in windows), 2),
            "longest_s": max((w["seconds"] for w in windows), default=0.0),
            "confirmed_s": round(confirmed, 2), "windows": windows,
            "answers": len(samples), "leader_answers": sum(s["leader"] for s in samples),
            "period_s": PROBE_PERIOD_S}


# -- 4. ZooKeeper watches ----------------------------------------------------------------------

def steady_watches(summary: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """The run's zk_watches samples taken while no fault was active: from
    CLIENTS_SETTLE_S after the first client op (the consumer's coordinator
    lookup creates __consumer_offsets) to the final heal, outside [start,
    stop + SETTLE_AFTER_FAULT_S] of every fault; or once the cluster had
    recovered from the final heal (plus the same settling time)."""
    observations = read_jsonl(run_dir / "observations.jsonl")
    with open(run_dir / "history.jsonl") as f:
        first_op = json.loads(f.readline())["time"]
    windows = summary.get("fault_windows", [])
    heal = min((w["start"] for w in windows if w.get("fault") == "final-heal"),
               default=summary.get("duration_ns") or 0)
    busy = [(w["start"], (w.get("stop") or heal) + SETTLE_AFTER_FAULT_S * NS) for w in windows
            if w.get("fault") != "final-heal"]
    recovered = next((o["recovered_at"] + SETTLE_AFTER_FAULT_S * NS for o in observations
                      if o["kind"] == "recovery" and o.get("recovered")), None)
    got = [(o["time"], o["zk_watches"]) for o in observations
           if o["kind"] == "resources" and o.get("zk_watches") is not None]

    def steady(t: int) -> bool:
        if recovered is not None and t >= recovered:
            return True
        return (first_op + CLIENTS_SETTLE_S * NS <= t < heal
                and not any(a <= t <= b for a, b in busy))
    values = [w for t, w in got if steady(t)]
    return {"steady": values, "median": statistics.median(values) if values else None,
            "all": [(round(t / NS, 1), w, steady(t)) for t, w in got],
            "partition_replicas": partition_replicas(run_dir)}


def partition_replicas(run_dir: Path) -> dict[str, int] | None:
    """Replicas per topic at the end of the run (its ZooKeeper dump): the
    consumer's coordinator lookup adds __consumer_offsets to the run's topic."""
    try:
        tree = json.loads((run_dir / "zookeeper.json").read_text())
    except (OSError, ValueError):
        return None
    prefix = "/brokers/topics/"
    return {path[len(prefix):]: sum(len(r) for r in json.loads(data)["partitions"].values())
            for path, data in tree.items()
            if path.startswith(prefix) and path.count("/") == 3 and data}


# -- 5. a broker that comes back after a topic deletion ---------------------------------------

def topic_listed(cluster: Any, name: str) -> bool | None:
    """Whether broker `name` itself lists TOPIC with partitions in its
    Metadata answer; None when it does not answer."""
    try:
        node = cluster.node(name)
        conn = kafka_wire.KafkaConnection(node.host, node.port, timeout=2.0,
                                          client_id="compare-modes")
        try:
            md = kafka_wire.metadata(conn, [TOPIC])
        finally:
            conn.close()
    except Exception:  # noqa: BLE001 - down, or refusing Metadata before its first update
        return None
    return any(p.error == 0 for (t, _), p in md.partitions.items() if t == TOPIC)


def delete_topic(bootstrap: str) -> str:
    """DeleteTopics through the Kafka AdminClient: 'ok' or the error."""
    from confluent_kafka.admin import AdminClient
    client = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})  # alive until answered
    futures = client.delete_topics([TOPIC], operation_timeout=30, request_timeout=40)
    try:
        futures[TOPIC].result()
        return "ok"
    except Exception as e:  # noqa: BLE001 - reported as it is
        return str(e)


def on_disk(dirs: list[Path]) -> list[str]:
    return [d.name for d in dirs if d.exists()]


def delete_while_down(cluster: Any, zk: Any, mode: str, victim: str,
                      dirs: dict[str, list[Path]]) -> dict[str, Any]:
    """Stop `victim`, wait until its partitions are led by the others (so
    the deletion does not race their elections), delete the topic through
    the others, and say what the cluster did meanwhile."""
    vid = int(victim.rsplit("-", 1)[1])
    t_stop = time.monotonic()
    cluster.stop_node(victim)
    wait_until(lambda: vid not in admin.live_ids(zk), 30)

    def led_by_others() -> bool:
        live = set(admin.live_ids(zk)) - {vid}
        return all(p["leader"] in live for p in admin.describe_topic(zk, TOPIC)["partitions"])
    settled = wait_until(led_by_others, 30)
    settled_s = round(time.monotonic() - t_stop, 2) if settled else None
    time.sleep(SETTLE_AFTER_FAULT_S)    # the followers follow the new leaders
    live = [n for n in dirs if n != victim]
    t_delete = time.monotonic()
    answer = delete_topic(",".join(cluster.node(n).address for n in live))
    gone = wait_until(lambda: zk.exists(zkpaths.topic_path(TOPIC)) is None, 60)
    deleted_s = round(time.monotonic() - t_delete, 2) if gone else None
    wait_until(lambda: not any(on_disk(dirs[n]) for n in live), 30)
    return {"led_by_others_after_stop_s": settled_s,
            "delete_answer": answer, "topic_znode_gone_after_s": deleted_s,
            "live_brokers_dirs_left_30s": {n: on_disk(dirs[n]) for n in live if on_disk(dirs[n])},
            "v2_queue_requests_while_down": (len(StateChangeQueue(zk, vid).pending())
                                             if mode == "v2" else None),
            "replica_dirs_while_down": on_disk(dirs[victim])}


def watch_return(cluster: Any, zk: Any, victim: str, dirs: list[Path]) -> dict[str, Any]:
    """Start `victim` again; when its replica directories go (relative to
    its start and to its registration: negative is before it registered),
    and what the brokers and ZooKeeper say about the topic meanwhile."""
    vid = int(victim.rsplit("-", 1)[1])
    seen: dict[str, Any] = {"listed_by": set(), "znode": False}

    def look() -> None:
        if "removed" not in seen and not on_disk(dirs):
            seen["removed"] = time.monotonic()
        seen["znode"] |= zk.exists(zkpaths.topic_path(TOPIC)) is not None

    t_start = time.monotonic()
    cluster.start_node(victim)
    if not wait_until(lambda: look() or vid in admin.live_ids(zk), 90, 0.2):
        return {"error": f"{victim} did not register again within 90 s"}
    t_registered = time.monotonic()
    while time.monotonic() - t_registered < OBSERVE_RETURN_S:
        look()
        seen["listed_by"] |= {b.name for b in cluster.brokers() if topic_listed(cluster, b.name)}
        time.sleep(0.5)
    removed = seen.get("removed")
    return {"registered_after_start_s": round(t_registered - t_start, 2),
            "replica_dirs_removed": removed is not None,
            "removed_after_start_s": round(removed - t_start, 2) if removed else None,
            "removed_after_registration_s": round(removed - t_registered, 2) if removed else None,
            "replica_dirs_at_end": on_disk(dirs),
            "topic_in_metadata_of": sorted(seen["listed_by"]),
            "topic_znode_after_return": seen["znode"], "observed_s": OBSERVE_RETURN_S}


def deleted_topic(mode: str, evidence: Path) -> dict[str, Any]:
    """Check 5 on a cluster of its own, removed whatever happens; the nodes'
    logs and the ZooKeeper tree go to `evidence` first."""
    spec = ClusterSpec(name=f"compare-{mode}-{os.getpid()}", brokers=3,
                       broker_config=dict(MODES[mode]))
    cluster = make_cluster(spec, "docker")
    zk = None
    try:
        say(f"deleted topic, {mode}: starting 3 brokers")
        cluster.start()
        zk = admin.connect(cluster.zookeeper_connect)
        create_topics(cluster.bootstrap_servers, {TOPIC: PARTITIONS}, 3)
        admin.wait_for_leaders(zk, TOPIC, timeout=60)
        names = [b.name for b in cluster.brokers()]
        dirs = {n: [cluster.log_dir(n) / f"{TOPIC}-{p}" for p in range(PARTITIONS)] for n in names}
        if not wait_until(lambda: all(d.exists() for ds in dirs.values() for d in ds), 30):
            return {"error": "not every replica directory appeared within 30 s"}
        zk_node = cluster.node("zk-1")
        watches = []
        for _ in range(QUIET_READINGS):   # steady, or not: V2 brokers add watches for a while
            time.sleep(QUIET_READING_EVERY_S)
            watches.append(zk_watches(zk_node.host, zk_node.port))
        controller = admin.controller_info(zk)["id"]
        victim = next(n for n in reversed(names) if int(n.rsplit("-", 1)[1]) != controller)
        say(f"deleted topic, {mode}: stopping {victim}, deleting topic {TOPIC}")
        deleted = delete_while_down(cluster, zk, mode, victim, dirs)
        say(f"deleted topic, {mode}: starting {victim} again, watching it {OBSERVE_RETURN_S:g} s")
        returned = watch_return(cluster, zk, victim, dirs[victim])
        return {"stopped": victim, "controller": controller if mode == "controller" else None,
                **deleted, **returned, "quiet_zk_watches": watches}
    finally:
        if zk is not None:
            zk.stop()
            zk.close()
        try:
            collect_logs(cluster, evidence)
            dump_zookeeper(cluster.zookeeper_connect, evidence)
        except Exception as e:  # noqa: BLE001 - evidence only; the cluster goes anyway
            say(f"deleted topic, {mode}: evidence not kept: {e}")
        cluster.destroy()


# -- the table ---------------------------------------------------------------------------------

def fmt(v: Any, unit: str = "") -> str:
    return "not measured" if v is None else f"{v}{unit}"


def section(title: str, note: str, modes: list[str], rows: list[tuple[str, list[str]]]) -> str:
    lines = [f"## {title}", "", note, "", "| | " + " | ".join(modes) + " |",
             "|---|" + "---|" * len(modes)]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows]
    return "\n".join(lines) + "\n\n"


def show_writes(c: dict[str, Any]) -> str:
    w = c["writes"]
    took = ", ".join(str(f["took_effect"]) for f in w["faults"]) or "no fault"
    fatal = ", ".join(w["fatal"]) or "none"
    return (f"{fmt(w['missing_acks_all'])} / {fmt(w['missing_acks1'])} / {w['acknowledged']}; "
            f"valid {w['valid']} (fatal: {fatal}); took effect: {took}")


def show_unavailability(c: dict[str, Any]) -> str:
    parts = []
    for u in c["unavailability"]:
        led = "; ".join(f"t/{p}: no ack for {fmt(x['longest_gap_s'], ' s')}, " + (
                        "none until the run ended" if x.get("no_ack_until_the_end") else
                        f"acks again {fmt(x['resumed_after_start_s'], ' s')} after the start")
                        for p, x in u["led"].items())
        parts.append(f"{u['target']} at {u['start_s']} s: {led or 'led nothing'}")
    return "<br>".join(parts) or "no fault"


def show_split(c: dict[str, Any]) -> str:
    s = c.get("split")
    if s is None:
        return "not measured (no probe)"
    return (f"total {s['total_s']} s, longest {s['longest_s']} s in {len(s['windows'])} "
            f"window(s); confirmed {s['confirmed_s']} s")


def show_watches(w: dict[str, Any]) -> str:
    shapes = " or ".join(json.dumps(r) for r in w.get("partition_replicas", []))
    return f"{fmt(w.get('median'))} ({len(w.get('steady', []))} samples; replicas {shapes})"


def show_returned(r: dict[str, Any] | None) -> str:
    if r is None:
        return "not run"
    if "error" in r:
        return f"not measured ({r['error']})"
    dirs = (f"removed {r['removed_after_start_s']} s after its start ("
            + (f"{r['removed_after_registration_s']} s after it registered)"
               if r["removed_after_registration_s"] > 0 else "before it registered)")
            if r["replica_dirs_removed"] else
            f"still on disk {r['observed_s']:g} s after it registered: "
            f"{', '.join(r['replica_dirs_at_end'])}")
    queued = (f"; {r['v2_queue_requests_while_down']} requests in its queue while down"
              if r["v2_queue_requests_while_down"] is not None else "")
    left = "; ".join(f"{n} kept {', '.join(d)}" for n, d in r["live_brokers_dirs_left_30s"].items())
    return (f"DeleteTopics: {r['delete_answer']}, topic znode gone after "
            f"{fmt(r['topic_znode_gone_after_s'], ' s')}{queued}; "
            f"live brokers' replicas: {'gone' if not left else left + ' 30 s later'}; "
            f"its replicas: {dirs}; "
            f"topic listed again by: {', '.join(r['topic_in_metadata_of']) or 'no broker'}; "
            f"topic znode there after its return: {r['topic_znode_after_return']}")


def table(report: dict[str, Any]) -> str:
    runs, modes = report["runs"], report["modes"]

    def row(config: str, fault: str, show: Any) -> list[str]:
        out = []
        for m in modes:
            c = runs.get(f"{m}/{config}/{fault}")
            out.append("not run" if c is None else
                       f"not measured ({c['error']})" if "error" in c else show(c))
        return out

    keys = sorted({(c["config"], c["fault"]) for c in runs.values()})
    images = sorted({c["broker_image"] for c in [*runs.values(), *report["deleted_topic"].values()]
                     if "broker_image" in c})
    m = report["machine"]
    text = [f"# Coordination modes side by side ({report['date']})\n\n"
            f"`{report['command']}` at {report['commit']}; {m['cores']} cores ({m['cpu']}), "
            f"load {m['loadavg_start']} at the start, {m.get('loadavg_now')} at the end. One "
            f"run per cell (seed {report['seed']}, {report['duration_s']:g} s of workload and "
            "faults, the fault aimed at the leader of t/0): each number is one sample.\n\n"
            + "".join(f"Then `{x['command']}` at {x['commit']} ({x['at']}).\n\n"
                      for x in sorted(report.get("added", []) + report.get("rechecked", []),
                                      key=lambda x: x["at"]))
            + (f"The broker image changed during the measurement (the working tree changed): "
               f"{', '.join(images)}; summary.json says which run used which.\n\n"
               if len(images) > 1 else "")]
    text.append(section(
        "1. Acknowledged writes lost",
        "acknowledged acks=all writes missing from the complete final reads / the same for "
        "acks=1 writes / writes acknowledged; the checker's verdict and its fatal anomaly "
        "types; whether each fault took effect",
        modes, [(f"{c}, {f}", row(c, f, show_writes)) for c, f in keys]))
    text.append(section(
        "2. Unavailability of the partitions the leader led",
        "acks=all sends only. Per fault and partition its target led: the longest gap between "
        "two consecutive acks of that partition that overlaps the fault (however late the "
        "later ack came), and when, counted from the fault's start, that later ack came",
        modes, [(f"{c}, {f}", row(c, f, show_unavailability)) for c, f in keys]))
    text.append(section(
        "3. Split leadership during a partition-isolate of the leader",
        f"two brokers answering ListOffsets as leader of one partition at once, probed every "
        f"{PROBE_PERIOD_S:g} s; an answer holds until the broker's next (`confirmed`: only "
        "between two leader answers of each broker)",
        modes, [(c, row(c, f, show_split)) for c, f in keys if f == "partition-isolate"]))
    w, d = report.get("zk_watches", {}), report.get("deleted_topic", {})
    text.append(section(
        "4. ZooKeeper watches in steady state",
        "runs: the median of the samples taken outside faults (how many; the partition "
        "replicas per topic at the end); quiet cluster: readings of the cluster of check 5 (topic "
        f"t only, 9 replicas) every {QUIET_READING_EVERY_S:g} s after its topic was created, "
        "before its broker stopped",
        modes, [("runs", [show_watches(w.get(x, {})) for x in modes]),
                ("quiet cluster", [fmt((d.get(x) or {}).get("quiet_zk_watches")) for x in modes])]))
    text.append(section(
        "5. A broker that comes back after its topic was deleted",
        "3 brokers, a topic with a replica on each; one broker stopped, the topic deleted "
        "(AdminClient DeleteTopics), the broker started again and watched",
        modes, [("stopped broker", [show_returned(d.get(x)) for x in modes])]))
    return "".join(text)


# -- main --------------------------------------------------------------------------------------

def machine() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor())
    return {"cores": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "loadavg_start": [round(x, 2) for x in os.getloadavg()]}


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True,
                          text=True).stdout.strip()


def commit() -> str:
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + (" (with uncommitted changes)" if dirty else "")


def default_out() -> Path:
    base = RAW / f"compare-modes-{dt.date.today().isoformat()}"
    for suffix in ["", *(f"-{c}" for c in "bcdefghij")]:
        if not Path(f"{base}{suffix}").exists():
            return Path(f"{base}{suffix}")
    raise SystemExit(f"compare-modes: {base}-* all taken; pass --out")


AXES = {"mode": tuple(MODES), "config": tuple(CONFIGS), "fault": (*FAULTS, DELETED_TOPIC)}


def chosen(only: list[str]) -> dict[str, tuple[str, ...]]:
    """Each axis narrowed to the items `--only` names, or whole."""
    return {axis: tuple(i for i in items if i in only) or items for axis, items in AXES.items()}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="items of --only: " + ", ".join(
                                     i for items in AXES.values() for i in items))
    ap.add_argument("--out", type=Path, help="output directory (default "
                    "runs/bench/compare-modes-DATE)")
    ap.add_argument("--duration", type=float, default=40.0,
                    help="seconds of workload and faults per run (default 40)")
    ap.add_argument("--seed", type=int, default=7, help="the schedule's seed, the same in "
                    "every run (default 7)")
    ap.add_argument("--only", nargs="+", default=[], metavar="ITEM",
                    help="keep only these modes, configurations, fault kinds, deleted-topic")
    ap.add_argument("--recheck", type=Path, metavar="DIR",
                    help="start no cluster: derive every run's numbers again from the run "
                         "directories kept in DIR (an earlier output) and rewrite its "
                         "summary.json and table.md")
    a = ap.parse_args(argv)
    if a.recheck is not None:
        if a.only or a.out or argv_has(argv, "--duration", "--seed"):
            ap.error("--recheck takes the runs as they are: drop --only, --out, --duration, --seed")
        if not (a.recheck / "summary.json").exists():
            ap.error(f"--recheck {a.recheck}: no summary.json there")
        return a
    known = {i for items in AXES.values() for i in items}
    for item in a.only:
        if item not in known:
            ap.error(f"--only {item}: not one of {', '.join(sorted(known))}")
    if a.duration < 20:
        ap.error(f"--duration {a.duration:g}: at least 20 s (the first fault starts 8-10 s in "
                 "and lasts 8-10 s)")
    if a.out is not None and (a.out / "summary.json").exists():
        if not a.only:
            ap.error(f"--out {a.out}: already holds a summary.json; choose a new directory, or "
                     "name the cells to run again in it with --only")
        earlier = json.loads((a.out / "summary.json").read_text())
        for option, key, value in (("--seed", "seed", a.seed), ("--duration", "duration_s",
                                                              a.duration)):
            if earlier[key] != value:
                ap.error(f"{option} {value:g}: {a.out} was measured with {earlier[key]:g}")
    return a


def argv_has(argv: list[str] | None, *options: str) -> bool:
    given = argv if argv is not None else sys.argv[1:]
    return any(g.split("=", 1)[0] in options for g in given)


def this_command(argv: list[str] | None) -> str:
    return " ".join([".venv/bin/python", "bench/compare_modes.py",
                     *(argv if argv is not None else sys.argv[1:])])


def save(report: dict[str, Any], out: Path) -> None:
    report["machine"]["loadavg_now"] = [round(x, 2) for x in os.getloadavg()]
    (out / "summary.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / "table.md").write_text(table(report))


def watches_per_mode(report: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for mode in report["modes"]:
        cells = [c["zk_watches"] for c in report["runs"].values()
                 if c["mode"] == mode and c.get("zk_watches")]
        steady = [x for w in cells for x in w["steady"]]
        shapes = {json.dumps(w.get("partition_replicas"), sort_keys=True) for w in cells}
        out[mode] = {"steady": steady, "median": statistics.median(steady) if steady else None,
                     "partition_replicas": [json.loads(x) for x in sorted(shapes)]}
    return out


def recheck(out: Path, argv: list[str] | None) -> int:
    """The numbers of an earlier output derived again from its run directories."""
    report = json.loads((out / "summary.json").read_text())
    for name, cell in report["runs"].items():
        run_dir = out / "runs" / Path(cell["run_dir"]).name   # wherever DIR is now
        if cell.get("exit_code") in (EXIT_OK, EXIT_UNKNOWN):
            cell.update(measure(name, run_dir))
        else:   # a failed run has no numbers
            for key in ("writes", "unavailability", "zk_watches", "split"):
                cell.pop(key, None)
            cell.setdefault("error", f"the run failed (exit {cell.get('exit_code')})")
    report["zk_watches"] = watches_per_mode(report)
    report.setdefault("rechecked", []).append({
        "command": this_command(argv), "commit": commit(),
        "at": dt.datetime.now().isoformat(timespec="seconds")})
    save(report, out)
    say(f"done: {out / 'table.md'}")
    return 0


def new_report(a: argparse.Namespace, pick: dict[str, tuple[str, ...]],
               argv: list[str] | None) -> dict[str, Any]:
    return {
        "command": this_command(argv), "commit": commit(), "date": dt.date.today().isoformat(),
        "uncommitted": git("status", "--porcelain", "--untracked-files=no").splitlines(),
        "started": dt.datetime.now().isoformat(timespec="seconds"), "machine": machine(),
        "seed": a.seed, "duration_s": a.duration, "modes": list(pick["mode"]),
        "configs": {c: {"broker_config": CONFIGS[c][0], "producers": CONFIGS[c][1]}
                    for c in pick["config"]},
        "runs": {}, "zk_watches": {}, "deleted_topic": {}}


def earlier_report(out: Path, argv: list[str] | None) -> dict[str, Any] | None:
    """An earlier output's report, when cells are run again into it; the
    command that does so is recorded beside the first."""
    if not (out / "summary.json").exists():
        return None
    report = json.loads((out / "summary.json").read_text())
    report.setdefault("added", []).append({
        "command": this_command(argv), "commit": commit(),
        "at": dt.datetime.now().isoformat(timespec="seconds"),
        "loadavg": [round(x, 2) for x in os.getloadavg()]})
    return report


def set_aside(run_dir: Path) -> None:
    """A run directory of an earlier try of the cell is kept as RUN_DIR.earlier-N."""
    if run_dir.exists():
        n = 1 + sum(1 for _ in run_dir.parent.glob(f"{run_dir.name}.earlier-*"))
        run_dir.rename(run_dir.with_name(f"{run_dir.name}.earlier-{n}"))


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.recheck is not None:
        return recheck(a.recheck, argv)
    out = a.out or default_out()
    pick = chosen(a.only)
    faults = [f for f in pick["fault"] if f != DELETED_TOPIC]
    cells = [(m, c, f) for m in pick["mode"] for c in pick["config"] for f in faults]
    report = earlier_report(out, argv) or new_report(a, pick, argv)
    (out / "runs").mkdir(parents=True, exist_ok=True)

    also = " and the deleted-topic check" if DELETED_TOPIC in pick["fault"] else ""
    say(f"{len(cells)} chaos runs{also} -> {out}")
    for i, (mode, config, fault) in enumerate(cells, 1):
        name = f"{mode}/{config}/{fault}"
        run_dir = out / "runs" / f"{mode}-{config}-{fault}"
        set_aside(run_dir)
        say(f"[{i}/{len(cells)}] {name}: running (seed {a.seed}, {a.duration:g} s of faults)")
        # The broker image is built from the working tree when a cluster starts:
        # which code each run tested, should the tree change meanwhile.
        built_from = {"commit": commit(), "broker_image": current_tags().broker}
        try:
            spec = run_spec(mode, config, fault, a.duration, a.seed, run_dir)
            cell = play(name, spec, run_dir, probe=fault == "partition-isolate")
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - the cell says so; the other cells go on
            cell = {"run_dir": str(run_dir), "error": f"{type(e).__name__}: {e}"}
        report["runs"][name] = {"mode": mode, "config": config, "fault": fault, **built_from,
                                **cell}
        w = cell.get("writes")
        say(f"[{i}/{len(cells)}] {name}: " + (
            f"{fmt(w['missing_acks_all'])} acks=all and {fmt(w['missing_acks1'])} acks=1 "
            f"writes of {w['acknowledged']} acknowledged missing from the final reads, valid "
            f"{w['valid']}, {cell['seconds']:.0f} s" if w else cell["error"]))
        save(report, out)
    report["zk_watches"] = watches_per_mode(report)
    if DELETED_TOPIC in pick["fault"]:
        for mode in pick["mode"]:
            try:
                report["deleted_topic"][mode] = {
                    "commit": commit(), "broker_image": current_tags().broker,
                    **deleted_topic(mode, out / f"deleted-topic-{mode}")}
            except KeyboardInterrupt:
                raise
            except Exception as e:  # noqa: BLE001
                report["deleted_topic"][mode] = {"error": f"{type(e).__name__}: {e}"}
            say(f"deleted topic, {mode}: {json.dumps(report['deleted_topic'][mode])}")
            save(report, out)
    report["finished"] = dt.datetime.now().isoformat(timespec="seconds")
    save(report, out)
    say(f"done: {out / 'table.md'}")
    return 0


def interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    # Ctrl-C and SIGTERM both end the run that is going on cleanly (also when
    # started in the background, where SIGINT comes in ignored).
    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        say("interrupted; every cluster started was removed; the results so far are in --out")
        sys.exit(130)
