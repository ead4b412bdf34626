"""The offsets topic `__consumer_offsets`: its name, which of its partitions
holds a group, and the records kept there (docs/design.md#groups).

The layout is Kafka's, so that a record written here reads the same as one
a Kafka broker wrote: a group lives in partition abs(javaHashCode(group)) % N;
a committed offset is a record whose key is (version 1, group, topic,
partition) and whose value is (version 1, offset, metadata, commit
timestamp, expire timestamp); a group's membership is a record whose key is
(version 2, group) and whose value is Kafka 2.0's group metadata (version
2: protocol type, generation, protocol, leader, state timestamp, and each
member with its subscription and assignment). A record with no value (a
tombstone) removes the offset or the group. Strings are int16-length-prefixed
UTF-8 (-1: null), bytes int32-length-prefixed, integers big-endian.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable, Iterator

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from cluster.log import batch as v2
from cluster.server.group_metadata import OffsetAndMetadata

GROUP_METADATA_TOPIC = "__consumer_offsets"

OFFSET_KEY_VERSION = 1        # what this broker writes (Kafka 2.0 writes 1; 0 is the same)
GROUP_METADATA_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 1
GROUP_VALUE_VERSION = 2       # Kafka 2.0's; 0, 1 and 3 are read too

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


@dataclass(frozen=True)
class MemberRecord:
    """One member as a group-metadata record keeps it."""
    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupRecord:
    """A group's membership at the end of a rebalance (an Empty group has
    no members and no protocol)."""
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: tuple[MemberRecord, ...]


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

    def nullable_string(self) -> str | None:
        if self._peek_i16() == -1:
            self.pos += _I16.size
            return None
        return self.string()

    def _peek_i16(self) -> int:
        if self.pos + _I16.size > len(self.data):
            raise RecordFormatError("record ends too early")
        return _I16.unpack_from(self.data, self.pos)[0]

    def bytes_(self) -> bytes:
        n = self.i32()
        if n < 0:
            return b""
        if self.pos + n > len(self.data):
            raise RecordFormatError(f"bad bytes length {n}")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b


def _nullable(s: str | None) -> bytes:
    return _I16.pack(-1) if s is None else _string(s)


def _bytes(b: bytes) -> bytes:
    return _I32.pack(len(b)) + b


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return (_I16.pack(OFFSET_KEY_VERSION) + _string(group) + _string(topic)
            + _I32.pack(partition))


def encode_offset_value(om: OffsetAndMetadata) -> bytes:
    return (_I16.pack(OFFSET_VALUE_VERSION) + _I64.pack(om.offset) + _string(om.metadata)
            + _I64.pack(om.commit_timestamp) + _I64.pack(om.expire_timestamp))


def encode_group_key(group: str) -> bytes:
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + _string(group)


def encode_group_value(g: GroupRecord) -> bytes:
    """Kafka 2.0's group metadata value, version 2."""
    out = [_I16.pack(GROUP_VALUE_VERSION), _string(g.protocol_type), _I32.pack(g.generation),
           _nullable(g.protocol), _nullable(g.leader), _I64.pack(g.state_timestamp),
           _I32.pack(len(g.members))]
    for m in g.members:
        out += [_string(m.member_id), _string(m.client_id), _string(m.client_host),
                _I32.pack(m.rebalance_timeout_ms), _I32.pack(m.session_timeout_ms),
                _bytes(m.subscription), _bytes(m.assignment)]
    return b"".join(out)


def decode_group_value(data: bytes) -> GroupRecord:
    """Every group metadata version Kafka wrote (0-3): v1 added each
    member's rebalance timeout, v2 the state timestamp, v3 the static
    member's instance id (read and dropped)."""
    r = _Reader(bytes(data))
    version = r.i16()
    if version not in (0, 1, 2, 3):
        raise RecordFormatError(f"unknown group metadata value version {version}")
    protocol_type, generation = r.string(), r.i32()
    protocol, leader = r.nullable_string(), r.nullable_string()
    timestamp = r.i64() if version >= 2 else -1
    count = r.i32()
    if count < 0 or count > len(r.data):
        raise RecordFormatError(f"bad member count {count}")
    members = []
    for _ in range(count):
        member_id = r.string()
        if version >= 3:
            r.nullable_string()   # group instance id
        client_id, client_host = r.string(), r.string()
        session = r.i32()
        rebalance = session
        if version >= 1:
            rebalance, session = session, r.i32()
        members.append(MemberRecord(member_id, client_id, client_host, rebalance, session,
                                    r.bytes_(), r.bytes_()))
    return GroupRecord(protocol_type, generation, protocol, leader, timestamp, tuple(members))


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

def _batch(records: list[tuple[bytes, bytes | None]], timestamp_ms: int,
           producer: tuple[int, int] | None = None) -> bytes:
    """One uncompressed v2 batch of (key, value) records; transactional,
    of that (producer id, epoch), when `producer` is given."""
    pid, epoch = producer or (-1, -1)
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0,
                                  is_transactional=producer is not None, producer_id=pid,
                                  producer_epoch=epoch, base_sequence=-1,
                                  batch_size=_BATCH_BYTES)
    for i, (key, value) in enumerate(records):
        b.append(i, timestamp=timestamp_ms, key=key, value=value, headers=[])
    return bytes(b.build())


def commit_batch(group: str, offsets: dict[tuple[str, int], OffsetAndMetadata],
                 timestamp_ms: int, producer: tuple[int, int] | None = None) -> bytes:
    """One batch with a record per committed partition; a transaction's
    (TxnOffsetCommit) is transactional, of its producer."""
    return _batch([(encode_offset_key(group, topic, partition), encode_offset_value(om))
                   for (topic, partition), om in offsets.items()], timestamp_ms, producer)


def group_batch(group: str, record: GroupRecord, timestamp_ms: int) -> bytes:
    """One batch with the group's metadata record."""
    return _batch([(encode_group_key(group), encode_group_value(record))], timestamp_ms)


Record = tuple[int, OffsetKey | GroupMetadataKey, OffsetAndMetadata | GroupRecord | None]


def read_records(data: bytes, on_bad: Callable[[int, Exception], None]) -> Iterator[Record]:
    """(offset, key, value or None for a tombstone) of each offset-commit
    and group-metadata record in whole v2 batches, as read from the log;
    stops at a batch cut short. Control batches are skipped; a record or
    batch that cannot be read goes to `on_bad(offset, error)` and is skipped
    too, so one bad record cannot keep a coordinator from loading."""
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
                if rec.value is None:
                    yield rec.offset, key, None
                elif isinstance(key, OffsetKey):
                    yield rec.offset, key, decode_offset_value(rec.value)
                else:
                    yield rec.offset, key, decode_group_value(rec.value)
            except RecordFormatError as e:
                on_bad(rec.offset, e)
