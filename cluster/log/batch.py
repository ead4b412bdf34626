"""RecordBatch v2 (magic 2) headers: parse, validate, iterate, restamp.

The log never looks inside a batch's records: everything it needs (offsets,
leader epoch, producer fields, timestamps, length, CRC) is in the fixed
61-byte header, so appends cost one header parse and one CRC per batch, never a
per-record loop. Layout (big-endian), byte offsets in brackets:

    [0]  baseOffset int64          \\ outside the CRC and rewritten by the broker
    [8]  batchLength int32          |  (batchLength counts from [12] to the end)
    [12] partitionLeaderEpoch int32 /
    [16] magic int8
    [17] crc uint32                 CRC-32C of [21] .. end of batch
    [21] attributes int16
    [23] lastOffsetDelta int32
    [27] firstTimestamp int64
    [35] maxTimestamp int64
    [43] producerId int64
    [51] producerEpoch int16
    [53] baseSequence int32
    [57] recordsCount int32
    [61] records...
"""
from __future__ import annotations

import struct
from typing import Iterator

import crc32c

from .errors import CorruptRecordError

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
# baseOffset + batchLength: the part of a batch not counted by batchLength.
LOG_OVERHEAD = 12
# The smallest legal batchLength: a header with no records.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
MAGIC = 2
CRC_START = 21  # attributes: first byte the CRC covers

_OFFSET_LEN = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_LEADER_EPOCH_AT = 12
_CRC_AT = 17
_INT16 = struct.Struct(">h")
_UINT32 = struct.Struct(">I")

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20


class BatchHeader:
    """The header fields of one batch, and where the batch sits in its buffer."""

    __slots__ = ("base_offset", "batch_length", "partition_leader_epoch", "magic", "crc",
                 "attributes", "last_offset_delta", "first_timestamp", "max_timestamp",
                 "producer_id", "producer_epoch", "base_sequence", "records_count",
                 "position")

    def __init__(self, fields: tuple, position: int):
        (self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic,
         self.crc, self.attributes, self.last_offset_delta, self.first_timestamp,
         self.max_timestamp, self.producer_id, self.producer_epoch, self.base_sequence,
         self.records_count) = fields
        self.position = position

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (-1 when the batch carries none), wrapping
        at 2**31 like Kafka's DefaultRecordBatch.lastSequence."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (2**31)

    def __repr__(self) -> str:
        return (f"BatchHeader(offsets={self.base_offset}..{self.last_offset}, "
                f"epoch={self.partition_leader_epoch}, size={self.size}, "
                f"pos={self.position}, pid={self.producer_id}, seq={self.base_sequence})")


def parse_header(buf, position: int = 0) -> BatchHeader:
    """Parse the header at `position` without validating anything but its length."""
    if len(buf) - position < HEADER_SIZE:
        raise CorruptRecordError(
            f"batch header at {position} is truncated: {len(buf) - position} bytes")
    return BatchHeader(HEADER.unpack_from(buf, position), position)


def peek_offset_and_size(buf, position: int = 0) -> tuple[int, int]:
    """(baseOffset, whole batch size) from the first 12 bytes at `position`."""
    base, length = _OFFSET_LEN.unpack_from(buf, position)
    return base, length + LOG_OVERHEAD


def check_batch(buf, position: int = 0) -> BatchHeader:
    """Parse and validate the batch at `position`: whole, magic 2, CRC correct.

    Raises CorruptRecordError saying what is wrong. A batch extending past the
    end of `buf` is reported as truncated (a torn write in a file, a partial
    batch in a fetch response).
    """
    h = parse_header(buf, position)
    if h.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batch at {position} has impossible length {h.batch_length}")
    end = position + h.size
    if end > len(buf):
        raise CorruptRecordError(
            f"batch at {position} is truncated: needs {h.size} bytes, "
            f"{len(buf) - position} present")
    if h.magic != MAGIC:
        raise CorruptRecordError(f"batch at {position} has magic {h.magic}, only 2 is supported")
    if h.last_offset_delta < 0:
        raise CorruptRecordError(
            f"batch at {position} has negative lastOffsetDelta {h.last_offset_delta}")
    crc = crc32c.crc32c(memoryview(buf)[position + CRC_START:end])
    if crc != h.crc:
        raise CorruptRecordError(
            f"batch at {position} fails its CRC: stored {h.crc:#010x}, computed {crc:#010x}")
    return h


def is_truncated_at(buf, position: int) -> bool:
    """Whether the bytes from `position` are the start of a batch cut short
    (as opposed to complete but invalid)."""
    remaining = len(buf) - position
    if remaining < LOG_OVERHEAD:
        return True
    _, size = peek_offset_and_size(buf, position)
    return remaining < max(size, HEADER_SIZE)


def iter_batches(buf, *, allow_partial_tail: bool = False) -> Iterator[BatchHeader]:
    """Validate and yield every batch in `buf`, in order.

    With allow_partial_tail, a last batch cut short ends the iteration quietly,
    as a Kafka client treats the tail of a fetch response; otherwise it is an
    error like any other corruption.
    """
    pos, n = 0, len(buf)
    while pos < n:
        if allow_partial_tail and is_truncated_at(buf, pos):
            return
        h = check_batch(buf, pos)
        yield h
        pos += h.size


def valid_prefix(buf, expected_base: int | None = None) -> tuple[list[BatchHeader], int, str | None]:
    """Scan `buf` for its longest prefix of valid, contiguous batches.

    This is log recovery's view of a segment: return (headers, valid_bytes,
    reason), where reason says why the scan stopped before the end (None when
    the whole buffer is valid). Besides check_batch, each batch must start at
    the offset where the previous one ended (the first at `expected_base` when
    given): baseOffset lies outside the CRC, so this is what catches its
    corruption. The log never has offset gaps (there is no compaction).
    """
    headers: list[BatchHeader] = []
    pos, n = 0, len(buf)
    expect = expected_base
    while pos < n:
        try:
            h = check_batch(buf, pos)
        except CorruptRecordError as e:
            return headers, pos, str(e)
        if expect is not None and h.base_offset != expect:
            return headers, pos, (f"batch at {pos} has base offset {h.base_offset}, "
                                  f"expected {expect}")
        headers.append(h)
        expect = h.next_offset
        pos += h.size
    return headers, pos, None


def set_base_offset(buf: bytearray, position: int, offset: int) -> None:
    """Rewrite baseOffset in place; it is outside the CRC, so no recompute."""
    _INT64.pack_into(buf, position, offset)


def set_leader_epoch(buf: bytearray, position: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch in place; outside the CRC as well."""
    _INT32.pack_into(buf, position + _LEADER_EPOCH_AT, epoch)


def add_attributes(buf: bytearray, position: int, bits: int) -> None:
    """Set attribute `bits` of the batch at `position` (a whole batch in
    `buf`) in place; the attributes are inside the CRC, so it is computed again."""
    h = parse_header(buf, position)
    end = position + h.size
    _INT16.pack_into(buf, position + CRC_START, h.attributes | bits)
    crc = crc32c.crc32c(memoryview(buf)[position + CRC_START:end])
    _UINT32.pack_into(buf, position + _CRC_AT, crc)
