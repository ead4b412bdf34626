"""TransactionCoordinator: the transactional requests of the ids whose
`__transaction_state` partitions this broker leads (KIP-98;
docs/design.md#transactions), as Kafka's TransactionCoordinator answers them.

It knows the rules (transaction_metadata.py) and the order of writes; it is
handed what touches the rest of the broker: `append` writes one id's new
metadata to its partition of the transaction log and returns the append's
error once the log's ISR holds it (acks=all), and `send_markers` writes a
transaction's markers to its partitions' leaders (WriteTxnMarkers) and
returns once every one has it. The cache changes only after an append of
its own succeeded, so a coordinator that fails over loads what was
acknowledged. One write at a time per id: a request while one is in flight
is CONCURRENT_TRANSACTIONS, which clients retry.

EndTxn is answered once the PREPARE_x state is written; the markers follow,
then the COMPLETE_x state. Until that is written, the producer's next
transaction is refused with CONCURRENT_TRANSACTIONS.
"""
from __future__ import annotations

import logging
from typing import Awaitable, Callable, Iterable

from cluster.protocol import errors as E
from cluster.server import transaction_metadata as tm
from cluster.server.transaction_log import decode_key, decode_value, partition_of
from cluster.server.transaction_metadata import Markers, Outcome, TransactionMetadata

log = logging.getLogger(__name__)

Append = Callable[[int, TransactionMetadata], Awaitable[int]]
SendMarkers = Callable[[Markers], Awaitable[int]]

# Append error -> the error a transactional request answers (Kafka's
# TransactionStateManager.appendTransactionToLog).
_APPEND_ERRORS = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.REQUEST_TIMED_OUT: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_FOR_PARTITION: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
}


def append_error(code: int) -> int:
    return _APPEND_ERRORS.get(code, code)


class TransactionCoordinator:
    def __init__(self, partition_count: Callable[[], int], append: Append,
                 send_markers: SendMarkers,
                 new_producer_id: Callable[[], int], clock_ms: Callable[[], int],
                 max_timeout_ms: int, bump_per_transaction: bool):
        self.partition_count = partition_count   # of __transaction_state
        self.append = append
        self.send_markers = send_markers
        self.new_producer_id = new_producer_id
        self.clock_ms = clock_ms
        self.max_timeout_ms = max_timeout_ms
        self.bump_per_transaction = bump_per_transaction
        self.loaded: dict[int, dict[str, TransactionMetadata]] = {}   # partition -> id -> state
        self.loading: set[int] = set()
        self.in_flight: set[str] = set()

    # -- which ids are here ---------------------------------------------------------------------

    def begin_load(self, partition: int) -> None:
        """This broker became the partition's leader: its ids answer
        COORDINATOR_LOAD_IN_PROGRESS until `load` has read the partition."""
        self.loading.add(partition)
        self.loaded.pop(partition, None)

    def load(self, partition: int, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """The partition's records (key, value), oldest first: the last of each id wins."""
        ids: dict[str, TransactionMetadata] = {}
        for key, value in records:
            tid = decode_key(key)
            md = decode_value(tid, value)
            if md is None:
                ids.pop(tid, None)
            else:
                ids[tid] = md
        self.loaded[partition] = ids
        self.loading.discard(partition)
        log.info("transaction coordinator: loaded %d ids of __transaction_state-%d",
                 len(ids), partition)

    def unload(self, partition: int) -> None:
        """This broker no longer leads the partition: its ids answer NOT_COORDINATOR."""
        self.loading.discard(partition)
        self.loaded.pop(partition, None)

    def _here(self, tid: str) -> tuple[int, dict[str, TransactionMetadata] | None]:
        p = partition_of(tid, self.partition_count())
        if p in self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, None
        if p not in self.loaded:
            return E.NOT_COORDINATOR, None
        return E.NONE, self.loaded[p]

    # -- requests -------------------------------------------------------------------------------

    async def _write(self, tid: str, md: TransactionMetadata) -> int:
        """Append `md`, then (only then) cache it."""
        p = partition_of(tid, self.partition_count())
        err = append_error(await self.append(p, md))
        if err == E.NONE and p in self.loaded:
            self.loaded[p][tid] = md
        return err

    async def _handle(self, tid: str, decide: Callable[[TransactionMetadata | None], Outcome]
                      ) -> tuple[int, TransactionMetadata | None]:
        """One request: refused if the id is not here or has a write in
        flight; else `decide` on its state, and its write appended."""
        err, ids = self._here(tid)
        if err != E.NONE:
            return err, None
        if tid in self.in_flight:
            return E.CONCURRENT_TRANSACTIONS, None
        outcome = decide(ids.get(tid))
        if outcome.write is None:
            return outcome.error, ids.get(tid)
        self.in_flight.add(tid)
        try:
            err = await self._write(tid, outcome.write)
        finally:
            self.in_flight.discard(tid)
        if err != E.NONE:
            return err, None
        if outcome.write.state in (tm.TxnState.PREPARE_COMMIT, tm.TxnState.PREPARE_ABORT):
            self.in_flight.add(tid)   # until the markers are written and COMPLETE_x is
        return outcome.error, outcome.write

    async def init_producer_id(self, tid: str, timeout_ms: int) -> tuple[int, int, int]:
        """InitProducerId with a transactional id: (error, producer id, epoch)."""
        err, md = await self._handle(tid, lambda cur: tm.init_producer_id(
            cur, tid, timeout_ms, self.max_timeout_ms, self.clock_ms(), self.new_producer_id))
        if md is not None and md.state in (tm.TxnState.PREPARE_COMMIT, tm.TxnState.PREPARE_ABORT):
            await self.complete(tid)   # a fenced session's transaction: aborted now
        if err != E.NONE or md is None:
            return err, -1, -1
        return E.NONE, md.producer_id, md.producer_epoch

    async def add_partitions(self, tid: str, producer_id: int, epoch: int,
                             partitions: set[tuple[str, int]]) -> int:
        err, _ = await self._handle(tid, lambda cur: tm.add_partitions(
            cur, producer_id, epoch, partitions, self.clock_ms()))
        return err

    async def end_txn(self, tid: str, producer_id: int, epoch: int, commit: bool,
                      client_follows_bump: bool = True) -> int:
        """EndTxn, answered once the PREPARE_x state is written; `complete`
        must follow (the caller schedules it, as Kafka's marker channel does).
        The epoch is bumped under KIP-890 only for a client that learns the
        new one (EndTxn v5), as in Kafka."""
        bump = self.bump_per_transaction and client_follows_bump
        err, _ = await self._handle(tid, lambda cur: tm.end_txn(
            cur, producer_id, epoch, commit, self.clock_ms(), bump))
        return err

    def describe(self, tid: str) -> tuple[int, TransactionMetadata | None]:
        """(error, state) for DescribeTransactions: TRANSACTIONAL_ID_NOT_FOUND
        for an id this coordinator does not know."""
        err, ids = self._here(tid)
        if err != E.NONE:
            return err, None
        md = ids.get(tid)
        return (E.NONE, md) if md is not None else (E.TRANSACTIONAL_ID_NOT_FOUND, None)

    def listing(self) -> tuple[int, list[TransactionMetadata]]:
        """Every id this coordinator has loaded; COORDINATOR_LOAD_IN_PROGRESS
        while a partition loads (what is listed is then partial)."""
        err = E.COORDINATOR_LOAD_IN_PROGRESS if self.loading else E.NONE
        return err, [md for ids in self.loaded.values() for md in ids.values()]

    def current(self, tid: str) -> TransactionMetadata | None:
        """The id's state as this coordinator has it (None: unknown or not here)."""
        err, ids = self._here(tid)
        return ids.get(tid) if err == E.NONE else None

    async def complete(self, tid: str) -> int:
        """Write the prepared transaction's markers, then its COMPLETE_x
        state. Any error leaves it prepared (and the id busy): try again."""
        err, ids = self._here(tid)
        if err != E.NONE:
            self.in_flight.discard(tid)   # another coordinator finishes it after its load
            return err
        md = ids.get(tid)
        if md is None or md.state not in (tm.TxnState.PREPARE_COMMIT, tm.TxnState.PREPARE_ABORT):
            self.in_flight.discard(tid)
            return E.NONE
        err = await self.send_markers(tm.markers(md))
        if err == E.NONE:
            err = await self._write(tid, tm.complete(md, self.clock_ms()))
        if err == E.NONE:
            self.in_flight.discard(tid)
        return err

    async def abort_expired(self) -> list[str]:
        """Abort (fencing their producers) the ongoing transactions open past
        their timeout; the ids aborted."""
        now = self.clock_ms()
        expired = [(tid, md) for ids in self.loaded.values() for tid, md in ids.items()
                   if tid not in self.in_flight and tm.expired(md, now)]
        done = []
        for tid, md in expired:
            err, _ = await self._handle(tid, lambda cur, md=md: Outcome(
                E.NONE, tm.fence(cur, now)) if cur == md else Outcome(E.NONE))
            if err == E.NONE and await self.complete(tid) == E.NONE:
                done.append(tid)
        return done

    def prepared(self) -> list[str]:
        """Ids whose markers are still to be written (after a load, or a failed try)."""
        return [tid for ids in self.loaded.values() for tid, md in ids.items()
                if md.state in (tm.TxnState.PREPARE_COMMIT, tm.TxnState.PREPARE_ABORT)]
