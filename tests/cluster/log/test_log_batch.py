"""RecordBatch v2 header parsing, validation and in-place restamping, checked
against batches built and decoded by kafka-python."""
from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

sys.path.insert(0, str(Path(__file__).parent))
from log_support import make_batch  # noqa: E402

from cluster.log.batch import (HEADER_SIZE, check_batch, iter_batches, parse_header,  # noqa: E402
                               set_base_offset, set_leader_epoch, valid_prefix)
from cluster.log.errors import CorruptRecordError  # noqa: E402

values_st = st.lists(st.binary(max_size=40), min_size=1, max_size=8)
producer_st = st.one_of(
    st.just((-1, -1, -1)),
    st.tuples(st.integers(0, 2**40), st.integers(0, 2**15 - 1), st.integers(0, 2**31 - 1)))
settings_ = settings(max_examples=60, deadline=None)


def test_header_is_61_bytes():
    assert HEADER_SIZE == 61


@settings_
@given(values=values_st, producer=producer_st, ts=st.integers(0, 2**41))
def test_parse_matches_kafka_python(values, producer, ts):
    pid, pepoch, seq = producer
    data = make_batch(values, producer_id=pid, producer_epoch=pepoch, base_sequence=seq,
                      timestamp=ts)
    h = check_batch(data)
    ref = DefaultRecordBatch(data)
    assert h.size == len(data) == ref.size_in_bytes
    assert (h.base_offset, h.magic, h.crc) == (0, 2, ref.crc)
    assert h.records_count == len(values) == h.last_offset_delta + 1
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (pid, pepoch, seq)
    assert (h.first_timestamp, h.max_timestamp) == (ts, ts + len(values) - 1)
    assert h.last_offset == len(values) - 1 and h.next_offset == len(values)


@settings_
@given(values=values_st, base=st.integers(0, 2**62), epoch=st.integers(-1, 2**31 - 1))
def test_restamp_keeps_crc_valid(values, base, epoch):
    buf = bytearray(make_batch(values))
    set_base_offset(buf, 0, base)
    set_leader_epoch(buf, 0, epoch)
    h = check_batch(buf)  # no CRC recompute needed
    assert (h.base_offset, h.partition_leader_epoch) == (base, epoch)
    ref = DefaultRecordBatch(bytes(buf))
    assert ref.validate_crc()
    assert [r.offset for r in ref] == [base + i for i in range(len(values))]
    assert [r.value for r in DefaultRecordBatch(bytes(buf))] == values


@settings_
@given(values=values_st, data=st.data())
def test_any_flip_in_crc_region_is_detected(values, data):
    buf = bytearray(make_batch(values))
    pos = data.draw(st.integers(17, len(buf) - 1))  # the crc field and what it covers
    buf[pos] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(CorruptRecordError):
        check_batch(buf)


@settings_
@given(batches=st.lists(values_st, min_size=1, max_size=5), cut=st.integers(1, 10**6))
def test_iter_batches_and_partial_tail(batches, cut):
    blobs = []
    base = 0
    for vals in batches:
        b = bytearray(make_batch(vals))
        set_base_offset(b, 0, base)
        base += len(vals)
        blobs.append(bytes(b))
    buf = b"".join(blobs)
    assert [h.size for h in iter_batches(buf)] == [len(b) for b in blobs]
    headers, valid, reason = valid_prefix(buf, 0)
    assert (valid, reason) == (len(buf), None) and len(headers) == len(blobs)

    cut = cut % len(buf)  # keep [0, cut)
    part = buf[:cut]
    whole = [h.size for h in iter_batches(part, allow_partial_tail=True)]
    sizes, total = [], 0
    for b in blobs:
        if total + len(b) > cut:
            break
        sizes.append(len(b))
        total += len(b)
    assert whole == sizes
    if total < cut:
        with pytest.raises(CorruptRecordError, match="truncated"):
            list(iter_batches(part))
    headers, valid, _ = valid_prefix(part, 0)
    assert valid == total


def test_rejects_wrong_magic_and_bad_length():
    buf = bytearray(make_batch(2))
    buf[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        check_batch(buf)
    buf = bytearray(make_batch(2))
    struct.pack_into(">i", buf, 8, 10)
    with pytest.raises(CorruptRecordError, match="length"):
        check_batch(buf)
    with pytest.raises(CorruptRecordError, match="truncated"):
        parse_header(b"\0" * 60)


def test_valid_prefix_requires_contiguous_offsets():
    a = bytearray(make_batch(3))
    b = bytearray(make_batch(2))
    set_base_offset(b, 0, 4)  # a ends at 3: a gap
    headers, valid, reason = valid_prefix(bytes(a + b), 0)
    assert len(headers) == 1 and valid == len(a) and "expected 3" in reason
    headers, valid, reason = valid_prefix(bytes(a), 5)
    assert headers == [] and valid == 0
