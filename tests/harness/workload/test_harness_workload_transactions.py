"""harness/workload/transactions.py: what the transactional loop records
(docs/history-format.md, "Transactions"), with a fake producer (the loop's
logic only; the real producer runs against the built-in broker in
tests/cluster/server/test_transactions_e2e.py and the transactional suite)."""
from __future__ import annotations

import random

from harness.workload import transactions
from harness.workload.clients import EXIT_FATAL


class FakeProducer:
    """Acknowledges every send at the next offset; each end() answers from `ends`."""

    op_timeout_s = 1.0

    def __init__(self, ends):
        self.ends = list(ends)
        self.fatal = None
        self.pending = []
        self.offset = 0

    def init(self):
        pass

    def begin(self):
        pass

    def send(self, topic, partition, value, done):
        self.pending.append(done)

    def flush(self, timeout):
        for done in self.pending[:-1]:       # the last one is never delivered
            done("ok", {"offset": self.offset})
            self.offset += 1
        self.pending = []
        return 0

    def end(self, commit):
        outcome = self.ends.pop(0)
        if not self.ends:
            self.fatal = "stop"
        return outcome


def _run(ends, abort_ratio=0.0):
    events = []
    code = transactions.run(FakeProducer(ends), [("t", 0), ("t", 1)], 3, 7, 10**9, abort_ratio,
                            lambda **e: events.append(e), lambda: False, random.Random(1))
    return code, events


def test_each_transaction_sends_then_ends_and_every_op_carries_its_transaction():
    code, events = _run([("ok", {}), ("fail", {"error": "X"}), ("info", {"error": "timeout"})])
    assert code == EXIT_FATAL                          # the fake turned fatal after its last end
    ends = [(e["txn"], e["type"], e["intent"]) for e in events
            if "intent" in e and e["type"] != "invoke"]
    assert ends == [("w7/1", "ok", "commit"), ("w7/2", "fail", "commit"),
                    ("w7/3", "info", "commit")]
    first = [e for e in events if e.get("txn") == "w7/1"]
    kinds = [(e["type"], e.get("f")) for e in first]
    # Three sends invoked, two acknowledged, one never delivered (info), then the end.
    assert kinds[:3] == [("invoke", "send")] * 3
    assert sorted(t for t, f in kinds[3:6]) == ["info", "ok", "ok"]
    assert kinds[6:] == [("invoke", "txn"), ("ok", None)]
    values = [e["value"] for e in events if e.get("f") == "send"]
    assert len(set(values)) == len(values) and all(v // 10**9 == 7 for v in values)


def test_the_abort_ratio_decides_the_intent():
    _, events = _run([("ok", {})] * 50, abort_ratio=0.5)
    intents = [e["intent"] for e in events if e.get("f") == "txn"]
    assert 10 < intents.count("abort") < 40 and intents.count("commit") > 10


class FakePipe:
    """Two rounds of the same input (the first transaction aborts, so its
    inputs come again); its producer never turns fatal."""

    group = "g"

    def __init__(self):
        self.tx = FakeProducer([("ok", {}), ("ok", {})])
        self.rounds = [{("in", 0): [[0, 11], [1, 12]]}, {("in", 0): [[0, 11], [1, 12]]}]
        self.position = {}
        self.rewinds = 0

    @property
    def fatal(self):
        return None

    def rewind(self):
        self.rewinds += 1

    def read(self, timeout):
        return self.rounds.pop(0) if self.rounds else {}

    def high_watermark(self, tp):
        return 2

    def send_offsets(self, offsets):
        return "ok", {}

    def committed(self):
        return {("in", 0): self.position.get(("in", 0), -1)}


def test_the_pipeline_writes_one_output_per_input_and_sends_its_offsets():
    from harness.workload import pipeline
    pipe = FakePipe()
    pipe.tx.flush = lambda timeout: [d("ok", {"offset": i}) for i, d in
                                     enumerate(pipe.tx.pending)] and 0
    events = []
    rng = random.Random(0)
    rng.random = iter([0.0, 0.9]).__next__            # abort, then commit (ratio 0.5)
    calls = iter(range(100))
    pipeline.run(pipe, "out", 1, 5, 10**9, 0.5, lambda **e: events.append(e),
                 lambda: next(calls) > 2, rng)
    sends = [e for e in events if e.get("f") == "send"]
    assert [s["source"]["value"] for s in sends] == [11, 12, 11, 12]
    assert {s["topic"] for s in sends} == {"out"}
    ends = [(e["txn"], e["intent"], e["type"]) for e in events
            if "intent" in e and e["type"] != "invoke"]
    assert ends == [("w5/1", "abort", "ok"), ("w5/2", "commit", "ok")]
    assert pipe.rewinds == 2            # at the start, and after the abort
    commits = [e for e in events if e.get("kind") == "commit"]
    assert [(c["outcome"], c["txn"]) for c in commits] == [
        ("invoke", "w5/1"), ("ok", "w5/1"), ("invoke", "w5/2"), ("ok", "w5/2")]
    assert [e for e in events if e.get("kind") == "committed"] == [
        {"type": "group", "kind": "committed", "group": "g", "topic": "in", "partition": 0,
         "offset": 2}]
