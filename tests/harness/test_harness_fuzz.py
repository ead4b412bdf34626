"""harness/fuzz.py: the cases are reproducible and well-aimed, the replica
file check finds what it must, and a short live run against a real cluster
(local backend) ends with no finding."""
from __future__ import annotations

import json
import struct
from collections import Counter

import pytest

from cluster.protocol import api, control
from cluster.protocol.frame import parse_request_header, skip_tagged_fields
from harness import fuzz, kafka_wire
from harness.cli import main as chaoslog

TARGET = fuzz.Target([fuzz.Broker(b, "127.0.0.1", 9090 + b, 3) for b in (1, 2, 3)],
                     controller=2, controller_epoch=4, topics={"fuzz-a": 3, "fuzz-b": 1})


def test_a_case_is_the_same_every_time_and_depends_on_its_index():
    a, b = fuzz.make_case(7, 11, TARGET), fuzz.make_case(7, 11, TARGET)
    assert (a.kind, a.what, a.chunks) == (b.kind, b.what, b.chunks)
    assert len({tuple(fuzz.make_case(7, i, TARGET).chunks) for i in range(50)}) > 45


def test_every_kind_and_every_client_api_is_generated():
    cases = [fuzz.make_case(1, i, TARGET) for i in range(1500)]
    assert set(Counter(c.kind for c in cases)) == set(fuzz.KINDS)
    assert {c.api_key for c in cases if c.kind == "client"} == set(api.SERVED_APIS)


def test_client_cases_are_requests_the_broker_decodes():
    for i in range(600):
        case = fuzz.make_case(3, i, TARGET)
        if case.kind != "client":
            continue
        frame = b"".join(case.chunks)
        (size,) = struct.unpack_from(">i", frame)
        assert size == len(frame) - 4
        hdr = parse_request_header(frame[4:])
        assert (hdr.api_key, hdr.api_version, hdr.correlation_id) == (
            case.api_key, case.version, case.correlation_id)
        if hdr.api_key != api.API_VERSIONS:
            body = (skip_tagged_fields(frame[4:], hdr.body_offset)
                    if api.is_flexible(hdr.api_key, hdr.api_version) else hdr.body_offset)
            api.decode_request(hdr.api_key, hdr.api_version, frame[4:], body)


def test_control_cases_always_name_a_broker_and_expect_a_refusal():
    for i in range(1500):
        case = fuzz.make_case(5, i, TARGET)
        if case.kind != "control" or case.api_key == control.CONTROLLED_SHUTDOWN:
            continue
        _hdr, body = control.decode_request(b"".join(case.chunks)[4:])
        assert body.broker_id != -1, case.what
        assert body.broker_id != case.broker.id or body.broker_epoch != -1, case.what
        assert case.allowed_errors == fuzz.REFUSED
        stale = body.controller_epoch < TARGET.controller_epoch
        elsewhere = body.broker_id != case.broker.id or body.broker_epoch < case.broker.start_epoch
        assert stale or elsewhere, case.what


def test_damaged_batches_are_damaged():
    import random
    from cluster.protocol.records import RecordError, to_v2
    rng = random.Random(0)
    for _ in range(200):
        how, batch = fuzz.damaged_batch(rng)
        with pytest.raises(RecordError):
            to_v2(batch)


def _segment(path, batches: list[tuple[int, list[bytes]]]) -> None:
    data = b""
    for base, values in batches:
        b = bytearray(kafka_wire.record_batch(values))
        struct.pack_into(">q", b, 0, base)
        data += bytes(b)
    path.write_bytes(data)


def test_the_replica_file_check(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    _segment(d / f"{0:020d}.log", [(0, [b"a", b"b"]), (2, [b"c"])])
    _segment(d / f"{3:020d}.log", [(3, [b"d"])])
    assert fuzz.check_replica_files(tmp_path) == []
    _segment(d / f"{3:020d}.log", [(4, [b"d"])])            # a gap
    assert any("base offset 4 after 3" in v for v in fuzz.check_replica_files(tmp_path))
    raw = bytearray((d / f"{0:020d}.log").read_bytes())
    raw[-1] ^= 1                                            # a flipped bit
    (d / f"{0:020d}.log").write_bytes(bytes(raw))
    assert any("CRC mismatch" in v for v in fuzz.check_replica_files(tmp_path))
    (d / f"{0:020d}.log").write_bytes(bytes(raw[:20]))       # a torn batch
    assert any("batch length" in v for v in fuzz.check_replica_files(tmp_path))
    (d / f"{0:020d}.log").write_bytes(bytes(raw[:8]))        # a torn header
    assert any("trailing bytes" in v for v in fuzz.check_replica_files(tmp_path))


def test_first_error_finds_a_nested_error_code():
    from kafka.protocol.producer import ProduceResponse
    resp = ProduceResponse(version=3, throttle_time_ms=0,
                           responses=[("t", [(0, 0, 5, -1), (1, 6, -1, -1)])])
    decoded = ProduceResponse.decode(resp.encode(version=3), version=3)
    assert fuzz._first_error(decoded) == 6


def test_a_short_run_against_a_live_cluster_finds_nothing(tmp_path, capsys):
    out = tmp_path / "fuzz.json"
    code = chaoslog(["fuzz", "--cases", "300", "--seed", "1", "--check-every", "100",
                     "--out", str(out)])
    report = json.loads(out.read_text())
    assert code == 0, report["findings"]
    assert report["cases"] == 300 and report["crashes"] == 0 and report["health_checks"] >= 3
    assert report["log_check"]["violations"] == []
    assert set(report["kinds"]) == set(fuzz.KINDS)
    assert report["outcomes"].get("answered", 0) > 100
