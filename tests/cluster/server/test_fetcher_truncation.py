"""The follower's leader-epoch truncation logic (KIP-101 / KIP-279, Kafka
2.0's getOffsetTruncationState) against real logs, without processes."""
from __future__ import annotations

import asyncio

from kafka.protocol.consumer import OffsetForLeaderEpochResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from cluster.config import BrokerConfig
from cluster.log import Log, LogConfig
from cluster.log.batch import set_base_offset, set_leader_epoch
from cluster.protocol import errors as E
from cluster.server.fetcher import FetchState, ReplicaFetcher
from cluster.server.partition import Partition
from fetcher_stubs import partitions_of


def _batch(base: int, count: int, epoch: int) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 20)
    for i in range(count):
        b.append(i, timestamp=1000 + i, key=None, value=b"v", headers=[])
    buf = bytearray(b.build())
    set_base_offset(buf, 0, base)
    set_leader_epoch(buf, 0, epoch)
    return bytes(buf)


def _follower(tmp_path, epochs: list[tuple[int, int, int]]):
    cfg = BrokerConfig.from_dict({"broker.id": 2})
    log = Log(tmp_path / "t-0", LogConfig.from_broker_config(cfg))
    for base, count, epoch in epochs:
        log.append_as_follower(_batch(base, count, epoch))
    p = Partition("t", 0, log, 2, 0)
    p.leader_id = 1
    return cfg, p


def test_kip279_two_rounds(tmp_path):
    # Follower: epoch 0 at 0, epoch 1 at 10, epoch 3 at 20; LEO 30.
    cfg, p = _follower(tmp_path, [(0, 10, 0), (10, 10, 1), (20, 10, 3)])
    assert p.log.leader_epoch_cache.entries() == [(0, 0), (1, 10), (3, 20)]

    async def run():
        f = ReplicaFetcher(cfg, partitions_of({("t", 0): p}), 1, lambda b: None)
        s = FetchState(p.leo, truncating=True)
        f.partitions[("t", 0)] = s
        # Round 1: asked for epoch 3, the leader knows epoch 2 ending at 25.
        # Our largest epoch <= 2 is 1, ending at 20: truncate to 20, ask again.
        f._apply_epoch_answer(("t", 0), s, p, 3, 2, 25)
        assert (p.leo, s.truncating) == (20, True)
        assert p.log.leader_epoch_cache.latest_epoch == 1
        # Round 2: asked for epoch 1, the leader says it ends at 15.
        f._apply_epoch_answer(("t", 0), s, p, 1, 1, 15)
        assert s.truncating is False
        assert p.leo == 10 and s.offset == 10  # batches are whole: 10..19 goes entirely
        await f.stop()
    asyncio.run(run())
    p.log.close()


def test_epoch_answers_that_keep_everything_or_fall_back_to_hw(tmp_path):
    cfg, p = _follower(tmp_path, [(0, 10, 0), (10, 10, 1)])
    p.hw = 5

    async def run():
        f = ReplicaFetcher(cfg, partitions_of({("t", 0): p}), 1, lambda b: None)
        s = FetchState(p.leo, truncating=True)
        # The leader's epoch 1 ends beyond our LEO: nothing to cut.
        f._apply_epoch_answer(("t", 0), s, p, 1, 1, 40)
        assert (p.leo, s.truncating) == (20, False)
        # An undefined end offset: fall back to the HW (batch 0..9 contains 5,
        # so the LEO ends at 0).
        s.truncating = True
        f._apply_epoch_answer(("t", 0), s, p, 1, -1, -1)
        assert s.truncating is False and p.leo <= 5
        await f.stop()
    asyncio.run(run())
    p.log.close()


def test_an_answer_for_a_state_replaced_meanwhile_is_not_applied(tmp_path):
    """An OffsetForLeaderEpoch answer that arrives after a LeaderAndIsr
    re-added the partition (a new leader epoch) was computed from the leader's
    log as it was: applying it to the new state could keep records the leader
    replaced since. The new state asks again."""
    cfg, p = _follower(tmp_path, [(0, 10, 0), (10, 10, 1)])

    async def run():
        f = ReplicaFetcher(cfg, partitions_of({("t", 0): p}), 1, lambda b: None)
        f._stopped = True  # no loop: the test plays the requests
        old = FetchState(p.leo, truncating=True, leader_epoch=1)
        f.partitions[("t", 0)] = old

        class Conn(_Conn):
            async def request(self, key, version, body):
                f.add(("t", 0), p.leo, truncating=True, leader_epoch=3)  # meanwhile
                return _epoch_answer(version, 1, 10)
        f._conn = Conn()
        await f._truncate()
        new = f.partitions[("t", 0)]
        assert new is not old and new.truncating and p.leo == 20
        await f.stop()
    asyncio.run(run())
    p.log.close()


def test_a_fenced_partition_waits_for_the_controller(tmp_path):
    cfg, p = _follower(tmp_path, [(0, 10, 0)])

    async def run():
        f = ReplicaFetcher(cfg, partitions_of({("t", 0): p}), 1, lambda b: None)
        f._stopped = True
        f.add(("t", 0), p.leo, truncating=True, leader_epoch=1)

        class Conn(_Conn):
            async def request(self, key, version, body):
                return _epoch_answer(version, -1, -1, E.FENCED_LEADER_EPOCH)
        f._conn = Conn()
        await f._truncate()
        s = f.partitions[("t", 0)]
        assert s.fenced and not s.fetchable and p.leo == 10
        f.add(("t", 0), p.leo, truncating=True, leader_epoch=2)  # the next LeaderAndIsr
        assert f.partitions[("t", 0)].fetchable is False  # truncates first
        assert f.partitions[("t", 0)].fenced is False
        await f.stop()
    asyncio.run(run())
    p.log.close()


class _Conn:
    """A connection to the leader that answers what the test says."""
    def close(self) -> None:
        pass


def _epoch_answer(version: int, epoch: int, end: int, error: int = 0) -> bytes:
    resp = OffsetForLeaderEpochResponse(version=version, throttle_time_ms=0, topics=[
        ("t", [(error, 0, epoch, end)])])
    return bytes(resp.encode(version=version))
