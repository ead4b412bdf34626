"""A transactional id's state at its transaction coordinator: Kafka's
TransactionMetadata and the rules of its state machine
(docs/design.md#transactions).

Pure: each operation takes the current metadata (None: the id is unknown)
and the request, and returns an Outcome: the error for the client, and the
metadata to append to the transaction log, or None when nothing changes.
The coordinator applies the new metadata only once the log's ISR holds it,
so a coordinator that fails over loads exactly what it acknowledged.

    (none) -init-> EMPTY -add partitions-> ONGOING -end txn-> PREPARE_COMMIT | PREPARE_ABORT
    PREPARE_x -markers written-> COMPLETE_x -init / add partitions-> EMPTY | ONGOING

`bump_per_transaction` selects the protocol: False is KIP-98's, where one
producer epoch serves every transaction of a session; True is KIP-890's,
where ending a transaction bumps the epoch, so the markers carry the new
epoch and fence a produce or an EndTxn of the ended transaction that
arrives late (the late-write anomaly of KAFKA-17754).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import IntEnum
from typing import Callable, NamedTuple

from cluster.protocol import errors as E

TP = tuple[str, int]

# Kafka's Short.MaxValue - 1: the last epoch a producer id is used with
# before the coordinator gives the transactional id a new producer id.
MAX_EPOCH = 32766


class TxnState(IntEnum):
    """Kafka's states, with its numbers (the transaction log's status byte)."""
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


S = TxnState
# state -> the states it may be entered from (Kafka's validPreviousStates).
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
# A transaction is being ended: the markers are (about to be) on their way.
PREPARING = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE})
# An EndTxn was carried out (or is being): what a retry of it finds.
ENDED = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


class InvalidTransition(Exception):
    """A bug in the coordinator: a change Kafka's state machine does not allow."""


@dataclass(frozen=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TP] = frozenset()
    txn_start_ms: int = -1
    last_update_ms: int = -1

    def to(self, state: TxnState, now_ms: int, **changes) -> TransactionMetadata:
        """This metadata moved to `state`; refused unless the state machine allows it."""
        if self.state not in VALID_PREVIOUS[state]:
            raise InvalidTransition(f"transactional id {self.transactional_id!r}: "
                                    f"{self.state.name} -> {state.name}")
        return dataclasses.replace(self, state=state, last_update_ms=now_ms, **changes)

    @property
    def commit(self) -> bool:
        """Whether the transaction being ended commits (in PREPARE_x or COMPLETE_x)."""
        return self.state in (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)


class Outcome(NamedTuple):
    error: int
    write: TransactionMetadata | None = None   # to append to the transaction log


def init_producer_id(cur: TransactionMetadata | None, transactional_id: str, timeout_ms: int,
                     max_timeout_ms: int, now_ms: int, new_producer_id: Callable[[], int]
                     ) -> Outcome:
    """InitProducerId with a transactional id: a new producer id, or the
    same one with the next epoch, which fences every earlier session of the
    id. An ongoing transaction of an earlier session is aborted first (with
    a bumped epoch, so its producer is fenced at once); the caller gets
    CONCURRENT_TRANSACTIONS and tries again, as Kafka's clients do."""
    if not 0 < timeout_ms <= max_timeout_ms:
        return Outcome(E.INVALID_TRANSACTION_TIMEOUT)
    if cur is None or cur.state is S.DEAD:
        return Outcome(E.NONE, TransactionMetadata(transactional_id, new_producer_id(), 0,
                                                   timeout_ms, S.EMPTY, last_update_ms=now_ms))
    if cur.state in PREPARING:
        return Outcome(E.CONCURRENT_TRANSACTIONS)
    if cur.state is S.ONGOING:
        return Outcome(E.CONCURRENT_TRANSACTIONS, fence(cur, now_ms))
    if cur.producer_epoch >= MAX_EPOCH:
        pid, epoch = new_producer_id(), 0
    else:
        pid, epoch = cur.producer_id, cur.producer_epoch + 1
    return Outcome(E.NONE, cur.to(S.EMPTY, now_ms, producer_id=pid, producer_epoch=epoch,
                                  timeout_ms=timeout_ms, partitions=frozenset(),
                                  txn_start_ms=-1))


def _check_producer(cur: TransactionMetadata | None, producer_id: int, epoch: int) -> int:
    if cur is None or cur.state is S.DEAD or cur.producer_id != producer_id:
        return E.INVALID_PRODUCER_ID_MAPPING
    if cur.producer_epoch != epoch:
        return E.PRODUCER_FENCED
    return E.NONE


def add_partitions(cur: TransactionMetadata | None, producer_id: int, epoch: int,
                   partitions: set[TP], now_ms: int) -> Outcome:
    """AddPartitionsToTxn: the partitions join the producer's transaction,
    which begins with the first of them."""
    err = _check_producer(cur, producer_id, epoch)
    if err != E.NONE:
        return Outcome(err)
    if cur.state in PREPARING:
        return Outcome(E.CONCURRENT_TRANSACTIONS)
    if cur.state is S.ONGOING and set(partitions) <= cur.partitions:
        return Outcome(E.NONE)
    start = cur.txn_start_ms if cur.state is S.ONGOING else now_ms
    return Outcome(E.NONE, cur.to(S.ONGOING, now_ms, partitions=cur.partitions | set(partitions),
                                  txn_start_ms=start))


def end_txn(cur: TransactionMetadata | None, producer_id: int, epoch: int, commit: bool,
            now_ms: int, bump_per_transaction: bool) -> Outcome:
    """EndTxn: the transaction is prepared to commit or abort (the markers
    follow: `complete` once every partition has its marker). A retry of an
    EndTxn already carried out is answered again; one that contradicts it is
    INVALID_TXN_STATE."""
    if (bump_per_transaction and cur is not None and cur.producer_id == producer_id
            and cur.producer_epoch == epoch + 1 and cur.state in ENDED):
        # KIP-890: a retry of the EndTxn that bumped the epoch (Kafka's
        # retryOnEpochBump), answered as before; a contradicting one is refused.
        if cur.commit != commit:
            return Outcome(E.INVALID_TXN_STATE)
        return Outcome(E.CONCURRENT_TRANSACTIONS if cur.state in PREPARING else E.NONE)
    err = _check_producer(cur, producer_id, epoch)
    if err != E.NONE:
        return Outcome(err)
    if cur.state is S.ONGOING:
        target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        epoch_after = epoch + 1 if bump_per_transaction and epoch < MAX_EPOCH else epoch
        return Outcome(E.NONE, cur.to(target, now_ms, producer_epoch=epoch_after))
    if cur.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT) and cur.commit == commit:
        return Outcome(E.CONCURRENT_TRANSACTIONS)
    if cur.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT) and cur.commit == commit:
        return Outcome(E.NONE)
    return Outcome(E.INVALID_TXN_STATE)


def complete(cur: TransactionMetadata, now_ms: int) -> TransactionMetadata:
    """Every partition of the transaction has its marker: COMPLETE_x, no partitions."""
    target = {S.PREPARE_COMMIT: S.COMPLETE_COMMIT, S.PREPARE_ABORT: S.COMPLETE_ABORT}.get(cur.state)
    if target is None:
        raise InvalidTransition(f"transactional id {cur.transactional_id!r}: "
                                f"no markers to complete in {cur.state.name}")
    return cur.to(target, now_ms, partitions=frozenset(), txn_start_ms=-1)


def fence(cur: TransactionMetadata, now_ms: int) -> TransactionMetadata:
    """The ongoing transaction aborted with the next epoch: its markers fence
    the producer that began it (a new session of its id, or its timeout)."""
    epoch = min(cur.producer_epoch + 1, MAX_EPOCH)
    return cur.to(S.PREPARE_EPOCH_FENCE, now_ms, producer_epoch=epoch).to(S.PREPARE_ABORT, now_ms)


def expired(cur: TransactionMetadata, now_ms: int) -> bool:
    """An ongoing transaction open past its timeout (transaction.timeout.ms):
    the coordinator aborts it with `fence`."""
    return cur.state is S.ONGOING and now_ms - cur.txn_start_ms > cur.timeout_ms


class Markers(NamedTuple):
    """What WriteTxnMarkers carries to the partitions' leaders."""
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TP]
    transactional_id: str


def markers(cur: TransactionMetadata) -> Markers:
    """The markers of a prepared transaction."""
    if cur.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        raise InvalidTransition(f"transactional id {cur.transactional_id!r}: "
                                f"no markers to write in {cur.state.name}")
    return Markers(cur.producer_id, cur.producer_epoch, cur.commit, cur.partitions,
                   cur.transactional_id)
