"""The history validator: each rule of history-format.md, with the offending line."""

from __future__ import annotations

import json

import pytest
from reports_histgen import HistoryBuilder, run_json, write_run

from reports.validate import validate


def good():
    b = HistoryBuilder()
    b.nemesis("kill", "start", ["broker-1"])
    b.send(0, 1, offset=0)
    b.send(1, 2, outcome="info")
    b.nemesis("kill", "stop", ["broker-1"])
    b.poll(2, [(0, 1)], hw=1, final=True)
    return b.events


def rules(tmp_path, events, meta=None):
    d = write_run(tmp_path / "run", events, meta or run_json())
    return [(v.rule, v.line) for v in validate(d)]


def renumber(events):
    for i, e in enumerate(events):
        e["index"] = i
    return events


def test_a_valid_history_has_no_violations(tmp_path):
    assert rules(tmp_path, good()) == []


def test_index_gap_and_time_going_back(tmp_path):
    ev = good()
    ev[3]["index"] = 7
    ev[5]["time"] = 1
    found = rules(tmp_path, ev)
    assert ("index", 4) in found
    assert ("time", 6) in found


def test_completion_without_invocation_and_mismatches(tmp_path):
    ev = good()
    ev[2]["op"] = 99  # the ok send's op has no invocation; op 1 then never completes
    found = rules(tmp_path, ev)
    assert ("pairing", 3) in found
    assert ("never-completed", 2) in found
    ev = good()
    ev[2]["process"] = 5
    assert ("pairing", 3) in rules(tmp_path, ev)
    ev = good()
    ev[2]["partition"] = 3
    assert ("pairing", 3) in rules(tmp_path, ev)
    ev = good()
    ev[2]["value"] = 17
    assert ("pairing", 3) in rules(tmp_path, ev)


def test_one_outstanding_op_per_process(tmp_path):
    b = HistoryBuilder()
    op1 = b.invoke_send(0, 1)
    op2 = b.invoke_send(0, 2)  # line 2: process 0 already busy
    b.complete_send(op1, 0, 1, offset=0)
    b.complete_send(op2, 0, 2, offset=1)
    assert ("outstanding", 2) in rules(tmp_path, b.events)


def test_process_retired_after_info(tmp_path):
    b = HistoryBuilder()
    b.send(0, 1, outcome="info")
    b.send(0, 2, offset=0)  # line 3: process 0 was retired
    found = rules(tmp_path, b.events)
    assert ("retired", 3) in found and ("retired", 4) in found


def test_values_are_unique_and_ops_not_reused(tmp_path):
    b = HistoryBuilder()
    b.send(0, 1, offset=0)
    b.send(1, 1, offset=1)  # line 3: value 1 again
    ev = b.events + [
        {"index": 4, "time": 10**9, "process": 3, "op": 0, "type": "invoke", "f": "poll", "topic": "t",
         "partition": 0},
        {"index": 5, "time": 10**9, "process": 3, "op": 0, "type": "ok", "f": "poll", "topic": "t",
         "partition": 0, "records": [], "high_watermark": 2},
    ]
    found = rules(tmp_path, ev)
    assert ("value-reused", 3) in found
    assert ("op-reused", 5) in found


def test_nemesis_rules(tmp_path):
    ev = good()
    ev[5]["phase"] = "start"  # a second start, and none stopped
    found = rules(tmp_path, ev)
    assert found.count(("nemesis", 1)) == 1 and ("nemesis", 6) in found
    ev = good()
    ev[0]["phase"] = "begin"  # unknown phase; then the stop has no start
    found = rules(tmp_path, ev)
    assert ("nemesis", 1) in found and ("nemesis", 6) in found
    ev = good()
    ev[0]["process"] = 3
    ev[5]["type"] = "ok"
    found = rules(tmp_path, ev)
    assert ("nemesis", 1) in found and ("nemesis", 6) in found


def test_malformed_lines_are_listed_and_checking_goes_on(tmp_path):
    d = write_run(tmp_path / "run", good(), run_json())
    lines = (d / "history.jsonl").read_text().splitlines()
    lines[1] = "not json"
    e = json.loads(lines[7])
    del e["records"]
    lines[7] = json.dumps(e)
    (d / "history.jsonl").write_text("\n".join(lines) + "\n")
    found = [(v.rule, v.line) for v in validate(d)]
    assert ("malformed", 2) in found and ("malformed", 8) in found
    assert any(v.file.endswith("history.jsonl") and "records" in v.message for v in validate(d))


def test_bad_run_json(tmp_path):
    meta = run_json()
    meta["format"] = "v1"
    found = validate(write_run(tmp_path / "run", good(), meta))
    assert [(v.rule, v.file.endswith("run.json")) for v in found] == [("run", True)]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_part_files(tmp_path, fmt):
    d = write_run(tmp_path / "run", good(), run_json(), fmt=fmt, parts=3)
    assert validate(d) == []
    ev = renumber(good())
    ev[4]["index"] = 3  # duplicate index 3 in the last part
    d = write_run(tmp_path / "run2", ev, run_json(), fmt=fmt, parts=3)
    assert any(v.rule == "index" for v in validate(d))
