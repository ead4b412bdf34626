"""The controller<->broker codec: every body roundtrips; garbage only ever
raises ProtocolError."""
import struct

import pytest
from hypothesis import given, settings, strategies as st

from cluster.protocol import control as c
from cluster.protocol import errors as E

i16 = st.integers(-2**15, 2**15 - 1)
i32 = st.integers(-2**31, 2**31 - 1)
i64 = st.integers(-2**63, 2**63 - 1)
text = st.text(max_size=20)
ids = st.lists(i32, max_size=5).map(tuple)

pstate = st.builds(c.PartitionState, text, i32, i32, i32, ids, i32, ids, text)
endpoint = st.builds(c.BrokerEndpoint, i32, text, i32)
tp = st.builds(c.TopicPartition, text, i32)
perr = st.builds(c.PartitionError, text, i32, i16)
marker = st.builds(c.TxnMarker, i64, i16, st.booleans(), st.lists(tp, max_size=3).map(tuple), i32)
marker_result = st.builds(c.TxnMarkerResult, i64, st.lists(perr, max_size=3).map(tuple))

requests = st.one_of(
    st.builds(c.LeaderAndIsrRequest, i32, i32, st.booleans(),
              st.lists(pstate, max_size=4).map(tuple), st.lists(endpoint, max_size=3).map(tuple),
              i32, i64),
    st.builds(c.StopReplicaRequest, i32, i32, st.booleans(), st.lists(tp, max_size=4).map(tuple),
              i32, i64),
    st.builds(c.UpdateMetadataRequest, i32, i32, st.lists(pstate, max_size=4).map(tuple),
              st.lists(endpoint, max_size=3).map(tuple), i32, i64),
    st.builds(c.ControlledShutdownRequest, i32, i64),
    st.builds(c.WriteTxnMarkersRequest, st.lists(marker, max_size=3).map(tuple)),
)
responses = st.one_of(
    st.builds(c.LeaderAndIsrResponse, i16, st.lists(perr, max_size=4).map(tuple)),
    st.builds(c.StopReplicaResponse, i16, st.lists(perr, max_size=4).map(tuple)),
    st.builds(c.UpdateMetadataResponse, i16),
    st.builds(c.ControlledShutdownResponse, i16, st.lists(tp, max_size=4).map(tuple)),
    st.builds(c.WriteTxnMarkersResponse, st.lists(marker_result, max_size=3).map(tuple)),
)


@given(requests, i32, st.one_of(st.none(), text))
def test_controller_codec_request_roundtrip(body, corr, client_id):
    frame = c.encode_request(body, corr, client_id)
    (size,) = struct.unpack(">i", frame[:4])
    assert size == len(frame) - 4
    header, decoded = c.decode_request(frame[4:])
    assert decoded == body
    assert header == c.RequestHeader(body.API_KEY, c.API_VERSION, corr, client_id)


@given(responses, i32)
def test_controller_codec_response_roundtrip(body, corr):
    frame = c.encode_response(body, corr)
    assert c.decode_response_with_header(body.API_KEY, frame[4:]) == (corr, body)
    assert c.decode_response(body.API_KEY, frame[4:]) == body


@settings(max_examples=500)
@given(st.binary(max_size=200))
def test_controller_codec_garbage_never_crashes(data):
    try:
        c.decode_request(data)
    except c.ProtocolError:
        pass
    for key in c.RESPONSE_TYPES:
        try:
            c.decode_response(key, data)
        except c.ProtocolError:
            pass


@settings(max_examples=300)
@given(requests, st.data())
def test_controller_codec_mutated_frames_never_crash(body, data):
    frame = bytearray(c.encode_request(body, 1, "x")[4:])
    if frame:
        i = data.draw(st.integers(0, len(frame) - 1))
        frame[i] = data.draw(st.integers(0, 255))
        cut = data.draw(st.integers(0, len(frame)))
        frame = frame[:cut]
    try:
        c.decode_request(bytes(frame))
    except c.ProtocolError:
        pass


def test_controller_codec_strictness():
    body = c.ControlledShutdownRequest(1, 2)
    frame = c.encode_request(body, 3, None)[4:]
    with pytest.raises(c.ProtocolError):
        c.decode_request(frame + b"\x00")  # trailing byte
    with pytest.raises(c.ProtocolError):
        c.decode_request(frame[:-1])
    bad_version = frame[:2] + b"\x00\x00" + frame[4:]  # v0: before requests named their broker
    with pytest.raises(c.ProtocolError):
        c.decode_request(bad_version)
    with pytest.raises(c.ProtocolError):
        c.encode_request(c.UpdateMetadataResponse(0), 1)
    with pytest.raises(c.ProtocolError):
        c.encode_request(c.ControlledShutdownRequest(2**40, 0), 1)
    # a huge array count is refused without allocating
    huge = c.encode_request(c.StopReplicaRequest(1, 1, False, ()), 1)[4:]
    huge = huge[:-16] + struct.pack(">i", 2**31 - 1) + huge[-12:]  # the count, then broker id, epoch
    with pytest.raises(c.ProtocolError):
        c.decode_request(huge)


def test_controller_codec_header_peek_and_response_for():
    req = c.LeaderAndIsrRequest(1, 5, False, (c.PartitionState("t", 0, 1, 1, (1,), 0, (1,)),))
    frame = c.encode_request(req, 9, "controller-1")[4:]
    header, pos = c.decode_request_header(frame)
    assert header.api_key == c.LEADER_AND_ISR and pos == 2 + 2 + 4 + 2 + len("controller-1")
    resp = c.response_for(req, E.STALE_CONTROLLER_EPOCH)
    assert resp.error == 11 and resp.partitions == (c.PartitionError("t", 0, 11),)
    assert E.name(11) == "STALE_CONTROLLER_EPOCH"
