"""harness/workload/group.py without a broker: which client commits how,
fail or info for a commit, and the worker lines every group member writes."""
import pytest

from harness.workload.clients import CLIENTS
from harness.workload.group import (GROUP_CLIENTS, ConfluentGroupConsumer, GroupMember,
                                    check_member, commit_outcome, committed_offsets, offsets_of)
from reports.groups import NO_OFFSET
from harness.workload.runner import WorkloadSpec


@pytest.mark.parametrize("name,expected", [
    ("ILLEGAL_GENERATION", ("fail", "ILLEGAL_GENERATION")),      # refused: not stored
    ("UNKNOWN_MEMBER_ID", ("fail", "UNKNOWN_MEMBER_ID")),
    ("REBALANCE_IN_PROGRESS", ("fail", "REBALANCE_IN_PROGRESS")),
    ("_ASSIGNMENT_LOST", ("fail", "_ASSIGNMENT_LOST")),          # refused before sending
    ("REQUEST_TIMED_OUT", ("info", "timeout")),                  # may have been stored
    ("KafkaTimeoutError", ("info", "timeout")),
    ("NOT_COORDINATOR", ("info", "NOT_COORDINATOR")),
    ("KafkaConnectionError", ("info", "KafkaConnectionError")),
])
def test_a_commit_fails_only_when_refused(name, expected):
    assert commit_outcome(name) == expected


def test_every_client_has_a_member_and_auto_only_where_every_commit_is_seen():
    assert set(GROUP_CLIENTS) == set(CLIENTS)
    assert "auto" in GROUP_CLIENTS["confluent"]
    for client in ("kafka-python", "aiokafka"):
        check_member(client, "manual")
        with pytest.raises(ValueError, match=f"--commit auto with --client {client}"):
            check_member(client, "auto")
        with pytest.raises(ValueError, match="commits manual or none"):
            WorkloadSpec({"t": 1}, client=client, sub_via="subscribe", commit="auto")
        WorkloadSpec({"t": 1}, client=client, sub_via="subscribe", commit="none")
    with pytest.raises(ValueError, match="needs --client"):
        check_member("raw", "manual")


class _TP:
    """confluent-kafka's TopicPartition as `committed()` answers it: its
    `error` cannot be set through the library's constructor."""

    def __init__(self, topic, partition, offset=-1001, error=None):
        self.topic, self.partition, self.offset, self.error = topic, partition, offset, error


class _Consumer:
    """committed() answers each partition as `answers` says; assign() is recorded."""

    def __init__(self, answers):
        self.answers, self.assigned = answers, None

    def committed(self, parts, timeout):
        return [_TP(tp.topic, tp.partition, *self.answers[tp.partition]) for tp in parts]

    def assign(self, parts):
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in parts]


def test_an_offset_fetch_answered_with_an_error_is_unknown_not_no_offset():
    """Issue 34: librdkafka leaves a partition its OffsetFetch failed for at
    -1001 with the error beside it. Taken as "nothing committed", the member
    re-read from the log start and the checker blamed the broker for the
    regression. It is unknown (committed null) and the library fetches it."""
    assert committed_offsets([_TP("t", 0, 7), _TP("t", 1), _TP("t", 2, -1001, "NOT_COORDINATOR")]
                             ) == {("t", 0): 7, ("t", 1): -1001, ("t", 2): None}
    lines = []
    member = ConfluentGroupConsumer.__new__(ConfluentGroupConsumer)
    GroupMember.__init__(member, "g", "manual", lambda t, **f: lines.append((t, f)))
    member._log_start = lambda tp: 0
    consumer = _Consumer({0: (7,), 1: (), 2: (-1001, "COORDINATOR_LOAD_IN_PROGRESS")})
    member._assigned(consumer, [_TP("t", p, -1001) for p in (0, 1, 2)])
    [(kind, assign)] = [x for x in lines if x[1].get("kind") == "assign"]
    assert [(p["partition"], p["position"], p["committed"]) for p in assign["partitions"]] == [
        (0, 7, 7), (1, 0, NO_OFFSET), (2, None, None)]
    assert consumer.assigned == [("t", 0, 7), ("t", 1, 0), ("t", 2, -1001)]
    assert any("t/2: COORDINATOR_LOAD_IN_PROGRESS" in f.get("msg", "") for t, f in lines
               if t == "log")


def test_member_lines():
    """An assignment opens a slot; a poll is one history op per partition
    invoked at the position; commits pair invoke and outcome by id."""
    lines = []
    m = GroupMember("g", "manual", lambda t, **f: lines.append((t, f)))
    m.assigned([("t", 0, 3, 3), ("t", 1, 0, -1), ("t", 2, None, None)])
    assert lines[-1] == ("group", {"kind": "assign", "group": "g", "partitions": [
        {"topic": "t", "partition": 0, "position": 3, "committed": 3},
        {"topic": "t", "partition": 1, "position": 0, "committed": -1},
        {"topic": "t", "partition": 2, "position": None, "committed": None}]})
    reached = m.polled({("t", 0): [[3, 30], [4, 31]], ("t", 2): [[7, 1]]},
                       lambda t, p: {0: 10}.get(p))
    assert reached == [("t", 0, 5), ("t", 2, 8)]
    assert lines[1:5] == [
        ("invoke", {"slot": 1, "seq": 1, "f": "poll", "topic": "t", "partition": 0, "offset": 3,
                    "group": "g"}),
        ("ok", {"slot": 1, "seq": 1, "records": [[3, 30], [4, 31]], "high_watermark": 10}),
        ("invoke", {"slot": 1, "seq": 2, "f": "poll", "topic": "t", "partition": 2,
                    "offset": None, "group": "g"}),
        # no watermark known: the records prove it was past the last one
        ("ok", {"slot": 1, "seq": 2, "records": [[7, 1]], "high_watermark": 8})]
    assert m.position == {("t", 0): 5, ("t", 1): 0, ("t", 2): 8}
    ref = m.commit_invoked(offsets_of(reached))
    m.commit_done(ref, offsets=offsets_of(reached))
    ref2 = m.commit_invoked(offsets_of(reached[:1]))
    m.commit_done(ref2, error="UNKNOWN_MEMBER_ID")
    commits = [f for t, f in lines if f.get("kind") == "commit"]
    assert [(c["outcome"], c["commit"]) for c in commits] == [
        ("invoke", 1), ("ok", 1), ("invoke", 2), ("fail", 2)]
    assert commits[1]["offsets"] == [{"topic": "t", "partition": 0, "offset": 5},
                                     {"topic": "t", "partition": 2, "offset": 8}]
    assert commits[3]["error"] == "UNKNOWN_MEMBER_ID" and "auto" not in commits[3]
    m.revoked([("t", 0)], lost=True)
    assert lines[-1] == ("group", {"kind": "revoke", "group": "g", "lost": True,
                                   "partitions": [{"topic": "t", "partition": 0}]})
    m.assigned([("t", 0, 5, 5)])
    assert m.slot == 2 and set(m.position) == {("t", 0), ("t", 1), ("t", 2)}
