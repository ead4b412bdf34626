"""The transactions of one partition replica: which are open, its last stable
offset, and the aborted transactions a `read_committed` fetch skips (KIP-98;
docs/design.md#transactions). Kafka keeps this in its ProducerStateManager;
here it is apart from the idempotence state (producer_state.py), which it
does not change.

A producer's transactional batch opens its transaction at the batch's base
offset, unless one is open; a control batch (a COMMIT or ABORT marker)
closes it. A closed transaction stays unstable until the high watermark
passes its marker: until then a new leader may not have the marker, and the
transaction would be open again there.

The last stable offset (LSO) is the first offset of the oldest unstable
transaction, or the high watermark when there is none: a `read_committed`
fetch returns records below it only. An aborted transaction is kept as
(producer id, first offset, marker offset); such a fetch is told of those
that overlap what it returns, and the client drops their records.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple

from cluster.log.batch import BatchHeader


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int     # the ABORT marker's offset


class OpenTransactions:
    def __init__(self) -> None:
        self.open: dict[int, int] = {}          # producer id -> first offset
        self.closing: list[tuple[int, int]] = []  # (first offset, marker offset), marker >= HW
        self.aborted: list[AbortedTxn] = []     # in marker order
        self.hw = 0

    def append(self, h: BatchHeader, commit: bool | None = None) -> None:
        """Take an appended batch (as leader or follower, or read at load);
        for a control batch, `commit` is its marker's type."""
        if h.producer_id < 0 or not h.is_transactional:
            return
        if not h.is_control:
            self.open.setdefault(h.producer_id, h.base_offset)
            return
        if commit is None:
            raise ValueError(f"the control batch at offset {h.base_offset} needs its marker's type")
        first = self.open.pop(h.producer_id, None)
        if first is None:
            return   # a marker with no transaction here (a retried WriteTxnMarkers)
        if not commit:
            self.aborted.append(AbortedTxn(h.producer_id, first, h.base_offset))
        if h.base_offset >= self.hw:
            self.closing.append((first, h.base_offset))

    def update_hw(self, hw: int) -> None:
        self.hw = hw
        self.closing = [(f, m) for f, m in self.closing if m >= hw]

    def last_stable_offset(self) -> int:
        """The first offset of the oldest unstable transaction, else the HW."""
        firsts = list(self.open.values()) + [f for f, _ in self.closing]
        return min([self.hw, *firsts])

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions with a record in [start, end): what a
        `read_committed` fetch of that range reports."""
        return [a for a in self.aborted if a.last_offset >= start and a.first_offset < end]

    def rebuild(self, batches: Iterable[tuple[BatchHeader, bool | None]], hw: int) -> None:
        """From the log (at load, and after a truncation: a marker truncated
        away opens its transaction again): each batch header with its marker type."""
        self.open.clear()
        self.closing.clear()
        self.aborted.clear()
        self.hw = 0
        for h, commit in batches:
            self.append(h, commit)
        self.update_hw(hw)
