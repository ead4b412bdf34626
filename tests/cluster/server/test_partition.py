"""A Partition against a real log, without processes. The leader's ISR
expansion: a follower joins (or rejoins) the ISR only on a fetch after its
first one under the current leader state, because the first may have been
sent before the LeaderAndIsr that took it out (it was told to stop, or it
died). The producer state after a truncation."""
from __future__ import annotations

from kafka.record.default_records import DefaultRecordBatchBuilder

from cluster.config import BrokerConfig
from cluster.log import Log, LogConfig
from cluster.protocol import errors as E
from cluster.protocol.records import batch_headers
from cluster.server.partition import Partition


def _records(count: int) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 20)
    for i in range(count):
        b.append(i, timestamp=1000 + i, key=None, value=b"v", headers=[])
    return bytes(b.build())


def _leader(tmp_path, isr) -> Partition:
    cfg = BrokerConfig.from_dict({"broker.id": 1})
    p = Partition("t", 0, Log(tmp_path / "t-0", LogConfig.from_broker_config(cfg)), 1, 0)
    p.make_leader((1, 2, 3), isr, leader_epoch=0, zk_version=0, controller_epoch=1, now_ms=0)
    p.log.append_as_leader(_records(10), 0)
    return p


def test_caught_up_follower_joins_on_its_second_fetch(tmp_path):
    p = _leader(tmp_path, (1, 2))
    assert p.record_follower_fetch(2, 10, 10) is False  # in the ISR: HW advances
    assert p.hw == 10
    assert p.record_follower_fetch(3, 10, 20) is False  # first fetch: maybe a stale one
    assert p.expanded_isr() is None
    assert p.record_follower_fetch(3, 10, 30) is True
    assert p.expanded_isr() == {1, 2, 3}


def test_stale_fetch_after_the_controller_took_a_follower_out_does_not_put_it_back(tmp_path):
    p = _leader(tmp_path, (1, 2, 3))
    for t, b in ((10, 2), (11, 3), (20, 2), (21, 3)):
        p.record_follower_fetch(b, 10, t)
    assert p.hw == 10
    # Controlled shutdown of broker 3: the controller takes it out of the ISR
    # (leader epoch + 1) and tells it to stop; a fetch it sent before arrives.
    p.make_leader((1, 2, 3), (1, 2), leader_epoch=1, zk_version=1, controller_epoch=1, now_ms=30)
    assert p.record_follower_fetch(3, 10, 40) is False
    # Another follower's fetch does not pull it in either.
    p.make_leader((1, 2, 3), (1,), leader_epoch=2, zk_version=2, controller_epoch=1, now_ms=50)
    p.record_follower_fetch(3, 10, 60)
    p.record_follower_fetch(2, 10, 61)
    assert p.record_follower_fetch(2, 10, 62) is True
    assert p.expanded_isr() == {1, 2}


def _idempotent(value: bytes, pid: int, seq: int) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=pid, producer_epoch=0, base_sequence=seq,
                                  batch_size=1 << 20)
    b.append(0, timestamp=1000, key=None, value=value, headers=[])
    return bytes(b.build())


def test_a_truncation_forgets_the_sequences_of_the_removed_batches(tmp_path):
    """docs/design.md#idempotence: after a truncation the producer state is
    rebuilt from what the log still holds, so a retry of a removed batch is
    written again, not answered with an offset that no longer holds it."""
    p = _leader(tmp_path, (1,))
    for seq in range(3):
        data = _idempotent(b"i%d" % seq, 42, seq)
        err, base, _ = p.append_as_leader(data, list(batch_headers(data)), 1, 1, 1 << 20)
        assert (err, base) == (E.NONE, 10 + seq)
    p.truncate_to(12)                                  # batch 2 removed
    retry = list(batch_headers(_idempotent(b"i2", 42, 2)))[0]
    assert p.producer_state.check(retry) == (E.NONE, None)
    kept = list(batch_headers(_idempotent(b"i1", 42, 1)))[0]
    assert p.producer_state.check(kept) == (E.NONE, (11, 11))


def test_requests_naming_another_leader_epoch_are_fenced(tmp_path):
    """KIP-320 (docs/design.md#fencing): the leader of epoch 3 serves its own
    epoch and requests naming none; an older epoch is fenced, a newer one is
    not known here yet."""
    p = _leader(tmp_path, (1, 2, 3))
    p.make_leader((1, 2, 3), (1, 2, 3), leader_epoch=3, zk_version=1, controller_epoch=1, now_ms=0)
    assert p.leader_epoch_error(-1) == E.NONE
    assert p.leader_epoch_error(3) == E.NONE
    assert p.leader_epoch_error(2) == E.FENCED_LEADER_EPOCH
    assert p.leader_epoch_error(4) == E.UNKNOWN_LEADER_EPOCH
    assert p.read(0, 1 << 20, 2, current_leader_epoch=2) == (E.FENCED_LEADER_EPOCH, b"")
    err, records = p.read(0, 1 << 20, 2, current_leader_epoch=3)
    assert err == E.NONE and records
    # A follower in that epoch: fencing is answered before "not the leader".
    p.make_follower((1, 2, 3), (1, 2, 3), 2, leader_epoch=4, zk_version=2, controller_epoch=1)
    assert p.read(0, 1 << 20, 3, current_leader_epoch=3)[0] == E.FENCED_LEADER_EPOCH
    assert p.read(0, 1 << 20, 3, current_leader_epoch=4)[0] == E.NOT_LEADER_FOR_PARTITION
    p.log.close()


def test_the_hw_waits_for_a_follower_whose_isr_expansion_is_being_written(tmp_path):
    """docs/design.md#isr: the maximal ISR. Follower 2 reached the HW and the
    leader (alone in its ISR) decided to add it; until that write lands the
    HW must not pass 2's LEO, or 2 joins the ISR without a committed record."""
    p = _leader(tmp_path, (1,))
    assert p.hw == 0
    p.maybe_advance_hw()
    assert p.hw == 10                               # alone: the HW is the leader's LEO
    p.record_follower_fetch(2, 10, 10)
    assert p.record_follower_fetch(2, 10, 20) is True
    new = p.expanded_isr()
    assert new == {1, 2}
    p.isr_adding = new - p.isr                      # as ReplicaManager._change_isr does
    p.log.append_as_leader(_records(5), 0)          # the write is still in flight
    p.maybe_advance_hw()
    assert p.hw == 10, "the HW passed the LEO of a follower joining the ISR"
    p.record_follower_fetch(2, 15, 30)              # the joining follower's fetches count
    assert p.hw == 15
    p.isr_adding = frozenset()
    p.apply_isr(frozenset(new), 1)
    assert p.hw == 15
