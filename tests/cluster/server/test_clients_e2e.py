"""Unmodified Kafka clients against a 3-broker cluster, RF 3 (issue 3 (a)):
confluent-kafka, kafka-python and aiokafka each produce 10,000 messages with
acks=all and read every one back, in order, exactly once; acks=0 and acks=1
are exercised too. Leadership is assigned by hand (HandController)."""
from __future__ import annotations

import asyncio
import time

import pytest

N = 10_000


def _topic(cluster, name: str, leader: int = 1):
    order = {1: (1, 2, 3), 2: (2, 3, 1), 3: (3, 1, 2)}[leader]
    cluster.hc.create_topic(name, {0: order})
    return name


def _values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


# -- confluent-kafka ----------------------------------------------------------------

def _ck_produce(bootstrap: str, topic: str, values, acks: str, idempotent: bool = False):
    import confluent_kafka as ck
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": acks,
                     "enable.idempotence": idempotent, "linger.ms": 5})
    errors, offsets = [], []

    def cb(err, msg):
        (errors if err else offsets).append(err or msg.offset())
    for v in values:
        while True:
            try:
                p.produce(topic, value=v, partition=0, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(60) == 0
    return errors, offsets


def _ck_consume(bootstrap: str, topic: str, n: int, timeout: float = 60) -> list[bytes]:
    import confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                     "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < n and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                assert not m.error(), m.error()
                got.append(m.value())
        # Nothing more than n may come.
        for m in c.consume(100, 0.5):
            if not m.error():
                got.append(m.value())
    finally:
        c.close()
    return got


@pytest.mark.parametrize("idempotent", [False, True])
def test_confluent_kafka_acks_all(cluster3, idempotent):
    topic = _topic(cluster3, f"ck-all-{int(idempotent)}", leader=1)
    values = _values("ck", N)
    errors, offsets = _ck_produce(cluster3.bootstrap, topic, values, "all", idempotent)
    assert errors == []
    assert sorted(offsets) == list(range(N))
    assert _ck_consume(cluster3.bootstrap, topic, N) == values


@pytest.mark.parametrize("acks", ["0", "1"])
def test_confluent_kafka_acks_0_and_1(cluster3, acks):
    topic = _topic(cluster3, f"ck-acks{acks}", leader=2)
    values = _values(f"ck{acks}", 2000)
    errors, _ = _ck_produce(cluster3.bootstrap, topic, values, acks)
    assert errors == []
    assert _ck_consume(cluster3.bootstrap, topic, len(values)) == values


# -- kafka-python --------------------------------------------------------------------

def _kp_produce(bootstrap, topic, values, acks, **kw):
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, linger_ms=5, **kw)
    futures = [p.send(topic, v, partition=0) for v in values]
    p.flush(60)
    metas = [f.get(timeout=60) for f in futures]
    p.close()
    return metas


def _kp_consume(bootstrap, topic, n, timeout=60):
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek(tp, 0)
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < n and time.monotonic() < deadline:
            for msgs in c.poll(500, max_records=5000).values():
                got.extend(m.value for m in msgs)
        for msgs in c.poll(500).values():
            got.extend(m.value for m in msgs)
    finally:
        c.close()
    return got


def test_kafka_python_acks_all(cluster3):
    topic = _topic(cluster3, "kp-all", leader=2)
    values = _values("kp", N)
    metas = _kp_produce(cluster3.bootstrap, topic, values, "all")
    assert [m.offset for m in metas] == list(range(N))
    assert _kp_consume(cluster3.bootstrap, topic, N) == values


@pytest.mark.parametrize("acks", [0, 1])
def test_kafka_python_acks_0_and_1(cluster3, acks):
    topic = _topic(cluster3, f"kp-acks{acks}", leader=3)
    values = _values(f"kp{acks}", 2000)
    _kp_produce(cluster3.bootstrap, topic, values, acks)
    assert _kp_consume(cluster3.bootstrap, topic, len(values)) == values


def test_kafka_python_old_message_formats(cluster3):
    """api_version (0, 10) makes kafka-python use Produce v2 / Fetch v3 with
    magic 1 messages: converted to v2 batches on produce, down-converted on
    fetch; (0, 9) uses magic 0 and Fetch v1."""
    for api_version, name in (((0, 10), "kp-magic1"), ((0, 9), "kp-magic0")):
        topic = _topic(cluster3, name, leader=1)
        values = _values(name, 500)
        _kp_produce(cluster3.bootstrap, topic, values, 1, api_version=api_version,
                    compression_type="gzip")
        from kafka import KafkaConsumer, TopicPartition
        c = KafkaConsumer(bootstrap_servers=cluster3.bootstrap, enable_auto_commit=False,
                          group_id=None, api_version=api_version)
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            for msgs in c.poll(500).values():
                got.extend(m.value for m in msgs)
        c.close()
        assert got == values, name


# -- aiokafka -----------------------------------------------------------------------------

async def _aio_produce(bootstrap, topic, values, acks):
    import aiokafka
    p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks=acks, linger_ms=5)
    await p.start()
    try:
        futs = [await p.send(topic, v, partition=0) for v in values]
        return await asyncio.gather(*futs)
    finally:
        await p.stop()


async def _aio_consume(bootstrap, topic, n, timeout=60):
    import aiokafka
    c = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await c.start()
    got: list[bytes] = []
    try:
        tp = aiokafka.TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            for msgs in (await c.getmany(timeout_ms=500)).values():
                got.extend(m.value for m in msgs)
        for msgs in (await c.getmany(timeout_ms=500)).values():
            got.extend(m.value for m in msgs)
    finally:
        await c.stop()
    return got


def test_aiokafka_acks_all(cluster3):
    topic = _topic(cluster3, "aio-all", leader=3)
    values = _values("aio", N)
    metas = asyncio.run(_aio_produce(cluster3.bootstrap, topic, values, "all"))
    assert [m.offset for m in metas] == list(range(N))
    assert asyncio.run(_aio_consume(cluster3.bootstrap, topic, N)) == values


@pytest.mark.parametrize("acks", [0, 1])
def test_aiokafka_acks_0_and_1(cluster3, acks):
    topic = _topic(cluster3, f"aio-acks{acks}", leader=1)
    values = _values(f"aio{acks}", 2000)
    asyncio.run(_aio_produce(cluster3.bootstrap, topic, values, acks))
    assert asyncio.run(_aio_consume(cluster3.bootstrap, topic, len(values))) == values


def test_followers_replicate_everything(cluster3):
    """After the client tests, every replica of every topic holds the same
    bytes as the leader: followers append the leader's batches unchanged."""
    from broker_cluster import wait_until

    from cluster.server.internal_topic import INTERNAL_TOPICS
    # The offsets topic is there too (a consumer's FindCoordinator created
    # it: docs/design.md#groups) but without replicas: nobody plays the
    # controller for it in this cluster.
    topics = [t for t in cluster3.zk.get_children("/brokers/topics") if t not in INTERNAL_TOPICS]
    assert topics

    def logs(b, t):
        d = b.log_dir / f"{t}-0"
        return b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))

    for t in topics:
        def same():
            contents = [logs(b, t) for b in cluster3.brokers.values()]
            return contents[0] and all(c == contents[0] for c in contents)
        wait_until(same, 10, f"identical replicas of {t}")
