"""Consumer groups against real brokers with their controller components
(docs/design.md#groups): kafka-python and confluent-kafka consumers
subscribe, consume and commit; a second member makes the group rebalance
and split the partitions; committed offsets outlive their coordinator; an
unknown group has no offsets. Short rebalance delays and session timeouts
keep the module quick."""
from __future__ import annotations

import threading
import time

from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse
from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from broker_cluster import wait_until
from cluster import admin
from cluster.server.offsets_topic import GROUP_METADATA_TOPIC, partition_for
from kafka_wire import Wire

CONFIG = {"chaoslog.controller.enable": True, "min.insync.replicas": 2,
          "group.initial.rebalance.delay.ms": 100, "group.min.session.timeout.ms": 1000,
          "offsets.topic.num.partitions": 4}


def _cluster(make_cluster, topic: str, partitions: int):
    c = make_cluster(3, **CONFIG)
    wait_until(lambda: admin.controller_info(c.zk)["id"] > 0, 30, "a controller")
    admin.create_topic(c.zk, topic, partitions, 3)
    admin.wait_for_leaders(c.zk, topic, 30)
    return c


def _produce(c, topic: str, values: list[bytes], partitions: int) -> None:
    import confluent_kafka as ck
    p = ck.Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5})
    failed = []
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % partitions,
                  on_delivery=lambda err, _m: err and failed.append(err))
    assert p.flush(30) == 0 and failed == []


def _call(c, broker: int, req_cls, resp_cls, version: int, **fields):
    w = Wire(c.brokers[broker].address)
    try:
        return w.call(req_cls, resp_cls, version, **fields)
    finally:
        w.close()


def _coordinator(c, group: str) -> int:
    """The coordinator a live broker names for the group, once it has one."""
    def ask():
        b = next(b for b in c.brokers.values() if b.alive)
        r = _call(c, b.id, FindCoordinatorRequest, FindCoordinatorResponse, 2, key=group,
                  key_type=0)
        return r.node_id if r.error_code == 0 else None
    return wait_until(ask, 30, f"a coordinator for {group}")


def _committed(c, group: str) -> dict[tuple[str, int], int]:
    """Every committed offset of the group, from its coordinator (OffsetFetch v4)."""
    r = _call(c, _coordinator(c, group), OffsetFetchRequest, OffsetFetchResponse, 4,
              group_id=group, topics=None)
    assert r.error_code == 0, r
    return {(t.name, p.partition_index): p.committed_offset
            for t in r.topics for p in t.partitions}


class KafkaPythonMember:
    """A kafka-python KafkaConsumer subscribed in its own thread (the client
    rebalances inside poll, so two members need two threads); commit()
    asks the thread to commit what it has consumed."""

    def __init__(self, c, group: str, topic: str, name: str):
        self.args = (c.bootstrap, group, topic, name)
        self.records: list[tuple[int, int, bytes]] = []   # (partition, offset, value)
        self.assignment: set[int] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._commit = threading.Event()
        self.commits = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from kafka import KafkaConsumer
        bootstrap, group, topic, name = self.args
        cons = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=name,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=6000, heartbeat_interval_ms=300,
                             max_poll_interval_ms=15000)
        cons.subscribe([topic])
        try:
            while not self._stop.is_set():
                for tp, msgs in cons.poll(timeout_ms=100).items():
                    self.records += [(tp.partition, m.offset, m.value) for m in msgs]
                self.assignment = {tp.partition for tp in cons.assignment()}
                if self._commit.is_set():
                    try:
                        cons.commit()
                        self._commit.clear()
                        self.commits += 1
                    except Exception as e:  # noqa: BLE001 - a rebalance: poll, then again
                        self.errors.append(repr(e))
        finally:
            cons.close()

    def commit(self) -> None:
        n = self.commits
        self._commit.set()
        wait_until(lambda: self.commits > n, 30, "a commit")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)


def test_kafka_python_members_consume_commit_and_split_the_partitions(make_cluster):
    c = _cluster(make_cluster, "kp", 4)
    _produce(c, "kp", [b"a%03d" % i for i in range(200)], 4)
    first = KafkaPythonMember(c, "kpg", "kp", "first")
    second = None
    try:
        wait_until(lambda: len(first.records) >= 200, 60, "the first member's records")
        assert sorted(v for _, _, v in first.records) == [b"a%03d" % i for i in range(200)]
        assert first.assignment == {0, 1, 2, 3}
        first.commit()
        assert _committed(c, "kpg") == {("kp", p): 50 for p in range(4)}

        second = KafkaPythonMember(c, "kpg", "kp", "second")
        wait_until(lambda: first.assignment and second.assignment
                   and first.assignment | second.assignment == {0, 1, 2, 3}
                   and not first.assignment & second.assignment, 60, "the partitions split")
        assert len(first.assignment) == len(second.assignment) == 2
        coordinator = _coordinator(c, "kpg")
        [g] = _call(c, coordinator, DescribeGroupsRequest, DescribeGroupsResponse, 2,
                    groups=["kpg"]).groups
        assert (g.error_code, g.group_state, g.protocol_type) == (0, "Stable", "consumer")
        assert sorted(m.client_id for m in g.members) == ["first", "second"]

        # The second member starts at the committed offsets: it reads only what comes now.
        before = len(first.records)
        _produce(c, "kp", [b"b%03d" % i for i in range(40)], 4)
        wait_until(lambda: len(first.records) - before + len(second.records) >= 40, 60,
                   "the new records")
        new = first.records[before:] + second.records
        assert sorted(v for _, _, v in new) == [b"b%03d" % i for i in range(40)]
        assert {p for p, _, _ in second.records} <= second.assignment
        assert {p for p, _, _ in first.records[before:]} <= first.assignment
    finally:
        first.close()
        if second is not None:
            second.close()

    # A group nobody committed for has no offsets.
    assert _committed(c, "nobody") == {}
    r = _call(c, _coordinator(c, "nobody"), OffsetFetchRequest, OffsetFetchResponse, 1,
              group_id="nobody", topics=[("kp", [0, 1])])
    assert [(p.partition_index, p.committed_offset, p.error_code)
            for p in r.topics[0].partitions] == [(0, -1, 0), (1, -1, 0)]


def _ck_consumer(c, group: str, topic: str):
    import confluent_kafka as ck
    cons = ck.Consumer({"bootstrap.servers": c.bootstrap, "group.id": group,
                        "auto.offset.reset": "earliest", "enable.auto.commit": False,
                        "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                        "topic.metadata.refresh.interval.ms": 1000})
    cons.subscribe([topic])
    return cons


def _ck_consume(cons, n: int, timeout: float = 60) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        for m in cons.consume(100, 0.2):
            assert not m.error(), m.error()
            got.append(m)
    return got


def test_confluent_kafka_commit_and_resume(make_cluster):
    c = _cluster(make_cluster, "ck", 2)
    _produce(c, "ck", [b"a%03d" % i for i in range(100)], 2)
    cons = _ck_consumer(c, "ckg", "ck")
    try:
        got = _ck_consume(cons, 100)
        assert sorted(m.value() for m in got) == [b"a%03d" % i for i in range(100)]
        cons.commit(asynchronous=False)
        assert _committed(c, "ckg") == {("ck", 0): 50, ("ck", 1): 50}
    finally:
        cons.close()

    _produce(c, "ck", [b"b%03d" % i for i in range(10)], 2)
    again = _ck_consumer(c, "ckg", "ck")
    try:
        got = _ck_consume(again, 10)
        assert sorted(m.value() for m in got) == [b"b%03d" % i for i in range(10)]
        assert {(m.partition(), m.offset()) for m in got} == {
            (p, o) for p in range(2) for o in range(50, 55)}
        assert _ck_consume(again, 1, timeout=1) == []   # nothing read twice
    finally:
        again.close()


def test_committed_offsets_survive_their_coordinator(make_cluster):
    c = _cluster(make_cluster, "fo", 2)
    _produce(c, "fo", [b"a%03d" % i for i in range(60)], 2)
    cons = _ck_consumer(c, "fog", "fo")
    try:
        assert len(_ck_consume(cons, 60)) == 60
        cons.commit(asynchronous=False)
    finally:
        cons.close()
    coordinator = _coordinator(c, "fog")
    offsets_partition = partition_for("fog", CONFIG["offsets.topic.num.partitions"])

    def leader() -> int:
        d = admin.describe_topic(c.zk, GROUP_METADATA_TOPIC)
        return d["partitions"][offsets_partition]["leader"]
    assert leader() == coordinator
    c.brokers[coordinator].kill()   # no controlled shutdown: its session has to expire
    wait_until(lambda: leader() not in (-1, coordinator), 30, "a new offsets leader")
    # Brokers answer FindCoordinator from their metadata, which the
    # controller's UpdateMetadata brings up to ZooKeeper's a moment later.
    wait_until(lambda: _coordinator(c, "fog") == leader(), 30,
               "FindCoordinator naming the new offsets leader")
    assert _committed(c, "fog") == {("fo", 0): 30, ("fo", 1): 30}

    _produce(c, "fo", [b"b%03d" % i for i in range(10)], 2)
    again = _ck_consumer(c, "fog", "fo")
    try:
        got = _ck_consume(again, 10)
        assert sorted(m.value() for m in got) == [b"b%03d" % i for i in range(10)]
        assert min(m.offset() for m in got) == 30
    finally:
        again.close()


def test_aiokafka_group_commits(make_cluster):
    import asyncio

    import aiokafka
    c = _cluster(make_cluster, "aio", 2)
    _produce(c, "aio", [b"a%03d" % i for i in range(40)], 2)

    async def consume_and_commit() -> tuple[list[bytes], dict]:
        cons = aiokafka.AIOKafkaConsumer(
            "aio", bootstrap_servers=c.bootstrap, group_id="aiog", enable_auto_commit=False,
            auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=300)
        await cons.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 60
            while len(got) < 40 and time.monotonic() < deadline:
                for msgs in (await cons.getmany(timeout_ms=200)).values():
                    got.extend(m.value for m in msgs)
            await cons.commit()
            tps = [aiokafka.TopicPartition("aio", p) for p in range(2)]
            return got, {tp.partition: await cons.committed(tp) for tp in tps}
        finally:
            await cons.stop()

    got, committed = asyncio.run(consume_and_commit())
    assert sorted(got) == [b"a%03d" % i for i in range(40)]
    assert committed == {0: 20, 1: 20}
    assert _committed(c, "aiog") == {("aio", 0): 20, ("aio", 1): 20}
