"""Log retention and the HW checkpoint on the brokers' own timers
(log.retention.check.interval.ms, replica.high.watermark.checkpoint.interval.ms),
and a follower that comes back behind its leader's log start offset (Kafka's
handleOffsetOutOfRange: the leader's log starts past the follower's LEO, so
the follower empties its log and restarts it at the leader's start)."""
from __future__ import annotations

import time

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from broker_cluster import wait_until
from cluster import zkpaths
from cluster.log.checkpoint import HIGH_WATERMARK_FILE, HighWatermarkCheckpoint
from cluster.zkpaths import LeaderAndIsr
from kafka_wire import Wire, fetch, list_offset, produce, v2_batch

SMALL_LOGS = {"log.segment.bytes": 1024, "log.retention.bytes": 2048,
              "log.retention.check.interval.ms": 200}
VALUE = b"v" * 100  # one record per batch: about 170 bytes, 6 batches a segment


def fresh_batch(value: bytes) -> bytes:
    """A one-record batch stamped now (v2_batch's are from 2023: retention by
    time would delete them, and these tests want retention by size)."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 20)
    b.append(0, timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    return bytes(b.build())


def _lai(cluster, topic) -> LeaderAndIsr:
    data, stat = cluster.zk.get(zkpaths.leader_and_isr_path(topic, 0))
    return LeaderAndIsr.decode(data, stat.version)


def _segments(broker, topic) -> list[int]:
    """Base offsets of the segment files of the broker's replica of topic-0."""
    return sorted(int(p.stem) for p in (broker.log_dir / f"{topic}-0").glob("*.log"))


def _segment_bytes(broker, topic) -> int:
    return sum(p.stat().st_size for p in (broker.log_dir / f"{topic}-0").glob("*.log"))


def _records(broker, topic) -> list[tuple[int, bytes]]:
    """(offset, value) of every record from the leader's log start to its HW."""
    w = Wire(broker.address)
    try:
        err, offset = list_offset(w, topic, 0, -2)
        assert err == 0, err
        out = []
        while True:
            err, _, records = fetch(w, topic, 0, offset)
            assert err == 0, err
            if not records:
                return out
            mr = MemoryRecords(records)
            while (batch := mr.next_batch()) is not None:
                for r in batch:
                    out.append((r.offset, r.value))
                    offset = r.offset + 1
    finally:
        w.close()


def test_retention_and_hw_checkpoint_run_on_their_timers(make_cluster):
    c = make_cluster(2, **SMALL_LOGS, **{"replica.high.watermark.checkpoint.interval.ms": 200})
    c.hc.create_topic("by-size", {0: (1, 2)})
    c.hc.create_topic("by-time", {0: (1, 2)})
    leader, follower = c.brokers[1], c.brokers[2]
    w = Wire(leader.address)
    for i in range(40):
        assert produce(w, "by-size", 0, fresh_batch(VALUE)) == (0, i)
        assert produce(w, "by-time", 0, v2_batch([VALUE])) == (0, i)

    # No restart, no shutdown: the brokers' timers do it. By size: the oldest
    # segments go while what is left stays >= log.retention.bytes.
    def trimmed(b):
        segs = _segments(b, "by-size")
        return segs[0] > 0 and 2048 <= _segment_bytes(b, "by-size") < 2048 + 2 * 1024 and segs
    segs = wait_until(lambda: trimmed(leader), 10, "size retention on the leader")
    assert list_offset(w, "by-size", 0, -2) == (0, segs[0])
    assert list_offset(w, "by-size", 0, -1) == (0, 40)
    assert fetch(w, "by-size", 0, 0)[0] == 1  # OFFSET_OUT_OF_RANGE below the log start
    assert [o for o, _ in _records(leader, "by-size")] == list(range(segs[0], 40))
    wait_until(lambda: trimmed(follower), 10, "size retention on the follower")
    # By time (records from 2023, log.retention.ms 7 days): every segment but
    # the active one, on both replicas.
    for b in (leader, follower):
        wait_until(lambda: len(_segments(b, "by-time")) == 1, 10,
                   f"time retention on broker {b.id}")
    assert list_offset(w, "by-time", 0, -2) == (0, _segments(leader, "by-time")[0])

    # The HW checkpoint is rewritten on its timer while the brokers run.
    def checkpointed(b, hw):
        hws = HighWatermarkCheckpoint(b.log_dir / HIGH_WATERMARK_FILE).read()
        return hws.get(("by-size", 0)) == hw and hws.get(("by-time", 0)) == hw
    wait_until(lambda: checkpointed(leader, 40), 5, "HW 40 checkpointed by the leader")
    wait_until(lambda: checkpointed(follower, 40), 5, "HW 40 checkpointed by the follower")
    for i in range(5):
        assert produce(w, "by-size", 0, fresh_batch(VALUE))[0] == 0
        assert produce(w, "by-time", 0, fresh_batch(VALUE))[0] == 0
    wait_until(lambda: checkpointed(leader, 45), 5, "HW 45 checkpointed by the leader")
    wait_until(lambda: checkpointed(follower, 45), 5, "HW 45 checkpointed by the follower")
    assert leader.alive and follower.alive
    w.close()


def test_follower_behind_the_leaders_log_start_restarts_its_log(make_cluster):
    c = make_cluster(2, **SMALL_LOGS, **{"replica.lag.time.max.ms": 1000})
    c.hc.create_topic("behind", {0: (1, 2)})
    leader, follower = c.brokers[1], c.brokers[2]
    w = Wire(leader.address)
    for i in range(5):
        assert produce(w, "behind", 0, fresh_batch(b"early %d" % i)) == (0, i)
    follower.kill()
    wait_until(lambda: _lai(c, "behind").isr == (1,), 10, "ISR shrink to the leader")
    # While the follower is down the leader rolls segments and retention
    # deletes the old ones, those the follower has included.
    for i in range(5, 65):
        assert produce(w, "behind", 0, fresh_batch(b"late %d" % i)) == (0, i)
    wait_until(lambda: list_offset(w, "behind", 0, -2)[1] > 5, 10,
               "leader's log start past the follower's LEO (5)")
    assert _segments(follower, "behind") == [0]

    follower.start().wait_registered(c.zk)
    c.hc.push([c.hc.state("behind", 0)], to={2})
    wait_until(lambda: _lai(c, "behind").isr == (1, 2), 15, "the follower back in the ISR")
    log = follower.stderr()
    assert "restarting log at leader 1's start offset" in log
    assert "truncated fully, restarting at" in log
    assert _segments(follower, "behind")[0] > 5  # offsets 0-4 are gone
    assert produce(w, "behind", 0, fresh_batch(b"after")) == (0, 65)  # acks=all, ISR 1,2
    expected = dict(_records(leader, "behind"))
    w.close()

    # Broker 2 leads: from its log start to offset 65 it has what broker 1 has.
    c.hc.elect("behind", 0, 2, (2, 1))
    w2 = Wire(follower.address)
    wait_until(lambda: list_offset(w2, "behind", 0, -1) == (0, 66), 10, "HW 66 on broker 2")
    start = list_offset(w2, "behind", 0, -2)[1]
    w2.close()
    got = _records(follower, "behind")
    assert start > 5 and [o for o, _ in got] == list(range(start, 66))
    assert all(expected[o] == v for o, v in got if o in expected)
    assert got[-1] == (65, b"after") and got[0][1] == b"late %d" % start
