"""Property tests of the broker's codecs (no processes): decoding random
bytes only ever raises ProtocolError (requests) or RecordError (record sets);
requests and record sets round-trip."""
from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from cluster.protocol import api, records
from cluster.protocol.frame import ProtocolError, parse_request_header

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
CLIENT_KEYS = sorted(api.CLIENT_APIS)


def _decode_any(frame: bytes):
    hdr = parse_request_header(frame)
    if api.is_supported(hdr.api_key, hdr.api_version) and hdr.api_key in api.CLIENT_APIS:
        return api.decode_request(hdr.api_key, hdr.api_version, frame, hdr.body_offset)
    return hdr


@SETTINGS
@given(st.binary(max_size=300))
def test_random_frames_raise_only_protocol_error(data):
    try:
        _decode_any(data)
    except ProtocolError:
        pass


@SETTINGS
@given(st.sampled_from(CLIENT_KEYS), st.integers(0, 4), st.binary(max_size=200))
def test_random_bodies_raise_only_protocol_error(key, version, body):
    lo, hi, _, _ = api.CLIENT_APIS[key]
    version = lo + version % (hi - lo + 1)
    frame = struct.pack(">hhih", key, version, 1, -1) + body
    try:
        _decode_any(frame)
    except ProtocolError:
        pass


@SETTINGS
@given(st.binary(max_size=400))
def test_random_record_sets_raise_only_record_error(data):
    try:
        records.to_v2(data)
    except records.RecordError as e:
        assert e.code == 2


_values = st.lists(st.one_of(st.none(), st.binary(max_size=50)), min_size=1, max_size=20)


@SETTINGS
@given(_values, st.sampled_from([0, 1, 2]), st.sampled_from([0, 1]))
def test_record_set_conversion_round_trip(values, magic, compression):
    b = MemoryRecordsBuilder(magic, compression, 1 << 20)
    for i, v in enumerate(values):
        b.append(timestamp=1000 + i if magic else None, key=b"k%d" % i, value=v)
    b.close()
    data, headers = records.to_v2(b.buffer())
    assert sum(h.records_count for h in headers) == len(values)
    for down in (0, 1):
        mr = MemoryRecords(records.down_convert(data, down))
        out = []
        while mr.has_next():
            out.extend((r.offset, r.value) for r in mr.next_batch())
        assert out == list(enumerate(values))


@SETTINGS
@given(st.sampled_from(["produce", "fetch", "metadata", "list_offsets"]),
       st.integers(0, 9), st.text(min_size=1, max_size=20), st.integers(0, 1000))
def test_request_round_trip(kind, version, topic, n):
    """Every version served decodes what a client encodes."""
    lo, hi, _, _ = api.CLIENT_APIS[{"produce": api.PRODUCE, "fetch": api.FETCH,
                                    "metadata": api.METADATA,
                                    "list_offsets": api.LIST_OFFSETS}[kind]]
    v = lo + version % (hi - lo + 1)
    if kind == "produce":
        req = ProduceRequest(version=v, acks=-1, timeout_ms=n, topic_data=[(topic, [(n, b"x")])],
                             **({"transactional_id": None} if v >= 3 else {}))
        key = api.PRODUCE
    elif kind == "fetch":
        kw = {"max_bytes": n} if v >= 3 else {}
        if v >= 4:
            kw["isolation_level"] = 0
        if v >= 7:
            kw.update(session_id=0, session_epoch=-1, forgotten_topics_data=[])
        part = (n, n * 7, 3, 1000) if v >= 5 else (n, n * 7, 1000)
        if v >= 9:
            part = (n, n % 5 - 1) + part[1:]  # the sender's leader epoch
        req = FetchRequest(version=v, replica_id=-1, max_wait_ms=n, min_bytes=1,
                           topics=[(topic, [part])], **kw)
        key = api.FETCH
    elif kind == "metadata":
        kw = {"allow_auto_topic_creation": False} if v >= 4 else {}
        req = MetadataRequest(version=v, topics=[(topic,)], **kw)
        key = api.METADATA
    else:
        kw = {"isolation_level": 1} if v >= 2 else {}
        req = ListOffsetsRequest(version=v, replica_id=-1,
                                 topics=[(topic, [(n, -1, 1) if v == 0 else (n, -1)])], **kw)
        key = api.LIST_OFFSETS
    body = bytes(req.encode(version=v))
    frame = struct.pack(">hhih", key, v, 42, 3) + b"cli" + body
    hdr = parse_request_header(frame)
    assert (hdr.api_key, hdr.api_version, hdr.correlation_id, hdr.client_id) == (key, v, 42, "cli")
    decoded = api.decode_request(key, v, frame, hdr.body_offset)
    assert decoded.to_dict() == type(req).decode(body, version=v).to_dict()
    assert decoded.to_dict()[{"produce": "topic_data", "fetch": "topics", "metadata": "topics",
                              "list_offsets": "topics"}[kind]][0]["name" if kind in (
                                  "produce", "metadata", "list_offsets") else "topic"] == topic


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_api_versions_body(version):
    from kafka.protocol.metadata import ApiVersionsResponse
    err = 35 if version == 3 else 0
    resp = ApiVersionsResponse.decode(api.api_versions_body(version, err),
                                      version=0 if err else version)
    assert resp.error_code == err
    assert {k.api_key for k in resp.api_keys} == set(api.SUPPORTED_VERSIONS)


def test_a_flexible_request_header_and_response_header():
    """Header v2's tagged fields are stepped over (KIP-482), even a non-empty
    set; a flexible answer carries header v1 (an empty set); EndTxn v5 reads
    back through kafka-python's codec."""
    from kafka.protocol.producer import EndTxnRequest, EndTxnResponse

    from cluster.protocol.frame import (ProtocolError, frame_response, parse_request_header,
                                        skip_tagged_fields)
    body = bytes(EndTxnRequest(version=5, transactional_id="t", producer_id=7,
                               producer_epoch=1, committed=True).encode(version=5))
    tagged = bytes([2, 0, 1, 0x2A, 5, 2, 0xAB, 0xCD])   # two fields: tag 0 (1 byte), tag 5 (2)
    frame = struct.pack(">hhih", api.END_TXN, 5, 9, 1) + b"c" + tagged + body
    hdr = parse_request_header(frame)
    assert api.is_flexible(api.END_TXN, 5) and not api.is_flexible(api.END_TXN, 2)
    start = skip_tagged_fields(frame, hdr.body_offset)
    assert api.decode_request(api.END_TXN, 5, frame, start).producer_id == 7
    with pytest.raises(ProtocolError):
        skip_tagged_fields(frame[:hdr.body_offset + 5], hdr.body_offset)
    out = frame_response(9, b"xy", flexible=True)
    assert out == struct.pack(">ii", 7, 9) + b"\x00xy"
    resp = EndTxnResponse(version=5, throttle_time_ms=0, error_code=0, producer_id=7,
                          producer_epoch=2)
    assert EndTxnResponse.decode(bytes(resp.encode(version=5)), version=5).producer_epoch == 2
