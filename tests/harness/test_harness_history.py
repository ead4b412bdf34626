"""The recorder keeps the history format's invariants under concurrency and
loses at most about a second when the harness dies."""
import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from harness.history import (HistoryError, HistoryRecorder, HistoryStats, encode,
                             read_history, update_run_json, write_run_json)

REPO = Path(__file__).resolve().parents[2]


def load(path):
    return list(read_history(path))


def check_invariants(events):
    """Rules 1, 3, 5 of history-format.md plus index/time/op uniqueness."""
    assert [e["index"] for e in events] == list(range(len(events)))
    times = [e["time"] for e in events]
    assert times == sorted(times)
    open_ops = {}      # process -> op
    retired = set()
    seen_ops = {}
    for e in events:
        if e["process"] == -1:
            assert e["f"] == "nemesis" and e["type"] == "info"
            assert e["op"] not in seen_ops
            seen_ops[e["op"]] = e
            continue
        p = e["process"]
        assert p not in retired, f"process {p} reused after info"
        if e["type"] == "invoke":
            assert p not in open_ops
            assert e["op"] not in seen_ops
            open_ops[p] = e["op"]
            seen_ops[e["op"]] = e
        else:
            assert open_ops.pop(p) == e["op"]
            if e["type"] == "info":
                retired.add(p)
    assert not open_ops


def test_fields_and_order(tmp_path):
    with HistoryRecorder(tmp_path / "h.jsonl") as h:
        op = h.invoke("w0", "send", topic="t", partition=0, value=1)
        h.nemesis("kill", "start", ["broker-2"])
        h.complete(op, "ok", offset=0)
        op2 = h.invoke("c0", "poll", topic="t", partition=0, offset=0)
        h.complete(op2, "ok", records=[[0, 1]], high_watermark=1)
        h.nemesis("kill", "stop", ["broker-2"], detail={"signal": "KILL"})
    lines = (tmp_path / "h.jsonl").read_text().splitlines()
    assert list(json.loads(lines[0])) == ["index", "time", "process", "op", "type", "f",
                                          "topic", "partition", "value"]
    ev = [json.loads(x) for x in lines]
    assert ev[1] == {"index": 1, "time": ev[1]["time"], "process": -1, "op": 1, "type": "info",
                     "f": "nemesis", "fault": "kill", "phase": "start", "targets": ["broker-2"]}
    # the completion of a send repeats what was sent
    assert ev[2]["value"] == 1 and ev[2]["offset"] == 0 and ev[2]["op"] == 0
    # a poll's completion does not inherit the invoke's position
    assert "offset" not in ev[4] and ev[4]["records"] == [[0, 1]]
    assert ev[5]["detail"] == '{"signal":"KILL"}'
    check_invariants(ev)


def test_retire_after_info(tmp_path):
    with HistoryRecorder(tmp_path / "h.jsonl") as h:
        a = h.invoke("w", "send", topic="t", partition=0, value=1)
        h.complete(a, "fail", error="NOT_ENOUGH_REPLICAS")
        b = h.invoke("w", "send", topic="t", partition=0, value=2)
        h.complete(b, "info", error="timeout")
        c = h.invoke("w", "send", topic="t", partition=0, value=3)
        h.complete(c, "ok", offset=5)
    ev = load(tmp_path / "h.jsonl")
    procs = [e["process"] for e in ev]
    assert procs[:4] == [0, 0, 0, 0]   # fail keeps the process
    assert procs[4] == procs[5] == 1    # info retired it
    check_invariants(ev)


def test_one_outstanding_per_actor_and_unknown_ops(tmp_path):
    with HistoryRecorder(tmp_path / "h.jsonl") as h:
        h.invoke("w", "send", topic="t", partition=0, value=1)
        with pytest.raises(HistoryError):
            h.invoke("w", "send", topic="t", partition=0, value=2)
        with pytest.raises(HistoryError):
            h.complete(99, "ok")
        with pytest.raises(HistoryError):
            h.invoke("x", "read")
        with pytest.raises(HistoryError):
            h.invoke("x", "send", bogus=1)
        with pytest.raises(HistoryError):
            h.nemesis("kill", "begin")


def test_close_completes_outstanding_as_info(tmp_path):
    h = HistoryRecorder(tmp_path / "h.jsonl")
    h.invoke("w", "send", topic="t", partition=0, value=1)
    h.close(reason="harness stopped")
    ev = load(tmp_path / "h.jsonl")
    assert ev[-1]["type"] == "info" and ev[-1]["error"] == "harness stopped"
    assert ev[-1]["value"] == 1
    check_invariants(ev)
    with pytest.raises(HistoryError):
        h.nemesis("kill", "start")


def test_concurrent_writers_keep_invariants(tmp_path):
    stats = HistoryStats()
    h = HistoryRecorder(tmp_path / "h.jsonl", flush_interval=0.01)
    h.subscribe(stats)

    def worker(w):
        for i in range(300):
            op = h.invoke(("w", w), "send", topic="t", partition=w % 3, value=w * 10**9 + i)
            kind = ("ok", "fail", "info")[i % 3]
            h.complete(op, kind, **({"offset": i} if kind == "ok" else {"error": "x"}))

    def nemesis():
        for i in range(50):
            h.nemesis("pause", "start" if i % 2 == 0 else "stop", ["broker-1"])

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    threads.append(threading.Thread(target=nemesis))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    h.close()
    ev = load(tmp_path / "h.jsonl")
    assert len(ev) == 8 * 600 + 50
    check_invariants(ev)
    assert stats.counts[("send", "ok")] == 8 * 100
    assert stats.acked[("t", 0)] == 297
    assert stats.active_faults == {}


def test_time_is_nondecreasing_even_if_the_clock_is_not(tmp_path):
    ticks = iter([100, 200, 150, 300, 250, 400])
    h = HistoryRecorder(tmp_path / "h.jsonl", clock=lambda: next(ticks), start_ns=0)
    for _ in range(5):
        h.nemesis("kill", "start")
    h._stop.set()
    ev = [json.loads(x) for x in h._buf]
    assert [e["time"] for e in ev] == [100, 200, 200, 300, 300]


CRASHER = textwrap.dedent("""
    import sys, time
    from harness.history import HistoryRecorder
    h = HistoryRecorder(sys.argv[1], flush_interval=0.2)
    i = 0
    while True:
        op = h.invoke("w", "send", topic="t", partition=0, value=i)
        h.complete(op, "ok", offset=i)
        i += 1
        if i % 100 == 0:
            print(i, flush=True)
        time.sleep(0.001)
""")


def test_sigkill_loses_at_most_about_a_second(tmp_path):
    path = tmp_path / "h.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", CRASHER, str(path)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        printed = 0
        while printed < 800 and time.monotonic() < deadline:
            printed = int(proc.stdout.readline())
        started = time.monotonic()
        while time.monotonic() - started < 1.5:
            printed = int(proc.stdout.readline())
        # `printed` ops were recorded at least this long ago: 1.2 s > flush interval
        time.sleep(1.2)
        before_kill = printed
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    raw = path.read_bytes()
    assert raw.endswith(b"\n"), "no torn line from our own writes"
    ev = load(path)
    check_invariants_prefix(ev)
    ok_values = {e["value"] for e in ev if e["type"] == "ok"}
    assert set(range(before_kill)) <= ok_values


def check_invariants_prefix(events):
    assert [e["index"] for e in events] == list(range(len(events)))
    assert [e["time"] for e in events] == sorted(e["time"] for e in events)


def test_run_json(tmp_path):
    write_run_json(tmp_path, run="r1", seed=42, cluster={"brokers": 3}, workload={"client": "confluent"},
                   faults=["kill"])
    meta = json.loads((tmp_path / "run.json").read_text())
    assert meta["format"] == 1 and meta["run"] == "r1" and meta["seed"] == 42
    assert meta["started_at"].endswith("Z") and "T" in meta["started_at"]
    update_run_json(tmp_path, outcome="complete")
    assert json.loads((tmp_path / "run.json").read_text())["outcome"] == "complete"


def test_encode_omits_nulls():
    line = encode({"index": 0, "time": 1, "process": 0, "op": 0, "type": "invoke", "f": "poll",
                   "topic": "t", "partition": 0, "offset": None, "final": None})
    assert json.loads(line) == {"index": 0, "time": 1, "process": 0, "op": 0, "type": "invoke",
                                "f": "poll", "topic": "t", "partition": 0}
