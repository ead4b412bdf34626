"""Record-set conversion between what clients send or read and what the log keeps.

The log stores RecordBatch v2 only (magic 2). Produce v0-v2 clients send
MessageSets of magic 0 or 1 messages, possibly compressed inside a wrapper
message; those are converted on produce into one uncompressed v2 batch per
partition append (offsets are reassigned by the log anyway). Fetch v0-v3
clients cannot parse v2, so reads for them are down-converted: magic 0 for
Fetch v0-v1 and magic 1 for Fetch v2-v3, as Kafka does.

v2 input is validated batch by batch (length, magic, CRC-32C) without looking
at the records, so the produce hot path costs one header parse and one CRC per
batch. Only the old formats pay for a per-record conversion.
"""
from __future__ import annotations

import struct

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder

from cluster.log import batch as v2
from cluster.log.errors import CorruptRecordError
from cluster.protocol import errors as E

# offset int64, size int32: the 12 bytes every entry of every format starts with.
_ENTRY = struct.Struct(">qi")
_MAGIC_AT = 16  # magic byte position in v0/v1 messages and in v2 batches alike
_HUGE = 2**31 - 1
# The smallest v0 message after its 12-byte entry header: crc, magic, attributes,
# key length, value length.
_MIN_LEGACY_SIZE = 14


class RecordError(Exception):
    """Records a produce request cannot append; `code` is the Kafka error."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


_CODEC_MASK = 0x07


def _check_compressed(records, h: v2.BatchHeader) -> None:
    """A compressed batch's CRC covers its compressed bytes only: decompress
    it and read every record, as Kafka's leader does before it appends, or
    consumers would be served a batch nobody can read."""
    try:
        for _record in DefaultRecordBatch(bytes(records[h.position:h.position + h.size])):
            pass   # reads as many records as the header counts, or raises
    except Exception as e:  # noqa: BLE001 - the codecs raise whatever they raise
        raise RecordError(E.CORRUPT_MESSAGE, f"a compressed batch cannot be read: "
                                             f"{type(e).__name__}") from None


def magic_of(records) -> int:
    """The message format of a record set (of its first entry)."""
    if len(records) <= _MAGIC_AT:
        raise RecordError(E.CORRUPT_MESSAGE, f"record set of {len(records)} bytes is too short")
    return records[_MAGIC_AT]


def to_v2(records) -> tuple[bytes, list[v2.BatchHeader]]:
    """Validate a produce request's records and return them as v2 batches
    together with their headers. Raises RecordError (CORRUPT_MESSAGE) for
    anything that is not a whole, CRC-correct record set of one format."""
    if records is None or len(records) == 0:
        raise RecordError(E.CORRUPT_MESSAGE, "empty record set")
    magic = magic_of(records)
    if magic == 2:
        try:
            headers = list(v2.iter_batches(records))
        except CorruptRecordError as e:
            raise RecordError(E.CORRUPT_MESSAGE, str(e)) from None
        for h in headers:
            if h.attributes & _CODEC_MASK:
                _check_compressed(records, h)
        return bytes(records), headers
    if magic in (0, 1):
        data = _legacy_to_v2(records, magic)
        return data, [v2.parse_header(data, 0)]
    raise RecordError(E.CORRUPT_MESSAGE, f"unknown message format magic {magic}")


def _legacy_to_v2(records, magic: int) -> bytes:
    mv = memoryview(records)
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=_HUGE)
    pos, n, count = 0, len(records), 0
    try:
        while pos < n:
            if n - pos < _ENTRY.size + _MIN_LEGACY_SIZE:
                raise RecordError(E.CORRUPT_MESSAGE, f"truncated message at byte {pos}")
            _, size = _ENTRY.unpack_from(mv, pos)
            end = pos + _ENTRY.size + size
            if size < _MIN_LEGACY_SIZE or end > n:
                raise RecordError(E.CORRUPT_MESSAGE, f"bad message size {size} at byte {pos}")
            if mv[pos + _MAGIC_AT] != magic:
                raise RecordError(E.CORRUPT_MESSAGE, "mixed message formats in one message set")
            wrapper = LegacyRecordBatch(mv[pos:end], magic)
            if not wrapper.validate_crc():
                raise RecordError(E.CORRUPT_MESSAGE, f"message at byte {pos} fails its CRC")
            for rec in wrapper:
                if not rec.validate_crc():
                    raise RecordError(E.CORRUPT_MESSAGE, "inner message fails its CRC")
                ts = rec.timestamp if magic == 1 and rec.timestamp is not None else -1
                builder.append(count, timestamp=ts, key=_b(rec.key), value=_b(rec.value),
                               headers=[])
                count += 1
            pos = end
    except RecordError:
        raise
    except Exception as e:  # asserts, struct errors, codec errors inside kafka-python
        raise RecordError(E.CORRUPT_MESSAGE, f"undecodable message set: {e!r}") from None
    return bytes(builder.build())


def _b(x):
    return None if x is None else bytes(x)


def down_convert(data, magic: int) -> bytes:
    """v2 batches (as read from the log) as a magic 0 or 1 MessageSet with
    absolute offsets, uncompressed."""
    if not data:
        return b""
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=_HUGE)
    mv = memoryview(data)
    pos, n = 0, len(data)
    while pos + v2.LOG_OVERHEAD <= n:
        _, size = v2.peek_offset_and_size(mv, pos)
        if pos + size > n:
            break  # a partial batch at the end of a read: clients skip it too
        batch = DefaultRecordBatch(mv[pos:pos + size])
        if not batch.is_control_batch:
            for rec in batch:
                builder.append(rec.offset, rec.timestamp if magic == 1 else None,
                               _b(rec.key), _b(rec.value))
        pos += size
    return bytes(builder.build())


def batch_headers(data) -> list[v2.BatchHeader]:
    """Headers of whole v2 batches in `data`, without CRC checks (for bytes that
    come out of our own log or were already validated)."""
    out = []
    pos, n = 0, len(data)
    while pos + v2.HEADER_SIZE <= n:
        h = v2.parse_header(data, pos)
        if h.size < v2.HEADER_SIZE or pos + h.size > n:
            break
        out.append(h)
        pos += h.size
    return out
