"""harness/workload/group_kafka_python.py without a broker: the names of
refused commits, and how a member positions what a rebalance gave it."""
import kafka
import kafka.errors as E
import pytest
from kafka import TopicPartition as TP

from harness.workload.group import commit_outcome
from harness.workload.group_kafka_python import KafkaPythonGroupConsumer, commit_error


@pytest.mark.parametrize("exc,expected", [
    (E.CommitFailedError(E.IllegalGenerationError()), ("fail", "ILLEGAL_GENERATION")),
    (E.CommitFailedError(E.UnknownMemberIdError()), ("fail", "UNKNOWN_MEMBER_ID")),
    (E.CommitFailedError(E.RebalanceInProgressError()), ("fail", "REBALANCE_IN_PROGRESS")),
    # refused by kafka-python itself: no current generation, never sent
    (E.CommitFailedError("Offset commit cannot be completed since the consumer is not part "
                         "of an active group"), ("fail", "_ASSIGNMENT_LOST")),
    (E.RebalanceInProgressError("undergoing a rebalance"), ("fail", "REBALANCE_IN_PROGRESS")),
    (E.KafkaTimeoutError(), ("info", "timeout")),                 # retried until the timeout
    (E.OffsetMetadataTooLargeError(), ("info", "OFFSET_METADATA_TOO_LARGE")),
])
def test_commit_errors(exc, expected):
    assert commit_outcome(commit_error(exc)) == expected


class Record:
    def __init__(self, offset, value):
        self.offset, self.value = offset, str(value).encode()


class FakeKafkaConsumer:
    """KafkaConsumer as the member sees it: poll() first runs what a
    rebalance would call on the listener, then returns its batch."""

    def __init__(self, **conf):
        self.conf, self.steps, self.paused, self.seeks, self.commits = conf, [], set(), {}, []
        self.committed_at = {}

    def subscribe(self, topics, listener):
        self.listener = listener

    def pause(self, *parts):
        self.paused |= set(parts)

    def resume(self, *parts):
        self.paused -= set(parts)

    def poll(self, timeout_ms, max_records):
        step = self.steps.pop(0)
        return step(self) if callable(step) else step

    def committed(self, tp, timeout_ms):
        if self.committed_at is None:
            raise E.KafkaTimeoutError()
        return self.committed_at.get(tp.partition)

    def beginning_offsets(self, parts, timeout_ms):
        return {tp: 2 for tp in parts}

    def seek(self, tp, offset):
        assert tp in self.paused                   # positioned before it may be fetched
        self.seeks[tp] = offset

    def highwater(self, tp):
        return 20

    def commit(self, offsets, timeout_ms):
        self.commits.append({tp.partition: om.offset for tp, om in offsets.items()})


def rebalance(revoked, assigned):
    def step(c):
        c.listener.on_partitions_revoked({TP("t", p) for p in revoked})
        c.listener.on_partitions_assigned({TP("t", p) for p in assigned})
        # records of a paused partition are never handed over
        return {TP("t", p): [Record(9, 9)] for p in assigned if TP("t", p) not in c.paused}
    return step


def test_a_rebalance_pauses_then_the_member_positions_records_and_commits(monkeypatch):
    monkeypatch.setattr(kafka, "KafkaConsumer", FakeKafkaConsumer)
    lines = []
    m = KafkaPythonGroupConsumer("b:1,b:2", "g", ["t"], "manual", "c",
                                 lambda t, **f: lines.append((t, f)))
    c = m.c
    assert c.conf["group_id"] == "g" and c.conf["enable_auto_commit"] is False
    c.committed_at = {0: 5}                      # 0 committed 5, 1 nothing (log start 2)
    c.steps = [rebalance([], [0, 1]),
               {TP("t", 0): [Record(5, 50), Record(6, 51)], TP("t", 1): [Record(2, 60)]}]
    m.poll(10, 0.1)
    assert c.seeks == {TP("t", 0): 5, TP("t", 1): 2} and not c.paused
    assert lines == [("group", {"kind": "assign", "group": "g", "partitions": [
        {"topic": "t", "partition": 0, "position": 5, "committed": 5},
        {"topic": "t", "partition": 1, "position": 2, "committed": -1}]})]
    m.poll(10, 0.1)
    assert [f["offset"] for t, f in lines if t == "invoke"] == [5, 2]
    assert c.commits == [{0: 7, 1: 3}]
    assert [f["outcome"] for t, f in lines if t == "group" and f["kind"] == "commit"] == [
        "invoke", "ok"]
    # the coordinator moved on: the next rebalance takes 1, and its OffsetFetch fails
    c.committed_at = None
    c.steps = [rebalance([0, 1], [0])]
    m.poll(10, 0.1)
    assert lines[-3] == ("group", {"kind": "revoke", "group": "g", "lost": False, "partitions": [
        {"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}]})
    assert lines[-2][0] == "log"                  # (why the commit is unknown)
    assert lines[-1][1]["partitions"] == [{"topic": "t", "partition": 0, "position": None,
                                           "committed": None}]
    assert m.position == {("t", 0): None} and m.slot == 2 and not c.paused
    c.steps = [rebalance([0], [])]
    m.poll(10, 0.1)
    c.listener.on_partitions_lost(set())          # nothing held: no line
    assert lines[-1][1]["kind"] == "revoke" and m.position == {}


def test_auto_commit_is_refused():
    with pytest.raises(ValueError, match="commits manual or none"):
        KafkaPythonGroupConsumer("b:1", "g", ["t"], "auto", "c", lambda t, **f: None)
