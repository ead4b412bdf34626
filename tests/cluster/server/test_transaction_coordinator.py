"""cluster/server/transaction_coordinator.py: the order of writes and what
each request answers, with the log and the markers as lists (the real
append and WriteTxnMarkers come with the broker's wiring)."""
from __future__ import annotations

import asyncio
import itertools

import pytest

from cluster.protocol import errors as E
from cluster.server.transaction_coordinator import TransactionCoordinator
from cluster.server.transaction_log import encode_key, encode_value, partition_of
from cluster.server.transaction_metadata import TxnState as S

PARTS = 4
TID = "tx"
HOME = partition_of(TID, PARTS)


class Log:
    """The transaction log as appended (partition, metadata), and the markers sent."""

    def __init__(self):
        self.records, self.markers = [], []
        self.append_error = E.NONE
        self.markers_error = E.NONE

    async def append(self, partition, md):
        if self.append_error == E.NONE:
            self.records.append((partition, md))
        return self.append_error

    async def send(self, markers):
        if self.markers_error == E.NONE:
            self.markers.append(markers)
        return self.markers_error

    def states(self):
        return [md.state for _p, md in self.records]


def _coordinator(log: Log, bump: bool = False, now=None) -> TransactionCoordinator:
    c = TransactionCoordinator(lambda: PARTS, log.append, log.send,
                               itertools.count(1000).__next__,
                               now or (lambda: 0), 900_000, bump)
    c.begin_load(HOME)
    c.load(HOME, [])
    return c


async def _begin(c: TransactionCoordinator) -> None:
    """Producer 1000 (epoch 0) of TID, with a transaction open on t-0."""
    assert await c.init_producer_id(TID, 60_000) == (E.NONE, 1000, 0)
    assert await c.add_partitions(TID, 1000, 0, {("t", 0)}) == E.NONE


def run(coro):
    return asyncio.run(coro)


def test_a_commit_writes_prepare_then_the_markers_then_complete():
    log = Log()
    c = _coordinator(log)

    async def go():
        assert await c.init_producer_id(TID, 60_000) == (E.NONE, 1000, 0)
        assert await c.add_partitions(TID, 1000, 0, {("t", 0), ("t", 1)}) == E.NONE
        assert await c.end_txn(TID, 1000, 0, True) == E.NONE
        # Answered after PREPARE_COMMIT; the next transaction waits for the markers.
        assert await c.add_partitions(TID, 1000, 0, {("t", 0)}) == E.CONCURRENT_TRANSACTIONS
        assert c.prepared() == [TID]
        assert await c.complete(TID) == E.NONE
        assert await c.add_partitions(TID, 1000, 0, {("t", 0)}) == E.NONE
    run(go())
    assert log.states() == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT, S.ONGOING]
    assert {p for p, _ in log.records} == {HOME}
    [m] = log.markers
    assert (m.producer_id, m.producer_epoch, m.commit, m.partitions) == (
        1000, 0, True, {("t", 0), ("t", 1)})


def test_nothing_is_cached_that_the_log_did_not_take():
    log = Log()
    c = _coordinator(log)

    async def go():
        await c.init_producer_id(TID, 60_000)
        log.append_error = E.NOT_ENOUGH_REPLICAS
        assert await c.add_partitions(TID, 1000, 0, {("t", 0)}) == E.COORDINATOR_NOT_AVAILABLE
        log.append_error = E.NOT_LEADER_FOR_PARTITION
        assert await c.add_partitions(TID, 1000, 0, {("t", 0)}) == E.NOT_COORDINATOR
        log.append_error = E.NONE
        # Still EMPTY: nothing to end; the add goes through now.
        assert await c.end_txn(TID, 1000, 0, True) == E.INVALID_TXN_STATE
        assert await c.add_partitions(TID, 1000, 0, {("t", 0)}) == E.NONE
    run(go())
    assert log.states() == [S.EMPTY, S.ONGOING]


def test_markers_that_fail_leave_the_transaction_prepared_until_a_retry():
    log = Log()
    c = _coordinator(log)

    async def go():
        await _begin(c)
        await c.end_txn(TID, 1000, 0, False)
        log.markers_error = E.NOT_LEADER_FOR_PARTITION
        assert await c.complete(TID) == E.NOT_LEADER_FOR_PARTITION
        assert await c.add_partitions(TID, 1000, 0, {("t", 0)}) == E.CONCURRENT_TRANSACTIONS
        log.markers_error = E.NONE
        assert await c.complete(TID) == E.NONE
    run(go())
    assert log.states()[-2:] == [S.PREPARE_ABORT, S.COMPLETE_ABORT]


def test_a_new_session_aborts_the_old_one_s_transaction_and_fences_it():
    log = Log()
    c = _coordinator(log)

    async def go():
        await _begin(c)
        assert await c.init_producer_id(TID, 60_000) == (E.CONCURRENT_TRANSACTIONS, -1, -1)
        assert await c.init_producer_id(TID, 60_000) == (E.NONE, 1000, 2)
        assert await c.end_txn(TID, 1000, 0, True) == E.PRODUCER_FENCED
    run(go())
    assert log.states() == [S.EMPTY, S.ONGOING, S.PREPARE_ABORT, S.COMPLETE_ABORT, S.EMPTY]
    assert log.markers[0].producer_epoch == 1 and not log.markers[0].commit


def test_an_expired_transaction_is_aborted():
    log = Log()
    now = [0]
    c = _coordinator(log, now=lambda: now[0])

    async def go():
        await c.init_producer_id(TID, 1000)
        await c.add_partitions(TID, 1000, 0, {("t", 0)})
        now[0] = 1000
        assert await c.abort_expired() == []
        now[0] = 1001
        assert await c.abort_expired() == [TID]
        assert await c.add_partitions(TID, 1000, 0, {("t", 0)}) == E.PRODUCER_FENCED
    run(go())
    assert log.states()[-2:] == [S.PREPARE_ABORT, S.COMPLETE_ABORT]


def test_ids_elsewhere_or_loading_are_refused_and_a_load_takes_the_last_record():
    log = Log()
    c = TransactionCoordinator(lambda: PARTS, log.append, log.send,
                               itertools.count(1000).__next__,
                               lambda: 0, 900_000, False)

    async def go():
        assert await c.init_producer_id(TID, 60_000) == (E.NOT_COORDINATOR, -1, -1)
        c.begin_load(HOME)
        assert await c.add_partitions(TID, 1, 0, {("t", 0)}) == E.COORDINATOR_LOAD_IN_PROGRESS
        other = _coordinator(Log())
        await _begin(other)
        await other.end_txn(TID, 1000, 0, True)
        written = [(encode_key(TID), encode_value(other.loaded[HOME][TID]))]
        c.load(HOME, [(encode_key("gone"), encode_value(other.loaded[HOME][TID])),
                      (encode_key("gone"), None)] + written)
        # Loaded prepared: the markers are still to be written (the new coordinator finishes it).
        assert c.prepared() == [TID] and "gone" not in c.loaded[HOME]
        assert await c.complete(TID) == E.NONE
        c.unload(HOME)
        assert await c.add_partitions(TID, 1000, 0, {("t", 0)}) == E.NOT_COORDINATOR
    run(go())
    assert log.states() == [S.COMPLETE_COMMIT]


@pytest.mark.parametrize("bump, epoch_after", [(False, 0), (True, 1)])
def test_the_protocol_setting_decides_the_epoch_after_a_transaction(bump, epoch_after):
    log = Log()
    c = _coordinator(log, bump=bump)

    async def go():
        await _begin(c)
        await c.end_txn(TID, 1000, 0, True)
        await c.complete(TID)
        late = await c.add_partitions(TID, 1000, 0, {("t", 0)})
        assert late == (E.PRODUCER_FENCED if bump else E.NONE)
    run(go())
    assert log.markers[0].producer_epoch == epoch_after
