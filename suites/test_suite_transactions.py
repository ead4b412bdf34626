"""Transactions (docs/design.md#transactions) under faults: confluent's
transactional producers commit and abort while brokers, and with them the
transaction coordinators and partition leaders, are killed, paused and
cut off; consumers and the final reads read at read_committed. The checker
judges the transactional anomalies (docs/anomalies.md, "Transactions"): no
aborted transaction's value read, no committed transaction torn or lost,
none read before its commit. And KAFKA-17754 scripted at the wire beside
such a workload: under KIP-98 the checker finds the late write of an
aborted transaction read as committed; under KIP-890 it is fenced.

A broker killed mid-commit takes with it the coordinator of some
transactional ids (`__transaction_state` has 10 partitions over the three
brokers) and the leader of some of the run's partitions, so the new
coordinator's load, the markers it writes again and the markers written
while a leader fails are all on the path of these runs; another run moves
every coordinator by reassigning the transaction log.
"""
import time

import pytest

from cluster import admin, zkpaths
from cluster.protocol import errors as E
from harness import kafka_wire
from suite_helpers import SAFE, ZkView, describe, wait_for

pytestmark = [pytest.mark.docker]

# Short transaction timeouts: a producer killed with a transaction open
# holds the last stable offset back until its coordinator aborts it.
TXN = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 2000}
TXN_TYPES = ("aborted-txn-read", "torn-txn", "precommitted-read", "txn-reorder")


def _no_transactional_anomaly(summary):
    found = {t: summary["anomalies"].get(t) for t in TXN_TYPES}
    assert all(v == [] for v in found.values()), describe(summary)
    assert all(summary["oracles"].get(t) == "checked" for t in TXN_TYPES), summary["oracles"]


@pytest.mark.broker_config(**SAFE, **TXN)
def test_transactions_stay_whole_when_coordinators_and_leaders_fail(workload, nemesis):
    run = workload({"t": 3}, replication_factor=3, transactions=True, abort_ratio=0.3,
                   rate=60, producers=2, slots=3)
    nemesis(["kill", "pause", "partition-isolate"], duration=40, seed=3, interval=(4, 8),
            fault_duration=(3, 8))
    summary = run.finish().verdict()
    assert summary["valid"] is True, describe(summary)
    _no_transactional_anomaly(summary)
    assert summary["counts"]["send"]["ok"] > 100


LATE_VALUE = 999 * 10**9          # the scripted writer's values: no worker's (worker id * 10^9 + n)


def _late_write(run, zk, topic: str, kip890: bool) -> str:
    """KAFKA-17754 at the wire, recorded in the run's history: transaction
    1 adds t/0 and its produce is held back; it aborts; transaction 2 adds
    t/0, the held produce arrives, transaction 2 commits. Returns the error
    the late produce got."""
    actor = ("late-writer", 0)
    rec = run.recorder
    tid, tp = "chaoslog-late-writer", (topic, 0)
    end_version = 5 if kip890 else 1

    def connect(broker: int):
        node = run.cluster.node(f"broker-{broker}")
        return kafka_wire.KafkaConnection(node.host, node.port, client_id="late-writer",
                                          timeout=30)

    def coordinator():
        conn = connect(1)
        try:
            err, node, _, _ = kafka_wire.find_coordinator(conn, tid, key_type=1)
        finally:
            conn.close()
        return node if err == 0 else None

    coord = connect(wait_for(coordinator, 60, "a transaction coordinator"))
    _, pid, epoch = wait_for(lambda: (lambda r: r if r[0] == 0 else None)(
        kafka_wire.init_transactional_id(coord, tid)), 60, "a producer id")
    data = connect(zk.lai(topic, 0).leader)

    def begin(epoch: int) -> None:
        wait_for(lambda: kafka_wire.add_partitions_to_txn(coord, tid, pid, epoch, [tp]) ==
                 {tp: 0}, 30, "t/0 added to the transaction")

    def end(txn: str, epoch: int, commit: bool) -> int:
        op = rec.invoke(actor, "txn", txn=txn, intent="commit" if commit else "abort")
        err, _, after = kafka_wire.end_txn(coord, tid, pid, epoch, commit, end_version)
        rec.complete(op, "ok" if err == 0 else "info", **({} if err == 0 else
                                                          {"error": E.name(err)}))
        return after

    def send(txn: str, value: int, epoch: int, seq: int, batch: bytes | None = None) -> int:
        op = rec.invoke(actor, "send", topic=topic, partition=0, value=value, txn=txn)
        batch = batch or kafka_wire.record_batch([str(value).encode()], (pid, epoch, seq), True)
        err, offset = kafka_wire.produce_batch(data, topic, 0, batch, transactional_id=tid)
        rec.complete(op, "ok" if err == 0 else "fail",
                     **({"offset": offset} if err == 0 else {"error": E.name(err)}))
        return err

    try:
        begin(epoch)
        held = kafka_wire.record_batch([str(LATE_VALUE).encode()], (pid, epoch, 0), True)
        epoch2 = end("late-writer/1", epoch, commit=False)     # transaction 1 aborts
        begin(epoch2)
        late = send("late-writer/1", LATE_VALUE, epoch, 0, held)   # arrives now
        send("late-writer/2", LATE_VALUE + 1, epoch2, 1 if not kip890 else 0)
        end("late-writer/2", epoch2, commit=True)
    finally:
        for conn in (coord, data):
            conn.close()
    return E.name(late)


def _late_write_run(workload, kip890: bool) -> tuple[str, dict]:
    """A small transactional workload on t/0 beside the scripted late write;
    its final reads (read_committed) show what the late write did."""
    run = workload({"t": 1}, replication_factor=3, transactions=True, abort_ratio=0.3, rate=20,
                   producers=1, slots=2)
    late = _late_write(run, ZkView(run.zk), "t", kip890)
    return late, run.finish().verdict()


@pytest.mark.broker_config(**SAFE, **TXN, **{"transaction.protocol": "kip-98"})
def test_the_late_write_of_an_aborted_transaction_is_read_under_kip_98(workload):
    """KAFKA-17754: the late produce of an aborted transaction joins the
    next one, and the checker finds its value read at read_committed."""
    late, summary = _late_write_run(workload, kip890=False)
    found = [a["value"] for a in summary["anomalies"]["aborted-txn-read"]]
    assert late == "NONE" and found == [LATE_VALUE], describe(summary)
    assert summary["valid"] is False


@pytest.mark.broker_config(**SAFE, **TXN, **{"transaction.protocol": "kip-890"})
def test_the_late_write_of_an_aborted_transaction_is_fenced_under_kip_890(workload):
    """KIP-890: EndTxn v5 bumped the epoch, the late produce is fenced,
    and the run is clean."""
    late, summary = _late_write_run(workload, kip890=True)
    assert late == "INVALID_PRODUCER_EPOCH", late
    assert summary["anomalies"]["aborted-txn-read"] == [], describe(summary)
    assert summary["valid"] is True, describe(summary)


@pytest.mark.broker_config(**SAFE, **TXN)
def test_transactions_stay_whole_while_their_coordinators_move(workload):
    """Every partition of `__transaction_state` is reassigned (its replicas
    rotated) and led by its new preferred replica, twice, while
    transactions commit and abort: each coordinator hands its ids to
    another broker, which loads them and writes the markers of the
    transactions it finds prepared."""
    run = workload({"t": 3}, replication_factor=3, transactions=True, abort_ratio=0.3, rate=60,
                   producers=2, slots=3)
    zk = ZkView(run.zk)
    wait_for(lambda: run.zk.exists("/brokers/topics/__transaction_state"), 60,
             "the transaction log, created by the producers' first FindCoordinator")
    for _ in range(2):
        time.sleep(5)
        parts = admin.describe_topic(run.zk, "__transaction_state")["partitions"]
        plan = {("__transaction_state", p["partition"]): p["replicas"][1:] + p["replicas"][:1]
                for p in parts}
        assert admin.reassign(run.zk, plan, wait=True, timeout=90)["done"], plan
        admin.preferred_election(run.zk, "__transaction_state", timeout=60)
        wait_for(lambda: all(zk.lai(*tp).leader == r[0] for tp, r in plan.items())
                 and not run.zk.exists(zkpaths.PREFERRED_REPLICA_ELECTION), 60,
                 "every coordinator moved to its partition's new preferred replica")
    summary = run.finish().verdict()
    assert summary["valid"] is True, describe(summary)
    _no_transactional_anomaly(summary)
