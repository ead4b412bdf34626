"""One log segment: `<20-digit base offset>.log` plus its `.index`.

A segment holds a contiguous run of batches starting at its base offset. The
.log file descriptor stays open for the segment's life: appends are one
`pwrite` at the tracked end, reads are `pread`s positioned through the index.
`size` (the byte length of valid data) is kept in memory and is the only end
of file the segment believes, so a reader never sees a half-written append.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from .batch import (HEADER_SIZE, MIN_BATCH_LENGTH, BatchHeader, parse_header,
                    peek_offset_and_size, valid_prefix)
from .errors import CorruptRecordError
from .index import OffsetIndex

# How much to pread at a time while walking batch headers.
SCAN_CHUNK = 64 * 1024
# Index entries hold offsets relative to the base as int32.
MAX_RELATIVE_OFFSET = 2**31 - 1


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def log_path(dir: Path, base_offset: int) -> Path:
    return dir / f"{segment_name(base_offset)}.log"


def index_path(dir: Path, base_offset: int) -> Path:
    return dir / f"{segment_name(base_offset)}.index"


class LogSegment:
    def __init__(self, dir: Path, base_offset: int, index_interval_bytes: int):
        self.dir = Path(dir)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = log_path(self.dir, base_offset)
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self.index = OffsetIndex(index_path(self.dir, base_offset), base_offset)
        self.size = os.fstat(self._fd).st_size
        # Offset after the last batch; set by recover()/load().
        self.next_offset = base_offset
        self.bytes_since_last_index_entry = 0
        # Largest batch maxTimestamp, computed lazily for time retention.
        self._max_timestamp: int | None = None

    # -- opening -----------------------------------------------------------

    def recover(self) -> tuple[list[BatchHeader], str | None]:
        """Validate every batch, cut the file after the valid prefix, rebuild
        the index. Returns the valid batches and why the scan stopped early
        (None if the whole file was valid)."""
        data = os.pread(self._fd, self.size, 0) if self.size else b""
        headers, valid, reason = valid_prefix(data, self.base_offset)
        if valid < self.size:
            os.ftruncate(self._fd, valid)
            self.size = valid
        entries: list[tuple[int, int]] = []
        since = 0
        max_ts = -1
        for h in headers:
            if since > self.index_interval_bytes:
                entries.append((h.last_offset, h.position))
                since = 0
            since += h.size
            if h.max_timestamp > max_ts:
                max_ts = h.max_timestamp
        self.index.reset(entries)
        self.bytes_since_last_index_entry = since
        self.next_offset = headers[-1].next_offset if headers else self.base_offset
        self._max_timestamp = max_ts
        return headers, reason

    def load(self) -> tuple[list[BatchHeader], str | None]:
        """Open a segment below the recovery point, i.e. known to have been
        fsynced: trust the index if it passes the sanity check and validate only
        the batches after its last entry (to learn the next offset). Anything
        inconsistent falls back to a full recover()."""
        if not self.index.load(self.size):
            return self.recover()
        if len(self.index) == 0:
            return self.recover()  # at most ~index_interval_bytes + one batch
        last_offset, pos = self.index.lookup(2**63 - 1)
        tail = os.pread(self._fd, self.size - pos, pos)
        headers, valid, reason = valid_prefix(tail)
        if not headers or headers[0].last_offset != last_offset:
            return self.recover()
        if reason is not None:
            os.ftruncate(self._fd, pos + valid)
            self.size = pos + valid
        self.next_offset = headers[-1].next_offset
        self.bytes_since_last_index_entry = valid
        return [], reason

    # -- appending ---------------------------------------------------------

    def can_hold(self, last_offset: int) -> bool:
        return last_offset - self.base_offset <= MAX_RELATIVE_OFFSET

    def append(self, buf, headers: list[BatchHeader]) -> None:
        """Write validated, offset-stamped batches (`headers` index into `buf`)."""
        start = self.size
        view = memoryview(buf)
        written = 0
        while written < len(view):
            written += os.pwrite(self._fd, view[written:], start + written)
        for h in headers:
            if self.bytes_since_last_index_entry > self.index_interval_bytes:
                self.index.append(h.last_offset, start + h.position)
                self.bytes_since_last_index_entry = 0
            self.bytes_since_last_index_entry += h.size
            if self._max_timestamp is not None and h.max_timestamp > self._max_timestamp:
                self._max_timestamp = h.max_timestamp
        self.size = start + len(view)
        self.next_offset = headers[-1].next_offset

    # -- reading -----------------------------------------------------------

    def scan(self, position: int = 0) -> Iterator[BatchHeader]:
        """Headers of the batches from byte `position` (a batch boundary) on,
        read in chunks. The data is trusted (it was validated on append or
        recovery); only an impossible length is checked, to never loop."""
        chunk_pos, chunk = position, b""
        while position < self.size:
            off = position - chunk_pos
            if off + HEADER_SIZE > len(chunk):
                chunk_pos, off = position, 0
                chunk = os.pread(self._fd, min(SCAN_CHUNK, self.size - position), position)
            h = parse_header(chunk, off)
            if h.batch_length < MIN_BATCH_LENGTH:
                raise CorruptRecordError(f"{self.log_path}: bad batch length at {position}")
            h.position = position
            yield h
            position += h.size

    def find(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset is >= `offset` (the batch holding
        it), or None if the segment ends before `offset`."""
        if offset >= self.next_offset:
            return None
        _, pos = self.index.lookup(offset)
        for h in self.scan(pos):
            if h.last_offset >= offset:
                return h
        return None

    def read(self, offset: int, max_bytes: int, max_offset: int | None,
             min_one: bool) -> bytes:
        """Whole batches from the one holding `offset`, at most `max_bytes`
        (but one batch regardless when `min_one`), none whose last offset is
        >= `max_offset`."""
        first = self.find(offset)
        if first is None:
            return b""
        if max_offset is not None and first.last_offset >= max_offset:
            return b""
        start = first.position
        want = min(max(max_bytes, first.size if min_one else 0), self.size - start)
        if want < first.size:
            return b""
        data = os.pread(self._fd, want, start)
        # Cut after the last whole batch that is within limits.
        end, n = 0, len(data)
        while end + 12 <= n:
            base, size = peek_offset_and_size(data, end)
            if end + size > n:
                break
            if max_offset is not None:
                # size >= HEADER_SIZE, so lastOffsetDelta is inside `data`.
                last = base + int.from_bytes(data[end + 23:end + 27], "big", signed=True)
                if last >= max_offset:
                    break
            end += size
        return data[:end] if end < n else data

    def max_timestamp(self) -> int:
        """Largest batch maxTimestamp (-1 if none), for time-based retention."""
        if self._max_timestamp is None:
            self._max_timestamp = max((h.max_timestamp for h in self.scan(0)), default=-1)
        return self._max_timestamp

    def last_modified_ms(self) -> int:
        return os.fstat(self._fd).st_mtime_ns // 1_000_000

    # -- changing ----------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop the batch holding `offset` and everything after it; return the
        number of bytes removed. Truncating mid-batch drops the whole batch."""
        h = self.find(offset)
        if h is None:
            return 0
        removed = self.size - h.position
        os.ftruncate(self._fd, h.position)
        self.size = h.position
        self.index.truncate_to_position(h.position)
        self.next_offset = h.base_offset
        self.bytes_since_last_index_entry = self.size - self.index.last_position
        self._max_timestamp = None
        return removed

    def flush(self) -> None:
        os.fsync(self._fd)
        self.index.flush()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.index.close()

    def delete(self) -> None:
        self.close()
        for p in (self.log_path, self.index.path):
            try:
                p.unlink()
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, next={self.next_offset}, size={self.size})"
