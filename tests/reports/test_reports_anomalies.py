"""Each anomaly of anomalies.md on a tiny hand-made history, with its values and offsets.

Every case runs through both checkers: the reference checker one by one, the
Spark checker once for all cases (one batch, one set of Spark jobs); their
summaries agree field for field, and together the cases find every type of
reports/registry.py.
"""

from __future__ import annotations

import json
import random
import tempfile
from html import escape
from pathlib import Path

import pytest
from reports_histgen import HistoryBuilder, only, run_json, write_run

from reports import reference
from reports.registry import BY_NAME
from reports.report import render
from reports.invariants import ORACLES
from reports.summary import (ANOMALY_TYPES, GROUP_TYPES, INCARNATION_TYPES, TRANSACTION_TYPES,
                             build_summary)

CASES = {}
INVARIANT_TYPES = tuple(ORACLES)


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def final_read(b, proc, records, hw, topic="t", partition=0, position=None):
    return b.poll(proc, records, position=position, hw=hw, topic=topic, partition=partition, final=True)


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


# ------------------------------------------------------ oracles beyond the clients' reads

S = 1_000_000_000


def workload(**clients):
    """run.json's workload with its client instances (docs/history-format.md)."""
    return {"workload": {"client": "sim", "acks": "mixed", "idempotence": False, "topics": {"t": 1},
                         "clients": clients}}


def producer(acks="all", idempotent=False):
    return {"role": "producer", "acks": acks, "idempotent": idempotent}


def send(b, proc, value, offset, node, outcome="ok", **kw):
    op = b.invoke_send(proc, value, node=node, **kw)
    b.complete_send(op, proc, value, outcome, offset, **kw)
    return op


def sample(time, *parts, live=(1, 2, 3), controller=1, controller_epoch=1, reassigning=None):
    """A `metadata` observation; parts are (topic, partition, leader, epoch, isr, version)."""
    return {"kind": "metadata", "time": time, "controller": controller,
            "controller_epoch": controller_epoch, "live_brokers": list(live),
            "reassigning": reassigning or {},
            "partitions": [{"topic": t, "partition": p, "replicas": [1, 2, 3], "leader": leader,
                            "leader_epoch": epoch, "isr": list(isr), "zk_version": version,
                            "controller_epoch": controller_epoch}
                           for t, p, leader, epoch, isr, version in parts]}


def recovery(time, recovered=True):
    return {"kind": "recovery", "time": time, "healed_at": time - S, "bound_s": 60,
            "recovered": recovered, "recovered_at": time if recovered else None,
            "detail": "" if recovered else "t/0: leader -1 is not a live broker"}


@case
def acks1_loss_is_not_fatal():
    b = HistoryBuilder()
    send(b, 0, 1, 0, "producer-1")          # acks=1: acknowledged at 0, then truncated away
    send(b, 1, 2, 0, "producer-2")          # acks=all: offset 0 again
    final_read(b, 2, [(0, 2)], 1)
    return b, workload(**{"producer-1": producer("1"), "producer-2": producer()})


def check_acks1_loss_is_not_fatal(s):
    assert s["valid"] is True
    only(s, lost_unreplicated=[{"value": 1, "offset": 0}])


@case
def idempotent_duplicate():
    b = HistoryBuilder()
    send(b, 0, 1, 0, "producer-1")
    send(b, 0, 2, 1, "producer-2")
    b.poll(1, [(0, 1), (1, 2)], hw=3)
    final_read(b, 2, [(0, 1), (1, 2), (2, 1)], 3)   # value 1 again: a duplicate, idempotent producer
    return b, workload(**{"producer-1": producer(idempotent=True), "producer-2": producer()})


def check_idempotent_duplicate(s):
    assert s["valid"] is False and s["fatal"] == ["duplicate"]
    only(s, duplicate=[{"value": 1, "offsets": [0, 2], "idempotent": True}])


def _idempotent_duplicate_with_writers(second_writer):
    """Value 1 at offsets 0 and 2; the replicas' files say who wrote each copy."""
    b, meta = idempotent_duplicate()
    rep = replica("broker-1", [[0, 1], [1, 2], [2, 1]], [[0, 0, 1, 7], [1, 1, 1, 8], [2, 2, 2, 9]],
                  [[1, 0], [2, 2]], 3)
    rep["writers"] = [[0, 0, 1000, 0, 5], [2, 2, *second_writer]]
    meta["observations"] = [rep]
    return b, meta


@case
def idempotent_duplicate_appended_twice():
    return _idempotent_duplicate_with_writers([1000, 0, 5])   # the same producer, epoch and sequence


def check_idempotent_duplicate_appended_twice(s):
    assert s["valid"] is False and s["fatal"] == ["duplicate"]
    only(s, duplicate=[{"value": 1, "offsets": [0, 2], "idempotent": True,
                        "writers": [[0, 1000, 0, 5], [2, 1000, 0, 5]]}])
    assert "resent" not in s["anomalies"]["duplicate"][0]


@case
def idempotent_duplicate_resent_by_the_client():
    return _idempotent_duplicate_with_writers([1000, 1, 0])   # the client's next epoch, sequence 0


def check_idempotent_duplicate_resent_by_the_client(s):
    assert s["valid"] is True and s["fatal"] == []
    only(s, duplicate=[{"value": 1, "offsets": [0, 2], "idempotent": True, "resent": True,
                        "writers": [[0, 1000, 0, 5], [2, 1000, 1, 0]]}])


@case
def whole_run_idempotent_duplicate_resent():
    """run.json says the whole workload was idempotent (no per-client flags)."""
    b, _ = duplicate_not_idempotent()
    rep = replica("broker-1", [[0, 1], [1, 1]], [[0, 0, 1, 7], [1, 1, 2, 8]], [[1, 0], [2, 1]], 2)
    rep["writers"] = [[0, 0, 1000, 0, 0], [1, 1, 1000, 1, 0]]
    return b, {"idempotent": True, "observations": [rep]}


def check_whole_run_idempotent_duplicate_resent(s):
    assert s["fatal"] == [] and s["valid"] is True, s["fatal"]
    only(s, duplicate=[{"value": 1, "offsets": [0, 1], "resent": True,
                        "writers": [[0, 1000, 0, 0], [1, 1000, 1, 0]]}])


@case
def read_uncommitted():
    b = HistoryBuilder()
    send(b, 0, 1, 0, "producer-1")
    send(b, 0, 2, 1, "producer-1")
    op = b.invoke_poll(1, 0)
    b.complete_poll(op, 1, [(0, 1), (1, 2)], hw=1, log_start_offset=0)  # offset 1 is not committed
    final_read(b, 2, [(0, 1), (1, 2)], 2)
    return b, workload(**{"producer-1": producer()})


def check_read_uncommitted(s):
    assert s["fatal"] == ["read-uncommitted"]
    only(s, read_uncommitted=[{"offset": 1, "value": 2, "high_watermark": 1, "log_start_offset": 0,
                               "process": 1}])
    assert s["oracles"]["read-uncommitted"] == "checked"


@case
def truncated_read():
    b = HistoryBuilder()
    for v, o in ((1, 0), (2, 1)):
        send(b, 0, v, o, "producer-1")
    b.poll(1, [(0, 1), (1, 2)], hw=2)
    final_read(b, 2, [(0, 1)], 1)           # the log ends at 1: the read of offset 1 is gone
    return b, workload(**{"producer-1": producer("1")})


def check_truncated_read(s):
    assert s["valid"] is False and s["fatal"] == ["truncated-read"]
    only(s, truncated_read=[{"offset": 1, "value": 2, "final_high_watermark": 1, "process": 1}])


@case
def nonmonotonic_send():
    b = HistoryBuilder()
    a = b.invoke_send(0, 1, node="producer-1")
    c = b.invoke_send(1, 2, node="producer-1")
    b.complete_send(c, 1, 2, "ok", 0)       # sent second, written first
    b.complete_send(a, 0, 1, "ok", 1)
    final_read(b, 2, [(0, 2), (1, 1)], 2)
    return b, workload(**{"producer-1": producer(idempotent=True)})


def check_nonmonotonic_send(s):
    assert s["fatal"] == ["nonmonotonic-send"]
    only(s, nonmonotonic_send=[{"node": "producer-1", "value": 2, "offset": 0, "previous_value": 1,
                                "previous_offset": 1}])


@case
def ack_below_min_isr():
    b = HistoryBuilder()
    b.add(process=0, op=b.op_id(), type="invoke", f="send", topic="t", partition=0, value=1,
          node="producer-1", time=10 * S)
    b.add(process=0, op=0, type="ok", f="send", topic="t", partition=0, value=1, offset=0,
          time=11 * S)
    b.add(process=1, op=b.op_id(), type="invoke", f="send", topic="t", partition=0, value=2,
          node="producer-1", time=12 * S)   # invoked too soon after the ISR grew back: fine
    b.add(process=1, op=1, type="ok", f="send", topic="t", partition=0, value=2, offset=1,
          time=13 * S)
    final_read(b, 2, [(0, 1), (1, 2)], 2)
    meta = workload(**{"producer-1": producer()})
    meta["cluster"] = {"brokers": 3, "broker_config": {"min.insync.replicas": "2"}}
    meta["observations"] = [sample(t * S, ("t", 0, 1, 1, [1], 3)) for t in range(12)] + [
        sample(12 * S, ("t", 0, 1, 1, [1, 2], 4))]
    return b, meta


def check_ack_below_min_isr(s):
    assert s["fatal"] == ["ack-below-min-isr"]
    only(s, ack_below_min_isr=[{"value": 1, "offset": 0, "isr": [1], "min_isr": 2}])


@case
def observed_metadata():
    b = HistoryBuilder()
    send(b, 0, 1, 0, "producer-1")
    final_read(b, 2, [(0, 1)], 1)
    meta = workload(**{"producer-1": producer()})
    meta["observations"] = [
        sample(0 * S, ("t", 0, 1, 5, [1, 2], 7), ("t", 1, 2, 1, [2], 1)),
        sample(1 * S, ("t", 0, 3, 4, [1, 2], 8), ("t", 1, -1, 2, [2], 2), controller_epoch=2),
        sample(3 * S, ("t", 0, 3, 4, [1, 2], 8), ("t", 1, -1, 2, [2], 2), controller_epoch=1),
    ] + [sample(t * S, ("t", 0, 1, 6, [1, 2], 9), ("t", 1, -1, 2, [2], 2))
         for t in range(5, 27, 2)] + [
        recovery(27 * S),
        {"kind": "broker-metadata", "time": 28 * S, "broker": "broker-1", "brokers": [1, 2, 3],
         "partitions": [{"topic": "t", "partition": 0, "leader": 2, "isr": [1, 2],
                         "replicas": [1, 2, 3], "error": 0},
                        {"topic": "t", "partition": 1, "leader": -1, "isr": [2],
                         "replicas": [1, 2, 3], "error": 0}]}]
    return b, meta


def check_observed_metadata(s):
    assert set(s["fatal"]) == {"isr-invariant", "epoch-regression", "leaderless", "stale-metadata"}
    a = s["anomalies"]
    assert [(x["rule"], x["leader"]) for x in a["isr-invariant"]] == [("leader not in ISR", 3),
                                                                       ("leader not in ISR", 3)]
    assert [(x["what"], x["previous"], x["current"]) for x in a["epoch-regression"]] == [
        ("controller epoch", 2, 1), ("leader epoch", 5, 4)]
    assert [(x["partition"], x["live_isr"]) for x in a["leaderless"]] == [(1, [2])]
    assert [(x["broker"], x["partition"], x["served"]["leader"]) for x in a["stale-metadata"]] == [
        ("broker-1", 0, 2)]
    assert all(v == "checked" for k, v in s["oracles"].items()
               if k not in ("read-uncommitted", "nonmonotonic-send", "replica-divergence",
                            *GROUP_TYPES, *INCARNATION_TYPES, *INVARIANT_TYPES,
                            *TRANSACTION_TYPES))
    assert s["oracles"]["group-skipped"] == "no input: no consumer group in the run (no groups.jsonl)"


@case
def v2_leader_vacancies():
    """V2 coordination (controller epoch -1): a leader that died leaves its
    partition leaderless at the same epoch (nobody writes that state); a
    leader changing to another broker without a new epoch is still caught."""
    b = HistoryBuilder()
    send(b, 0, 1, 0, "producer-1")
    final_read(b, 2, [(0, 1)], 1)
    meta = workload(**{"producer-1": producer()})
    v2 = {"controller": None, "controller_epoch": -1}
    meta["observations"] = [
        sample(0 * S, ("t", 0, 3, 0, [1, 2, 3], 1), ("t", 1, 2, 0, [1, 2, 3], 1), **v2),
        sample(1 * S, ("t", 0, -1, 0, [1, 2, 3], 1), ("t", 1, 3, 0, [1, 2, 3], 1), **v2),
        sample(2 * S, ("t", 0, 1, 1, [1, 2], 2), ("t", 1, 3, 0, [1, 2, 3], 1), **v2),
        recovery(3 * S)]
    return b, meta


def check_v2_leader_vacancies(s):
    assert [(x["partition"], x["what"], x["previous"], x["current"])
            for x in s["anomalies"]["epoch-regression"]] == [
        (1, "leader changed without a new leader epoch", "2@0", "3@0")]


def kafka_sample(time, *parts, live=(1, 2, 3)):
    """A `metadata` observation of a target without ZooKeeper (a broker's
    Metadata answer): parts are (topic, partition, leader, isr); no epochs."""
    return {"kind": "metadata", "time": time, "source": "kafka", "controller": 1,
            "live_brokers": list(live), "reassigning": {},
            "partitions": [{"topic": t, "partition": p, "replicas": [1, 2, 3], "leader": leader,
                            "isr": list(isr)} for t, p, leader, isr in parts]}


@case
def metadata_answers_of_a_target_without_zookeeper():
    """isr-invariant and leaderless judge Metadata samples as they judge
    ZooKeeper's; the oracles that need epochs and versions say they had none."""
    b = HistoryBuilder()
    send(b, 0, 1, 0, "producer-1")
    final_read(b, 2, [(0, 1)], 1)
    meta = workload(**{"producer-1": producer()})
    meta["cluster"] = {"brokers": 3, "broker_config": {"min.insync.replicas": "2"}}
    meta["observations"] = [kafka_sample(0, ("t", 0, 3, [1, 2]), ("t", 1, 2, [2]))] + [
        kafka_sample(t * S, ("t", 0, 1, [1, 2]), ("t", 1, -1, [2])) for t in range(1, 26)] + [
        recovery(27 * S)]
    return b, meta


def check_metadata_answers_of_a_target_without_zookeeper(s):
    assert set(s["fatal"]) == {"isr-invariant", "leaderless"}
    a = s["anomalies"]
    assert [(x["rule"], x["leader"]) for x in a["isr-invariant"]] == [("leader not in ISR", 3)]
    assert [(x["partition"], x["live_isr"]) for x in a["leaderless"]] == [(1, [2])]
    why = ("no input: fewer than two ZooKeeper metadata samples (Metadata answers carry no "
           "epochs or versions)")
    assert s["oracles"]["epoch-regression"] == why
    assert s["oracles"]["ack-below-min-isr"] == why
    assert s["oracles"]["isr-invariant"] == s["oracles"]["leaderless"] == "checked"


@case
def other_runs_topics_are_not_stale():
    """A cluster shared by several runs: ZooKeeper holds the topic of an
    earlier run, which the brokers were not asked about."""
    b = HistoryBuilder()
    send(b, 0, 1, 0, "producer-1")
    final_read(b, 2, [(0, 1)], 1)
    meta = workload(**{"producer-1": producer()})
    meta["observations"] = [sample(t * S, ("t", 0, 1, 1, [1, 2, 3], 1),
                                   ("earlier", 0, 2, 1, [1, 2, 3], 1)) for t in range(3)] + [
        recovery(3 * S),
        {"kind": "broker-metadata", "time": 4 * S, "broker": "broker-1", "topics": ["t"],
         "brokers": [1, 2, 3],
         "partitions": [{"topic": "t", "partition": 0, "leader": 1, "isr": [1, 2, 3],
                         "replicas": [1, 2, 3], "error": 0}]}]
    return b, meta


def check_other_runs_topics_are_not_stale(s):
    assert s["oracles"]["stale-metadata"] == "checked"
    only(s)


@case
def unrecovered_cluster():
    b = HistoryBuilder()
    send(b, 0, 1, 0, "producer-1")
    final_read(b, 2, [(0, 1)], 1)
    meta = workload(**{"producer-1": producer()})
    meta["observations"] = [recovery(2 * S, recovered=False)]
    return b, meta


def check_unrecovered_cluster(s):
    assert s["fatal"] == ["unrecovered"]
    only(s, unrecovered=[{"kind": "cluster", "detail": "t/0: leader -1 is not a live broker"}])


@case
def unrecovered_partition():
    b = HistoryBuilder()
    send(b, 0, 1, 0, "producer-1")
    b.add(process=1, op=b.op_id(), type="invoke", f="send", topic="t", partition=0, value=2,
          node="producer-1", time=20 * S)
    b.add(process=1, op=1, type="info", f="send", topic="t", partition=0, value=2, error="timeout",
          time=25 * S)
    final_read(b, 2, [(0, 1)], 1)
    meta = workload(**{"producer-1": producer()})
    meta["observations"] = [recovery(10 * S)]
    return b, meta


def check_unrecovered_partition(s):
    assert s["fatal"] == ["unrecovered"]
    only(s, unrecovered=[{"kind": "partition", "topic": "t", "partition": 0, "failed": 1,
                          "errors": {"timeout": 1}}])


def replica(broker, records, batches, epochs, leo, hw=None):
    return {"kind": "replica", "time": 30 * S, "broker": broker, "topic": "t", "partition": 0,
            "log_start_offset": 0, "log_end_offset": leo, "hw_checkpoint": hw, "epochs": epochs,
            "batches": batches, "records": records}


@case
def replica_divergence():
    b = HistoryBuilder()
    for v, o in ((1, 0), (2, 1), (3, 2)):
        send(b, 0, v, o, "producer-1")
    final_read(b, 2, [(0, 1), (1, 2), (2, 3)], 3)
    meta = workload(**{"producer-1": producer()})
    meta["observations"] = [
        sample(0, ("t", 0, 1, 2, [1, 2, 3], 5)),
        replica("broker-1", [[0, 1], [1, 2], [2, 3]], [[0, 1, 1, 11], [2, 2, 2, 22]],
                [[1, 0], [2, 2]], 3),
        replica("broker-2", [[0, 1], [1, 9], [2, 3]], [[0, 1, 1, 99], [2, 2, 2, 22]],
                [[1, 0], [2, 1]], 3),      # another value at 1, its batch's crc; epoch 2 at 1 in its cache
        replica("broker-3", [[0, 1], [1, 2]], [[0, 1, 1, 11]], [[1, 0]], 2),   # in the ISR, short
    ]
    return b, meta


def check_replica_divergence(s):
    assert s["fatal"] == ["replica-divergence"]
    got = sorted((a["broker"], a["kind"], a["offset"], a["count"]) for a in s["anomalies"]["replica-divergence"])
    assert got == [("broker-2", "epoch-cache", 1, 1), ("broker-2", "record", 0, 2),
                   ("broker-3", "missing", 2, 1)]
    rec = next(a for a in s["anomalies"]["replica-divergence"] if a["kind"] == "record")
    assert rec["expected"] == [1, 1, 11] and rec["found"] == [1, 1, 99]  # the batch's crc differs


@case
def every_oracle_clean():
    b = HistoryBuilder()
    a = b.invoke_send(0, 1, node="producer-1")
    b.complete_send(a, 0, 1, "ok", 0)
    op = b.invoke_poll(1, 0)
    b.complete_poll(op, 1, [(0, 1)], hw=1, log_start_offset=0)
    final_read(b, 2, [(0, 1)], 1)
    meta = workload(**{"producer-1": producer(idempotent=True)})
    g = Groups(b)
    g.commit("consumer-1", 0)  # (a group that committed: its oracles have input)
    # (a transactional run with a pipeline, whose group's offset was recorded at the end)
    meta["workload"].update(transactions=True, pipeline={"input": "t", "output": "u", "group": "g"})
    g.add(kind="committed", topic="t", partition=0, offset=0)
    meta["groups"] = g.events
    meta["observations"] = [sample(0, ("t", 0, 1, 1, [1, 2, 3], 1)),
                            sample(S, ("t", 0, 1, 1, [1, 2, 3], 1)), recovery(2 * S),
                            {"kind": "broker-metadata", "time": 3 * S, "broker": "broker-1",
                             "brokers": [1, 2, 3], "partitions": [
                                 {"topic": "t", "partition": 0, "leader": 1, "isr": [3, 2, 1],
                                  "replicas": [1, 2, 3], "error": 0}]}] + [
        replica(f"broker-{i}", [[0, 1]], [[0, 0, 1, 7]], [[1, 0]], 1) for i in (1, 2, 3)] + [
        # (another topic, deleted and created again: the resurrected oracle's input)
        {"kind": "topic-delete", "time": 0, "topic": "other"},
        {"kind": "topic-create", "time": S, "topic": "other"}] + [
        # (the broker-state samples of the invariant oracles, in a configuration promising them)
        state(1, t * S, (1, 1, [1, 2, 3], 1, 1, {2: 1, 3: 1}, (0, 0, 1, 7))) for t in (0, 1)]
    meta["cluster"] = promised()
    return b, meta


def check_every_oracle_clean(s):
    assert s["valid"] is True
    only(s)
    assert set(s["oracles"].values()) == {"checked"}


# --------------------------------------------------------------------------- invariant oracles


def promised(**config):
    """run.json's cluster whose configuration promises every invariant oracle
    (reports/invariants.py), with `config` over it."""
    return {"brokers": 3, "broker_config": {
        "replication.truncation": "leader-epoch", "unclean.leader.election.enable": "false",
        "replica.lag.time.max.ms": "3000", "zookeeper.session.timeout.ms": "2000", **config}}


def state(broker, time, *parts, start_epoch=1):
    """A `broker-state` observation (the broker's state window); parts are
    (leader, epoch, isr, hw, leo, followers, committed) of t/0."""
    return {"kind": "broker-state", "time": time, "broker": broker, "start_epoch": start_epoch,
            "truncated": False,
            "partitions": [{"topic": "t", "partition": 0, "topic_id": "id-t", "leader": leader,
                            "epoch": epoch, "isr": list(isr), "zk_version": epoch,
                            "replicas": [1, 2, 3], "hw": hw, "leo": leo, "start": 0,
                            "fenced": False, "committed": list(committed),
                            **({"followers": {str(b): o for b, o in followers.items()}}
                               if followers is not None else {})}
                           for leader, epoch, isr, hw, leo, followers, committed in parts]}


BATCH = (0, 0, 1, 7)   # the committed batch: base, last offset, leader epoch, CRC


def broken_states():
    """Leader 1 with follower 3 in its ISR behind the HW; its HW going back
    in epoch 1; broker 2 naming another batch at committed offset 0."""
    return [state(1, 0, (1, 1, [1, 2, 3], 1, 1, {2: 1, 3: 1}, BATCH)),
            state(1, S, (1, 1, [1, 2, 3], 2, 2, {2: 2, 3: 1}, BATCH)),      # 3 at 1 < HW 2
            state(1, 2 * S, (1, 1, [1, 2], 1, 2, {2: 2, 3: 1}, BATCH)),     # HW 2 then 1
            state(2, 2 * S, (1, 1, [1, 2], 1, 2, None, (0, 0, 1, 8)))]      # another CRC


def broken_metadata():
    """t/0: broker 3 elected from outside ISR [1, 2]; unregistered broker 2
    left in the ISR from 1 s to 17 s (dead-isr-member's grace: 3 + 2 + 10
    s); t/1: a reassignment to [1, 2, 4] finished at 18 s with 4 outside the ISR."""
    moving = {"t/1": [1, 2, 4]}
    return ([sample(0, ("t", 0, 1, 1, [1, 2], 1), ("t", 1, 1, 1, [1, 2, 3], 1))] +
            [sample(t * S, ("t", 0, 3, 2, [3, 2], 2), ("t", 1, 1, 1, [1, 3], 2),
                    live=(1, 3, 4), reassigning=moving) for t in range(1, 18)] +
            [sample(18 * S, ("t", 0, 3, 2, [3, 2], 2), ("t", 1, 1, 1, [1], 3),
                    live=(1, 3, 4))])


def _with_replicas(samples, tp, replicas):
    for s in samples:
        for p in s["partitions"]:
            if f"{p['topic']}/{p['partition']}" == tp:
                p["replicas"] = list(replicas)
    return samples


def invariant_run(observations, cluster, faults=()):
    """A clean history beside `observations`; each of `faults` hits broker 4
    from 16 s to 17 s."""
    b = HistoryBuilder()
    for phase, t in (("start", 16 * S), ("stop", 17 * S)):
        for fault in faults:
            b.add(process=-1, op=b.op_id(), type="info", f="nemesis", fault=fault, phase=phase,
                  targets=["broker-4"], time=t)
    send(b, 0, 1, 0, "producer-1")
    final_read(b, 2, [(0, 1)], 1)
    meta = workload(**{"producer-1": producer()})
    meta["cluster"] = cluster
    meta["observations"] = observations
    return b, meta


@case
def invariants_of_broker_state():
    return invariant_run(broken_states(), promised())


def check_invariants_of_broker_state(s):
    assert set(s["fatal"]) == {"isr-behind-hw", "hw-regression", "committed-divergence"}
    only(s, isr_behind_hw=[{"leader": 1, "follower": 3, "follower_leo": 1, "hw": 2, "time": S}],
         hw_regression=[{"rule": "leader HW went back", "broker": 1, "hw": 1, "previous": 2}],
         committed_divergence=[{"offset": 0, "broker": 2, "batch": [0, 0, 1, 8], "other_broker": 1,
                                "other_batch": list(BATCH)}])
    assert all(s["oracles"][k] == "checked" for k in INVARIANT_TYPES[:3])


@case
def invariants_of_zookeeper():
    samples = _with_replicas(broken_metadata()[-1:], "t/1", (1, 2, 4))
    return invariant_run(broken_metadata()[:-1] + samples, promised())


def check_invariants_of_zookeeper(s):
    assert set(s["fatal"]) == {"unclean-election", "dead-isr-member", "reassignment-unsynced"}
    only(s, unclean_election=[{"leader": 3, "previous_isr": [1, 2], "previous_leader": 1}],
         dead_isr_member=[{"partition": 0, "broker": 2, "seconds": 16.0, "since": S}],
         reassignment_unsynced=[{"partition": 1, "targets": [1, 2, 4], "missing": [4]}])


@case
def invariants_not_promised():
    """The same evidence, in a configuration that does not promise them:
    HW truncation (isr-behind-hw, committed-divergence), unclean elections
    on, a disk fault (committed-divergence), a longer ISR lag and session
    timeout (dead-isr-member's grace: 5 + 6 + 10 s), a kill of the new
    replica around the reassignment's end (reassignment-unsynced)."""
    samples = _with_replicas(broken_metadata()[-1:], "t/1", (1, 2, 4))
    obs = broken_states() + broken_metadata()[:-1] + samples
    return invariant_run(obs, promised(**{
        "replication.truncation": "hw", "unclean.leader.election.enable": "true",
        "replica.lag.time.max.ms": "5000", "zookeeper.session.timeout.ms": "6000"}),
        faults=("truncate-tail", "kill"))


def check_invariants_not_promised(s):
    assert s["fatal"] == ["hw-regression"]
    only(s, hw_regression=[{"rule": "leader HW went back"}])
    o = s["oracles"]
    assert o["isr-behind-hw"] == "not promised by the configuration: replication.truncation=hw"
    assert o["committed-divergence"] == o["isr-behind-hw"]
    assert o["unclean-election"] == ("not promised by the configuration: "
                                     "unclean.leader.election.enable=true")
    assert o["dead-isr-member"] == o["reassignment-unsynced"] == "checked"


@case
def invariants_with_disk_faults():
    return invariant_run(broken_states(), promised(), faults=("bitflip",))


def check_invariants_with_disk_faults(s):
    assert set(s["fatal"]) == {"isr-behind-hw", "hw-regression"}
    assert s["oracles"]["committed-divergence"] == (
        "not promised by the configuration: disk faults (bitflip)")


@case
def invariants_of_another_system():
    """Another system's run (run.json cluster.system): the design's
    definitions, and the defaults they are read with, are the built-in broker's."""
    samples = _with_replicas(broken_metadata()[-1:], "t/1", (1, 2, 4))
    return invariant_run(broken_states() + broken_metadata()[:-1] + samples,
                         {**promised(), "system": "tansu"})


def check_invariants_of_another_system(s):
    only(s)
    assert all(s["oracles"][k].startswith("not promised by the configuration: tansu")
               for k in INVARIANT_TYPES)


@case
def invariants_without_a_controller():
    """Controller coordination with no controller registered: nobody could
    drop the dead broker from the ISR (V2 coordination has no controller:
    each leader drops it, and the grace counts)."""
    obs = [{**m, "controller": None} for m in broken_metadata()[:-1]]
    return invariant_run(obs, promised(**{"unclean.leader.election.enable": "true"}))


def check_invariants_without_a_controller(s):
    only(s)


@case
def invariants_of_v2_coordination():
    obs = [{**m, "controller": None} for m in broken_metadata()[:-1]]
    return invariant_run(obs, promised(**{"unclean.leader.election.enable": "true",
                                          "coordination": "v2"}))


def check_invariants_of_v2_coordination(s):
    only(s, dead_isr_member=[{"partition": 0, "broker": 2}])


# --------------------------------------------------------------------------- topics re-created


def recreated(topic, deleted_at, created_at):
    """observations.jsonl's lines for a topic deleted and created again."""
    return [{"kind": "topic-delete", "time": deleted_at, "topic": topic},
            {"kind": "topic-create", "time": created_at, "topic": topic}]


class Timed:
    """Ops given as (invoked, answered) times; the events go to the builder in time order."""

    def __init__(self):
        self.b, self.events = HistoryBuilder(), []

    def send(self, process, value, invoked, answered, outcome="ok", offset=None):
        op = self.b.op_id()
        done = dict(process=process, op=op, type=outcome, f="send", topic="t", partition=0,
                    value=value, time=answered)
        done.update(offset=offset) if outcome == "ok" else done.update(error="timeout")
        self.events += [dict(process=process, op=op, type="invoke", f="send", topic="t",
                             partition=0, value=value, time=invoked), done]

    def poll(self, process, records, invoked, answered, hw, final=False, position=None):
        op = self.b.op_id()
        extra = {"final": True} if final else {}
        self.events += [
            dict(process=process, op=op, type="invoke", f="poll", topic="t", partition=0,
                 offset=position, time=invoked, **extra),
            dict(process=process, op=op, type="ok", f="poll", topic="t", partition=0,
                 records=[list(r) for r in records], high_watermark=hw, time=answered, **extra)]

    def built(self) -> HistoryBuilder:
        for ev in sorted(self.events, key=lambda e: e["time"]):
            self.b.add(**ev)
        return self.b


@case
def recreated_topic_clean():
    """t deleted at 10 s and created again at 14 s: its first incarnation's
    records are gone (value 6, never read, is not unseen; nor is value 7,
    which a read that re-seeked past it never returned, lost); a send answered
    after the re-creation went to the new one (value 3 at offset 0 again);
    a read of the old one returned a value whose send was answered, info,
    only after the re-creation (value 5: it may be in either, not phantom);
    a client that prefetched hands out a record of the old incarnation
    after the new one exists (value 9: the poll is the old one's)."""
    h = Timed()
    h.send(0, 1, 1 * S, 2 * S, offset=0)
    h.send(0, 2, 3 * S, 4 * S, offset=1)
    h.send(1, 5, 5 * S, 15 * S, outcome="info")
    h.send(2, 6, 6 * S, 7 * S, offset=3)
    h.poll(2, [(0, 1), (1, 2), (2, 5)], 8 * S, 9 * S, hw=3)
    h.send(2, 7, 9 * S, 9 * S + 1, offset=4)
    h.send(2, 8, 9 * S + 2, 9 * S + 3, offset=5)
    h.poll(5, [(5, 8)], 9 * S + 4, 9 * S + 5, hw=6, position=5)
    h.send(2, 9, 9 * S + 6, 9 * S + 7, offset=6)
    h.poll(5, [(6, 9)], 15 * S, 15 * S + 1, hw=7)
    h.send(3, 3, 12 * S, 16 * S, offset=0)
    h.send(3, 4, 17 * S, 18 * S, offset=1)
    h.poll(4, [(0, 3), (1, 4)], 20 * S, 21 * S, hw=2, final=True)
    return h.built(), {"observations": recreated("t", 10 * S, 14 * S)}


def check_recreated_topic_clean(s):
    assert s["valid"] is True, s["fatal"]
    only(s)
    parts = {p["topic"]: p for p in s["final_reads"]["partitions"]}
    assert set(parts) == {"t", "t#1"}
    assert parts["t"]["deleted"] is True and parts["t"]["acknowledged"] == 6
    assert parts["t#1"]["final_complete"] is True and "deleted" not in parts["t#1"]
    assert parts["t#1"]["acknowledged"] == 2
    assert s["oracles"]["resurrected"] == "checked"


@case
def resurrected():
    """The re-created t's final reads return the first incarnation's records."""
    h = Timed()
    h.send(0, 1, 1 * S, 2 * S, offset=0)
    h.send(0, 2, 3 * S, 4 * S, offset=1)
    h.poll(4, [(0, 1), (1, 2)], 20 * S, 21 * S, hw=2, final=True)
    return h.built(), {"observations": recreated("t", 10 * S, 14 * S)}


def check_resurrected(s):
    assert s["fatal"] == ["resurrected"]
    only(s, resurrected=[{"topic": "t#1", "value": 1, "offset": 0, "acknowledged_in": "t"},
                         {"topic": "t#1", "value": 2, "offset": 1, "acknowledged_in": "t"}])


# --------------------------------------------------------------------------- consumer groups


class Groups:
    """groups.jsonl lines beside a HistoryBuilder: each placed after the history's last event."""

    def __init__(self, b, group="g"):
        self.b, self.group, self.events, self.refs = b, group, [], 0

    def add(self, **ev):
        last = self.b.events[-1]["time"] if self.b.events else 0
        self.events.append({"time": last, "index": len(self.b.events), "seq": len(self.events),
                            "group": self.group, **ev})

    def assign(self, member, position, committed, partition=0):
        self.add(member=member, kind="assign", partitions=[
            {"topic": "t", "partition": partition, "position": position, "committed": committed}])

    def revoke(self, member, partition=0):
        self.add(member=member, kind="revoke", lost=False,
                 partitions=[{"topic": "t", "partition": partition}])

    def commit(self, member, offset, outcome="ok", partition=0):
        self.refs += 1
        offsets = [{"topic": "t", "partition": partition, "offset": offset}]
        self.add(member=member, kind="commit", type="invoke", commit=self.refs, offsets=offsets)
        done = {"offsets": offsets} if outcome == "ok" else {"error": "timeout"}
        self.add(member=member, kind="commit", type=outcome, commit=self.refs, **done)


def group_poll(b, proc, records, position, group="g"):
    op = b.invoke_poll(proc, position, group=group)
    b.complete_poll(op, proc, records, hw=4, group=group)


def four_sends():
    b = HistoryBuilder()
    for v, o in ((1, 0), (2, 1), (3, 2), (4, 3)):
        b.send(0, v, offset=o)
    return b


def read_all(b):
    final_read(b, 9, [(0, 1), (1, 2), (2, 3), (3, 4)], 4)


@case
def group_clean():
    """Two members in turn, each resuming at the other's last commit."""
    b = four_sends()
    g = Groups(b)
    g.assign("consumer-1", 0, -1)
    group_poll(b, 1, [(0, 1), (1, 2)], 0)
    g.commit("consumer-1", 2)
    g.revoke("consumer-1")
    g.assign("consumer-2", 2, 2)
    group_poll(b, 2, [(2, 3), (3, 4)], 2)
    g.commit("consumer-2", 4)
    read_all(b)
    return b, {"groups": g.events}


def check_group_clean(s):
    assert s["valid"] is True
    only(s)
    assert {s["oracles"][k] for k in GROUP_TYPES} == {"checked"}


@case
def commit_regressed():
    b = four_sends()
    g = Groups(b)
    g.assign("consumer-1", 0, -1)
    group_poll(b, 1, [(0, 1), (1, 2), (2, 3)], 0)
    g.commit("consumer-1", 3)
    g.revoke("consumer-1")
    g.assign("consumer-2", 1, 1)          # told 1 after 3 was acknowledged
    group_poll(b, 2, [(1, 2), (2, 3)], 1)
    g.commit("consumer-2", 2)             # acknowledged below 3
    group_poll(b, 2, [(3, 4)], 3)
    read_all(b)
    return b, {"groups": g.events}


def check_commit_regressed(s):
    assert s["valid"] is False and s["fatal"] == ["commit-regressed"]
    only(s, commit_regressed=[
        {"group": "g", "member": "consumer-2", "kind": "assign", "offset": 1, "previous": 3},
        {"group": "g", "member": "consumer-2", "kind": "commit", "offset": 2, "previous": 3}])


@case
def resume_past_commit():
    b = four_sends()
    g = Groups(b)
    g.assign("consumer-1", 0, -1)
    group_poll(b, 1, [(0, 1)], 0)
    g.commit("consumer-1", 1)
    g.revoke("consumer-1")
    g.assign("consumer-2", 3, 3)          # starts at 3: offsets 1 and 2 never reach the group
    group_poll(b, 2, [(3, 4)], 3)
    g.commit("consumer-2", 4)
    read_all(b)
    return b, {"groups": g.events}


def check_resume_past_commit(s):
    assert s["valid"] is False and s["fatal"] == ["group-skipped", "resume-past-commit"]
    only(s, resume_past_commit=[{"group": "g", "member": "consumer-2", "offset": 3, "committed": 1,
                                 "skipped": 1}],
         group_skipped=[{"value": 2, "offset": 1, "committed": 4},
                        {"value": 3, "offset": 2, "committed": 4}])


@case
def resume_after_unknown_commit():
    """A commit whose outcome is unknown may have taken effect: resuming at it is no anomaly."""
    b = four_sends()
    g = Groups(b)
    g.assign("consumer-1", 0, -1)
    group_poll(b, 1, [(0, 1)], 0)
    g.commit("consumer-1", 1)
    group_poll(b, 1, [(1, 2), (2, 3)], 1)
    g.commit("consumer-1", 3, outcome="info")
    g.assign("consumer-2", 3, 3)
    group_poll(b, 2, [(3, 4)], 3)
    g.commit("consumer-2", 4)
    read_all(b)
    return b, {"groups": g.events}


def check_resume_after_unknown_commit(s):
    assert s["valid"] is True
    only(s)


def member_skips():
    """A member that moves past offset 1 by itself and commits 3."""
    b = four_sends()
    g = Groups(b)
    g.assign("consumer-1", 0, -1)
    group_poll(b, 1, [(0, 1)], 0)
    group_poll(b, 1, [(2, 3)], 2)
    g.commit("consumer-1", 3)
    return b, g


@case
def group_skipped():
    b, g = member_skips()
    read_all(b)
    return b, {"groups": g.events}


def check_group_skipped(s):
    assert s["valid"] is False and s["fatal"] == ["group-skipped"]
    only(s, group_skipped=[{"topic": "t", "partition": 0, "group": "g", "value": 2, "offset": 1,
                            "committed": 3}])


@case
def group_skipped_unjudged():
    """Without complete final reads nothing says the record is still there to poll."""
    b, g = member_skips()
    return b, {"groups": g.events}


def check_group_skipped_unjudged(s):
    assert s["fatal"] == ["lost"]     # (reads got past offset 1: a loss, not a group's skip)
    only(s, lost=[{"value": 2}], unseen=[{"value": 4}])


def random_group_run(seed):
    """A group's life at random over two partitions: members take partitions
    over at (about) the last commit, poll with occasional jumps, commit
    with all outcomes and now and then below what they had. The checkers
    must agree on whatever it shows."""
    rng = random.Random(seed)
    b = HistoryBuilder()
    g = Groups(b)
    log = {0: [], 1: []}                                   # partition -> values by offset
    owner, process, position, committed = {}, {}, {}, {0: 0, 1: 0}
    value, proc = 0, 10
    for _ in range(60):
        p = rng.randrange(2)
        roll = rng.random()
        if roll < 0.35:
            value += 1
            b.send(0, value, offset=len(log[p]), partition=p)
            log[p].append(value)
        elif roll < 0.45 or p not in owner:
            proc += 1
            owner[p], process[p] = f"consumer-{proc}", proc
            position[p] = max(0, committed[p] + rng.choice((0, 0, 0, -1, 1, 2)))
            g.add(member=owner[p], kind="assign", partitions=[
                {"topic": "t", "partition": p, "position": position[p],
                 "committed": committed[p] - rng.choice((0, 0, 0, 1))}])
        elif roll < 0.8:
            start = position[p] + (1 if rng.random() < 0.1 else 0)
            records = [(o, log[p][o]) for o in range(start, min(len(log[p]), start + 3))]
            op = b.invoke_poll(process[p], position[p], partition=p, group="g")
            b.complete_poll(op, process[p], records, hw=len(log[p]), partition=p, group="g")
            if records:
                position[p] = records[-1][0] + 1
        else:
            outcome = rng.choice(("ok", "ok", "ok", "fail", "info"))
            offset = max(0, position[p] - (1 if rng.random() < 0.1 else 0))
            g.commit(owner[p], offset, outcome=outcome, partition=p)
            if outcome == "ok":
                committed[p] = offset
    for p in (0, 1):
        final_read(b, 99, list(enumerate(log[p])), len(log[p]), partition=p)
    return b, {"groups": g.events}


def agrees_with_reference(name):
    def check(s):
        b, meta = CASES[name]()
        want = build_summary(reference.check(_write_case(name, b, meta)))
        for kind in GROUP_TYPES:
            assert s["anomaly_counts"][kind] == want["anomaly_counts"][kind], kind
            assert s["anomalies"][kind] == want["anomalies"][kind], kind
    return check


for _seed in range(4):
    CASES[f"random_groups_{_seed}"] = lambda seed=_seed: random_group_run(seed)
    globals()[f"check_random_groups_{_seed}"] = agrees_with_reference(f"random_groups_{_seed}")


# --------------------------------------------------------------------------- running them


def _write(tmp_path_factory, name):
    b, meta_extra = CASES[name]()
    return _write_case(name, b, meta_extra, tmp_path_factory.mktemp("crafted") / name)


def _write_case(name, b, meta_extra, d=None):
    meta_extra = dict(meta_extra)
    observations = meta_extra.pop("observations", None)
    groups = meta_extra.pop("groups", None)
    d = d or Path(tempfile.mkdtemp(prefix="crafted-")) / name
    write_run(d, b.events, run_json(run=name, **meta_extra))
    if observations is not None:
        (d / "observations.jsonl").write_text("".join(json.dumps(o) + "\n" for o in observations))
    if groups is not None:
        (d / "groups.jsonl").write_text("".join(json.dumps(e) + "\n" for e in groups))
    return d


@pytest.fixture(scope="module")
def spark_summaries(spark, tmp_path_factory):
    from reports import api

    dirs = {name: _write(tmp_path_factory, name) for name in CASES}
    results = api.findings(list(dirs.values()), spark=spark)
    return {name: build_summary(r) for name, r in zip(dirs, results)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference(name, tmp_path_factory):
    s = build_summary(reference.check(_write(tmp_path_factory, name)))
    globals()[f"check_{name}"](s)


@pytest.mark.parametrize("name", sorted(CASES))
def test_spark(name, spark_summaries):
    globals()[f"check_{name}"](spark_summaries[name])


@pytest.mark.parametrize("name", sorted(CASES))
def test_spark_agrees_with_reference(name, spark_summaries, tmp_path_factory):
    """The two checkers' summary.json, field for field (but the checker's name)."""
    want = build_summary(reference.check(_write(tmp_path_factory, name)))
    got = dict(spark_summaries[name])
    assert (got.pop("checker"), want.pop("checker")) == ("spark", "reference")
    assert json.loads(json.dumps(got)) == json.loads(json.dumps(want))


def test_every_anomaly_type_has_a_case_and_a_report_section(tmp_path_factory):
    """Some case above finds each type of the registry (the transaction types:
    test_reports_transactions.py); the report gives it a section with the
    type's line for the instance."""
    found = {}
    for name in sorted(CASES):
        s = build_summary(reference.check(_write(tmp_path_factory, name)))
        for kind in ANOMALY_TYPES:
            if s["anomaly_counts"][kind]:
                found.setdefault(kind, s)
    assert set(found) == set(ANOMALY_TYPES) - set(TRANSACTION_TYPES)
    for kind, s in found.items():
        html = render(s, {})
        line = BY_NAME[kind].line(s["anomalies"][kind][0])
        assert f'<h3 id="{kind}">' in html and escape(line) in html, kind


def test_summary_shape(tmp_path_factory):
    """The part of summary.json other tools rely on: every key, always."""
    s = build_summary(reference.check(_write(tmp_path_factory, "clean")))
    assert s["format"] == 1 and s["run"] == "clean"
    assert set(s["anomalies"]) == set(ANOMALY_TYPES)
    assert set(s["counts"]) >= {"send", "poll", "acknowledged", "read"}
    for f in ("send", "poll"):
        assert set(s["counts"][f]) >= {"ok", "fail", "info"}
