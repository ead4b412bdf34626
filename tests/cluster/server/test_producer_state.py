"""The idempotent producers' sequence state of one replica (docs/design.md#idempotence)."""
from __future__ import annotations

from cluster.log.batch import BatchHeader
from cluster.protocol import errors as E
from cluster.server.producer_state import MAX_BATCHES, ProducerState

PID = 7


def header(seq: int, count: int = 1, epoch: int = 0, offset: int = 0, pid: int = PID) -> BatchHeader:
    # (base offset, length, leader epoch, magic, crc, attributes, last offset delta,
    #  first timestamp, max timestamp, producer id, producer epoch, base sequence, count)
    return BatchHeader((offset, 0, 0, 2, 0, 0, count - 1, 0, 0, pid, epoch, seq, count), 0)


def appended(state: ProducerState, seq: int, offset: int, count: int = 1, epoch: int = 0) -> None:
    h = header(seq, count, epoch)
    assert state.check(h) == (E.NONE, None)
    state.update(h, offset)


def test_a_retry_of_any_of_the_last_batches_gets_its_original_offsets():
    s = ProducerState()
    for i in range(MAX_BATCHES):
        appended(s, 2 * i, 100 + 2 * i, count=2)
    for i in range(MAX_BATCHES):
        assert s.check(header(2 * i, 2)) == (E.NONE, (100 + 2 * i, 101 + 2 * i))


def test_a_retry_older_than_the_last_batches_is_out_of_order_not_appended():
    s = ProducerState()
    for i in range(MAX_BATCHES + 1):
        appended(s, i, 10 + i)
    assert s.check(header(0)) == (E.OUT_OF_ORDER_SEQUENCE_NUMBER, None)


def test_a_retry_regrouped_differently_is_not_taken_for_new_data():
    s = ProducerState()
    appended(s, 0, 10)
    appended(s, 1, 11)
    # sequences 1..2: overlaps what is written, does not continue it
    assert s.check(header(1, count=2)) == (E.OUT_OF_ORDER_SEQUENCE_NUMBER, None)


def test_gaps_and_a_first_batch_not_at_zero_are_refused():
    s = ProducerState()
    # A producer the replica knows nothing of (its topic created again):
    # Kafka's UNKNOWN_PRODUCER_ID, which lets the client start a new epoch.
    assert s.check(header(3)) == (E.UNKNOWN_PRODUCER_ID, None)
    appended(s, 0, 10)
    assert s.check(header(2)) == (E.OUT_OF_ORDER_SEQUENCE_NUMBER, None)
    assert s.check(header(1)) == (E.NONE, None)


def test_a_new_epoch_restarts_at_zero_and_fences_the_old_one():
    s = ProducerState()
    appended(s, 0, 10)
    assert s.check(header(5, epoch=1)) == (E.OUT_OF_ORDER_SEQUENCE_NUMBER, None)
    assert s.is_new_session(header(0, epoch=1))
    appended(s, 0, 11, epoch=1)
    assert not s.is_new_session(header(1, epoch=1))
    assert s.check(header(1, epoch=0)) == (E.INVALID_PRODUCER_EPOCH, None)
    assert s.describe(PID) == "epoch 1 seq 0..0 at offset 11..11"


def test_followers_and_a_rebuild_from_the_log_deduplicate_like_the_leader():
    leader, follower = ProducerState(), ProducerState()
    logged = []
    for i in range(3):
        h = header(i, offset=20 + i)
        assert leader.check(h) == (E.NONE, None)
        leader.update(h, 20 + i)
        follower.update(h)            # a fetched batch carries its offset
        logged.append(h)
    rebuilt = ProducerState()
    rebuilt.rebuild(logged)
    for s in (follower, rebuilt):
        assert s.check(header(2)) == (E.NONE, (22, 22))
        assert s.check(header(3)) == (E.NONE, None)


def test_batches_without_a_producer_id_are_not_tracked():
    s = ProducerState()
    h = header(0, pid=-1)
    assert s.check(h) == (E.NONE, None)
    s.update(h, 0)
    assert s.producers == {} and s.describe(-1) == "none"
