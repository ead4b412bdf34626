"""Workload pure logic: error classification, the worker's line protocol and
the harness-side mapping of worker lines onto the history."""
import json
import threading
from types import SimpleNamespace

import pytest

from contracts.deadline import wait_until
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
                     ({"sub_via": "subscribe", "client": "kafka-python", "commit": "auto"},
                      "commits manual or none")):
        with pytest.raises(ValueError, match=why):
            WorkloadSpec({"t": 1}, **bad)


# -- group members (harness/workload/group.py) without a broker -----------------------------

class FakeMessage:
    def __init__(self, topic, partition, offset, value):
        self._m = (topic, partition, offset, str(value).encode())

    def error(self):
        return None

    def topic(self):
        return self._m[0]

    def partition(self):
        return self._m[1]

    def offset(self):
        return self._m[2]

    def value(self):
        return self._m[3]


class FakeConsumer:
    """confluent_kafka.Consumer as a group member sees it: consume() first
    runs the rebalance callback of a pending assignment, then returns `batches`."""

    def __init__(self, conf):
        self.conf, self.batches, self.committed_at, self.stored, self.commits = conf, [], {}, [], []
        self.commit_error = None

    def subscribe(self, topics, on_assign, on_revoke, on_lost):
        self.on_assign, self.on_revoke = on_assign, on_revoke

    def committed(self, parts, timeout):
        from confluent_kafka import KafkaError, KafkaException, TopicPartition
        if self.committed_at is None:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return [TopicPartition(tp.topic, tp.partition, self.committed_at.get(tp.partition, -1001))
                for tp in parts]

    def get_watermark_offsets(self, tp, timeout=None, cached=False):
        return 0, 10

    def assign(self, parts):
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in parts]

    def unassign(self):
        self.assigned = []

    def consume(self, num_messages, timeout):
        step = self.batches.pop(0)
        return step(self) if callable(step) else step

    def commit(self, offsets, asynchronous):
        from confluent_kafka import KafkaException
        self.commits.append([(tp.partition, tp.offset) for tp in offsets])
        if self.commit_error:
            raise KafkaException(self.commit_error)
        return offsets

    def store_offsets(self, offsets):
        self.stored.append([(tp.partition, tp.offset) for tp in offsets])


def member(monkeypatch, commit):
    import confluent_kafka
    from harness.workload.group import ConfluentGroupConsumer
    monkeypatch.setattr(confluent_kafka, "Consumer", FakeConsumer)
    lines = []
    m = ConfluentGroupConsumer("b:1", "g", ["t"], commit, "c", lambda t, **f: lines.append((t, f)))
    return m, m.c, lines


def rebalance(callback, *parts):
    """A consume() that only runs a rebalance callback ("on_assign" or "on_revoke")."""
    from confluent_kafka import TopicPartition

    def step(c):
        getattr(c, callback)(c, [TopicPartition("t", p) for p in parts])
        return []
    return step


def test_a_member_starts_at_the_commit_polls_per_partition_and_commits(monkeypatch):
    from confluent_kafka import KafkaError
    m, c, lines = member(monkeypatch, "manual")
    c.committed_at = {0: 3}                   # partition 0 committed 3, partition 1 nothing
    c.batches = [rebalance("on_assign", 0, 1), [FakeMessage("t", 0, 3, 30), FakeMessage("t", 1, 0, 40),
                                FakeMessage("t", 0, 4, 31)], [FakeMessage("t", 0, 5, 32)]]
    m.poll(10, 0.1)
    assert c.assigned == [("t", 0, 3), ("t", 1, 0)]       # the position is set, not left to the library
    assert lines[0] == ("group", {"kind": "assign", "group": "g", "partitions": [
        {"topic": "t", "partition": 0, "position": 3, "committed": 3},
        {"topic": "t", "partition": 1, "position": 0, "committed": -1}]})
    m.poll(10, 0.1)
    polls = [(t, f) for t, f in lines if t in ("invoke", "ok")]
    assert polls[0] == ("invoke", {"slot": 1, "seq": 1, "f": "poll", "topic": "t", "partition": 0,
                                   "offset": 3, "group": "g"})
    assert polls[1][1]["records"] == [[3, 30], [4, 31]] and polls[1][1]["high_watermark"] == 10
    assert polls[2][1]["partition"] == 1 and polls[2][1]["offset"] == 0
    assert c.commits == [[(0, 5), (1, 1)]]
    commits = [f for t, f in lines if t == "group" and f["kind"] == "commit"]
    assert [x["outcome"] for x in commits] == ["invoke", "ok"]
    assert commits[1]["offsets"] == [{"topic": "t", "partition": 0, "offset": 5},
                                     {"topic": "t", "partition": 1, "offset": 1}]
    c.commit_error = KafkaError(KafkaError.ILLEGAL_GENERATION)
    m.poll(10, 0.1)
    assert [f["offset"] for t, f in lines if t == "invoke"][-1] == 5   # where the last poll left it
    assert [f.get("outcome") for t, f in lines if t == "group"][-1] == "fail"
    c.batches = [rebalance("on_revoke", 0)]
    m.poll(10, 0.1)
    assert lines[-1] == ("group", {"kind": "revoke", "group": "g", "lost": False,
                                   "partitions": [{"topic": "t", "partition": 0}]})
    assert list(m.position) == [("t", 1)]
    c.committed_at = None                      # the OffsetFetch fails: the library chooses
    c.batches = [rebalance("on_assign", 0)]
    m.poll(10, 0.1)
    assert lines[-1][1]["partitions"][0] == {"topic": "t", "partition": 0, "position": None,
                                             "committed": None}
    assert c.assigned == [("t", 0, -1001)] and m.slot == 2   # (-1001: librdkafka's "invalid")


def test_auto_commits_cover_only_reported_records(monkeypatch):
    from confluent_kafka import TopicPartition
    m, c, lines = member(monkeypatch, "auto")
    assert c.conf["enable.auto.commit"] is True and c.conf["enable.auto.offset.store"] is False
    c.batches = [rebalance("on_assign", 0), [FakeMessage("t", 0, 0, 1), FakeMessage("t", 0, 1, 2)]]
    m.poll(10, 0.1)
    m.poll(10, 0.1)
    assert c.stored == [[(0, 2)]] and c.commits == []      # stored after the poll was written
    c.conf["on_commit"](None, [TopicPartition("t", 0, 2)])
    c.conf["on_commit"](None, [TopicPartition("t", 0, -1001)])   # nothing to commit: no line
    commits = [f for t, f in lines if t == "group" and f["kind"] == "commit"]
    assert [(x["outcome"], x["auto"]) for x in commits] == [("invoke", True), ("ok", True)]


# -- a producer that stopped at a fatal client error -------------------------------------------

class ExitingHandle(FakeHandle):
    """A worker that prints nothing and exits with `code`."""

    def __init__(self, name, code):
        super().__init__([])
        self.name, self.code = name, code
        self.terminated = False

    def wait(self, timeout):
        return self.code

    def terminate(self):
        self.terminated = True


def test_a_producer_stopped_by_a_fatal_client_error_is_replaced_once(tmp_path):
    """librdkafka's idempotent producer stops for good at UNKNOWN_PRODUCER_ID
    (a topic deleted and created again): its worker exits EXIT_FATAL and a new
    instance takes its place, as an application would restart it. Other
    exits, and any exit once the workload stops, start nothing."""
    from harness.workload import Workload
    from harness.workload.clients import EXIT_FATAL
    rec = HistoryRecorder(tmp_path / "h.jsonl")
    codes = iter([EXIT_FATAL, 0])
    launched = []

    def launch(name, argv):
        launched.append((name, argv))
        return ExitingHandle(name, next(codes))

    w = Workload(rec, "127.0.0.1:9", WorkloadSpec({"t": 1}, producers=1, consumers=0),
                 launcher=launch)
    w.start()
    wait_until(lambda: len(launched) == 2 and all(not s.thread.is_alive() for s in w.streams), 5)
    assert [n for n, _ in launched] == ["producer-1", "producer-2"]
    # The same producer again: the same settings, a new worker id.
    (old, new) = (argv for _, argv in launched)
    assert [a for a, b in zip(old, new) if a != b] == ["1"] and old[0] == "producer"
    assert w.replaced == {"producer-1": "producer-2"}            # the second exit (0) is final
    assert set(w.clients) == {"producer-1", "producer-2"}
    w._stopping.set()
    w._replace_if_fatal(w.streams[0], EXIT_FATAL)
    assert len(launched) == 2
    rec.close()
