"""Idempotent-producer state of one partition replica (KIP-98, the part
without transactions).

Per producer id: its epoch and the sequence ranges and offsets of its last 5
batches (a producer has at most 5 requests in flight). A batch whose sequence
range matches one of those is a retry of an appended batch: it is answered
with the original offset and not appended again. Any other batch must start at
the sequence after the last one, else OUT_OF_ORDER_SEQUENCE_NUMBER. A new
epoch must start at sequence 0; an older epoch is fenced. A producer this
replica has no state for (its topic was deleted and created again, or its
batches are gone) starting past 0 is UNKNOWN_PRODUCER_ID, as in Kafka: the
client may start a new epoch, where OUT_OF_ORDER would be fatal to it.

Leaders and followers both update the state for every batch they append, so
a follower that becomes leader already has it. At load, and after a
truncation removed batches, it is rebuilt by scanning the log's batch headers
(headers only: cheap, no record decoding), so it survives failover and restart.
"""
from __future__ import annotations

from collections import deque
from typing import Iterable

from cluster.log.batch import BatchHeader
from cluster.protocol import errors as E

MAX_BATCHES = 5
_SEQ_MOD = 2**31


class _Producer:
    __slots__ = ("epoch", "batches")

    def __init__(self, epoch: int):
        self.epoch = epoch
        # (first_seq, last_seq, first_offset, last_offset), oldest first
        self.batches: deque[tuple[int, int, int, int]] = deque(maxlen=MAX_BATCHES)


class ProducerState:
    def __init__(self) -> None:
        self.producers: dict[int, _Producer] = {}

    def check(self, h: BatchHeader) -> tuple[int, tuple[int, int] | None]:
        """Check a batch before appending it as leader.

        Returns (NONE, None) to append, (NONE, (first, last)) for a duplicate
        whose original offsets are given, or (error code, None)."""
        if h.producer_id < 0:
            return E.NONE, None
        p = self.producers.get(h.producer_id)
        first_seq, last_seq = h.base_sequence, h.last_sequence
        if p is None:
            return (E.NONE, None) if first_seq == 0 else (E.UNKNOWN_PRODUCER_ID, None)
        if h.producer_epoch < p.epoch:
            return E.INVALID_PRODUCER_EPOCH, None
        if h.producer_epoch > p.epoch:
            return (E.NONE, None) if first_seq == 0 else (E.OUT_OF_ORDER_SEQUENCE_NUMBER, None)
        for fs, ls, fo, lo in p.batches:
            if fs == first_seq and ls == last_seq:
                return E.NONE, (fo, lo)
        if p.batches:
            expected = (p.batches[-1][1] + 1) % _SEQ_MOD
            if first_seq != expected:
                return E.OUT_OF_ORDER_SEQUENCE_NUMBER, None
        elif first_seq != 0:
            return E.OUT_OF_ORDER_SEQUENCE_NUMBER, None
        return E.NONE, None

    def is_new_session(self, h: BatchHeader) -> bool:
        """Whether `h` carries a newer epoch than the one this replica knows
        for its producer (a client that bumped its epoch: worth a log line)."""
        p = self.producers.get(h.producer_id)
        return p is not None and h.producer_epoch > p.epoch

    def describe(self, producer_id: int) -> str:
        p = self.producers.get(producer_id)
        if p is None or not p.batches:
            return "none"
        fs, ls, fo, lo = p.batches[-1]
        return f"epoch {p.epoch} seq {fs}..{ls} at offset {fo}..{lo}"

    def update(self, h: BatchHeader, first_offset: int | None = None) -> None:
        """Record an appended batch (its base offset is `first_offset`, or the
        header's own when the batch came from the log or a leader)."""
        if h.producer_id < 0:
            return
        if h.is_control or h.base_sequence < 0:
            # A marker, or a coordinator's batch (offsets committed in a transaction).
            self.update_marker(h)
            return
        fo = h.base_offset if first_offset is None else first_offset
        p = self.producers.get(h.producer_id)
        if p is None or h.producer_epoch > p.epoch:
            p = self.producers[h.producer_id] = _Producer(h.producer_epoch)
        elif h.producer_epoch < p.epoch:
            return
        p.batches.append((h.base_sequence, h.last_sequence, fo, fo + h.last_offset_delta))

    def check_marker(self, producer_id: int, epoch: int) -> int:
        """A transaction marker may be written at the producer's epoch or a
        newer one (KIP-890's bump); an older one comes from a coordinator
        that was fenced since (Kafka's appendEndTxnMarker)."""
        p = self.producers.get(producer_id)
        return E.INVALID_PRODUCER_EPOCH if p is not None and epoch < p.epoch else E.NONE

    def update_marker(self, h: BatchHeader) -> None:
        """Record an appended marker: a newer epoch starts a session with no
        batches (its next batch starts at sequence 0); sequences go on after
        a marker of the same epoch, as a transaction ends within a session."""
        p = self.producers.get(h.producer_id)
        if p is None or h.producer_epoch > p.epoch:
            self.producers[h.producer_id] = _Producer(h.producer_epoch)

    def rebuild(self, headers: Iterable[BatchHeader]) -> None:
        self.producers.clear()
        for h in headers:
            self.update(h)
