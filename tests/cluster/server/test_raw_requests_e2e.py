"""The broker's protocol behaviour with raw requests (issue 3 (c)-(f)):
bad input never kills a broker, reads honour the HW, idempotent producers
are deduplicated, stale controllers are rejected."""
from __future__ import annotations

import struct
import time

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from broker_cluster import wait_until
from cluster.protocol import control
from kafka_wire import (Wire, fetch, init_producer_id, list_offset, metadata, produce,
                        v2_batch)


def _still_serving(broker) -> None:
    w = Wire(broker.address)
    try:
        resp = metadata(w)
        assert resp is not None and any(b.node_id == broker.id for b in resp.brokers)
    finally:
        w.close()


# -- (e) bad input ---------------------------------------------------------------------

def test_api_versions_probe_at_newer_version(cluster3):
    b = cluster3.brokers[1]
    w = Wire(b.address)
    # kafka-python probes with v4, librdkafka with v3: error 35 and the v0 body.
    w.send_raw(w.request_frame(18, 3, b"\x00"))
    frame = __import__("broker_cluster").read_frame(w.sock)
    resp = ApiVersionsResponse.decode(frame[4:], version=0)
    assert resp.error_code == 35
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert ranges[0] == (0, 6) and ranges[1] == (0, 9) and ranges[3] == (0, 6)
    assert ranges[10] == (0, 2)  # FindCoordinator: Kafka 2.0's (docs/design.md#groups)
    ok = w.call(ApiVersionsRequest, ApiVersionsResponse, 1)
    assert ok.error_code == 0
    w.close()


@pytest.mark.parametrize("payload", [
    b"\x00\x01",                                   # shorter than a header
    struct.pack(">hhih", 3, 1, 7, 500) + b"x",      # client_id longer than the frame
    struct.pack(">hhih", 3, 1, 7, -1) + b"\xff" * 3,  # Metadata v1 body truncated
    # Produce v3: null transactional id, acks 1, then 1000 topics that are not there
    struct.pack(">hhih", 0, 3, 7, -1) + struct.pack(">hhii", -1, 1, 1000, 1000) + b"\x01" * 10,
])
def test_malformed_frame_closes_connection(cluster3, payload):
    b = cluster3.brokers[1]
    w = Wire(b.address)
    w.send_raw(struct.pack(">i", len(payload)) + payload)
    assert w.closed_by_peer()
    w.close()
    _still_serving(b)


def test_unknown_api_key_and_version(cluster3):
    b = cluster3.brokers[2]
    for key, version in ((99, 0), (10, 0), (0, 9), (1, 11)):
        w = Wire(b.address)
        w.send_raw(w.request_frame(key, version, b""))
        assert w.closed_by_peer(), (key, version)
        w.close()
    _still_serving(b)


def test_oversize_frame_closes_connection(cluster3):
    b = cluster3.brokers[3]
    w = Wire(b.address)
    w.send_raw(struct.pack(">i", 200 * 1024 * 1024))  # > socket.request.max.bytes
    assert w.closed_by_peer()
    w.close()
    w = Wire(b.address)
    w.send_raw(struct.pack(">i", -5))
    assert w.closed_by_peer()
    w.close()
    _still_serving(b)


def test_bad_crc_and_unknown_topic(cluster3):
    cluster3.hc.create_topic("bad-input", {0: (1, 2, 3)})
    b = cluster3.brokers[1]
    w = Wire(b.address)
    good = v2_batch([b"a", b"b"])
    assert produce(w, "bad-input", 0, good) == (0, 0)
    bad = bytearray(v2_batch([b"c", b"d"]))
    bad[-1] ^= 0xFF
    assert produce(w, "bad-input", 0, bytes(bad))[0] == 2  # CORRUPT_MESSAGE
    # A truncated batch and a record set of an unknown format are corrupt too.
    assert produce(w, "bad-input", 0, good[:-3])[0] == 2
    assert produce(w, "bad-input", 0, b"\x00" * 16 + b"\x07" + b"\x00" * 60)[0] == 2
    assert list_offset(w, "bad-input", 0) == (0, 2)  # nothing was appended
    assert produce(w, "no-such-topic", 0, good)[0] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert fetch(w, "no-such-topic", 0, 0)[0] == 3
    assert list_offset(w, "no-such-topic", 0)[0] == 3
    md = metadata(w, ["no-such-topic"])
    assert md.topics[0].error_code == 3
    # Produce to a follower: NOT_LEADER_FOR_PARTITION.
    w2 = Wire(cluster3.brokers[2].address)
    assert produce(w2, "bad-input", 0, good)[0] == 6
    w2.close()
    # acks other than 0, 1, -1
    assert produce(w, "bad-input", 0, good, acks=2)[0] == 21
    assert produce(w, "bad-input", 0, good) == (0, 2)  # still serving, still appending
    w.close()


# -- (f) reads: HW and LEO ------------------------------------------------------------------

def test_reads_between_hw_and_leo_and_past_leo(cluster3):
    """Replica 4 does not exist but is in the ISR: the HW stays at 0 while
    acks=1 appends move the LEO (for replica.lag.time.max.ms, 10 s)."""
    zk = cluster3.zk
    from cluster import zkpaths
    from cluster.zkpaths import LeaderAndIsr, TopicAssignment
    zk.create(zkpaths.topic_path("hw-reads"), TopicAssignment({0: (1, 4)}).encode(), makepath=True)
    zk.create(zkpaths.leader_and_isr_path("hw-reads", 0),
              LeaderAndIsr(1, 0, (1, 4), 1).encode(), makepath=True)
    cluster3.hc.push([cluster3.hc.state("hw-reads", 0)])
    w = Wire(cluster3.brokers[1].address)
    assert produce(w, "hw-reads", 0, v2_batch([b"x"] * 5), acks=1) == (0, 0)
    assert produce(w, "hw-reads", 0, v2_batch([b"y"] * 5), acks=1) == (0, 5)
    # acks=all cannot complete: times out with REQUEST_TIMED_OUT.
    assert produce(w, "hw-reads", 0, v2_batch([b"z"]), acks=-1, timeout_ms=300) == (7, 10)
    # LEO 11, HW 0. Consumer reads below the HW only:
    assert list_offset(w, "hw-reads", 0) == (0, 0)
    err, hw, records = fetch(w, "hw-reads", 0, 0)
    assert (err, hw, records) == (0, 0, b"")
    err, hw, records = fetch(w, "hw-reads", 0, 7)  # between HW and LEO: empty, no error
    assert (err, records) == (0, b"")
    err, hw, records = fetch(w, "hw-reads", 0, 11)  # at the LEO: empty
    assert (err, records) == (0, b"")
    assert fetch(w, "hw-reads", 0, 12)[0] == 1  # past the LEO: OFFSET_OUT_OF_RANGE
    assert fetch(w, "hw-reads", 0, 500, version=0)[0] == 1
    # A follower (replica id >= 0) reads up to the LEO.
    err, hw, records = fetch(w, "hw-reads", 0, 0, replica_id=4)
    assert err == 0 and len(records) > 0
    # A consumer's long poll returns at max_wait when nothing is readable.
    t0 = time.monotonic()
    err, _, records = fetch(w, "hw-reads", 0, 0, max_wait_ms=400, min_bytes=1)
    assert records == b"" and 0.3 < time.monotonic() - t0 < 3
    w.close()


def test_long_poll_woken_by_append(cluster3):
    cluster3.hc.create_topic("long-poll", {0: (2, 3, 1)})
    leader = cluster3.brokers[2]
    import threading
    result = {}

    def poll():
        w = Wire(leader.address)
        t0 = time.monotonic()
        result["fetch"] = fetch(w, "long-poll", 0, 0, max_wait_ms=10000, min_bytes=1)
        result["took"] = time.monotonic() - t0
        w.close()
    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.5)
    w = Wire(leader.address)
    assert produce(w, "long-poll", 0, v2_batch([b"wake"]), acks=-1)[0] == 0
    w.close()
    t.join(15)
    err, hw, records = result["fetch"]
    assert err == 0 and records and result["took"] < 5


# -- (d) idempotent producer ------------------------------------------------------------------

def test_idempotent_duplicate_and_gap(cluster3):
    cluster3.hc.create_topic("idem", {0: (1, 2, 3)})
    w = Wire(cluster3.brokers[1].address)
    pid = init_producer_id(w)
    assert pid >= 0
    assert init_producer_id(w) != pid  # unique ids
    b0 = v2_batch([b"a", b"b", b"c"], pid, 0, 0)
    b1 = v2_batch([b"d", b"e"], pid, 0, 3)
    assert produce(w, "idem", 0, b0) == (0, 0)
    assert produce(w, "idem", 0, b1) == (0, 3)
    # Retries of both batches: their original offsets, nothing appended.
    assert produce(w, "idem", 0, b0) == (0, 0)
    assert produce(w, "idem", 0, b1) == (0, 3)
    assert list_offset(w, "idem", 0) == (0, 5)
    # A gap in the sequence: OUT_OF_ORDER_SEQUENCE_NUMBER, nothing appended.
    assert produce(w, "idem", 0, v2_batch([b"x"], pid, 0, 9))[0] == 45
    # Unknown producer starting above 0 (UNKNOWN_PRODUCER_ID, as Kafka: the
    # client may start a new epoch), and an older epoch after a newer one.
    assert produce(w, "idem", 0, v2_batch([b"x"], pid + 100, 0, 4))[0] == 59
    bf = v2_batch([b"f"], pid, 1, 0)
    assert produce(w, "idem", 0, bf) == (0, 5)
    assert produce(w, "idem", 0, v2_batch([b"g"], pid, 0, 5))[0] == 47
    assert list_offset(w, "idem", 0) == (0, 6)
    w.close()

    # Failover: broker 2 becomes leader; its producer state, built from the
    # batches it replicated, still recognises the retry of bf and fences epoch 0.
    wait_until(lambda: list_offset(w2 := Wire(cluster3.brokers[1].address), "idem", 0) == (0, 6),
               10, "HW 6")
    cluster3.hc.elect("idem", 0, 2, (2, 3, 1))
    w = Wire(cluster3.brokers[2].address)
    res = wait_until(lambda: (r := produce(w, "idem", 0, bf)) and r[0] != 6 and r, 10,
                     "broker 2 leading idem")
    assert res == (0, 5)
    assert produce(w, "idem", 0, b1)[0] == 47
    assert produce(w, "idem", 0, v2_batch([b"h"], pid, 1, 1)) == (0, 6)
    assert produce(w, "idem", 0, v2_batch([b"h"], pid, 1, 3))[0] == 45
    w.close()


# -- (c) controller epochs --------------------------------------------------------------------

def test_stale_controller_epoch_rejected(cluster3):
    hc = cluster3.hc
    hc.create_topic("epochs", {0: (3, 1, 2)})
    state = hc.state("epochs", 0)
    newer = hc.controller_epoch + 1
    # A newer controller speaks (UpdateMetadata at epoch+1) ...
    resp = hc.send(3, control.UpdateMetadataRequest(hc.controller_id, newer, (state,),
                                                    hc.live_endpoints()))
    assert resp.error == 0
    # ... then the old one sends a LeaderAndIsr making broker 1 leader: rejected.
    moved = control.PartitionState("epochs", 0, 1, state.leader_epoch + 1, (1, 2, 3),
                                   state.zk_version, state.replicas)
    resp = hc.send(3, control.LeaderAndIsrRequest(hc.controller_id, hc.controller_epoch, False,
                                                  (moved,), hc.live_endpoints()))
    assert resp.error == 11
    assert all(p.error == 11 for p in resp.partitions)
    resp = hc.send(3, control.StopReplicaRequest(hc.controller_id, hc.controller_epoch, True,
                                                 (control.TopicPartition("epochs", 0),)))
    assert resp.error == 11
    # Broker 3 is still the leader and serving.
    w = Wire(cluster3.brokers[3].address)
    assert produce(w, "epochs", 0, v2_batch([b"still"]))[0] == 0
    w.close()
    wait_until(lambda: "rejected leader-and-isr" in cluster3.brokers[3].stderr(), 5,
               "state-change rejection logged")
    # A LeaderAndIsr at the new controller epoch but a stale leader epoch is ignored.
    hc.controller_epoch = newer
    stale = control.PartitionState("epochs", 0, 1, state.leader_epoch, (1, 2, 3),
                                   state.zk_version, state.replicas)
    resp = hc.send(3, control.LeaderAndIsrRequest(hc.controller_id, newer, False, (stale,),
                                                  hc.live_endpoints()))
    assert resp.error == 0
    w = Wire(cluster3.brokers[3].address)
    assert produce(w, "epochs", 0, v2_batch([b"still"]))[0] == 0
    w.close()
    log = cluster3.brokers[3].stderr()
    assert ("state-change: broker=3 ignored become-follower topic=epochs partition=0 leader=1 "
            f"leader_epoch={state.leader_epoch}") in log
    assert ("state-change: broker=3 received become-leader topic=epochs partition=0 leader=3 "
            f"leader_epoch=0 controller_id={hc.controller_id} controller_epoch=1") in log
    assert "state-change: broker=3 completed become-leader topic=epochs partition=0" in log


# -- the versions of a Kafka 2.0 broker ---------------------------------------------------

def test_a_client_pinned_to_kafka_2_0_is_served_at_every_version(cluster3):
    """Produce 4-6, Fetch 6-8, ListOffsets 2-3, Metadata 5-6 and
    InitProducerId 1: what a Kafka 2.0 broker accepts, so a client pinned
    to that version is served, never dropped. Fetch sessions (v7) are
    declined as KIP-227 allows: session id 0, and an incremental fetch
    naming a session is refused."""
    from kafka.protocol.consumer import (FetchRequest, FetchResponse, ListOffsetsRequest,
                                         ListOffsetsResponse)
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse
    from kafka.protocol.producer import (InitProducerIdRequest, InitProducerIdResponse,
                                         ProduceRequest, ProduceResponse)
    cluster3.hc.create_topic("v20", {0: (1, 2, 3)})
    w = Wire(cluster3.brokers[1].address)
    try:
        wait_until(lambda: list_offset(w, "v20", 0) == (0, 0), 30, "broker 1 leading v20")
        for v in (4, 5, 6):
            resp = w.call(ProduceRequest, ProduceResponse, v, transactional_id=None, acks=-1,
                          timeout_ms=10000, topic_data=[("v20", [(0, v2_batch([b"p%d" % v]))])])
            part = resp.responses[0].partition_responses[0]
            assert (part.error_code, part.base_offset) == (0, v - 4), resp
            if v >= 5:
                assert part.log_start_offset == 0, resp

        for v in (6, 7, 8):
            kw = {"session_id": 0, "session_epoch": -1, "forgotten_topics_data": []} if v >= 7 else {}
            resp = w.call(FetchRequest, FetchResponse, v, replica_id=-1, max_wait_ms=0, min_bytes=0,
                          max_bytes=1 << 20, isolation_level=0,
                          topics=[("v20", [(0, 1, 0, 1 << 20)])], **kw)
            part = resp.responses[0].partitions[0]
            assert (part.error_code, part.high_watermark, part.log_start_offset) == (0, 3, 0), resp
            assert part.records, resp
            if v >= 7:
                assert (resp.error_code, resp.session_id) == (0, 0), resp
        refused = w.call(FetchRequest, FetchResponse, 7, replica_id=-1, max_wait_ms=0, min_bytes=0,
                         max_bytes=1 << 20, isolation_level=0, session_id=12, session_epoch=3,
                         topics=[], forgotten_topics_data=[])
        assert refused.error_code == 70 and refused.responses == [], refused  # FETCH_SESSION_ID_NOT_FOUND

        for v in (2, 3):
            resp = w.call(ListOffsetsRequest, ListOffsetsResponse, v, replica_id=-1, isolation_level=1,
                          topics=[("v20", [(0, -1)])])
            part = resp.topics[0].partitions[0]
            assert (part.error_code, part.offset) == (0, 3), resp

        for v in (5, 6):
            resp = w.call(MetadataRequest, MetadataResponse, v, topics=[("v20",)],
                          allow_auto_topic_creation=False)
            [part] = resp.topics[0].partitions
            assert (part.leader_id, sorted(part.replica_nodes), part.offline_replicas) == (
                1, [1, 2, 3], []), resp

        resp = w.call(InitProducerIdRequest, InitProducerIdResponse, 1, transactional_id=None,
                      transaction_timeout_ms=60000)
        assert resp.error_code == 0 and resp.producer_id >= 0, resp
    finally:
        w.close()
