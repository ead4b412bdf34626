"""cluster/protocol/control_records.py: transaction markers as Kafka writes them."""
from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch

from cluster.log import batch as v2
from cluster.log.errors import CorruptRecordError
from cluster.protocol.control_records import (ControlRecordError, Marker, control_batch,
                                              read_marker)


@pytest.mark.parametrize("commit", [True, False])
def test_a_marker_reads_back_and_kafka_python_sees_a_control_record(commit):
    data = control_batch(42, 3, commit, coordinator_epoch=5, timestamp_ms=1000)
    h = v2.check_batch(data)                      # a valid batch: the CRC covers the control bit
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (42, 3, -1, 1)
    assert h.is_control and h.is_transactional
    assert read_marker(data) == Marker(commit, 5)
    batch = DefaultRecordBatch(data)
    assert batch.is_control_batch and batch.is_transactional
    [record] = list(batch)
    assert (record.commit, record.abort) == (commit, not commit)


def test_a_batch_that_is_not_a_marker_is_refused():
    from kafka.record.default_records import DefaultRecordBatchBuilder
    b = DefaultRecordBatchBuilder(2, 0, True, 42, 3, 0, 1 << 20)
    b.append(0, 1000, b"k", b"v", [])
    with pytest.raises(ControlRecordError, match="not a control batch"):
        read_marker(bytes(b.build()))


def test_a_damaged_marker_fails_its_crc():
    data = bytearray(control_batch(42, 3, True, 5, 1000))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        read_marker(bytes(data))
