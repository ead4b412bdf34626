"""Transactions against real brokers with their controller components
(docs/design.md#transactions): confluent-kafka's transactional producer
commits, aborts and commits; a `read_committed` consumer reads exactly the
committed records, a `read_uncommitted` one all of them; a new session of
the same transactional id fences the old one; the coordinator's broker
killed, a new coordinator loads the id and fences a zombie; a
consume-transform-produce pipeline is exact; a late produce of an aborted
transaction lands in the next one under KIP-98 and is fenced under KIP-890."""
from __future__ import annotations

import confluent_kafka as ck
import pytest

from broker_cluster import wait_until
from cluster import admin
from cluster.protocol import errors as E
from cluster.server.transaction_log import TRANSACTION_STATE_TOPIC, partition_of

CONFIG = {"chaoslog.controller.enable": True, "min.insync.replicas": 2,
          "transaction.state.log.num.partitions": 4, "offsets.topic.num.partitions": 4}
TOPIC = "tx-out"


def _cluster(make_cluster):
    c = make_cluster(3, **CONFIG)
    wait_until(lambda: admin.controller_info(c.zk)["id"] > 0, 30, "a controller")
    admin.create_topic(c.zk, TOPIC, 2, 3)
    admin.wait_for_leaders(c.zk, TOPIC, 30)
    return c


def _producer(c, tid: str) -> ck.Producer:
    p = ck.Producer({"bootstrap.servers": c.bootstrap, "transactional.id": tid,
                     "transaction.timeout.ms": 60000, "linger.ms": 5})
    p.init_transactions(60)
    return p


def _transaction(p: ck.Producer, values: list[str], commit: bool) -> None:
    p.begin_transaction()
    for i, v in enumerate(values):
        p.produce(TOPIC, value=v.encode(), partition=i % 2)
    if commit:
        p.commit_transaction(60)
    else:
        p.flush(60)
        p.abort_transaction(60)


def _last_stable_offset(c, partition: int) -> int:
    """ListOffsets' latest at read_committed: the partition's LSO."""
    cons = ck.Consumer({"bootstrap.servers": c.bootstrap, "group.id": "lso",
                        "isolation.level": "read_committed"})
    try:
        return cons.get_watermark_offsets(ck.TopicPartition(TOPIC, partition), 30)[1]
    finally:
        cons.close()


def _read(c, isolation: str, expect: int) -> list[str]:
    cons = ck.Consumer({"bootstrap.servers": c.bootstrap, "group.id": f"reader-{isolation}",
                        "isolation.level": isolation, "auto.offset.reset": "earliest",
                        "enable.auto.commit": False})
    cons.assign([ck.TopicPartition(TOPIC, 0, 0), ck.TopicPartition(TOPIC, 1, 0)])
    got: list[str] = []

    def more():
        m = cons.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value().decode())
        return len(got) >= expect
    try:
        wait_until(more, 60, f"{expect} records at {isolation}")
        for _ in range(4):   # nothing more comes
            m = cons.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value().decode())
    finally:
        cons.close()
    return sorted(got)


def test_commit_abort_commit_reads_back_exactly_at_read_committed(make_cluster):
    c = _cluster(make_cluster)
    p = _producer(c, "tx-a")
    _transaction(p, ["a1", "a2", "a3"], commit=True)
    _transaction(p, ["b1", "b2", "b3"], commit=False)
    _transaction(p, ["c1", "c2"], commit=True)
    assert _read(c, "read_committed", 5) == ["a1", "a2", "a3", "c1", "c2"]
    assert _read(c, "read_uncommitted", 8) == ["a1", "a2", "a3", "b1", "b2", "b3", "c1", "c2"]


def test_a_zombie_is_fenced_also_after_its_coordinator_is_killed(make_cluster):
    c = _cluster(make_cluster)
    zombie = _producer(c, "tx-z")
    _transaction(zombie, ["z1"], commit=True)
    # The coordinator's broker dies; the next leader of its partition loads the id.
    parts = admin.describe_topic(c.zk, TRANSACTION_STATE_TOPIC)["partitions"]
    coordinator = next(p["leader"] for p in parts if p["partition"] == partition_of("tx-z", 4))
    c.brokers[coordinator].kill()
    successor = _producer(c, "tx-z")       # epoch + 1: fences the zombie
    zombie.begin_transaction()
    zombie.produce(TOPIC, value=b"zombie", partition=0)
    with pytest.raises(ck.KafkaException) as e:
        zombie.commit_transaction(30)
    assert e.value.args[0].code() in (ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED,
                                      ck.KafkaError.INVALID_PRODUCER_EPOCH)
    _transaction(successor, ["s1"], commit=True)
    assert _read(c, "read_committed", 2) == ["s1", "z1"]


def test_consume_transform_produce_is_exact_with_offsets_in_the_transaction(make_cluster):
    """Inputs read in a group, each transformed into one output in a
    transaction that also commits the group's offsets; one transaction is
    aborted and its inputs read again from the offsets committed before.
    The offsets show once the COMMIT marker is written, which follows
    EndTxn's answer (Kafka 2.0 has no UNSTABLE_OFFSET_COMMIT): waited for."""
    c = _cluster(make_cluster)
    admin.create_topic(c.zk, "tx-in", 1, 3)
    admin.wait_for_leaders(c.zk, "tx-in", 30)
    plain = ck.Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for i in range(12):
        plain.produce("tx-in", value=f"in-{i}".encode(), partition=0)
    assert plain.flush(30) == 0
    cons = ck.Consumer({"bootstrap.servers": c.bootstrap, "group.id": "ctp",
                        "auto.offset.reset": "earliest", "enable.auto.commit": False,
                        "isolation.level": "read_committed"})
    tp = ck.TopicPartition("tx-in", 0)
    cons.assign([tp])
    p = _producer(c, "tx-ctp")

    def committed() -> int:
        return cons.committed([tp], 30)[0].offset

    rounds = done = 0
    try:
        while done < 12:
            msgs = [m for m in cons.consume(4, 5) if m.error() is None]
            assert msgs, "no input came"
            p.begin_transaction()
            for m in msgs:
                p.produce(TOPIC, value=m.value().replace(b"in-", b"out-"), partition=0)
            p.send_offsets_to_transaction(cons.position([tp]), cons.consumer_group_metadata(),
                                          30)
            rounds += 1
            if rounds == 2:   # this one aborts: its inputs come again
                p.abort_transaction(30)
                assert committed() == done
                cons.seek(ck.TopicPartition("tx-in", 0, done))
                continue
            p.commit_transaction(30)
            done += len(msgs)
            wait_until(lambda: committed() == done, 30, f"offset {done} committed")
    finally:
        cons.close()
    assert rounds >= 4   # one aborted
    assert _read(c, "read_committed", 12) == sorted(f"out-{i}" for i in range(12))


@pytest.mark.parametrize("protocol", ["kip-98", "kip-890"])
def test_a_late_produce_of_an_aborted_transaction(make_cluster, protocol):
    """KAFKA-17754, scripted at the wire: transaction 1 adds a partition,
    its produce is held back, and it aborts; transaction 2 adds the same
    partition, the held produce arrives, transaction 2 commits. Under
    KIP-98 the late write joins transaction 2 and a read_committed reader
    sees a value of an aborted transaction; under KIP-890 (EndTxn v5: the
    epoch bumped as transaction 1 ended) it is fenced."""
    from harness import kafka_wire as kw
    c = make_cluster(3, **CONFIG, **{"transaction.protocol": protocol})
    wait_until(lambda: admin.controller_info(c.zk)["id"] > 0, 30, "a controller")
    admin.create_topic(c.zk, TOPIC, 1, 3)
    admin.wait_for_leaders(c.zk, TOPIC, 30)
    tid, tp = "late", (TOPIC, 0)
    end_version = 5 if protocol == "kip-890" else 1

    def connect(broker: int) -> kw.KafkaConnection:
        host, port = c.brokers[broker].address
        return kw.KafkaConnection(host, port, timeout=30)

    any_broker = connect(1)
    coordinator = wait_until(lambda: (lambda r: r[1] if r[0] == 0 else None)(
        kw.find_coordinator(any_broker, tid, key_type=1)), 60, "a transaction coordinator")
    coord = connect(coordinator)
    err, pid, epoch = wait_until(lambda: (lambda r: r if r[0] == 0 else None)(
        kw.init_transactional_id(coord, tid)), 60, "a producer id")
    leader = admin.describe_topic(c.zk, TOPIC)["partitions"][0]["leader"]
    data = connect(leader)

    def batch(value: bytes, epoch: int, seq: int) -> bytes:
        return kw.record_batch([value], (pid, epoch, seq), transactional=True)

    def begin(epoch: int) -> None:
        wait_until(lambda: kw.add_partitions_to_txn(coord, tid, pid, epoch, [tp]) == {tp: 0},
                   30, "the partition added (the last transaction's markers written)")

    begin(epoch)
    late = batch(b"late-from-aborted", epoch, 0)            # held back
    err, pid, epoch2 = kw.end_txn(coord, tid, pid, epoch, commit=False, version=end_version)
    assert err == 0 and epoch2 == (epoch + 1 if protocol == "kip-890" else epoch)
    begin(epoch2)
    late_error, _ = kw.produce_batch(data, TOPIC, 0, late, transactional_id=tid)
    seq = 1 if protocol == "kip-98" else 0                   # a new epoch starts at 0
    assert kw.produce_batch(data, TOPIC, 0, batch(b"committed", epoch2, seq),
                            transactional_id=tid)[0] == 0
    assert kw.end_txn(coord, tid, pid, epoch2, commit=True, version=end_version)[0] == 0
    expect = 2 if protocol == "kip-98" else 1
    read = _read(c, "read_committed", expect)
    if protocol == "kip-98":
        assert late_error == 0 and read == ["committed", "late-from-aborted"]
    else:
        assert late_error == E.INVALID_PRODUCER_EPOCH and read == ["committed"]
    for conn in (any_broker, coord, data):
        conn.close()


def test_the_admin_view_lists_and_describes_transactions(make_cluster):
    """DescribeTransactions and ListTransactions (flexible versions) answer
    from each id's coordinator: an open transaction is Ongoing with its
    partitions, a committed one CompleteCommit; an unknown id is not found."""
    from kafka.protocol.admin import (DescribeTransactionsRequest, DescribeTransactionsResponse,
                                      ListTransactionsRequest, ListTransactionsResponse)

    from harness import kafka_wire as kw
    c = _cluster(make_cluster)
    done = _producer(c, "tx-done")
    _transaction(done, ["d1"], commit=True)
    open_ = _producer(c, "tx-open")
    open_.begin_transaction()
    open_.produce(TOPIC, value=b"o1", partition=1)
    open_.flush(30)

    def ask(broker, req, resp, version, **fields):
        host, port = c.brokers[broker].address
        conn = kw.KafkaConnection(host, port)
        try:
            return conn.call(req, resp, version, **fields)
        finally:
            conn.close()

    listed = {}
    for b in c.brokers:
        r = ask(b, ListTransactionsRequest, ListTransactionsResponse, 1, state_filters=[],
                producer_id_filters=[], duration_filter=-1)
        assert r.error_code == 0
        listed.update({s.transactional_id: (b, s.transaction_state) for s in r.transaction_states})
    assert {t: s for t, (_, s) in listed.items()} == {"tx-done": "CompleteCommit",
                                                      "tx-open": "Ongoing"}
    b = listed["tx-open"][0]
    r = ask(b, DescribeTransactionsRequest, DescribeTransactionsResponse, 0,
            transactional_ids=["tx-open", "nobody"])
    by_id = {s.transactional_id: s for s in r.transaction_states}
    assert by_id["tx-open"].error_code == 0 and by_id["tx-open"].transaction_state == "Ongoing"
    assert [(t.topic, t.partitions) for t in by_id["tx-open"].topics] == [(TOPIC, [1])]
    assert by_id["nobody"].error_code in (E.TRANSACTIONAL_ID_NOT_FOUND, E.NOT_COORDINATOR)
    filtered = ask(b, ListTransactionsRequest, ListTransactionsResponse, 0,
                   state_filters=["Ongoing", "Bogus"], producer_id_filters=[])
    assert [s.transactional_id for s in filtered.transaction_states] == ["tx-open"]
    assert filtered.unknown_state_filters == ["Bogus"]
    open_.abort_transaction(30)


def test_a_transaction_open_past_its_timeout_is_aborted(make_cluster):
    """A producer that neither commits nor aborts holds the last stable
    offset back (a later committed transaction on the partition is not
    readable at read_committed) until its coordinator aborts it at its
    timeout; its own commit then fails, fenced."""
    c = make_cluster(3, **CONFIG, **{
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500})
    wait_until(lambda: admin.controller_info(c.zk)["id"] > 0, 30, "a controller")
    admin.create_topic(c.zk, TOPIC, 2, 3)
    admin.wait_for_leaders(c.zk, TOPIC, 30)
    slow = ck.Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "tx-slow",
                        "transaction.timeout.ms": 15000, "linger.ms": 5})
    slow.init_transactions(60)
    slow.begin_transaction()
    slow.produce(TOPIC, value=b"slow", partition=0)
    slow.flush(30)
    _transaction(_producer(c, "tx-fast"), ["f1"], commit=True)     # partition 0, after "slow"
    assert _last_stable_offset(c, 0) == 0                           # held at "slow"
    assert _read(c, "read_committed", 1) == ["f1"]                  # once "slow" is aborted
    assert _last_stable_offset(c, 0) == 4    # slow, f1, its COMMIT, the ABORT of slow
    with pytest.raises(ck.KafkaException):
        slow.commit_transaction(30)
