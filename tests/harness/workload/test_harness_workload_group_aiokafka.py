"""harness/workload/group_aiokafka.py without a broker: the names of refused
commits, and a member's listener positioning what a rebalance gave it."""
import asyncio

import aiokafka
import aiokafka.errors as E
import pytest
from aiokafka import TopicPartition as TP

from harness.workload.group import commit_outcome
from harness.workload.group_aiokafka import AiokafkaGroupConsumer, commit_error


def raised_from(cause):
    try:
        raise E.CommitFailedError("rebalanced") from cause
    except E.CommitFailedError as e:
        return e


@pytest.mark.parametrize("exc,expected", [
    (raised_from(E.IllegalGenerationError()), ("fail", "ILLEGAL_GENERATION")),
    (raised_from(E.UnknownMemberIdError()), ("fail", "UNKNOWN_MEMBER_ID")),
    (raised_from(E.RebalanceInProgressError()), ("fail", "REBALANCE_IN_PROGRESS")),
    (E.IllegalStateError("No partitions assigned"), ("fail", "_ASSIGNMENT_LOST")),  # never sent
    (asyncio.TimeoutError(), ("info", "timeout")),     # still retrying when we stopped waiting
    (E.KafkaConnectionError(), ("info", "KafkaConnectionError")),
])
def test_commit_errors(exc, expected):
    assert commit_outcome(commit_error(exc)) == expected


class Record:
    def __init__(self, offset, value):
        self.offset, self.value = offset, str(value).encode()


class FakeAIOKafkaConsumer:
    """AIOKafkaConsumer as the member sees it: the first assignment (t/0 and
    t/1, t/0 committed 5) arrives while it starts; getmany() first runs
    what a rebalance would await of the listener, then returns its batch."""

    def __init__(self, **conf):
        self.conf, self.steps, self.paused, self.seeks, self.commits = conf, [], set(), {}, []
        self.committed_at = {0: 5}
        self.seen_paused = set()

    def subscribe(self, topics, listener):
        self.listener = listener

    async def start(self):
        await self.listener.on_partitions_assigned({TP("t", 1), TP("t", 0)})

    async def stop(self):
        pass

    def pause(self, *parts):
        self.paused |= set(parts)

    def resume(self, *parts):
        self.paused -= set(parts)

    async def committed(self, tp):
        if self.committed_at is None:
            await asyncio.sleep(60)                  # the coordinator does not answer
        return self.committed_at.get(tp.partition)

    async def beginning_offsets(self, parts):
        return {tp: 2 for tp in parts}

    def seek(self, tp, offset):
        self.seen_paused.add(tp in self.paused)
        self.seeks[tp] = offset

    def highwater(self, tp):
        return 20

    async def getmany(self, timeout_ms, max_records):
        step = self.steps.pop(0)
        return (await step(self)) if callable(step) else step

    async def commit(self, offsets):
        self.commits.append({tp.partition: o for tp, o in offsets.items()})


def rebalance(revoked, assigned):
    async def step(c):
        c.listener.on_partitions_revoked({TP("t", p) for p in revoked})
        await c.listener.on_partitions_assigned({TP("t", p) for p in assigned})
        return {}
    return step


def test_the_listener_positions_at_the_commit_and_the_member_commits(monkeypatch):
    """Also the first assignment, which may come while the consumer starts."""
    monkeypatch.setattr(aiokafka, "AIOKafkaConsumer", FakeAIOKafkaConsumer)
    monkeypatch.setattr("harness.workload.group_aiokafka.COMMIT_TIMEOUT_S", 0.2)
    lines = []
    m = AiokafkaGroupConsumer("b:1", "g", ["t"], "manual", "c", lambda t, **f: lines.append((t, f)))
    c = m.c
    assert c.conf["group_id"] == "g" and c.conf["enable_auto_commit"] is False
    c.steps = [{TP("t", 0): [Record(5, 50), Record(6, 51)], TP("t", 1): []}]
    assert c.seeks == {TP("t", 0): 5, TP("t", 1): 2} and c.seen_paused == {True}
    assert not c.paused
    assert lines == [("group", {"kind": "assign", "group": "g", "partitions": [
        {"topic": "t", "partition": 0, "position": 5, "committed": 5},
        {"topic": "t", "partition": 1, "position": 2, "committed": -1}]})]
    m.poll(10, 0.1)
    assert [f["offset"] for t, f in lines if t == "invoke"] == [5]     # (1 returned nothing)
    assert c.commits == [{0: 7}]
    c.committed_at = None                          # the OffsetFetch never answers
    c.steps = [rebalance([0, 1], [0])]
    m.poll(10, 0.1)
    groups = [f for t, f in lines if t == "group"]
    assert groups[-2]["kind"] == "revoke" and len(groups[-2]["partitions"]) == 2
    assert groups[-1]["partitions"] == [{"topic": "t", "partition": 0, "position": None,
                                         "committed": None}]
    assert m.position == {("t", 0): None} and not c.paused and m.slot == 2
    m.close()
    assert m.loop.is_closed()


def test_auto_commit_is_refused():
    with pytest.raises(ValueError, match="commits manual or none"):
        AiokafkaGroupConsumer("b:1", "g", ["t"], "auto", "c", lambda t, **f: None)
