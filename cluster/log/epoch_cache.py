"""A replica's leader-epoch cache (KIP-101 / KIP-279), Kafka's LeaderEpochFileCache.

Maps each leader epoch to the first offset written in it. With
`replication.truncation=leader-epoch`, a follower asks the leader for the end
offset of its latest epoch (OffsetForLeaderEpoch) and truncates to that instead
of to its high watermark, which is what closes the two KIP-101 data-loss and
divergence scenarios. The cache is persisted in `<log dir>/leader-epoch-checkpoint`
and rewritten (atomically, fsynced) whenever it changes; changes are rare (one
per leader change), so the cost is off the hot path.
"""
from __future__ import annotations

import logging
import threading
from bisect import bisect_left, bisect_right
from pathlib import Path

from .checkpoint import read_checkpoint, write_checkpoint
from .errors import CorruptCheckpointError

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

log = logging.getLogger(__name__)


class LeaderEpochCache:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.RLock()
        # Parallel lists, sorted by epoch and (strictly) by start offset.
        self._epochs: list[int] = []
        self._starts: list[int] = []
        try:
            rows = read_checkpoint(self.path, 2)
            pairs = [(int(e), int(o)) for e, o in rows]
        except ValueError as e:
            raise CorruptCheckpointError(f"{self.path}: {e}") from None
        for epoch, start in pairs:
            self._epochs.append(epoch)
            self._starts.append(start)

    # -- queries -----------------------------------------------------------

    def entries(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(zip(self._epochs, self._starts))

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, or -1 when the cache is empty."""
        with self._lock:
            return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def earliest_entry(self) -> tuple[int, int] | None:
        with self._lock:
            return (self._epochs[0], self._starts[0]) if self._epochs else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Answer OffsetForLeaderEpoch: (epoch, end offset) for `requested_epoch`.

        - the latest epoch: (it, LEO);
        - an older epoch: the end offset is the start of the first epoch above
          it, and the epoch returned is the largest known epoch <= requested
          (KIP-279), or the requested one if it is below every known epoch;
        - undefined (-1), above every known epoch, or an empty cache: (-1, -1).
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if requested_epoch == self._epochs[-1]:
                return requested_epoch, log_end_offset
            higher = bisect_right(self._epochs, requested_epoch)
            if higher == len(self._epochs):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if higher == 0:
                return requested_epoch, self._starts[0]
            return self._epochs[higher - 1], self._starts[higher]

    # -- changes -----------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset` (called for every
        appended batch; only a new epoch, or an earlier start, changes anything).
        Entries that the new one contradicts, those with an epoch >= it or a
        start offset >= its start, are removed first, as Kafka does."""
        if epoch < 0:
            return
        with self._lock:
            if self._epochs and self._epochs[-1] == epoch and self._starts[-1] <= start_offset:
                return
            if self._epochs and self._epochs[-1] > epoch:
                log.warning("%s: epoch %d at %d assigned below newer epochs %s",
                            self.path, epoch, start_offset, self.entries())
            while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_offset):
                self._epochs.pop()
                self._starts.pop()
            self._epochs.append(epoch)
            self._starts.append(start_offset)
            self.flush()

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to `end_offset`: forget epochs starting at or after it."""
        with self._lock:
            if end_offset < 0 or not self._starts or self._starts[-1] < end_offset:
                return
            keep = bisect_left(self._starts, end_offset)
            del self._epochs[keep:]
            del self._starts[keep:]
            self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset` (retention): drop epochs that
        started at or before it, keeping the last of them with its start moved
        up to `start_offset`, since that epoch still covers the new first offset."""
        with self._lock:
            if start_offset < 0 or not self._starts or self._starts[0] > start_offset:
                return
            last = bisect_right(self._starts, start_offset) - 1
            epoch = self._epochs[last]
            if last == 0 and self._starts[0] == start_offset:
                return
            del self._epochs[:last + 1]
            del self._starts[:last + 1]
            self._epochs.insert(0, epoch)
            self._starts.insert(0, start_offset)
            self.flush()

    def clear(self) -> None:
        with self._lock:
            self._epochs.clear()
            self._starts.clear()
            self.flush()

    def flush(self) -> None:
        with self._lock:
            write_checkpoint(self.path, list(zip(self._epochs, self._starts)))

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.entries()})"
