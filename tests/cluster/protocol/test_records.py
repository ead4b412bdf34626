"""cluster/protocol/records.py: what a produce request's records must be.
A compressed batch's CRC covers the compressed bytes only, so garbage under
a valid CRC is caught by decompressing (found by the protocol fuzzer: such a
batch was appended and then served to consumers that cannot read it)."""
from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

from cluster.protocol import errors as E
from cluster.protocol.records import RecordError, to_v2


def _batch(values, compression: int = 0) -> bytearray:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 20)
    for i, v in enumerate(values):
        b.append(i, timestamp=1000 + i, key=None, value=v, headers=[])
    out = bytearray(b.build())
    assert struct.unpack_from(">h", out, 21)[0] & 7 == compression  # compressed as asked
    return out


def _recrc(batch: bytearray) -> bytes:
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, calc_crc32c(bytes(batch[21:])))
    return bytes(batch)


def test_a_compressed_batch_is_accepted_whole():
    data, headers = to_v2(bytes(_batch([b"a" * 100, b"b"], compression=1)))
    assert [h.records_count for h in headers] == [2]


def test_garbage_under_a_valid_crc_in_a_compressed_batch_is_refused():
    batch = _batch([b"a" * 100], compression=1)
    del batch[61:]
    batch += b"\x1f\x8b garbage, not gzip"
    with pytest.raises(RecordError) as e:
        to_v2(_recrc(batch))
    assert e.value.code == E.CORRUPT_MESSAGE


def test_a_compressed_batch_holding_fewer_records_than_its_header_says_is_refused():
    batch = _batch([b"x" * 100, b"y" * 100], compression=1)
    struct.pack_into(">i", batch, 57, 3)          # records count
    with pytest.raises(RecordError) as e:
        to_v2(_recrc(batch))
    assert e.value.code == E.CORRUPT_MESSAGE
