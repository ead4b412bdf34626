"""One partition as this broker sees it (Kafka's Partition and Replica).

The local replica is `log`; when this broker leads the partition it also
tracks every remote replica's LEO and last-caught-up time (from their fetch
offsets), the ISR, and the zkVersion of the leaderAndISR znode it last saw
(LeaderAndISRVersionInZK), against which it makes its conditional ISR writes.

High watermark (HW, docs/design.md#high-watermark): on the leader, min LEO
over the ISR; on a follower, min(leader HW in the last fetch response, own
LEO). Consumers read below the HW only; followers read up to the LEO.
`read_committed` consumers read below the last stable offset, which the
replica's open transactions give (docs/design.md#transactions).

All methods run on the broker's event loop (see replica_manager.py); none
blocks except the log calls, which are page-cache writes and reads.
"""
from __future__ import annotations

import logging

from cluster.log.batch import BatchHeader
from cluster.log.errors import CorruptRecordError, OffsetOutOfRangeError
from cluster.protocol import errors as E
from cluster.protocol.control_records import ControlRecordError, control_batch, read_marker
from cluster.protocol.records import batch_headers
from cluster.server.open_transactions import OpenTransactions
from cluster.server.producer_state import ProducerState
from cluster.server.purgatory import Notifier, OffsetWaiters

log = logging.getLogger(__name__)


class RemoteReplica:
    """The leader's view of a follower (Kafka 0.8's Replica with isLocal=false)."""

    __slots__ = ("broker_id", "leo", "last_caught_up_ms", "last_fetch_ms",
                 "last_fetch_leader_leo", "fetches")

    def __init__(self, broker_id: int, now_ms: int):
        self.broker_id = broker_id
        self.leo = -1  # unknown until it fetches from this leader
        # A follower gets a full lag period to show up after a leader change.
        self.last_caught_up_ms = now_ms
        self.last_fetch_ms = now_ms
        self.last_fetch_leader_leo = -1
        # Fetches seen since this leader state began (the last LeaderAndIsr).
        # The first may have been sent before it: by a follower that the
        # controller has since taken out of the ISR and told to stop (a
        # controlled shutdown) or that has died. Only a later one shows that
        # it follows, so only a later one can bring it (back) into the ISR;
        # otherwise acks=all writes would wait for a replica that is gone
        # until replica.lag.time.max.ms.
        self.fetches = 0

    @property
    def may_join_isr(self) -> bool:
        return self.fetches >= 2 and self.leo >= 0


class Partition:
    def __init__(self, topic: str, partition: int, log_, broker_id: int, now_ms: int):
        self.topic = topic
        self.partition = partition
        self.tp = (topic, partition)
        self.log = log_
        self.broker_id = broker_id
        self.replicas: tuple[int, ...] = ()
        self.leader_id = -1
        self.leader_epoch = -1
        self.controller_epoch = -1
        self.zk_version = -1
        self.isr: frozenset[int] = frozenset()
        self.txns = OpenTransactions()
        self.hw = 0
        # Set when a conditional ISR write found a newer znode version: someone
        # (the controller) changed leader/ISR, so this broker must stop taking
        # writes until told what happened (docs/design.md#isr, fencing).
        self.fenced = False
        self.remotes: dict[int, RemoteReplica] = {}
        self.producer_state = ProducerState()
        self.hw_waiters = OffsetWaiters()
        # Parked fetches: followers wake on appends (they read up to the LEO),
        # consumers on HW advances (they read below the HW); both on a
        # leadership change or a stopped replica, to learn about it.
        self.data_notifier = Notifier()
        self.hw_notifier = Notifier()
        self.isr_update_in_flight = False
        # The members an ISR expansion being written adds: the HW counts
        # them already (maybe_advance_hw, docs/design.md#isr).
        self.isr_adding: frozenset[int] = frozenset()
        self.created_ms = now_ms

    # -- state -----------------------------------------------------------------

    @property
    def leo(self) -> int:
        return self.log.log_end_offset

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    @property
    def takes_writes(self) -> bool:
        """A leader not fenced (docs/design.md#isr): the coordinators' appends check this."""
        return self.is_leader and not self.fenced

    @property
    def hw(self) -> int:
        return self._hw

    @hw.setter
    def hw(self, value: int) -> None:
        # Every change of the HW may make transactions stable (their markers committed).
        self._hw = value
        self.txns.update_hw(value)

    @property
    def last_stable_offset(self) -> int:
        """Where `read_committed` reads stop (docs/design.md#transactions)."""
        return self.txns.last_stable_offset()

    def init_hw(self, checkpointed: int | None) -> None:
        """On load: HW = min(checkpointed HW, LEO) (docs/design.md#high-watermark)."""
        self.hw = max(self.log.log_start_offset, min(checkpointed or 0, self.leo))

    def rebuild_producer_state(self) -> None:
        """The idempotence state and the open transactions, from the log's
        batch headers (and the marker of each control batch)."""
        headers = list(self.log.batches(self.log.log_start_offset))
        self.producer_state.rebuild(headers)
        self.txns.rebuild(((h, self._marker_of(h)) for h in headers), self.hw)

    def _marker_of(self, h: BatchHeader) -> bool | None:
        """A control batch's marker type from the log (None for other batches)."""
        if not h.is_control:
            return None
        return self._commit_of(self.log.read(h.base_offset, h.size)[:h.size], h)

    def _commit_of(self, batch, h: BatchHeader) -> bool:
        """The marker type of the control batch `batch` (its bytes), header `h`."""
        try:
            return read_marker(bytes(batch)).commit
        except ControlRecordError as e:
            # A control batch this broker cannot read: taken as an abort, so
            # its records are never shown as committed.
            log.warning("%s-%d: control batch at offset %d unreadable (%s): taken as ABORT",
                        self.topic, self.partition, h.base_offset, e)
            return False

    def view(self) -> dict:
        """This replica's state for the test-only window (state_window.py):
        what the design's definitions are about, all in memory but the one
        batch header of the last committed record."""
        out = {"topic": self.topic, "partition": self.partition, "topic_id": self.log.topic_id,
               "leader": self.leader_id,
               "epoch": self.leader_epoch, "isr": sorted(self.isr), "zk_version": self.zk_version,
               "replicas": list(self.replicas), "hw": self.hw, "leo": self.leo,
               "start": self.log.log_start_offset, "fenced": self.fenced,
               "lso": self.last_stable_offset}
        if self.is_leader:
            out["followers"] = {str(r.broker_id): r.leo for r in self.remotes.values()}
        committed = self.log.batch_at(self.hw - 1) if self.hw > 0 else None
        if committed is not None:
            out["committed"] = [committed.base_offset, committed.last_offset,
                                committed.partition_leader_epoch, committed.crc]
        return out

    def describe(self) -> str:
        return (f"{self.topic}-{self.partition} leader={self.leader_id} "
                f"epoch={self.leader_epoch} isr={sorted(self.isr)} hw={self.hw} leo={self.leo}")

    # -- leader / follower transitions (docs/design.md#leader-and-isr) ------------

    def make_leader(self, replicas, isr, leader_epoch: int, zk_version: int,
                    controller_epoch: int, now_ms: int) -> None:
        self.replicas = tuple(replicas)
        self.isr = frozenset(isr)
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        self.zk_version = zk_version
        self.controller_epoch = controller_epoch
        self.fenced = False
        self.isr_update_in_flight = False
        self.isr_adding = frozenset()
        self.remotes = {r: RemoteReplica(r, now_ms) for r in self.replicas if r != self.broker_id}
        # KIP-101: the new epoch starts at this replica's LEO, so followers
        # asking for an older epoch's end get the point where this log stops
        # agreeing with theirs.
        self.log.leader_epoch_cache.assign(leader_epoch, self.leo)
        if self.hw > self.leo:
            self.hw = self.leo
        self.maybe_advance_hw()
        self._notify_all()

    def make_follower(self, replicas, isr, leader: int, leader_epoch: int, zk_version: int,
                      controller_epoch: int) -> None:
        was_leader = self.is_leader
        self.replicas = tuple(replicas)
        self.isr = frozenset(isr)
        self.leader_id = leader
        self.leader_epoch = leader_epoch
        self.zk_version = zk_version
        self.controller_epoch = controller_epoch
        self.fenced = False
        self.remotes = {}
        if was_leader:
            self.hw_waiters.fail_all(E.NOT_LEADER_FOR_PARTITION)
        self._notify_all()

    def stop(self) -> None:
        """The replica is going away (StopReplica, shutdown): release waiters."""
        self.leader_id = -1
        self.hw_waiters.fail_all(E.NOT_LEADER_FOR_PARTITION)
        self._notify_all()

    def _notify_all(self) -> None:
        self.data_notifier.notify()
        self.hw_notifier.notify()

    def fence(self) -> None:
        self.fenced = True
        self.hw_waiters.fail_all(E.NOT_LEADER_FOR_PARTITION)

    # -- appends -------------------------------------------------------------------

    def append_as_leader(self, data: bytes, headers: list[BatchHeader], acks: int,
                         min_isr: int, max_batch_bytes: int) -> tuple[int, int, int]:
        """Append a produce request's batches for this partition.

        Returns (error, base offset, required offset): the base offset to
        report and, for acks=all, the HW the request must wait for."""
        if not self.is_leader or self.fenced:
            return E.NOT_LEADER_FOR_PARTITION, -1, -1
        if acks == -1 and len(self.isr) < min_isr:
            return E.NOT_ENOUGH_REPLICAS, -1, -1
        for h in headers:
            if h.size > max_batch_bytes:
                return E.MESSAGE_TOO_LARGE, -1, -1
            if h.is_control or (h.is_transactional and h.producer_id < 0):
                # Markers come from the transaction coordinator only (append_marker).
                return E.INVALID_RECORD, -1, -1
        try:
            if all(h.producer_id < 0 for h in headers):
                first, last = self.log.append_as_leader(data, self.leader_epoch)
                return self._appended(first, last)
            return self._append_idempotent(data, headers)
        except CorruptRecordError as e:
            log.warning("%s-%d: corrupt produce batch: %s", self.topic, self.partition, e)
            return E.CORRUPT_MESSAGE, -1, -1

    def append_txn_offsets(self, data: bytes, min_isr: int) -> tuple[int, int]:
        """The group coordinator's batch of offsets committed in a
        transaction (TxnOffsetCommit): transactional, of the producer, with
        no sequence (Kafka's coordinator-origin append: the epoch is
        checked, sequences are not). Returns (error, required offset)."""
        if not self.takes_writes:
            return E.NOT_LEADER_FOR_PARTITION, -1
        if len(self.isr) < min_isr:
            return E.NOT_ENOUGH_REPLICAS, -1
        [h] = batch_headers(data)
        err = self.producer_state.check_marker(h.producer_id, h.producer_epoch)
        if err != E.NONE:
            return err, -1
        first, last = self.log.append_as_leader(data, self.leader_epoch)
        h.base_offset = first
        self.producer_state.update_marker(h)
        self.txns.append(h)
        self._on_leo_change()
        return E.NONE, last + 1

    def _append_idempotent(self, data: bytes, headers: list[BatchHeader]) -> tuple[int, int, int]:
        # One batch at a time, so that a duplicate in the middle of a request
        # is skipped and the state check of each batch sees the ones before.
        mv = memoryview(data)
        base = required = -1
        for h in headers:
            err, dup = self.producer_state.check(h)
            if err != E.NONE:
                log.info("%s-%d: batch pid=%d epoch=%d seq=%d..%d refused: %s (last: %s)",
                         self.topic, self.partition, h.producer_id, h.producer_epoch,
                         h.base_sequence, h.last_sequence, E.name(err),
                         self.producer_state.describe(h.producer_id))
                return err, -1, -1
            if dup is None and self.producer_state.is_new_session(h):
                log.info("%s-%d: producer pid=%d starts epoch %d (last: %s)", self.topic,
                         self.partition, h.producer_id, h.producer_epoch,
                         self.producer_state.describe(h.producer_id))
            if dup is not None:
                first, last = dup
                log.info("%s-%d: duplicate batch pid=%d seq=%d..%d: already at offset %d",
                         self.topic, self.partition, h.producer_id, h.base_sequence,
                         h.last_sequence, first)
            else:
                chunk = bytes(mv[h.position:h.position + h.size])
                first, last = self.log.append_as_leader(chunk, self.leader_epoch)
                h.base_offset = first
                self.producer_state.update(h, first)
                self.txns.append(h)
                self._on_leo_change()
            if base < 0:
                base = first
            required = max(required, last + 1)
        return E.NONE, base, required

    def _appended(self, first: int, last: int) -> tuple[int, int, int]:
        self._on_leo_change()
        return E.NONE, first, last + 1

    def _on_leo_change(self) -> None:
        # ISR of one: the HW follows the LEO. Followers long-polling wake up.
        self.maybe_advance_hw()
        self.data_notifier.notify()

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int, min_isr: int, now_ms: int) -> tuple[int, int]:
        """Write a transaction's COMMIT or ABORT marker as leader (the
        coordinator's WriteTxnMarkers). Returns (error, required offset):
        the HW that makes the marker, and so the transaction's end, durable."""
        if not self.takes_writes:
            return E.NOT_LEADER_FOR_PARTITION, -1
        if len(self.isr) < min_isr:
            return E.NOT_ENOUGH_REPLICAS, -1
        err = self.producer_state.check_marker(producer_id, producer_epoch)
        if err != E.NONE:
            return err, -1
        data = control_batch(producer_id, producer_epoch, commit, coordinator_epoch, now_ms)
        first, last = self.log.append_as_leader(data, self.leader_epoch)
        h = self.log.batch_at(first)
        self.producer_state.update_marker(h)
        self.txns.append(h, commit)
        log.debug("%s-%d: %s marker of producer %d epoch %d at offset %d", self.topic,
                 self.partition, "COMMIT" if commit else "ABORT", producer_id, producer_epoch,
                 first)
        self._on_leo_change()
        return E.NONE, last + 1

    def append_as_follower(self, data) -> int:
        """Append fetched batches; returns how many offsets were added."""
        before = self.leo
        first, last = self.log.append_as_follower(data)
        if last >= first:
            for h in batch_headers(data):
                if h.base_offset > last:
                    break
                self.producer_state.update(h)
                commit = (self._commit_of(data[h.position:h.position + h.size], h)
                          if h.is_control else None)
                self.txns.append(h, commit)
        return self.leo - before

    def update_follower_hw(self, leader_hw: int) -> None:
        new = min(leader_hw, self.leo)
        if new != self.hw:
            self.hw = new

    def truncate_to(self, offset: int) -> bool:
        """Truncate the local log (follower); True if data was removed."""
        if offset >= self.leo:
            self.log.truncate_to(offset)   # no data, but an empty epoch at the end goes
            return False
        self.log.truncate_to(offset)
        if self.hw > self.leo:
            self.hw = self.leo
        self.rebuild_producer_state()
        return True

    # -- the leader's view of followers (docs/design.md#isr) -----------------------

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """A follower fetched from `fetch_offset`: that is its LEO. Returns True
        when it is out of the ISR but has caught up (ISR expansion due)."""
        r = self.remotes.get(replica_id)
        if r is None:
            return False
        leader_leo = self.leo
        r.leo = fetch_offset
        r.fetches += 1
        if fetch_offset >= leader_leo:
            r.last_caught_up_ms = now_ms
        elif fetch_offset >= r.last_fetch_leader_leo >= 0:
            # It has everything the leader had at its previous fetch.
            r.last_caught_up_ms = max(r.last_caught_up_ms, r.last_fetch_ms)
        r.last_fetch_ms = now_ms
        r.last_fetch_leader_leo = leader_leo
        if replica_id in self.isr or replica_id in self.isr_adding:
            self.maybe_advance_hw()
            return False
        return r.may_join_isr and fetch_offset >= self.hw

    def expanded_isr(self) -> frozenset[int] | None:
        """The ISR plus every assigned follower that has caught up to the HW
        (and fetched more than once under this leader state)."""
        add = {r.broker_id for r in self.remotes.values()
               if r.broker_id not in self.isr and r.broker_id in self.replicas
               and r.leo >= self.hw and r.may_join_isr}
        return self.isr | add if add else None

    def shrunk_isr(self, now_ms: int, lag_ms: int, lag_messages: int) -> frozenset[int] | None:
        """The ISR without followers that are stuck (not caught up within
        lag_ms) or slow (more than lag_messages behind), or None if none is."""
        leo = self.leo
        out = set()
        for b in self.isr:
            if b == self.broker_id:
                continue
            r = self.remotes.get(b)
            if r is None:
                out.add(b)
            elif now_ms - r.last_caught_up_ms > lag_ms:
                out.add(b)
            elif lag_messages > 0 and r.leo >= 0 and leo - r.leo > lag_messages:
                out.add(b)
        return self.isr - out if out else None

    def apply_isr(self, isr: frozenset[int], zk_version: int) -> None:
        self.isr = isr
        self.zk_version = zk_version
        self.maybe_advance_hw()

    def maybe_advance_hw(self) -> None:
        """HW = the smallest LEO of the maximal ISR: the ISR and the members
        an expansion being written adds. A joining follower counts from the
        moment the leader decides to add it: by the time a write the HW
        covers is acknowledged, the follower may be in the ISR in ZooKeeper,
        and so electable (docs/design.md#isr, Kafka's maximal ISR)."""
        if not self.is_leader:
            return
        new = self.leo
        for b in self.isr | self.isr_adding:
            if b != self.broker_id:
                r = self.remotes.get(b)
                leo = r.leo if r is not None else -1
                if leo < new:
                    new = leo
        if new > self.hw:
            self.hw = new
            self.hw_waiters.complete_up_to(new, self.ack_result)
            self.hw_notifier.notify()

    def ack_result(self) -> int:
        """The answer to an acks=all produce whose records the HW now covers:
        fine only if the ISR still has min.insync.replicas members."""
        return E.NONE if len(self.isr) >= self.min_isr else E.NOT_ENOUGH_REPLICAS_AFTER_APPEND

    min_isr = 1  # set by the replica manager from min.insync.replicas

    # -- reads -----------------------------------------------------------------------

    def leader_epoch_error(self, current_leader_epoch: int) -> int:
        """KIP-320 fencing (docs/design.md#fencing): a request naming the
        leader epoch its sender knows gets FENCED_LEADER_EPOCH when that epoch
        is older than this replica's (a follower the controller could not
        reach since), UNKNOWN_LEADER_EPOCH when newer (this replica has not
        heard of it yet). -1 names no epoch: clients, `hw` followers."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return E.NONE
        if current_leader_epoch < self.leader_epoch:
            return E.FENCED_LEADER_EPOCH
        return E.UNKNOWN_LEADER_EPOCH

    def read(self, fetch_offset: int, max_bytes: int, replica_id: int,
             current_leader_epoch: int = -1, read_committed: bool = False) -> tuple[int, bytes]:
        """(error, records) for a fetch. Consumers see below the HW only
        (`read_committed` ones below the LSO); an offset between that and
        the LEO gives an empty set (docs/design.md#high-watermark); below the
        log start or past the LEO is OFFSET_OUT_OF_RANGE."""
        err = self.leader_epoch_error(current_leader_epoch)
        if err != E.NONE:
            return err, b""
        if not self.is_leader:
            return E.NOT_LEADER_FOR_PARTITION, b""
        max_offset = None if replica_id >= 0 else self.hw
        if read_committed and max_offset is not None:
            max_offset = self.last_stable_offset
        try:
            return E.NONE, self.log.read(fetch_offset, max_bytes, max_offset)
        except OffsetOutOfRangeError:
            return E.OFFSET_OUT_OF_RANGE, b""
