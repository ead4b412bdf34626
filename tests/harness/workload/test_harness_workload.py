"""Workload pure logic: error classification, the worker's line protocol and
the harness-side mapping of worker lines onto the history."""
import json
import threading
from types import SimpleNamespace

import pytest

from harness.history import HistoryRecorder, read_history
from harness.workload.clients import ProducerSettings, _acks_done, _poll_ok
from harness.workload.errors import canonical, classify_send, kafka_python_name
from harness.workload.runner import WorkloadSpec, _Stream
from harness.workload.worker import Out, RateLimiter, parse_min_end, parse_partitions


# -- fail or info ---------------------------------------------------------------------

@pytest.mark.parametrize("name,single,never_sent,expected", [
    ("_MSG_TIMED_OUT", True, False, ("info", "timeout")),
    ("REQUEST_TIMED_OUT", True, False, ("info", "timeout")),
    ("_TRANSPORT", True, False, ("info", "_TRANSPORT")),
    ("NOT_ENOUGH_REPLICAS", True, False, ("fail", "NOT_ENOUGH_REPLICAS")),
    ("NOT_ENOUGH_REPLICAS", False, False, ("info", "NOT_ENOUGH_REPLICAS")),  # an earlier try may have landed
    ("NOT_ENOUGH_REPLICAS_AFTER_APPEND", True, False, ("info", "NOT_ENOUGH_REPLICAS_AFTER_APPEND")),
    # a leader turned follower answers this to appended, uncommitted requests
    ("NOT_LEADER_OR_FOLLOWER", True, False, ("info", "NOT_LEADER_FOR_PARTITION")),
    ("UNKNOWN_TOPIC_OR_PARTITION", False, False, ("info", "UNKNOWN_TOPIC_OR_PART")),
    ("MSG_SIZE_TOO_LARGE", False, False, ("fail", "MSG_SIZE_TOO_LARGE")),  # same bytes, same answer
    ("MESSAGE_SIZE_TOO_LARGE", False, False, ("fail", "MSG_SIZE_TOO_LARGE")),
    ("_QUEUE_FULL", False, False, ("fail", "_QUEUE_FULL")),
    ("KafkaConnectionError", True, False, ("info", "KafkaConnectionError")),
    ("KAFKA_STORAGE_ERROR", True, False, ("info", "KAFKA_STORAGE_ERROR")),
    ("SOMETHING_NEW", True, False, ("info", "SOMETHING_NEW")),
    ("SOMETHING_NEW", False, True, ("fail", "SOMETHING_NEW")),
])
def test_classify_send(name, single, never_sent, expected):
    assert classify_send(name, single_attempt=single, never_sent=never_sent) == expected


def test_kafka_python_names():
    import kafka.errors as e
    assert kafka_python_name(e.NotEnoughReplicasError()) == "NOT_ENOUGH_REPLICAS"
    assert canonical(kafka_python_name(e.KafkaTimeoutError())) == "timeout"
    assert kafka_python_name(ValueError("x")) == "ValueError"


def test_outcomes_of_successes_and_polls():
    assert _acks_done("all", 7) == ("ok", {"offset": 7})
    assert _acks_done("0", -1)[0] == "info"       # acks=0: nothing was acknowledged
    assert _poll_ok([], 5) == ("ok", {"records": [], "high_watermark": 5})
    assert _poll_ok([[3, 9]], None) == ("ok", {"records": [[3, 9]], "high_watermark": 4})
    assert _poll_ok([], None)[0] == "fail"


def test_producer_settings():
    assert ProducerSettings(acks="-1").acks == "all"
    assert ProducerSettings(idempotent=True).retries > 0
    with pytest.raises(ValueError):
        ProducerSettings(acks="2")
    with pytest.raises(ValueError):
        WorkloadSpec({})
    with pytest.raises(ValueError):
        WorkloadSpec({"t": 1}, client="java")
    assert WorkloadSpec({"b": 2, "a": 1}).partitions() == [("a", 0), ("b", 0), ("b", 1)]


# -- worker helpers -------------------------------------------------------------------

def test_worker_parsing():
    assert parse_partitions("t/0, my.topic-2/11") == [("t", 0), ("my.topic-2", 11)]
    with pytest.raises(SystemExit):
        parse_partitions("t0")
    assert parse_min_end("t/0=17,u/2=0") == {("t", 0): 17, ("u", 2): 0}


def test_rate_limiter():
    r = RateLimiter(0)
    assert all(r.ready() for _ in range(100))
    r = RateLimiter(10)
    ready = sum(r.ready() for _ in range(1000))
    assert 1 <= ready <= 11


def test_out_writes_json_lines():
    import io
    buf = io.StringIO()
    Out(buf).emit(type="invoke", slot=0, seq=1, f="send", value=5)
    assert json.loads(buf.getvalue()) == {"type": "invoke", "slot": 0, "seq": 1, "f": "send", "value": 5}


# -- stream -> history ------------------------------------------------------------------

class FakeHandle:
    name = "producer-7"

    def __init__(self, lines):
        self._lines = lines

    def lines(self):
        yield from self._lines


def lines(*events):
    return [(e if isinstance(e, str) else json.dumps(e)) + "\n" for e in events]


def test_stream_maps_slots_and_retires_after_info(tmp_path):
    rec = HistoryRecorder(tmp_path / "h.jsonl")
    logs = []
    s = _Stream(7, "producer-7", FakeHandle(lines(
        {"type": "invoke", "slot": 0, "seq": 1, "f": "send", "topic": "t", "partition": 0, "value": 7000000000},
        {"type": "invoke", "slot": 1, "seq": 2, "f": "send", "topic": "t", "partition": 1, "value": 7000000001},
        {"type": "info", "slot": 0, "seq": 1, "error": "timeout"},
        {"type": "ok", "slot": 1, "seq": 2, "offset": 0},
        {"type": "invoke", "slot": 0, "seq": 3, "f": "send", "topic": "t", "partition": 0, "value": 7000000002},
        {"type": "log", "msg": "hello"},
        "not json", '"a string"', '{"type": "ok", "slot": 0}',
        {"type": "ok", "slot": 5, "seq": 99},
    )), rec, logs.append)
    s.thread.join(5)
    rec.close()
    ev = list(read_history(tmp_path / "h.jsonl"))
    procs = [e["process"] for e in ev]
    assert procs[0] == procs[2] and procs[1] == procs[3]
    assert procs[4] not in procs[:4]                  # slot 0 retired after info
    assert ev[4]["op"] == ev[5]["op"] and ev[5]["type"] == "info" and ev[5]["error"] == "worker-exited"
    assert ev[3]["value"] == 7000000001 and ev[3]["offset"] == 0
    assert all(e["node"] == "producer-7" for e in ev if e["f"] == "send")  # the producer instance
    assert any("hello" in m for m in logs) and any("unknown op" in m for m in logs)


def test_status_lines_reach_the_callback(tmp_path):
    rec = HistoryRecorder(tmp_path / "h.jsonl")
    got = []
    s = _Stream(1, "final-1", FakeHandle(lines({"type": "status", "topic": "t", "partition": 0, "complete": True})),
                rec, lambda m: None, got.append)
    s.thread.join(5)
    rec.close()
    assert got == [{"topic": "t", "partition": 0, "complete": True}]


def test_group_lines_go_to_groups_jsonl_and_an_open_commit_ends_as_info(tmp_path):
    """A member's polls stay history polls (with their group); its assign and
    commits go to groups.jsonl; a commit open when the worker dies is unknown."""
    from reports.groups import read_groups
    rec = HistoryRecorder(tmp_path / "history.jsonl")
    offsets = [{"topic": "t", "partition": 0, "offset": 1}]
    s = _Stream(3, "consumer-3", FakeHandle(lines(
        {"type": "group", "kind": "assign", "group": "g", "partitions": [
            {"topic": "t", "partition": 0, "position": 0, "committed": -1}]},
        {"type": "invoke", "slot": 1, "seq": 1, "f": "poll", "topic": "t", "partition": 0,
         "offset": 0, "group": "g"},
        {"type": "ok", "slot": 1, "seq": 1, "records": [[0, 5]], "high_watermark": 1},
        {"type": "group", "kind": "commit", "outcome": "invoke", "commit": 1, "group": "g",
         "offsets": offsets},
        {"type": "group", "kind": "commit", "outcome": "ok", "commit": 1, "group": "g",
         "offsets": offsets},
        {"type": "group", "kind": "commit", "outcome": "invoke", "commit": 2, "group": "g",
         "offsets": offsets},
    )), rec, lambda m: None)
    s.thread.join(5)
    rec.close()
    ev = list(read_history(tmp_path / "history.jsonl"))
    assert [e["group"] for e in ev] == ["g", "g"]        # the completion inherits the group
    groups = read_groups(tmp_path)
    assert [(g["kind"], g.get("type")) for g in groups] == [
        ("assign", None), ("commit", "invoke"), ("commit", "ok"), ("commit", "invoke"),
        ("commit", "info")]
    assert groups[-1]["error"] == "worker-exited" and groups[-1]["commit"] == 2
    assert all(g["member"] == "consumer-3" for g in groups)
    assert groups[0]["index"] == 0 and groups[1]["index"] == 2   # placed among history events
    assert [g["seq"] for g in groups] == list(range(5))


def test_group_settings_are_checked():
    spec = WorkloadSpec({"t": 1}, sub_via="subscribe", commit="auto")
    assert WorkloadSpec.from_json(spec.to_json()) == spec
    for bad, why in (({"sub_via": "both"}, "sub_via"), ({"commit": "sometimes"}, "commit"),
                     ({"sub_via": "subscribe", "client": "kafka-python"}, "needs --client")):
        with pytest.raises(ValueError, match=why):
            WorkloadSpec({"t": 1}, **bad)
