"""Control batches: a transaction's COMMIT or ABORT marker in a partition's
log (KIP-98; docs/design.md#transactions), in Kafka's format so that
clients read them as they read a Kafka broker's.

A control batch is a RecordBatch v2 with the control and transactional
attribute bits, the producer's id and epoch, no sequence (-1), and one
record whose key is (int16 version 0, int16 type: 0 ABORT, 1 COMMIT) and
whose value is (int16 version 0, int32 coordinator epoch).
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from cluster.log import batch as v2

ABORT, COMMIT = 0, 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class Marker(NamedTuple):
    commit: bool
    coordinator_epoch: int


class ControlRecordError(ValueError):
    """A batch that is not a well-formed control batch, and why."""


def control_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                  timestamp_ms: int) -> bytes:
    """One marker as a batch at base offset 0 (the log gives it its offset)."""
    b = DefaultRecordBatchBuilder(2, 0, True, producer_id, producer_epoch, -1, 1 << 20)
    b.append(0, timestamp_ms, _KEY.pack(0, COMMIT if commit else ABORT),
             _VALUE.pack(0, coordinator_epoch), [])
    buf = bytearray(b.build())
    v2.add_attributes(buf, 0, v2.ATTR_CONTROL)
    return bytes(buf)


def read_marker(batch: bytes) -> Marker:
    """The marker a control batch carries (its CRC checked)."""
    h = v2.check_batch(batch)
    if not (h.is_control and h.is_transactional):
        raise ControlRecordError(f"the batch at offset {h.base_offset} is not a control batch "
                                 f"(attributes {h.attributes:#x})")
    records = list(DefaultRecordBatch(bytes(batch[:h.size])))
    if len(records) != 1:
        raise ControlRecordError(f"a control batch of {len(records)} records, not 1")
    r = records[0]
    key, value = r.key or b"", r.value or b""
    if len(key) != _KEY.size or len(value) < _VALUE.size:
        raise ControlRecordError(f"a control record of {len(key)} key and {len(value)} value bytes")
    version, kind = _KEY.unpack(key)
    if version != 0 or kind not in (ABORT, COMMIT):
        raise ControlRecordError(f"a control record of version {version}, type {kind}")
    _version, coordinator_epoch = _VALUE.unpack_from(value)
    return Marker(kind == COMMIT, coordinator_epoch)
