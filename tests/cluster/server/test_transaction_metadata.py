"""cluster/server/transaction_metadata.py: the transaction coordinator's state machine."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.protocol import errors as E
from cluster.server import transaction_metadata as tm
from cluster.server.transaction_metadata import MAX_EPOCH, InvalidTransition, TxnState as S

T0, T1 = ("t", 0), ("t", 1)
MAX_TIMEOUT = 900_000


def _ids():
    return itertools.count(1000).__next__


def _init(cur=None, now=0, new_pid=None, timeout=60_000):
    return tm.init_producer_id(cur, "tx", timeout, MAX_TIMEOUT, now, new_pid or _ids())


def _ongoing():
    md = _init().write
    return tm.add_partitions(md, md.producer_id, 0, {T0, T1}, 10).write


def test_a_commit_then_an_abort_then_a_new_session():
    md = _init().write
    assert (md.producer_id, md.producer_epoch, md.state) == (1000, 0, S.EMPTY)
    md = tm.add_partitions(md, 1000, 0, {T0}, 10).write
    assert (md.state, md.partitions, md.txn_start_ms) == (S.ONGOING, {T0}, 10)
    assert tm.add_partitions(md, 1000, 0, {T0}, 11) == (E.NONE, None)   # nothing new to write
    md = tm.add_partitions(md, 1000, 0, {T1}, 12).write
    assert md.partitions == {T0, T1} and md.txn_start_ms == 10
    md = tm.end_txn(md, 1000, 0, True, 20, bump_per_transaction=False).write
    assert md.state is S.PREPARE_COMMIT
    assert tm.markers(md) == tm.Markers(1000, 0, True, frozenset({T0, T1}), "tx")
    md = tm.complete(md, 21)
    assert (md.state, md.partitions) == (S.COMPLETE_COMMIT, frozenset())
    md = tm.add_partitions(md, 1000, 0, {T1}, 30).write
    assert (md.state, md.txn_start_ms) == (S.ONGOING, 30)
    md = tm.complete(tm.end_txn(md, 1000, 0, False, 40, False).write, 41)
    assert md.state is S.COMPLETE_ABORT
    md = _init(md, 50).write
    assert (md.producer_id, md.producer_epoch, md.state) == (1000, 1, S.EMPTY)


def test_a_new_session_fences_the_ongoing_transaction_of_the_old_one():
    md = _ongoing()
    err, fenced = _init(md, 100)
    # The caller tries again once the abort is done; the old producer is
    # fenced by the abort's markers, written with the next epoch.
    assert err == E.CONCURRENT_TRANSACTIONS
    assert (fenced.state, fenced.producer_epoch) == (S.PREPARE_ABORT, 1)
    assert tm.markers(fenced) == tm.Markers(1000, 1, False, frozenset({T0, T1}), "tx")
    assert _init(fenced, 101) == (E.CONCURRENT_TRANSACTIONS, None)
    assert tm.end_txn(fenced, 1000, 0, True, 102, False).error == E.PRODUCER_FENCED
    done = tm.complete(fenced, 103)
    assert tm.add_partitions(done, 1000, 0, {T0}, 104).error == E.PRODUCER_FENCED
    md = _init(done, 105).write
    assert (md.producer_epoch, md.state) == (2, S.EMPTY)


def test_an_expired_transaction_is_aborted_with_its_producer_fenced():
    md = _ongoing()
    assert not tm.expired(md, 10 + md.timeout_ms)
    assert tm.expired(md, 11 + md.timeout_ms)
    aborted = tm.fence(md, 11 + md.timeout_ms)
    assert (aborted.state, aborted.producer_epoch) == (S.PREPARE_ABORT, 1)


@pytest.mark.parametrize("pid, epoch, error", [(999, 0, E.INVALID_PRODUCER_ID_MAPPING),
                                               (1000, 1, E.PRODUCER_FENCED)])
def test_requests_of_another_producer_or_epoch_are_refused(pid, epoch, error):
    md = _ongoing()
    assert tm.add_partitions(md, pid, epoch, {T0}, 20) == (error, None)
    assert tm.end_txn(md, pid, epoch, True, 20, False) == (error, None)
    assert tm.add_partitions(None, 1000, 0, {T0}, 20).error == E.INVALID_PRODUCER_ID_MAPPING


def test_end_txn_retries_are_answered_and_contradictions_refused():
    md = _ongoing()
    prepared = tm.end_txn(md, 1000, 0, True, 20, False).write
    assert tm.end_txn(prepared, 1000, 0, True, 21, False) == (E.CONCURRENT_TRANSACTIONS, None)
    assert tm.end_txn(prepared, 1000, 0, False, 21, False) == (E.INVALID_TXN_STATE, None)
    assert tm.add_partitions(prepared, 1000, 0, {T0}, 21) == (E.CONCURRENT_TRANSACTIONS, None)
    done = tm.complete(prepared, 22)
    assert tm.end_txn(done, 1000, 0, True, 23, False) == (E.NONE, None)
    assert tm.end_txn(done, 1000, 0, False, 23, False) == (E.INVALID_TXN_STATE, None)
    assert tm.end_txn(_init().write, 1000, 0, True, 23, False) == (E.INVALID_TXN_STATE, None)


def test_before_kip_890_a_late_write_of_an_ended_transaction_joins_the_next():
    """KIP-98: one epoch for every transaction of a session. A request of
    the ended transaction that arrives late carries the current epoch."""
    done = tm.complete(tm.end_txn(_ongoing(), 1000, 0, True, 20, False).write, 21)
    late = tm.add_partitions(done, 1000, 0, {T0}, 30)
    assert late.error == E.NONE and late.write.state is S.ONGOING


def test_with_kip_890_ending_a_transaction_bumps_the_epoch_and_fences_its_late_requests():
    prepared = tm.end_txn(_ongoing(), 1000, 0, True, 20, bump_per_transaction=True).write
    assert (prepared.state, prepared.producer_epoch) == (S.PREPARE_COMMIT, 1)
    assert tm.markers(prepared).producer_epoch == 1   # the markers fence epoch 0's produces
    # The client's retry of that EndTxn (still at epoch 0) is answered.
    assert tm.end_txn(prepared, 1000, 0, True, 21, True) == (E.CONCURRENT_TRANSACTIONS, None)
    done = tm.complete(prepared, 22)
    assert tm.end_txn(done, 1000, 0, True, 23, True) == (E.NONE, None)
    assert tm.end_txn(done, 1000, 0, False, 23, True) == (E.INVALID_TXN_STATE, None)
    # A late request of the ended transaction is fenced; the next one uses epoch 1.
    assert tm.add_partitions(done, 1000, 0, {T0}, 30) == (E.PRODUCER_FENCED, None)
    assert tm.add_partitions(done, 1000, 1, {T0}, 30).write.state is S.ONGOING
    # Once a new session bumped the epoch again, the old epoch is only fenced.
    renewed = _init(done, 31).write
    assert renewed.producer_epoch == 2
    assert tm.end_txn(renewed, 1000, 1, True, 32, True) == (E.PRODUCER_FENCED, None)


def test_an_exhausted_epoch_gets_a_new_producer_id():
    md = _init().write
    md = md.to(S.EMPTY, 1, producer_epoch=MAX_EPOCH)
    new = _init(md, 2, new_pid=iter([2000]).__next__).write
    assert (new.producer_id, new.producer_epoch) == (2000, 0)


@pytest.mark.parametrize("timeout", [0, -1, MAX_TIMEOUT + 1])
def test_a_timeout_out_of_range_is_refused(timeout):
    assert _init(timeout=timeout) == (E.INVALID_TRANSACTION_TIMEOUT, None)


def test_the_state_machine_refuses_what_kafka_s_refuses():
    md = _ongoing()
    with pytest.raises(InvalidTransition, match="ONGOING -> COMPLETE_COMMIT"):
        md.to(S.COMPLETE_COMMIT, 1)
    with pytest.raises(InvalidTransition):
        tm.complete(md, 1)
    with pytest.raises(InvalidTransition):
        tm.markers(md)


_OPS = st.lists(st.tuples(st.sampled_from(["init", "add", "end", "complete", "expire"]),
                          st.integers(0, 3), st.booleans()), max_size=40)


@settings(max_examples=300, deadline=None)
@given(_OPS, st.booleans())
def test_no_sequence_of_requests_breaks_the_state_machine(ops, bump):
    """Any requests, with any epochs, in any order: every write is a change
    the state machine allows (`to` raises otherwise), the epoch never goes
    back, and a producer is only ever answered with the errors KIP-98 names."""
    md, now = None, 0
    for op, epoch, commit in ops:
        now += 1000
        if op == "init":
            out = _init(md, now)
        elif op == "add":
            out = tm.add_partitions(md, 1000, epoch, {T0}, now)
        elif op == "end":
            out = tm.end_txn(md, 1000, epoch, commit, now, bump)
        elif op == "complete" and md is not None and md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            out = tm.Outcome(E.NONE, tm.complete(md, now))
        elif op == "expire" and md is not None and tm.expired(md, now + 10**9):
            out = tm.Outcome(E.NONE, tm.fence(md, now))
        else:
            continue
        assert out.error in (E.NONE, E.CONCURRENT_TRANSACTIONS, E.INVALID_TXN_STATE,
                             E.INVALID_PRODUCER_ID_MAPPING, E.PRODUCER_FENCED)
        if out.write is not None:
            if md is not None:
                assert out.write.producer_epoch >= md.producer_epoch
            md = out.write
