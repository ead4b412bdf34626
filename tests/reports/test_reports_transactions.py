"""The transactional anomaly types (docs/anomalies.md, "Transactions (chaoslog)")
on tiny hand-made histories, and the history fields they read
(docs/history-format.md, "Transactions").

Every case runs through the reference checker one by one and through the
Spark checker once for all cases (one batch); each case's expectations hold
for both, and their summaries agree field for field.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

import pytest
from reports_histgen import HistoryBuilder, only, run_json, write_run

from reports import api, reference
from reports.errors import HistoryError
from reports.registry import BY_NAME
from reports.report import render
from reports.summary import ANOMALY_TYPES, TRANSACTION_TYPES, build_summary
from reports.transactions import NO_COMMITTED, NO_PIPELINE, NO_TRANSACTIONS
from reports.validate import validate

CASES = {}
RC = "read_committed"


def case(fn):
    CASES[fn.__name__] = fn
    return fn


# --------------------------------------------------------------------------- building histories


def txn_meta(pipeline=None):
    """run.json's workload of a transactional run (and its pipeline)."""
    workload = {"client": "confluent", "acks": "all", "idempotence": True, "topics": {"t": 2},
                "transactions": True, "abort_ratio": 0.2}
    if pipeline:
        workload["pipeline"] = {"input": "in", "output": "out", "group": "g"}
    return {"workload": workload}


def send(b, proc, value, offset, txn, outcome="ok", topic="t", partition=0, source=None):
    """A send inside transaction `txn` (a pipeline's output carries its `source`)."""
    op = b.invoke_send(proc, value, topic, partition, txn=txn,
                       **({"source": source} if source else {}))
    b.complete_send(op, proc, value, outcome, offset, topic, partition, txn=txn)
    return op


def end(b, proc, txn, intent="commit", outcome="ok", after_ns=0):
    """The txn op that ends `txn` (invoked `after_ns` after the event before)."""
    op = b.op_id()
    b.add(process=proc, op=op, type="invoke", f="txn", txn=txn, intent=intent,
          **({"time": b.time + after_ns} if after_ns else {}))
    done = {} if outcome == "ok" else {"error": "timeout" if outcome == "info" else "INVALID_TXN_STATE"}
    b.add(process=proc, op=op, type=outcome, f="txn", txn=txn, intent=intent, **done)
    return op


def poll(b, proc, records, hw, position=None, topic="t", partition=0, final=False, isolation=RC):
    """A poll at `isolation` (read_committed unless told)."""
    kw = {"isolation": isolation} if isolation else {}
    op = b.invoke_poll(proc, position, topic, partition, final=final, **kw)
    b.complete_poll(op, proc, records, hw, topic=topic, partition=partition, final=final, **kw)
    return op


def final(b, hw, *chunks, topic="t", partition=0):
    """Final reads of a partition at read_committed: each (position, records)
    of `chunks` (a read_committed consumer seeks past aborted records), then
    the empty poll at the high watermark (the last offset is a marker)."""
    for position, records in chunks:
        poll(b, 9, records, hw, position, topic, partition, final=True)
    poll(b, 9, [], hw, hw, topic, partition, final=True)


def source(offset, value, partition=0):
    return {"topic": "in", "partition": partition, "offset": offset, "value": value}


# --------------------------------------------------------------------------- cases


@case
def txn_clean():
    """Commits, aborts, a failed commit, an unknown commit and a transaction
    left open: only the committed values are read at read_committed, the
    others by nobody, which is no anomaly (not lost, not unseen)."""
    b = HistoryBuilder()
    send(b, 0, 1, 0, "p/1")
    send(b, 0, 2, 1, "p/1")
    end(b, 0, "p/1")                                   # marker at 2
    send(b, 0, 3, 3, "p/2")
    end(b, 0, "p/2", intent="abort")                   # marker at 4
    send(b, 0, 4, 5, "p/3")
    send(b, 0, 5, 0, "p/3", partition=1)
    poll(b, 1, [(0, 1), (1, 2)], 7)                    # p/3 still open: nothing of it yet
    end(b, 0, "p/3")                                   # markers t/0 6, t/1 1
    send(b, 0, 6, 7, "p/4")
    end(b, 0, "p/4", outcome="fail")                   # aborted: marker at 8
    send(b, 0, 7, 9, "p/5")
    end(b, 0, "p/5", outcome="info")                   # unknown: it did not commit (marker 10)
    send(b, 2, 8, 11, "q/1")                           # never ended: aborted at its timeout (12)
    poll(b, 1, [(5, 4)], 13, position=5)
    final(b, 13, (0, [(0, 1), (1, 2)]), (5, [(5, 4)]))
    final(b, 2, (0, [(0, 5)]), partition=1)
    return b, txn_meta()


def check_txn_clean(s):
    assert s["valid"] is True and s["final_reads"]["complete"] is True
    only(s)
    assert s["counts"]["send"]["ok"] == 8 and s["counts"]["poll"]["ok"] == 7  # txn ops are neither
    assert {s["oracles"][k] for k in TRANSACTION_TYPES if not k.startswith("eos")} == {"checked"}
    assert s["oracles"]["eos-missing"] == s["oracles"]["eos-duplicate"] == NO_PIPELINE


@case
def txn_fields_in_a_run_that_is_not_transactional():
    """Without run.json's workload.transactions the fields are ignored: the
    aborted value is lost as any acknowledged value would be, and the
    transaction types have no input."""
    b, _ = txn_clean()
    return b, {}


def check_txn_fields_in_a_run_that_is_not_transactional(s):
    only(s, lost=[{"value": 3}], unseen=[{"value": 6}, {"value": 7}, {"value": 8}])
    assert {s["oracles"][k] for k in TRANSACTION_TYPES} == {NO_TRANSACTIONS}


@case
def aborted_txn_read():
    """Values of an aborted transaction (its intent abort, its commit failed,
    no txn op) read at read_committed; read_uncommitted may read them."""
    b = HistoryBuilder()
    send(b, 0, 1, 0, "p/1")
    end(b, 0, "p/1", intent="abort")
    send(b, 0, 2, 2, "p/2")
    end(b, 0, "p/2", outcome="fail")
    send(b, 1, 3, 4, "q/1")
    poll(b, 2, [(0, 1), (2, 2), (4, 3)], 6, isolation=None)   # read_uncommitted: fine
    poll(b, 3, [(0, 1)], 6)
    poll(b, 3, [(2, 2)], 6, position=2)
    poll(b, 3, [(4, 3)], 6, position=4)
    final(b, 6, (4, [(4, 3)]))
    return b, txn_meta()


def check_aborted_txn_read(s):
    assert s["valid"] is False and s["fatal"] == ["aborted-txn-read"]
    only(s, aborted_txn_read=[{"value": 1, "offset": 0, "txn": "p/1", "process": 3, "send_op": 0},
                              {"value": 2, "offset": 2, "txn": "p/2", "process": 3},
                              {"value": 3, "offset": 4, "txn": "q/1", "process": 3}])


@case
def torn_txn():
    """A committed transaction the final log holds half of (the missing value
    is also unseen), and an aborted one the final log holds half of (the
    value it holds is also an aborted-txn-read; the missing one is nothing)."""
    b = HistoryBuilder()
    send(b, 0, 1, 0, "p/1")
    send(b, 0, 2, 0, "p/1", partition=1)
    end(b, 0, "p/1")
    send(b, 0, 3, 2, "p/2")
    send(b, 0, 4, 3, "p/2")
    end(b, 0, "p/2", intent="abort")                   # op 5
    final(b, 5, (0, [(0, 1), (2, 3)]))
    final(b, 1, partition=1)                           # value 2 is gone
    return b, txn_meta()


def check_torn_txn(s):
    assert s["valid"] is False and s["fatal"] == ["unseen", "aborted-txn-read", "torn-txn"]
    only(s, unseen=[{"topic": "t", "partition": 1, "value": 2}],
         aborted_txn_read=[{"value": 3, "offset": 2}],
         torn_txn=[{"topic": "t", "partition": 0, "txn": "p/2", "status": "aborted", "present": [3],
                    "missing": [4], "op": 5, "process": 0},
                   {"topic": "t", "partition": 1, "txn": "p/1", "status": "committed", "present": [1],
                    "missing": [2], "op": 2}])


@case
def torn_txn_unjudged():
    """A partition whose final reads did not complete is not judged: the
    committed value missing there is unseen (not fatal), the run unknown."""
    b = HistoryBuilder()
    send(b, 0, 1, 0, "p/1")
    send(b, 0, 2, 0, "p/1", partition=1)
    end(b, 0, "p/1")
    final(b, 2, (0, [(0, 1)]))
    poll(b, 9, [], 2, 0, partition=1, final=True)       # hw 2, nothing returned: incomplete
    return b, txn_meta()


def check_torn_txn_unjudged(s):
    assert s["valid"] is None and s["fatal"] == []
    only(s, unseen=[{"partition": 1, "value": 2}])


@case
def precommitted_read():
    b = HistoryBuilder()
    send(b, 0, 1, 0, "p/1")
    send(b, 0, 2, 1, "p/1")
    poll(b, 1, [(0, 1)], 1)                             # 2 s before the commit was invoked
    end(b, 0, "p/1", after_ns=2_000_000_000)
    poll(b, 1, [(1, 2)], 3)
    final(b, 3, (0, [(0, 1), (1, 2)]))
    return b, txn_meta()


def check_precommitted_read(s):
    assert s["valid"] is False and s["fatal"] == ["precommitted-read"]
    only(s, precommitted_read=[{"value": 1, "offset": 0, "txn": "p/1", "process": 1, "op": 2,
                                "index": 5, "commit_index": 6}])


@case
def read_just_before_the_commit_was_received():
    """The harness times events as it receives them, worker by worker: a
    read received a few milliseconds before the commit's invocation may
    have followed it (reports/transactions.py, RECEIPT_SKEW_NS). Not
    judged precommitted."""
    b = HistoryBuilder()
    send(b, 0, 1, 0, "p/1")
    poll(b, 1, [(0, 1)], 1)
    end(b, 0, "p/1")
    final(b, 1, (0, [(0, 1)]))
    return b, txn_meta()


def check_read_just_before_the_commit_was_received(s):
    assert s["valid"] is True, s["fatal"]
    only(s)


@case
def txn_reorder():
    """Sent 1 then 2, acknowledged at 1 then 0; in another transaction, sent
    3 then 4, acknowledged in order but read at read_committed the other way
    round (which binds offsets 3 and 4 to two values each)."""
    b = HistoryBuilder()
    a = b.invoke_send(0, 1, txn="p/1")
    c = b.invoke_send(1, 2, txn="p/1")
    b.complete_send(c, 1, 2, "ok", 0, txn="p/1")
    b.complete_send(a, 0, 1, "ok", 1, txn="p/1")
    end(b, 0, "p/1")
    send(b, 0, 3, 3, "p/2")
    send(b, 0, 4, 4, "p/2")
    end(b, 0, "p/2")
    poll(b, 2, [(0, 2), (1, 1), (3, 4), (4, 3)], 6)
    final(b, 6, (0, [(0, 2), (1, 1), (3, 4), (4, 3)]))
    return b, txn_meta()


def check_txn_reorder(s):
    assert s["valid"] is False and s["fatal"] == ["inconsistent-offset", "txn-reorder"]
    only(s, inconsistent_offset=[{"offset": 3}, {"offset": 4}],
         txn_reorder=[{"txn": "p/1", "value": 2, "offset": 0, "previous_value": 1, "previous_offset": 1,
                       "seen": "acknowledged", "op": 1, "previous_op": 0},
                      {"txn": "p/2", "value": 4, "offset": 3, "previous_value": 3, "previous_offset": 4,
                       "seen": "read"}])


def pipeline_input(b):
    """Input values 1..4 at offsets 0..3 of in/0, written without a transaction."""
    for v in (1, 2, 3, 4):
        b.send(0, v, offset=v - 1, topic="in")


def committed(b, offset, partition=0):
    """groups.jsonl's `committed` event of the pipeline's group, after it stopped."""
    return {"seq": 0, "time": b.time, "index": len(b.events), "group": "g", "kind": "committed",
            "topic": "in", "partition": partition, "offset": offset}


@case
def pipeline_clean():
    b = HistoryBuilder()
    pipeline_input(b)
    poll(b, 1, [(0, 1), (1, 2)], 4, topic="in", position=0)
    send(b, 1, 101, 0, "c/1", topic="out", source=source(0, 1))
    send(b, 1, 102, 1, "c/1", topic="out", source=source(1, 2))
    end(b, 1, "c/1")
    poll(b, 1, [(2, 3), (3, 4)], 4, topic="in")
    send(b, 1, 103, 3, "c/2", topic="out", source=source(2, 3))
    send(b, 1, 104, 4, "c/2", topic="out", source=source(3, 4))
    end(b, 1, "c/2")
    final(b, 4, (0, [(0, 1), (1, 2), (2, 3), (3, 4)]), topic="in")
    final(b, 6, (0, [(0, 101), (1, 102), (3, 103), (4, 104)]), topic="out")
    return b, {**txn_meta(pipeline=True), "groups": [committed(b, 4)]}


def check_pipeline_clean(s):
    assert s["valid"] is True
    only(s)
    assert {s["oracles"][k] for k in TRANSACTION_TYPES} == {"checked"}


@case
def pipeline_without_committed_offsets():
    b, _ = pipeline_clean()
    return b, txn_meta(pipeline=True)


def check_pipeline_without_committed_offsets(s):
    assert s["oracles"]["eos-missing"] == NO_COMMITTED and s["oracles"]["eos-duplicate"] == "checked"


@case
def eos_anomalies():
    """The group committed 3: input 3 (offset 2) has its only output in an
    aborted transaction (eos-missing); input 1 has two committed outputs, and
    input 4 (offset 3, not committed) one (eos-duplicate)."""
    b = HistoryBuilder()
    pipeline_input(b)
    poll(b, 1, [(0, 1), (1, 2)], 4, topic="in", position=0)
    send(b, 1, 101, 0, "c/1", topic="out", source=source(0, 1))
    send(b, 1, 102, 1, "c/1", topic="out", source=source(1, 2))
    end(b, 1, "c/1")
    poll(b, 2, [(0, 1)], 4, topic="in", position=0)          # a second consumer, in another txn
    send(b, 2, 105, 3, "d/1", topic="out", source=source(0, 1))
    end(b, 2, "d/1")
    poll(b, 1, [(2, 3), (3, 4)], 4, topic="in")
    send(b, 1, 103, 5, "c/2", topic="out", source=source(2, 3))
    end(b, 1, "c/2", intent="abort")
    send(b, 1, 104, 7, "c/3", topic="out", source=source(3, 4))
    end(b, 1, "c/3")
    final(b, 4, (0, [(0, 1), (1, 2), (2, 3), (3, 4)]), topic="in")
    final(b, 9, (0, [(0, 101), (1, 102)]), (3, [(3, 105)]), (7, [(7, 104)]), topic="out")
    return b, {**txn_meta(pipeline=True), "groups": [committed(b, 3)]}


def check_eos_anomalies(s):
    assert s["valid"] is False and s["fatal"] == ["eos-missing", "eos-duplicate"]
    only(s, eos_missing=[{"topic": "in", "partition": 0, "value": 3, "offset": 2, "group": "g",
                          "committed": 3}],
         eos_duplicate=[{"topic": "in", "value": 1, "offset": 0, "outputs": [101, 105], "committed": 3,
                         "process": 9},
                        {"topic": "in", "value": 4, "offset": 3, "outputs": [104], "committed": 3}])


@case
def read_committed_skips_aborted_records():
    """One read_committed poll returns 0, 1, 5: offset 3 holds a value of an
    aborted transaction (markers at 2 and 4), which it skips; not a
    poll-skip. The pipeline's group sent offset 4 to an aborted transaction,
    then 2 to a committed one: not a commit that went back (commit-regressed
    judges commits outside transactions)."""
    b = HistoryBuilder()
    send(b, 0, 1, 0, "p/1")
    send(b, 0, 2, 1, "p/1")
    end(b, 0, "p/1")
    send(b, 0, 3, 3, "p/2")
    end(b, 0, "p/2", intent="abort")
    send(b, 0, 4, 5, "p/3")
    end(b, 0, "p/3")
    poll(b, 1, [(0, 1), (1, 2), (5, 4)], 7, position=0)
    final(b, 7, (0, [(0, 1), (1, 2), (5, 4)]))
    final(b, 0, partition=1)
    offsets = [{"topic": "t", "partition": 0, "offset": 4}]
    groups = [{"seq": i, "time": b.time, "index": len(b.events), "group": "g",
               "member": "pipeline-1", "kind": "commit", "commit": c, "type": t, "txn": txn,
               "offsets": [{**offsets[0], "offset": o}]}
              for i, (c, t, txn, o) in enumerate([(1, "invoke", "p/2", 4), (1, "ok", "p/2", 4),
                                                   (2, "invoke", "p/3", 2), (2, "ok", "p/3", 2)])]
    return b, {**txn_meta(), "groups": groups}


def check_read_committed_skips_aborted_records(s):
    assert s["valid"] is True
    only(s)
    assert s["oracles"]["commit-regressed"].startswith("no input")


# Malformed transaction fields: both checkers refuse the history, naming the line.
BAD = {
    "unknown intent": ({"f": "txn", "txn": "p/1", "intent": "maybe"}, "unknown intent 'maybe'"),
    "txn op without intent": ({"f": "txn", "txn": "p/1"}, "missing required field 'intent'"),
    "unknown isolation": ({"f": "poll", "topic": "t", "partition": 0, "isolation": "serializable"},
                          "unknown isolation 'serializable'"),
    "source without offset": ({"f": "send", "topic": "t", "partition": 0, "value": 5,
                               "source": {"topic": "in", "partition": 0, "value": 1}},
                              "source must name topic, partition, offset and value"),
    "source not an object": ({"f": "send", "topic": "t", "partition": 0, "value": 5,
                              "source": "in/0/1"}, "not a JSON object"),
}


def bad_run(root: Path, name: str) -> Path:
    """txn_clean with one more invocation, the malformed one, at line 2."""
    b, meta = txn_clean()
    events = b.events[:1] + [{"index": 1, "time": 1, "process": 50, "op": 500, "type": "invoke",
                              **BAD[name][0]}] + b.events[1:]
    for i, ev in enumerate(events):
        ev["index"] = i
    return write_run(root / name.replace(" ", "-"), events, run_json(run=name, **meta))


# --------------------------------------------------------------------------- running them


def _write(root: Path, name: str, fmt: str = "jsonl") -> Path:
    b, meta = CASES[name]()
    meta = dict(meta)
    groups = meta.pop("groups", None)
    d = write_run(root / f"{name}.{fmt}", b.events, run_json(run=name, **meta), fmt=fmt,
                  parts=1 if fmt == "jsonl" else 2)
    if groups is not None:
        (d / "groups.jsonl").write_text("".join(json.dumps(e) + "\n" for e in groups))
    return d


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("txn")
    return {name: _write(root, name) for name in CASES}


@pytest.fixture(scope="module")
def parquet_runs(tmp_path_factory) -> dict[str, Path]:
    """Cases in Parquet parts (`source` is a struct column there)."""
    root = tmp_path_factory.mktemp("txn-parquet")
    return {name: _write(root, name, "parquet") for name in ("txn_clean", "eos_anomalies")}


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference(name, runs):
    globals()[f"check_{name}"](build_summary(reference.check(runs[name])))


def test_every_transaction_type_has_a_case_and_a_report_section(runs):
    """Some case finds each transaction type; the report gives it a section
    with the type's line for the instance."""
    found = {}
    for name in sorted(CASES):
        s = build_summary(reference.check(runs[name]))
        for kind in TRANSACTION_TYPES:
            if s["anomaly_counts"][kind]:
                found.setdefault(kind, s)
    assert set(found) == set(TRANSACTION_TYPES)
    for kind, s in found.items():
        html = render(s, {})
        line = BY_NAME[kind].line(s["anomalies"][kind][0])
        assert f'<h3 id="{kind}">' in html and escape(line) in html, kind


def test_the_validator_accepts_transactions(runs):
    for name in CASES:
        assert validate(runs[name]) == [], name


def test_the_validator_flags_a_transaction_s_recorder_bugs(tmp_path):
    b = HistoryBuilder()
    send(b, 0, 1, 0, "p/1")
    end(b, 0, "p/1")
    send(b, 0, 2, 1, "p/1")                              # line 5: after its txn op
    op = b.invoke_send(0, 3, txn="p/2")
    b.complete_send(op, 0, 3, "ok", 2, txn="p/3")        # line 8: another txn than invoked
    d = write_run(tmp_path / "run", b.events, run_json(**txn_meta()))
    assert [(v.rule, v.line) for v in validate(d)] == [("txn", 5), ("pairing", 8)]


@pytest.mark.parametrize("name", sorted(BAD))
def test_the_reference_refuses_malformed_transaction_fields(name, tmp_path):
    with pytest.raises(HistoryError) as e:
        reference.check(bad_run(tmp_path, name))
    assert e.value.line == 2 and BAD[name][1] in str(e.value)
    first = validate(bad_run(tmp_path / "v", name))[0]
    assert (first.rule, first.line) == ("malformed", 2)


def test_the_spark_checker_agrees(spark, runs, parquet_runs, tmp_path):
    """One batch: every case's expectations hold for the Spark checker (a
    few cases in Parquet too), its summary.json is the reference's field for
    field, and it refuses the malformed histories as the reference does."""
    good = [*runs.items(), *parquet_runs.items()]
    bad = {name: bad_run(tmp_path, name) for name in BAD}
    results = api.findings([d for _, d in good] + list(bad.values()), spark=spark)
    for (name, d), f in zip(good, results):
        got = build_summary(f)
        globals()[f"check_{name}"](got)
        want = build_summary(reference.check(d))
        assert (got.pop("checker"), want.pop("checker")) == ("spark", "reference")
        assert json.loads(json.dumps(got)) == json.loads(json.dumps(want)), name
    for name, e in zip(bad, results[len(good):]):
        assert isinstance(e, HistoryError) and e.line == 2 and BAD[name][1] in str(e), (name, e)
