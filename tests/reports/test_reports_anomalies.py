"""Each anomaly of anomalies.md on a tiny hand-made history, with its values and offsets.

Every case runs through both checkers: the reference checker one by one, the
Spark checker once for all cases (one batch, one set of Spark jobs).
"""

from __future__ import annotations

import pytest
from reports_histgen import HistoryBuilder, run_json, write_run

from reports import reference
from reports.summary import ANOMALY_TYPES, build_summary

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def final_read(b, proc, records, hw, topic="t", partition=0, position=None):
    return b.poll(proc, records, position=position, hw=hw, topic=topic, partition=partition, final=True)


def only(summary, **expected):
    """All anomaly types not named are empty; the named ones have exactly these keys."""
    for kind in ANOMALY_TYPES:
        got = summary["anomalies"][kind]
        want = expected.get(kind.replace("-", "_"), [])
        assert len(got) == len(want), (kind, got)
        for g, w in zip(got, want):
            for k, v in w.items():
                assert g[k] == v, (kind, k, g)


# --------------------------------------------------------------------------- cases


@case
def clean():
    b = HistoryBuilder()
    for v, o in ((1, 0), (2, 1), (3, 2)):
        b.send(0, v, offset=o)
    b.poll(1, [(0, 1), (1, 2)], hw=3)
    b.poll(1, [(2, 3)], hw=3)
    final_read(b, 2, [(0, 1), (1, 2), (2, 3)], 3)
    return b, {}


def check_clean(s):
    assert s["valid"] is True and s["verdict"] == "valid"
    only(s)
    c = s["counts"]
    assert c["send"] == {"ok": 3, "fail": 0, "info": 0, "pending": 0}
    assert c["poll"]["ok"] == 3
    assert (c["acknowledged"], c["read"], c["lost"], c["records"]) == (3, 3, 0, 6)
    assert s["final_reads"]["complete"] is True
    assert s["availability"]["send"] == 1.0
    assert s["latency"]["send"]["count"] == 3 and s["latency"]["send"]["p50_ns"] == 1_000_000


@case
def lost():
    b = HistoryBuilder()
    for v, o in ((1, 0), (2, 1), (3, 2)):
        b.send(0, v, offset=o)
    b.poll(1, [(0, 1)], hw=3)
    b.poll(1, [(2, 3)], position=2, hw=3)  # a re-seek over offset 1: no poll-skip
    final_read(b, 2, [(0, 1)], 3)
    final_read(b, 2, [(2, 3)], 3, position=2)
    return b, {}


def check_lost(s):
    assert s["valid"] is False and s["fatal"] == ["lost"]
    only(s, lost=[{"topic": "t", "partition": 0, "value": 2, "offset": 1, "process": 0, "op": 1}])
    assert s["counts"]["lost"] == 1


@case
def unseen_after_complete_final():
    b = HistoryBuilder()
    b.send(0, 1, offset=0)
    b.send(0, 2, offset=1)  # acknowledged, then truncated away: the log ends at 1
    final_read(b, 2, [(0, 1)], 1)
    return b, {}


def check_unseen_after_complete_final(s):
    assert s["final_reads"]["complete"] is True
    assert s["valid"] is False and s["fatal"] == ["unseen"]
    only(s, unseen=[{"value": 2, "offset": 1}])


@case
def incomplete_final_reads():
    b = HistoryBuilder()
    b.send(0, 1, offset=0)
    b.send(0, 2, offset=1)
    final_read(b, 2, [(0, 1)], 2)  # hw 2 but offset 1 never came back: timed out
    return b, {}


def check_incomplete_final_reads(s):
    assert s["final_reads"]["complete"] is False
    assert s["valid"] is None and s["verdict"] == "unknown"
    only(s, unseen=[{"value": 2, "offset": 1}])  # reported, not fatal
    assert s["fatal"] == [] and "unseen" not in s["fatal_types"]


@case
def no_final_reads():
    b = HistoryBuilder()
    b.send(0, 1, offset=0)
    b.poll(1, [(0, 1)], hw=1)
    return b, {}


def check_no_final_reads(s):
    assert s["valid"] is None
    only(s)
    assert s["final_reads"]["partitions"][0]["final_polls"] == 0


@case
def duplicate_not_idempotent():
    b = HistoryBuilder()
    b.send(0, 1, offset=0)  # the retry stored it twice: at 0 and 1
    b.poll(1, [(0, 1), (1, 1)], hw=2)
    final_read(b, 2, [(0, 1), (1, 1)], 2)
    return b, {"idempotent": False}


def check_duplicate_not_idempotent(s):
    assert s["valid"] is True  # reported, not fatal
    only(s, duplicate=[{"value": 1, "offsets": [0, 1], "process": 1, "send_op": 0}])
    assert s["counts"]["duplicated"] == 1


@case
def duplicate_idempotent():
    b, _ = duplicate_not_idempotent()
    return b, {"idempotent": True}


def check_duplicate_idempotent(s):
    assert s["valid"] is False and s["fatal"] == ["duplicate"]
    only(s, duplicate=[{"value": 1, "offsets": [0, 1]}])


@case
def inconsistent_offset_divergent_replica():
    b = HistoryBuilder()
    b.send(0, 1, offset=0)
    b.send(0, 2, offset=1)
    b.send(3, 9, outcome="info")  # outcome unknown; a stale replica serves it at offset 1
    b.poll(1, [(0, 1), (1, 2)], hw=2)
    b.poll(4, [(0, 1), (1, 9)], hw=2)
    final_read(b, 2, [(0, 1), (1, 2)], 2)
    return b, {}


def check_inconsistent_offset_divergent_replica(s):
    assert s["valid"] is False and s["fatal"] == ["inconsistent-offset"]
    only(s, inconsistent_offset=[{"offset": 1, "values": [2, 9], "acknowledged": [2], "process": 4}])


@case
def inconsistent_offset_reused_after_truncation():
    b = HistoryBuilder()
    b.send(0, 1, offset=0)  # acknowledged at 0 ...
    b.send(1, 2, offset=0)  # ... and so is this one, after an unclean election
    b.poll(2, [(0, 2)], hw=1)
    final_read(b, 3, [(0, 2)], 1)
    return b, {}


def check_inconsistent_offset_reused_after_truncation(s):
    assert s["valid"] is False
    assert s["fatal"] == ["lost", "inconsistent-offset"]
    only(s, lost=[{"value": 1, "offset": 0}],
         inconsistent_offset=[{"offset": 0, "values": [1, 2], "acknowledged": [1, 2]}])


@case
def aborted_read():
    b = HistoryBuilder()
    b.send(0, 1, outcome="fail")  # refused ... yet stored
    b.send(0, 2, offset=1)
    b.poll(1, [(0, 1), (1, 2)], hw=2)
    final_read(b, 2, [(0, 1), (1, 2)], 2)
    return b, {}


def check_aborted_read(s):
    assert s["valid"] is False and s["fatal"] == ["aborted-read"]
    # first read: process 1's poll
    only(s, aborted_read=[{"value": 1, "offset": 0, "process": 1, "send_op": 0}])
    assert s["errors"]["send"]["fail"] == {"NOT_ENOUGH_REPLICAS": 1}


@case
def phantom_read():
    b = HistoryBuilder()
    b.send(0, 1, offset=0)
    b.poll(1, [(0, 1), (1, 42)], hw=2)  # nobody sent 42
    final_read(b, 2, [(0, 1), (1, 42)], 2)
    return b, {}


def check_phantom_read(s):
    assert s["valid"] is False and s["fatal"] == ["phantom-read"]
    only(s, phantom_read=[{"value": 42, "offset": 1, "process": 1}])


@case
def nonmonotonic_within_a_poll():
    b = HistoryBuilder()
    for v, o in ((1, 0), (2, 1), (3, 2)):
        b.send(0, v, offset=o)
    b.poll(1, [(0, 1), (1, 2), (2, 3), (1, 2)], hw=3)
    final_read(b, 2, [(0, 1), (1, 2), (2, 3)], 3)
    return b, {}


def check_nonmonotonic_within_a_poll(s):
    assert s["valid"] is False and s["fatal"] == ["nonmonotonic-poll"]
    only(s, nonmonotonic_poll=[{"process": 1, "offset": 1, "previous": 2}])


@case
def nonmonotonic_across_polls():
    b = HistoryBuilder()
    for v, o in ((1, 0), (2, 1), (3, 2)):
        b.send(0, v, offset=o)
    b.poll(1, [(0, 1), (1, 2)], hw=3)
    b.poll(1, [(1, 2), (2, 3)], hw=3)  # no re-seek, yet offset 1 again
    final_read(b, 2, [(0, 1), (1, 2), (2, 3)], 3)
    return b, {}


def check_nonmonotonic_across_polls(s):
    only(s, nonmonotonic_poll=[{"process": 1, "offset": 1, "previous": 1, "op": 4, "previous_op": 3}])


@case
def reseek_is_not_an_anomaly():
    b = HistoryBuilder()
    for v, o in ((1, 0), (2, 1), (3, 2), (4, 3)):
        b.send(0, v, offset=o)
    b.poll(1, [(0, 1), (1, 2)], hw=4)
    b.poll(1, [(0, 1)], position=0, hw=4)  # re-seek back: fine
    b.poll(1, [], position=3, hw=4)  # re-seek forward, nothing returned yet
    b.poll(1, [(3, 4)], hw=4)  # the re-seek still counts: no skip over 1, 2
    b.poll(1, [(1, 2)], position=1, hw=4)
    b.poll(1, [(2, 3)], position=2, hw=4)  # position right after 1: not a re-seek, and 1 -> 2 is fine
    final_read(b, 2, [(0, 1), (1, 2), (2, 3), (3, 4)], 4)
    return b, {}


def check_reseek_is_not_an_anomaly(s):
    assert s["valid"] is True
    only(s)


@case
def poll_skip():
    b = HistoryBuilder()
    for v, o in ((1, 0), (2, 1), (3, 2)):
        b.send(0, v, offset=o)
    b.poll(1, [(0, 1)], hw=3)
    b.poll(1, [(2, 3)], hw=3)  # offset 1 holds value 2 (acknowledged): skipped
    final_read(b, 2, [(0, 1), (1, 2), (2, 3)], 3)
    return b, {}


def check_poll_skip(s):
    assert s["valid"] is False and s["fatal"] == ["poll-skip"]
    only(s, poll_skip=[{"process": 1, "offset": 2, "previous": 0, "skipped": 1, "op": 4, "previous_op": 3}])


@case
def gap_with_nothing_known_between():
    b = HistoryBuilder()
    b.send(0, 1, offset=0)
    b.send(0, 3, offset=2)  # nothing is known at offset 1 (e.g. a control record)
    b.poll(1, [(0, 1), (2, 3)], hw=3)
    final_read(b, 2, [(0, 1), (2, 3)], 3)
    return b, {}


def check_gap_with_nothing_known_between(s):
    assert s["valid"] is True
    only(s)


@case
def two_partitions_and_an_empty_one():
    b = HistoryBuilder()
    b.send(0, 1, offset=0, topic="t", partition=0)
    b.send(0, 2, offset=0, topic="t", partition=1)  # same offset, other partition: fine
    b.poll(1, [(0, 1)], hw=1, topic="t", partition=0)
    final_read(b, 2, [(0, 1)], 1, topic="t", partition=0)
    final_read(b, 2, [(0, 2)], 1, topic="t", partition=1)
    final_read(b, 2, [], 0, topic="u", partition=0)  # never written: empty, complete
    return b, {}


def check_two_partitions_and_an_empty_one(s):
    assert s["valid"] is True
    only(s)
    parts = {(p["topic"], p["partition"]): p for p in s["final_reads"]["partitions"]}
    assert set(parts) == {("t", 0), ("t", 1), ("u", 0)}
    assert parts[("u", 0)]["final_complete"] and parts[("u", 0)]["sends"] == 0


@case
def pending_and_info_outcomes():
    b = HistoryBuilder()
    b.send(0, 1, offset=0)
    b.send(1, 2, outcome="info")  # may or may not have happened: reading it is fine
    b.invoke_send(2, 3)  # never completes (the run ended)
    b.poll(3, [(0, 1), (1, 2), (2, 3)], hw=3)
    final_read(b, 4, [(0, 1), (1, 2), (2, 3)], 3)
    return b, {}


def check_pending_and_info_outcomes(s):
    assert s["valid"] is True
    only(s)
    assert s["counts"]["send"] == {"ok": 1, "fail": 0, "info": 1, "pending": 1}
    assert s["errors"]["send"]["info"] == {"timeout": 1}
    assert s["availability"]["send"] == 0.5


@case
def fault_windows():
    b = HistoryBuilder()
    b.send(0, 1, offset=0)
    b.nemesis("partition", "start", ["broker-1", "broker-2"])
    b.send(0, 2, offset=1)  # lost, acknowledged inside the window
    b.send(0, 3, outcome="fail")
    b.nemesis("partition", "stop", ["broker-1", "broker-2"])
    b.send(0, 4, offset=2)
    b.nemesis("kill", "start", ["broker-3"])  # never stopped: runs to the end
    b.poll(1, [(0, 1)], hw=3)
    b.poll(1, [(2, 4)], position=2, hw=3)
    final_read(b, 2, [(0, 1)], 3)
    final_read(b, 2, [(2, 4)], 3, position=2)
    return b, {}


def check_fault_windows(s):
    only(s, lost=[{"value": 2, "offset": 1}])
    w0, w1 = s["fault_windows"]
    assert (w0["fault"], w0["targets"], w0["stopped"]) == ("partition", ["broker-1", "broker-2"], True)
    assert w0["anomalies"]["lost"] == 1
    assert w0["errors"]["send"]["fail"] == {"NOT_ENOUGH_REPLICAS": 1}
    assert w0["ops"]["send"] == {"ok": 1, "fail": 1, "info": 0}
    assert w1["fault"] == "kill" and w1["stopped"] is False
    assert w1["stop"] == s["duration_ns"] and w1["anomalies"]["lost"] == 0
    assert w1["ops"]["poll"]["ok"] == 4


# --------------------------------------------------------------------------- running them


def _write(tmp_path_factory, name):
    b, meta_extra = CASES[name]()
    d = tmp_path_factory.mktemp("crafted") / name
    write_run(d, b.events, run_json(run=name, **meta_extra))
    return d


@pytest.fixture(scope="module")
def spark_summaries(spark, tmp_path_factory):
    from reports import spark_checker

    dirs = {name: _write(tmp_path_factory, name) for name in CASES}
    results = spark_checker.check(list(dirs.values()), spark=spark)
    return {name: build_summary(r) for name, r in zip(dirs, results)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference(name, tmp_path_factory):
    s = build_summary(reference.check(_write(tmp_path_factory, name)))
    globals()[f"check_{name}"](s)


@pytest.mark.parametrize("name", sorted(CASES))
def test_spark(name, spark_summaries):
    globals()[f"check_{name}"](spark_summaries[name])


def test_summary_shape(tmp_path_factory):
    """The part of summary.json other tools rely on: every key, always."""
    s = build_summary(reference.check(_write(tmp_path_factory, "clean")))
    assert s["format"] == 1 and s["run"] == "clean"
    assert set(s["anomalies"]) == set(ANOMALY_TYPES)
    assert set(s["counts"]) >= {"send", "poll", "acknowledged", "read"}
    for f in ("send", "poll"):
        assert set(s["counts"][f]) >= {"ok", "fail", "info"}
