"""The log of one partition replica: a directory of segments.

Offsets are contiguous from `log_start_offset` to `log_end_offset` (LEO, the
next offset to assign). The newest segment is the active one; appends go to it
and roll to a new segment when it is full. Opening a log recovers it: every
segment at or after the recovery point (the offset up to which the data is
known to have been fsynced) is validated batch by batch, the first torn or
corrupt batch and everything after it are dropped, and the index is rebuilt.

Durability follows Kafka: fsync after `flush_interval_messages` messages or
when the last fsync is older than `flush_interval_ms`, on segment roll, on
truncation and on close. The defaults never fsync on append, leaving
durability to replication; `recovery_point` says what a power loss cannot
lose (see crash.py).

A Log is safe to use from several threads: one lock serializes appends,
truncation, retention and reads (reads are short: an index lookup and a pread).
"""
from __future__ import annotations

import logging
import shutil
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from .batch import BatchHeader, iter_batches, set_base_offset, set_leader_epoch
from .checkpoint import (LEADER_EPOCH_FILE, PARTITION_METADATA_FILE, TMP_SUFFIX, fsync_dir,
                         read_topic_id, write_topic_id)
from .epoch_cache import LeaderEpochCache
from .errors import (CorruptCheckpointError, CorruptRecordError, InvalidOffsetError,
                     OffsetOutOfRangeError)
from .segment import LogSegment

log = logging.getLogger(__name__)

NEVER = 2**63 - 1


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class LogConfig:
    segment_bytes: int = 64 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_bytes: int = -1           # < 0: unlimited
    retention_ms: int = 7 * 24 * 3600 * 1000  # < 0: unlimited
    flush_interval_messages: int = NEVER
    flush_interval_ms: int = NEVER

    @classmethod
    def from_broker_config(cls, cfg) -> "LogConfig":
        return cls(
            segment_bytes=cfg["log.segment.bytes"],
            index_interval_bytes=cfg["log.index.interval.bytes"],
            retention_bytes=cfg["log.retention.bytes"],
            retention_ms=cfg["log.retention.ms"],
            flush_interval_messages=cfg["log.flush.interval.messages"],
            flush_interval_ms=cfg["log.flush.interval.ms"],
        )


class Log:
    def __init__(self, dir: Path, config: LogConfig, recovery_point: int = 0):
        """Open (creating if needed) and recover the log in `dir`.

        `recovery_point` is the offset below which the data is known to have
        been fsynced (from the log dir's recovery-point checkpoint); segments
        before the one holding it are trusted, the rest are fully validated.
        The default of 0 validates everything.
        """
        self.dir = Path(dir)
        self.config = config
        self._lock = threading.RLock()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.leader_epoch_cache = self._open_epoch_cache()
        if self.leader_epoch_cache is None:
            # Rebuild the epochs from every batch: validate the whole log.
            recovery_point = 0
            self.leader_epoch_cache = LeaderEpochCache(self.dir / LEADER_EPOCH_FILE)
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._unflushed_messages = 0
        self._last_flush_ms = wall_ms()
        self._closed = False
        # Called (with the Log lock held) after the recovery point changes;
        # LogManager uses it to keep its recovery-point checkpoint exact.
        self.on_recovery_point_change: Callable[[Log], None] | None = None
        self._load(recovery_point)
        self.topic_id = self._read_topic_id()

    def _read_topic_id(self) -> str | None:
        """The id of the topic this replica belongs to (None: not known yet,
        or unreadable: then the controller's next LeaderAndIsr writes it again)."""
        try:
            return read_topic_id(self.dir / PARTITION_METADATA_FILE)
        except CorruptCheckpointError as e:
            log.warning("%s: %s; the topic id is rewritten by the next LeaderAndIsr", self.dir, e)
            return None

    def set_topic_id(self, topic_id: str) -> None:
        """Record the topic id (docs/design.md#topic-ids), durably, once."""
        with self._lock:
            self._check_open()
            write_topic_id(self.dir / PARTITION_METADATA_FILE, topic_id)
            self.topic_id = topic_id

    # -- opening -----------------------------------------------------------

    def _open_epoch_cache(self) -> LeaderEpochCache | None:
        """The persisted epoch cache, or None if it must be rebuilt from the
        batches: its checkpoint is unreadable, or missing while the log has data
        (it is written, fsynced, before the first batch of any epoch)."""
        path = self.dir / LEADER_EPOCH_FILE
        if not path.exists():
            if any(p.stat().st_size for p in self.dir.glob("*.log")):
                return None
            cache = LeaderEpochCache(path)
            cache.flush()  # from now on, a missing file means a lost one
            return cache
        try:
            return LeaderEpochCache(path)
        except CorruptCheckpointError as e:
            log.warning("%s: %s; rebuilding the leader epoch cache", self.dir, e)
            path.unlink()
            return None

    def _load(self, recovery_point: int) -> None:
        for p in self.dir.iterdir():
            if p.name.endswith(TMP_SUFFIX) or p.name.endswith(".deleted"):
                p.unlink()
        bases = sorted(int(p.stem) for p in self.dir.glob("*.log") if p.stem.isdigit())
        for p in self.dir.glob("*.index"):
            if p.stem.isdigit() and int(p.stem) not in bases:
                p.unlink()  # an index without its log: a half-deleted segment
        if not bases:
            bases = [0]
        # The segment holding the recovery point, and all after it, get full recovery.
        first_unflushed = max(0, bisect_right(bases, recovery_point) - 1)
        expected = None
        for i, base in enumerate(bases):
            if expected is not None and base != expected:
                log.warning("%s: segment %d does not follow offset %d; dropping it and later ones",
                            self.dir, base, expected)
                self._delete_files(bases[i:])
                break
            seg = LogSegment(self.dir, base, self.config.index_interval_bytes)
            self.segments.append(seg)
            if i < first_unflushed:
                headers, reason = seg.load()
            else:
                headers, reason = seg.recover()
            cache = self.leader_epoch_cache
            for h in headers:
                # Only newer epochs: the checkpoint already knows the older ones,
                # and re-assigning an old epoch would erase the newer entries.
                if h.partition_leader_epoch > cache.latest_epoch:
                    cache.assign(h.partition_leader_epoch, h.base_offset)
            if reason is not None:
                log.warning("%s: recovery truncated segment %d at offset %d: %s",
                            self.dir, base, seg.next_offset, reason)
                self._delete_files(bases[i + 1:])
                break
            expected = seg.next_offset
        self._bases = [s.base_offset for s in self.segments]
        self.log_start_offset = self.segments[0].base_offset
        self.log_end_offset = self.segments[-1].next_offset
        self.recovery_point = max(self.log_start_offset, min(recovery_point, self.log_end_offset))
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)

    def _delete_files(self, bases: list[int]) -> None:
        for base in bases:
            LogSegment(self.dir, base, self.config.index_interval_bytes).delete()

    # -- state -------------------------------------------------------------

    def _set_recovery_point(self, offset: int) -> None:
        if offset != self.recovery_point:
            self.recovery_point = offset
            if self.on_recovery_point_change is not None:
                self.on_recovery_point_change(self)

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def _segment_for(self, offset: int) -> int:
        """Index in self.segments of the segment that would hold `offset`."""
        return max(0, bisect_right(self._bases, offset) - 1)

    # -- appending ---------------------------------------------------------

    def append_as_leader(self, batches: bytes, leader_epoch: int) -> tuple[int, int]:
        """Append producer batches: validate each (whole, magic 2, CRC, records
        count matching lastOffsetDelta), assign offsets from the LEO and stamp
        `leader_epoch`. Nothing is appended if any batch is invalid.
        Returns (first offset, last offset)."""
        buf = bytearray(batches)
        headers = list(iter_batches(buf))
        if not headers:
            raise CorruptRecordError("no record batch to append")
        for h in headers:
            if h.records_count < 1 or h.records_count != h.last_offset_delta + 1:
                raise CorruptRecordError(
                    f"batch at {h.position} has {h.records_count} records but "
                    f"lastOffsetDelta {h.last_offset_delta}")
        with self._lock:
            self._check_open()
            first = offset = self.log_end_offset
            for h in headers:
                set_base_offset(buf, h.position, offset)
                set_leader_epoch(buf, h.position, leader_epoch)
                h.base_offset = offset
                h.partition_leader_epoch = leader_epoch
                offset = h.next_offset
            self.leader_epoch_cache.assign(leader_epoch, first)
            self._append(buf, headers)
            return first, offset - 1

    def append_as_follower(self, batches: bytes) -> tuple[int, int]:
        """Append batches fetched from the leader, keeping their offsets and
        leader epochs. They must continue the log exactly at the LEO. A last
        batch cut short (the tail of a fetch response) is ignored, as Kafka's
        fetcher does; any other invalid batch raises CorruptRecordError.
        Returns (first offset, last offset), or (LEO, LEO - 1) if nothing whole
        was given."""
        buf = bytes(batches)
        headers = list(iter_batches(buf, allow_partial_tail=True))
        with self._lock:
            self._check_open()
            if not headers:
                return self.log_end_offset, self.log_end_offset - 1
            expect = self.log_end_offset
            for h in headers:
                if h.base_offset != expect:
                    raise InvalidOffsetError(
                        f"{self.dir}: follower batch at offset {h.base_offset}, expected {expect}")
                expect = h.next_offset
            end = headers[-1].position + headers[-1].size
            if end < len(buf):
                buf = buf[:end]
            for h in headers:
                if h.partition_leader_epoch >= 0:
                    self.leader_epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
            self._append(buf, headers)
            return headers[0].base_offset, expect - 1

    def _append(self, buf, headers: list[BatchHeader]) -> None:
        seg = self.segments[-1]
        last_offset = headers[-1].last_offset
        if seg.size > 0 and (seg.size + len(buf) > self.config.segment_bytes
                             or not seg.can_hold(last_offset)):
            seg = self._roll()
        seg.append(buf, headers)
        self.log_end_offset = seg.next_offset
        self._unflushed_messages += sum(h.records_count for h in headers)
        if self._unflushed_messages >= self.config.flush_interval_messages:
            self.flush()
        else:
            self.flush_if_due()

    def _roll(self) -> LogSegment:
        """Start a new active segment at the LEO. The old one is fsynced, as
        Kafka flushes a segment when it rolls (it will never change again)."""
        old = self.segments[-1]
        new = LogSegment(self.dir, self.log_end_offset, self.config.index_interval_bytes)
        self.segments.append(new)
        self._bases.append(new.base_offset)
        self._flush_segments(upto=self.log_end_offset)
        log.debug("%s: rolled %s -> %s", self.dir, old, new)
        return new

    # -- reading -----------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """Whole batches from the one holding `start_offset`: up to `max_bytes`
        but at least one batch, none reaching `max_offset` (exclusive; the high
        watermark for consumers). b"" at the LEO or at/after `max_offset`.
        Reads stop at the end of a segment, as Kafka's do."""
        with self._lock:
            self._check_open()
            if start_offset < self.log_start_offset or start_offset > self.log_end_offset:
                raise OffsetOutOfRangeError(start_offset, self.log_start_offset,
                                            self.log_end_offset)
            if start_offset == self.log_end_offset or (
                    max_offset is not None and start_offset >= max_offset):
                return b""
            for seg in self.segments[self._segment_for(start_offset):]:
                data = seg.read(start_offset, max_bytes, max_offset, min_one=True)
                if data or seg.next_offset > start_offset:
                    return data
            return b""

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch for this replica: (epoch, end offset), see
        LeaderEpochCache.end_offset_for."""
        with self._lock:
            return self.leader_epoch_cache.end_offset_for(epoch, self.log_end_offset)

    def batches(self, start_offset: int = 0) -> Iterator[BatchHeader]:
        """Headers of the batches whose last offset is >= `start_offset`, in order
        (for tools, tests and rebuilding producer state). Positions are within
        each batch's segment. Do not append or truncate while iterating."""
        with self._lock:
            segments = list(self.segments[self._segment_for(start_offset):])
        for seg in segments:
            pos = 0
            if start_offset > seg.base_offset:
                h = seg.find(start_offset)
                if h is None:
                    continue
                pos = h.position
            yield from seg.scan(pos)

    def batch_at(self, offset: int) -> BatchHeader | None:
        """Header of the batch holding `offset`, or None outside the log."""
        with self._lock:
            if not self.log_start_offset <= offset < self.log_end_offset:
                return None
            return self.segments[self._segment_for(offset)].find(offset)

    def last_batch(self) -> BatchHeader | None:
        """Header of the newest batch, or None for an empty log."""
        with self._lock:
            if self.log_end_offset == self.log_start_offset:
                return None
            for seg in reversed(self.segments):
                if seg.size:
                    return seg.find(seg.next_offset - 1)
            return None

    # -- truncation --------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop every offset >= `offset` (a follower truncating to its high
        watermark or to the leader's epoch end offset), and fsync. If `offset`
        falls inside a batch the whole batch goes, so the LEO may end up below
        `offset`. Truncating below the log start empties the log and restarts
        it at `offset`."""
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        with self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                # No record to remove, but an epoch this replica started as a
                # leader and never wrote in may sit at the log end; the new
                # leader's batches of an older epoch would otherwise replace
                # the older epoch's entry (docs/design.md#truncation).
                self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
                return
            if offset < self.log_start_offset:
                self.truncate_fully_and_start_at(offset)
                return
            keep = self._segment_for(offset)
            for seg in self.segments[keep + 1:]:
                seg.delete()
            del self.segments[keep + 1:]
            del self._bases[keep + 1:]
            seg = self.segments[-1]
            seg.truncate_to(offset)
            seg.flush()
            fsync_dir(self.dir)
            self.log_end_offset = seg.next_offset
            self._set_recovery_point(min(self.recovery_point, self.log_end_offset))
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            log.info("%s: truncated to %d (LEO %d)", self.dir, offset, self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete all data and restart the log, empty, at `offset` (a follower
        whose leader's log starts beyond this one's end)."""
        with self._lock:
            self._check_open()
            for seg in self.segments:
                seg.delete()
            seg = LogSegment(self.dir, offset, self.config.index_interval_bytes)
            self.segments = [seg]
            self._bases = [offset]
            fsync_dir(self.dir)
            self.log_start_offset = self.log_end_offset = offset
            self._set_recovery_point(offset)
            self._unflushed_messages = 0
            self.leader_epoch_cache.clear()
            log.info("%s: truncated fully, restarting at %d", self.dir, offset)

    # -- durability ----------------------------------------------------------

    def flush(self) -> None:
        """fsync everything appended so far; the recovery point becomes the LEO."""
        with self._lock:
            self._check_open()
            self._flush_segments(upto=self.log_end_offset)

    def _flush_segments(self, upto: int) -> None:
        if upto <= self.recovery_point:
            return
        for seg in self.segments[self._segment_for(self.recovery_point):]:
            if seg.base_offset >= upto and seg is not self.segments[-1]:
                break
            seg.flush()
        fsync_dir(self.dir)
        self._set_recovery_point(max(self.recovery_point, upto))
        if upto >= self.log_end_offset:
            self._unflushed_messages = 0
        self._last_flush_ms = wall_ms()

    def flush_if_due(self, now: int | None = None) -> bool:
        """fsync if there is unflushed data and the last fsync is older than
        flush_interval_ms (the broker may call this periodically). Returns
        whether it flushed."""
        with self._lock:
            if self._closed or self.recovery_point >= self.log_end_offset:
                return False
            interval = self.config.flush_interval_ms
            if interval >= NEVER:
                return False
            if (now if now is not None else wall_ms()) - self._last_flush_ms < interval:
                return False
            self.flush()
            return True

    # -- retention -----------------------------------------------------------

    def maybe_apply_retention(self, now_ms: int | None = None,
                              high_watermark: int | None = None) -> int:
        """Delete whole old segments, oldest first, by time (the segment's
        newest timestamp is older than retention_ms; a segment without
        timestamps uses its file's mtime) and then by size (while the log
        without the oldest segment is still >= retention_bytes). The active
        segment is never deleted, nor (when given) one holding offsets at or
        above `high_watermark`. Returns the number of segments deleted."""
        now = now_ms if now_ms is not None else wall_ms()
        cfg = self.config
        with self._lock:
            self._check_open()
            candidates = self.segments[:-1]
            if high_watermark is not None:
                candidates = [s for s in candidates if s.next_offset <= high_watermark]
            n = 0
            if cfg.retention_ms >= 0:
                for seg in candidates:
                    ts = seg.max_timestamp()
                    if ts <= 0:
                        ts = seg.last_modified_ms()
                    if now - ts <= cfg.retention_ms:
                        break
                    n += 1
            if cfg.retention_bytes >= 0:
                excess = self.size_in_bytes - sum(s.size for s in candidates[:n]) - cfg.retention_bytes
                for seg in candidates[n:]:
                    if excess - seg.size < 0:
                        break
                    excess -= seg.size
                    n += 1
            if n == 0:
                return 0
            for seg in self.segments[:n]:
                seg.delete()
            del self.segments[:n]
            del self._bases[:n]
            self.log_start_offset = self.segments[0].base_offset
            self._set_recovery_point(max(self.recovery_point, self.log_start_offset))
            self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
            log.info("%s: retention deleted %d segment(s), log starts at %d",
                     self.dir, n, self.log_start_offset)
            return n

    # -- lifecycle -------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"log {self.dir} is closed")

    def close(self, flush: bool = True) -> None:
        """Flush (unless told not to) and close: a clean shutdown leaves
        nothing to recover."""
        with self._lock:
            if self._closed:
                return
            if flush:
                self._flush_segments(upto=self.log_end_offset)
            for seg in self.segments:
                seg.close()
            self._closed = True

    def delete(self) -> None:
        """Close without flushing and remove the directory."""
        with self._lock:
            self.close(flush=False)
            shutil.rmtree(self.dir, ignore_errors=True)

    def __repr__(self) -> str:
        return (f"Log({self.dir.name}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, segments={len(self.segments)})")
