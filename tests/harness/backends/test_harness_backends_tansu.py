"""The tansu target end to end: real tansu brokers over a real PostgreSQL in
containers, real Kafka clients (confluent-kafka), real faults, the checker.

Skipped, with the command to run, until the opt-in image is built
(`chaoslog images --target tansu`: compiles tansu from crates.io). The
refusal table needs neither Docker nor the image.

The chaos run goes through harness.run.Run, as a run against any target
does; without ZooKeeper, Run reads leaders, registrations and recovery in
the brokers' Metadata (docs/targets.md, "One run, any target").
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from harness.backends.base import PAUSED, RUNNING, STOPPED, ClusterError
from harness.backends.tansu import POSTGRES, TansuCluster, TansuSpec, refusal
from harness.docker_engine import engine_available


def _why_skip() -> str | None:
    if not engine_available():
        return "no Docker engine answers here"
    from harness.images import TANSU_BUILD_HINT, tansu_image_built
    if not tansu_image_built():
        return (f"the tansu images are not built: run `{TANSU_BUILD_HINT}` "
                "(compiles tansu 0.6.0 from crates.io; docs/targets.md gives the build time)")
    return None


SKIP = _why_skip()
needs_tansu = [pytest.mark.docker, pytest.mark.skipif(SKIP is not None, reason=SKIP or "")]


# -- what the target refuses (no Docker needed) ---------------------------------------------

def test_tansu_refuses_what_it_cannot_do_by_fault_and_target_name():
    from faults.injectors import CATALOGUE
    supported = {name for name in CATALOGUE if refusal(name, "broker-1") is None}
    assert supported == {"kill", "stop", "pause", "partition-isolate", "partition-halves",
                         "partition-ring", "partition-bridge", "partition-one-way",
                         "partition-clients"}
    for name in set(CATALOGUE) - supported:
        why = refusal(name, "broker-1")
        assert why.startswith(f"the tansu target cannot run {name}: ")
    assert "ZooKeeper" in refusal("zk-expire")
    assert "replica files" in refusal("truncate-tail", "broker-2")
    # Roles read from Metadata are refused for every fault, named in the message.
    why = refusal("pause", "leader:t/0")
    assert "pause" in why and "'leader:t/0'" in why and "node 111" in why
    assert refusal("pause", "controller") and refusal("partition-isolate", "follower")
    assert refusal("pause", "broker-3") is None
    assert refusal("partition-isolate", "random") is None


def test_tansu_spec_says_what_it_cannot_be():
    assert TansuSpec(brokers=2).node_names() == [POSTGRES, "broker-1", "broker-2"]
    for bad, match in [(dict(zookeepers=1), "no ZooKeeper"), (dict(brokers=0), "at least one"),
                       (dict(broker_config={"min.insync.replicas": 2}), "min.insync.replicas"),
                       (dict(proxied=True), "proxied"), (dict(storage="memory"), "postgres")]:
        with pytest.raises(ClusterError, match=match):
            TansuSpec(**bad).validate()


# -- a running tansu cluster -------------------------------------------------------------------

@pytest.fixture(scope="module")
def tansu():
    """Three tansu brokers over one PostgreSQL, for the module; removed at the
    end whatever happened (destroy() also runs inside a failed start)."""
    if SKIP:
        pytest.skip(SKIP)
    c = TansuCluster(TansuSpec(name="tansu-test", brokers=3))
    try:
        c.start()
        yield c
    finally:
        c.destroy()


def _brokers(c: TansuCluster) -> list[str]:
    return [n.name for n in c.brokers()]


def test_tansu_cluster_is_up_with_the_usual_node_names(tansu):
    nodes = {n.name: n for n in tansu.nodes()}
    assert list(nodes) == [POSTGRES, "broker-1", "broker-2", "broker-3"]
    assert all(n.state == RUNNING for n in nodes.values())
    assert len(tansu.bootstrap_servers.split(",")) == 3
    assert tansu.zookeeper_connect == ""
    assert "listening on" in tansu.logs("broker-1")


def test_every_broker_names_itself_the_leader_of_every_partition(tansu):
    """What a Kafka client can know of roles on tansu: each broker's Metadata
    lists one broker, node 111, at its own address, leading every partition.
    This is why the target refuses leader-aimed faults."""
    from harness.topics import create_topics
    create_topics(tansu.bootstrap_servers, {"roles": 2}, 1)
    for name in _brokers(tansu):
        md = tansu.metadata_view(name, ["roles"])
        assert md.brokers == {111: (tansu.node_ip(name), 9092)}
        assert {tp: p.leader for tp, p in md.partitions.items()} == {("roles", 0): 111,
                                                                       ("roles", 1): 111}


def test_kafka_clients_produce_through_all_and_read_back_through_each_broker(tansu):
    """confluent-kafka writes through the cluster (acks=all) and reads every
    record back through each broker alone: the brokers share one storage."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from harness.topics import create_topics
    create_topics(tansu.bootstrap_servers, {"shared": 3}, 1)
    acked: dict[tuple[int, int], bytes] = {}
    errors = []

    def done(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked[(msg.partition(), msg.offset())] = msg.value()

    p = Producer({"bootstrap.servers": tansu.bootstrap_servers, "acks": "all",
                  "enable.idempotence": True, "log_level": 0})
    for i in range(90):
        p.produce("shared", value=f"v{i}".encode(), partition=i % 3, on_delivery=done)
    assert p.flush(60) == 0
    assert not errors and len(acked) == 90
    for name in _brokers(tansu):
        c = Consumer({"bootstrap.servers": f"{tansu.node_ip(name)}:9092", "group.id": f"g-{name}",
                      "enable.auto.commit": False, "log_level": 0})
        c.assign([TopicPartition("shared", p, 0) for p in range(3)])
        seen: dict[tuple[int, int], bytes] = {}
        deadline = time.monotonic() + 60
        while len(seen) < len(acked) and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                seen[(m.partition(), m.offset())] = m.value()
        c.close()
        assert seen == acked, f"read through {name}"


def test_node_operations_kill_pause_stop_and_start(tansu):
    tansu.kill_node("broker-2")
    assert tansu.node("broker-2").state == STOPPED and not tansu.answers("broker-2")
    tansu.start_node("broker-2")
    tansu.wait_ready(["broker-2"])
    tansu.pause_node("broker-3")
    assert tansu.node("broker-3").state == PAUSED and not tansu.answers("broker-3", timeout=2)
    tansu.resume_node("broker-3")
    assert tansu.answers("broker-3")
    tansu.stop_node("broker-1", timeout=10)
    assert tansu.node("broker-1").state == STOPPED
    tansu.start_node("broker-1")
    tansu.wait_ready()
    with pytest.raises(ClusterError, match="no node 'broker-9'"):
        tansu.kill_node("broker-9")


@pytest.mark.xfail(strict=True, reason=(
    "tansu 0.6.0 refuses every batch of an idempotent producer whose epoch the client bumped "
    "itself (librdkafka does, KIP-360, after messages timed out): the producer_epoch row "
    "tansu looks up does not exist, the broker logs a RowCount error and answers "
    "UNKNOWN_SERVER_ERROR, and librdkafka bumps again"))
def test_an_idempotent_producer_writes_again_after_its_messages_timed_out(tansu):
    """Apache Kafka accepts an idempotent producer's own epoch bump; a producer
    whose messages timed out while its broker was frozen must write again."""
    import threading
    from confluent_kafka import Producer
    from harness.topics import create_topics
    create_topics(tansu.bootstrap_servers, {"bump": 1}, 1)
    outcomes: list[str] = []
    p = Producer({"bootstrap.servers": tansu.bootstrap_servers, "enable.idempotence": True,
                  "acks": "all", "request.timeout.ms": 3000, "message.timeout.ms": 6000,
                  "log_level": 0})
    stop = threading.Event()

    def produce():
        while not stop.is_set():
            p.produce("bump", b"x", partition=0,
                      on_delivery=lambda err, _: outcomes.append("ok" if err is None
                                                                  else err.name()))
            p.poll(0.01)

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    try:
        time.sleep(3)
        victim = tansu.busiest_broker()
        tansu.pause_node(victim)
        time.sleep(10)             # longer than message.timeout.ms
        tansu.resume_node(victim)
        time.sleep(3)              # the timed-out messages are reported, the epoch bumped
        mark = len(outcomes)
        time.sleep(8)
    finally:
        stop.set()
        t.join(10)
        p.flush(10)
    assert "_MSG_TIMED_OUT" in outcomes[:mark], "the pause timed no message out"
    assert "ok" in outcomes[mark:], f"after the bump: {sorted(set(outcomes[mark:]))}"


def test_a_missing_image_is_a_clear_error_naming_the_build_command(monkeypatch):
    if not engine_available():
        pytest.skip("no Docker engine answers here")
    import harness.images
    monkeypatch.setattr(harness.images, "tansu_image_built", lambda: False)
    c = TansuCluster(TansuSpec(name="tansu-missing", brokers=1))
    try:
        with pytest.raises(ClusterError, match=r"chaoslog images --target tansu"):
            c.start()
        assert not c.containers and c.network is None
    finally:
        c.destroy()


# -- a short chaos run -------------------------------------------------------------------------

# (seconds into the run, fault, node, seconds held). tansu has no roles to aim
# at (see above); a client uses whichever broker its Metadata named, so node
# None means the broker serving the most clients when the fault starts
# (TansuCluster.busiest_broker).
CHAOS_FAULTS = ("kill", "pause", "partition-isolate")
CHAOS_STEPS = [(6.0 + 10.0 * i, CHAOS_FAULTS[i % 3], None, 6.0) for i in range(6)]
CHAOS_TOPICS = {"t": 3}


def chaos_run(cluster: TansuCluster, run_dir: Path, steps=CHAOS_STEPS, *, rate: float = 100.0,
              tail_s: float = 8.0) -> dict:
    """One chaos run against tansu through harness.run.Run, as against any
    target: topics through the AdminClient, a workload of real clients, the
    catalogue's injectors started at the steps' times, the final heal,
    recovery read in Metadata, the final reads, run.json and the node logs,
    then the reference checker. Returns summary.json."""
    from harness.run import Run
    from harness.workload import WorkloadSpec
    from harness.workload.clients import ProducerSettings

    spec = WorkloadSpec(dict(CHAOS_TOPICS), producers=2, slots=4, consumers=1, rate=rate,
                        mix=(ProducerSettings(acks="all", idempotent=True),
                             ProducerSettings(acks="all", retries=0)))
    steps_done: list[dict] = []
    with Run(run_dir, cluster, log=lambda m: print(m, flush=True)) as run:
        run.create_topics(spec.topics, 1)
        run.start_workload(spec)
        t0 = time.monotonic()
        for at, fault, node, hold in steps:
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            node = node or cluster.busiest_broker()
            # Whom the fault hits: the clients' connections to that broker now.
            steps_done.append({"at_s": round(time.monotonic() - t0, 1), "fault": fault,
                               "node": node, "clients": cluster.client_connections(node)})
            inj = run.inject(fault, node)
            time.sleep(hold)
            inj.stop()
        time.sleep(tail_s)
        run.outcome["steps"] = steps_done
        run.finish(quiet_s=5.0, final_timeout_s=60.0, settle_s=5.0)
    return run.verdict("reference")


@pytest.mark.slow
def test_a_short_chaos_run_against_tansu_is_judged_by_the_checker(tansu, tmp_path):
    """Kill, pause and isolate one tansu broker each while real clients write
    and read; the checker judges the history. Its verdict is the result, as it
    would be for the built-in broker: the test fails only if the run could
    not be judged. CHAOSLOG_TANSU_RESULTS=DIR keeps the summary there."""
    summary = chaos_run(tansu, tmp_path / "run")
    keep = os.environ.get("CHAOSLOG_TANSU_RESULTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copytree(tmp_path / "run", Path(keep) / "run", dirs_exist_ok=True)
    history = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").open()]
    stops = [e["fault"] for e in history if e["f"] == "nemesis" and e["phase"] == "stop"]
    assert sorted(stops) == sorted([s[1] for s in CHAOS_STEPS] + ["final-heal"])
    steps = json.loads((tmp_path / "run" / "run.json").read_text())["result"]["steps"]
    print(json.dumps(steps))
    # Every kind of fault hit a broker that served clients at the time.
    assert {s["fault"] for s in steps if s["clients"]} == set(CHAOS_FAULTS), steps
    assert summary["verdict"] in ("valid", "invalid")
    print(json.dumps({k: summary.get(k) for k in ("verdict", "fatal", "anomaly_counts",
                                                   "availability", "counts")}, indent=1))
