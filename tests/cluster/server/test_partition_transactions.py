"""A partition's transactions against a real log, without processes
(docs/design.md#transactions): transactional batches open a transaction,
the coordinator's markers close it, `read_committed` reads stop at the last
stable offset, a follower and a truncated replica see the same, and markers
of a fenced epoch or from a client are refused."""
from __future__ import annotations

from kafka.record.default_records import DefaultRecordBatchBuilder

from cluster.config import BrokerConfig
from cluster.log import Log, LogConfig
from cluster.protocol import errors as E
from cluster.protocol.control_records import control_batch
from cluster.protocol.records import batch_headers
from cluster.server.partition import Partition


def _batch(pid: int, epoch: int, seq: int, count: int, transactional: bool = True) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, transactional, pid, epoch, seq, 1 << 20)
    for i in range(count):
        b.append(i, 1000 + i, None, b"v", [])
    return bytes(b.build())


def _partition(tmp_path, name: str = "t-0", broker: int = 1) -> Partition:
    cfg = BrokerConfig.from_dict({"broker.id": broker})
    return Partition("t", 0, Log(tmp_path / name, LogConfig.from_broker_config(cfg)), broker, 0)


def _leader(tmp_path) -> Partition:
    p = _partition(tmp_path)
    p.make_leader((1,), (1,), leader_epoch=0, zk_version=0, controller_epoch=1, now_ms=0)
    return p


def _produce(p: Partition, data: bytes) -> int:
    err, base, _ = p.append_as_leader(data, batch_headers(data), -1, 1, 1 << 20)
    assert err == E.NONE, E.name(err)
    return base


def _read_offsets(p: Partition, start: int, committed: bool) -> list[int]:
    err, data = p.read(start, 1 << 20, -1, read_committed=committed)
    assert err == E.NONE
    return [h.base_offset for h in batch_headers(data)]


def test_open_transaction_holds_read_committed_back_until_its_marker(tmp_path):
    p = _leader(tmp_path)
    _produce(p, _batch(-1, -1, -1, 2, transactional=False))        # offsets 0-1
    assert _produce(p, _batch(7, 0, 0, 3)) == 2                     # transaction at 2-4
    _produce(p, _batch(-1, -1, -1, 1, transactional=False))         # offset 5
    assert p.hw == 6 and p.last_stable_offset == 2
    assert _read_offsets(p, 0, committed=False) == [0, 2, 5]
    assert _read_offsets(p, 0, committed=True) == [0]
    err, required = p.append_marker(7, 0, True, 0, 1, 2000)
    assert (err, required) == (E.NONE, 7)
    assert p.hw == 7 and p.last_stable_offset == 7
    assert _read_offsets(p, 0, committed=True) == [0, 2, 5, 6]
    assert p.txns.aborted == []


def test_an_aborted_transaction_is_listed_for_read_committed_fetches(tmp_path):
    p = _leader(tmp_path)
    _produce(p, _batch(7, 0, 0, 2))                 # 0-1
    assert p.append_marker(7, 0, False, 0, 1, 2000)[0] == E.NONE   # ABORT at 2
    _produce(p, _batch(7, 0, 2, 1))                 # sequences go on: 3
    p.append_marker(7, 0, True, 0, 1, 2000)         # COMMIT at 4
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in p.txns.aborted] == [(7, 0, 2)]
    assert p.txns.aborted_between(3, 5) == []
    assert len(p.txns.aborted_between(0, 3)) == 1


def test_markers_of_an_older_epoch_and_client_control_batches_are_refused(tmp_path):
    p = _leader(tmp_path)
    _produce(p, _batch(7, 3, 0, 1))
    assert p.append_marker(7, 2, True, 0, 1, 2000)[0] == E.INVALID_PRODUCER_EPOCH
    marker = control_batch(7, 3, True, 0, 2000)
    err, _, _ = p.append_as_leader(marker, batch_headers(marker), -1, 1, 1 << 20)
    assert err == E.INVALID_RECORD
    # KIP-890: a marker of the next epoch fences the transaction's late batches.
    assert p.append_marker(7, 4, False, 0, 1, 2000)[0] == E.NONE
    late = _batch(7, 3, 1, 1)
    err, _, _ = p.append_as_leader(late, batch_headers(late), -1, 1, 1 << 20)
    assert err == E.INVALID_PRODUCER_EPOCH
    assert _produce(p, _batch(7, 4, 0, 1)) == 2


def test_a_follower_sees_the_leaders_transactions_and_a_truncated_marker_reopens_one(tmp_path):
    leader = _leader(tmp_path)
    _produce(leader, _batch(7, 0, 0, 2))
    leader.append_marker(7, 0, False, 0, 1, 2000)
    _produce(leader, _batch(8, 0, 0, 1))
    leader.append_marker(8, 0, True, 0, 1, 2000)
    follower = _partition(tmp_path, "f-0", broker=2)
    follower.make_follower((1, 2), (1, 2), leader=1, leader_epoch=0, zk_version=0,
                           controller_epoch=1)
    err, data = leader.read(0, 1 << 20, replica_id=2)
    assert err == E.NONE
    follower.append_as_follower(data)
    follower.update_follower_hw(leader.hw)
    assert follower.txns.aborted == leader.txns.aborted
    assert follower.last_stable_offset == leader.last_stable_offset == 5
    # The COMMIT marker at 4 truncated away: producer 8's transaction is open again.
    follower.truncate_to(4)
    assert follower.txns.open == {8: 3}
    assert follower.last_stable_offset == 3
    # Rebuilt from the log at load, the same.
    again = _partition(tmp_path, "f-0", broker=2)
    again.rebuild_producer_state()
    again.init_hw(4)
    assert again.txns.open == {8: 3} and again.txns.aborted == follower.txns.aborted
