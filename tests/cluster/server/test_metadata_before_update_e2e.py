"""Regression: a (re)started broker described the cluster before it knew it.

Seen in a 20 s docker run (kill + partitions, confluent-kafka, retries=0,
acks=all, not idempotent): values read at two offsets. A killed broker came
back and listened at once, but waited for its predecessor's ZooKeeper session
to expire before registering, so for seconds it had had no UpdateMetadata.
Its Metadata answer then listed only itself. librdkafka (>= 2.10, which
purges brokers a Metadata response leaves out) decommissioned the two other
brokers; a ProduceRequest in flight on one of them, already appended and
waiting for the ISR, failed locally with _DESTROY_BROKER, which librdkafka
counts as "not persisted" and re-sends without using up `retries`. The leader
appended the same batch again.

The broker now refuses client Metadata requests (closes the connection)
until the controller has told it the cluster state, so clients ask a broker
that knows.
"""
from __future__ import annotations

import struct
import threading
import time

from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from broker_cluster import wait_until
from kafka_wire import Wire, fetch, metadata


def _leo(addr, topic: str, partition: int) -> int:
    """The log end offset (ListOffsets latest as a replica reads the LEO, not the HW)."""
    w = Wire(addr)
    try:
        resp = w.call(ListOffsetsRequest, ListOffsetsResponse, 1, replica_id=99,
                      topics=[(topic, [(partition, -1)])])
        p = resp.topics[0].partitions[0]
        assert p.error_code == 0, p
        return p.offset
    finally:
        w.close()


def _values(addr, topic: str, partition: int) -> list[tuple[int, bytes]]:
    """Every (offset, value) of the leader's log, up to its LEO (a replica read)."""
    from kafka.record.memory_records import MemoryRecords
    out: list[tuple[int, bytes]] = []
    w = Wire(addr)
    try:
        while True:
            err, _, data = fetch(w, topic, partition, len(out) and out[-1][0] + 1, replica_id=99)
            assert err == 0
            if not data:
                return out
            recs = MemoryRecords(bytes(data))
            while recs.has_next():
                batch = recs.next_batch()
                out.extend((r.offset, r.value) for r in batch)
    finally:
        w.close()


def test_uninformed_broker_refuses_metadata(make_cluster):
    c = make_cluster(3)  # told who is live (the fixture's UpdateMetadata)
    c.hc.create_topic("t", {0: (2, 3, 1)})
    b4 = c.add_broker(4).wait_registered(c.zk)  # registered, not told anything yet
    w = Wire(b4.address)
    # ApiVersions is answered (clients probe it before anything else) ...
    assert w.call(ApiVersionsRequest, ApiVersionsResponse, 0).error_code == 0
    # ... but a broker that has not been told the cluster state does not
    # describe it: before the fix this was a broker list of just itself.
    assert metadata(w, ["t"]) is None, "broker 4 answered Metadata before UpdateMetadata"
    w.close()
    c.hc.update_metadata([c.hc.state("t", 0)])  # the controller tells every broker
    for b in c.brokers.values():
        w = Wire(b.address)
        md = metadata(w, ["t"])
        assert md is not None, f"broker {b.id} refused Metadata after UpdateMetadata"
        assert sorted(x.node_id for x in md.brokers) == [1, 2, 3, 4]
        assert md.topics[0].partitions[0].leader_id == 2
        w.close()


def test_restarted_broker_metadata_does_not_make_librdkafka_resend(make_cluster):
    """The run's scenario, with librdkafka itself. t/0 is led by broker 2 and
    has a replica (4) that never fetches, so an acks=all produce to it stays
    in flight; t/1 is led by broker 1, which is then killed and restarted.
    The producer, still writing t/1, gets UNKNOWN_TOPIC_OR_PART from the
    restarted (uninformed) broker 1 and asks it for metadata. The value in
    flight on broker 2 must end up in the log once."""
    import confluent_kafka as ck

    c = make_cluster(3, **{"replica.lag.time.max.ms": 120000})
    c.hc.create_topic("t", {0: (2, 4), 1: (1, 2, 3)})
    b1, b2 = c.brokers[1], c.brokers[2]
    delivered: dict[bytes, tuple[str | None, int]] = {}
    p = ck.Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "retries": 0,
                     "enable.idempotence": False, "max.in.flight.requests.per.connection": 1,
                     "request.timeout.ms": 60000, "message.timeout.ms": 90000,
                     "linger.ms": 0, "retry.backoff.ms": 100,
                     "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200,
                     "topic.metadata.refresh.interval.ms": 500, "log_level": 0})

    def cb(err, msg):
        delivered[msg.value()] = (err.name() if err else None, msg.offset())

    stop = threading.Event()

    def keep_writing_t1():
        # Keeps the producer talking to broker 1 (the partition led there),
        # as the run's producers did; outcomes of these do not matter.
        n = 0
        while not stop.is_set():
            p.produce("t", value=b"t1-%d" % n, partition=1, on_delivery=cb)
            n += 1
            p.poll(0.05)

    p.produce("t", value=b"in-flight", partition=0, on_delivery=cb)
    writer = threading.Thread(target=keep_writing_t1, daemon=True)
    writer.start()
    try:
        # Appended on broker 2, waiting for replica 4 that never comes.
        wait_until(lambda: _leo(b2.address, "t", 0) == 1, 20, "the in-flight append on broker 2")
        wait_until(lambda: any(k.startswith(b"t1-") and v[0] is None
                               for k, v in list(delivered.items())), 20, "writes to t/1")
        b1.kill()
        b1.start()
        # While it waits for its predecessor's session to expire it is
        # uninformed; the producer talks to it (t/1) and asks it for metadata.
        b1.wait_registered(c.zk)
        time.sleep(2.0)
        # Now tell broker 1 the cluster state, as the controller would.
        c.hc.push([c.hc.state("t", 0), c.hc.state("t", 1)])
        time.sleep(2.0)
        # Let the in-flight produce complete: replica 4 leaves the ISR.
        c.hc.elect("t", 0, 2, (2,))
        stop.set()
        writer.join(10)
        assert p.flush(30) == 0
    finally:
        stop.set()
    copies = [off for off, v in _values(b2.address, "t", 0) if v == b"in-flight"]
    assert copies == [0], (f"the in-flight value is at offsets {copies} of t/0; "
                           f"delivery report {delivered.get(b'in-flight')}")
    assert delivered[b"in-flight"] == (None, 0)
    # Broker 1 was asked for metadata while uninformed (and refused): the
    # scenario happened, the test is not vacuous.
    assert "Metadata before" in b1.stderr(), b1.stderr()[-3000:]
