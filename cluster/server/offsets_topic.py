"""The offsets topic `__consumer_offsets`: its name, which of its partitions
holds a group, and the records kept there (docs/design.md#groups).

The layout is Kafka's, so that a record written here reads the same as one
a Kafka broker wrote: a group lives in partition abs(javaHashCode(group)) % N;
a committed offset is a record whose key is (version 1, group, topic,
partition) and whose value is (version 1, offset, metadata, commit
timestamp, expire timestamp); a record with no value (a tombstone) removes
the offset. Key version 2 is Kafka's group-metadata record, which this
broker does not write and skips when it reads (groups are not persisted).
Strings are int16-length-prefixed UTF-8, integers big-endian.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable, Iterator

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from cluster.log import batch as v2
from cluster.server.group_metadata import OffsetAndMetadata

GROUP_METADATA_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC})

OFFSET_KEY_VERSION = 1        # what this broker writes (Kafka 2.0 writes 1; 0 is the same)
GROUP_METADATA_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_BATCH_BYTES = 2**31 - 1


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, 32-bit signed overflow."""
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's Utils.abs(groupId.hashCode) % partitions (abs of MIN_VALUE is 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


# -- keys and values --------------------------------------------------------------------------

@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupMetadataKey:
    group: str


class RecordFormatError(ValueError):
    """Bytes that are not a key or value of the offsets topic."""


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return _I16.pack(len(b)) + b


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def _take(self, st: struct.Struct) -> int:
        if self.pos + st.size > len(self.data):
            raise RecordFormatError("record ends too early")
        (v,) = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return v

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def string(self) -> str:
        n = self.i16()
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError(f"bad string length {n}")
        try:
            s = self.data[self.pos:self.pos + n].decode("utf-8")
        except UnicodeDecodeError:
            raise RecordFormatError("string is not UTF-8") from None
        self.pos += n
        return s


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return (_I16.pack(OFFSET_KEY_VERSION) + _string(group) + _string(topic)
            + _I32.pack(partition))


def encode_offset_value(om: OffsetAndMetadata) -> bytes:
    return (_I16.pack(OFFSET_VALUE_VERSION) + _I64.pack(om.offset) + _string(om.metadata)
            + _I64.pack(om.commit_timestamp) + _I64.pack(om.expire_timestamp))


def decode_key(data: bytes) -> OffsetKey | GroupMetadataKey:
    r = _Reader(bytes(data))
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.string(), r.string(), r.i32())
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupMetadataKey(r.string())
    raise RecordFormatError(f"unknown key version {version}")


def decode_offset_value(data: bytes) -> OffsetAndMetadata:
    """Every value version Kafka wrote (0-3); the leader epoch of v3 is dropped."""
    r = _Reader(bytes(data))
    version = r.i16()
    if version == 0:
        offset, metadata, ts = r.i64(), r.string(), r.i64()
        return OffsetAndMetadata(offset, metadata, ts, -1)
    if version == 1:
        return OffsetAndMetadata(r.i64(), r.string(), r.i64(), r.i64())
    if version == 2:
        return OffsetAndMetadata(r.i64(), r.string(), r.i64(), -1)
    if version == 3:
        offset = r.i64()
        r.i32()  # leader epoch
        return OffsetAndMetadata(offset, r.string(), r.i64(), -1)
    raise RecordFormatError(f"unknown offset value version {version}")


# -- batches --------------------------------------------------------------------------------------

def commit_batch(group: str, offsets: dict[tuple[str, int], OffsetAndMetadata],
                 timestamp_ms: int) -> bytes:
    """One uncompressed v2 batch with a record per committed partition."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=_BATCH_BYTES)
    for i, ((topic, partition), om) in enumerate(offsets.items()):
        b.append(i, timestamp=timestamp_ms, key=encode_offset_key(group, topic, partition),
                 value=encode_offset_value(om), headers=[])
    return bytes(b.build())


def read_commits(data: bytes, on_bad: Callable[[int, Exception], None]
                 ) -> Iterator[tuple[int, OffsetKey, OffsetAndMetadata | None]]:
    """(offset, key, value or None for a tombstone) of each offset-commit
    record in whole v2 batches, as read from the log; stops at a batch cut
    short. Group-metadata records and control batches are skipped; a record
    or batch that cannot be read goes to `on_bad(offset, error)` and is
    skipped too, so one bad record cannot keep a coordinator from loading."""
    mv = memoryview(data)
    pos, n = 0, len(data)
    while pos + v2.LOG_OVERHEAD <= n:
        base, size = v2.peek_offset_and_size(mv, pos)
        if size <= v2.LOG_OVERHEAD or pos + size > n:
            return
        try:
            batch = DefaultRecordBatch(bytes(mv[pos:pos + size]))
            records = [] if batch.is_control_batch else list(batch)
        except Exception as e:  # noqa: BLE001 - kafka-python raises what it raises
            on_bad(base, e)
            records = []
        pos += size
        for rec in records:
            try:
                if rec.key is None:
                    raise RecordFormatError("a record without a key")
                key = decode_key(rec.key)
                if isinstance(key, OffsetKey):
                    yield rec.offset, key, (None if rec.value is None
                                            else decode_offset_value(rec.value))
            except RecordFormatError as e:
                on_bad(rec.offset, e)
