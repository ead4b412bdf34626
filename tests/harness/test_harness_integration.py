"""Short runs against a real local cluster (3 brokers, 1 ZooKeeper, links
through the proxy): every fault kind once, through the pytest fixtures.
Each checks that the history is well formed (the checker's own event schema
and its reference checker accept it), every fault start has its stop, the
cluster is whole again, and no worker process is left behind.

Needs Java + Debian's ZooKeeper jars (the local backend) and the broker;
skipped otherwise. About 30-60 s per test on 2 cores.
"""
import os
import subprocess

import pytest

from faults.nemesis import Schedule, Step
from harness.fixtures import chaos_run, history, nemesis, workload  # noqa: F401 - fixtures
from harness.history import read_history

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path):
    from harness.backends.base import ClusterError, ClusterSpec
    from harness.backends.local import LocalCluster

    try:
        c = LocalCluster(ClusterSpec(name=f"it{os.getpid()}", brokers=3, proxied=True,
                                     broker_config={"replica.lag.time.max.ms": 4000}),
                         base_dir=tmp_path / "cluster")
    except ClusterError as e:  # raised before anything starts: Java or ZooKeeper's jars missing
        pytest.skip(f"the local backend cannot run here: {e}")
    c.start()
    yield c
    c.destroy()
    leftovers = subprocess.run(["pgrep", "-f", str(c.base_dir)], capture_output=True,
                               text=True).stdout.split()
    assert not leftovers, f"processes left behind: {leftovers}"


def check_history(run_dir, cluster, expect_faults):
    from reports.readers import open_run
    from reports.reference import check
    from reports.schema import event_problem, normalize_event

    events = list(read_history(run_dir / "history.jsonl"))
    assert events
    for e in events:
        norm = normalize_event(e)
        assert norm is not None and event_problem(norm) is None, e
    starts = [(e["fault"], e["op"]) for e in events if e["f"] == "nemesis" and e["phase"] == "start"]
    stops = [e["fault"] for e in events if e["f"] == "nemesis" and e["phase"] == "stop"]
    assert sorted(f for f, _ in starts) == sorted(stops)
    seen = {f for f, _ in starts}
    assert set(expect_faults) <= seen, f"faults that never started: {set(expect_faults) - seen}"
    findings = check(open_run(run_dir))
    assert findings.counts["send"]["ok"] > 0
    assert all(n.state == "running" for n in cluster.nodes())
    return findings


def run_steps(cluster, workload, nemesis, history, steps, quiet=3.0):
    run = workload(topics={"t": 3}, replication_factor=3, rate=40, producers=1, slots=3)
    duration = max(s.at_s + s.duration_s for s in steps) + 1
    nem = nemesis(Schedule(1, duration, quiet, steps))
    run.finish(quiet_s=quiet, final_timeout_s=60, settle_s=3)
    assert not nem.errors, nem.errors
    # The final heal comes at the schedule's duration, not when its last step ended.
    heals = [e["time"] for e in read_history(history.run_dir / "history.jsonl")
             if e["f"] == "nemesis" and e["fault"] == "final-heal" and e["phase"] == "start"]
    assert heals and heals[0] >= duration * 1e9, (heals, duration)
    for s in run.workload.streams:
        assert s.handle.wait(1) is not None, f"{s.handle.name} still running"
    return run, nem


def test_process_faults(cluster, workload, nemesis, history):
    steps = [Step(1, "kill", 3, "leader"), Step(6, "stop", 3, "follower"),
             Step(11, "pause", 3, "controller"), Step(16, "hard-bounce", 20, "leader", {"times": 1}),
             Step(18, "clean-bounce", 10, "random", {"times": 1})]
    run, nem = run_steps(cluster, workload, nemesis, history, steps)
    check_history(history.run_dir, cluster, ["kill", "stop", "pause", "hard-bounce"])
    assert run.final.complete
    assert (history.run_dir / "run.json").exists() and (history.run_dir / "zookeeper.json").exists()
    assert (history.run_dir / "logs" / "broker-1.log").exists()


def test_zookeeper_faults(cluster, workload, nemesis, history):
    steps = [Step(1, "zk-expire", 2, "controller"), Step(5, "zk-expire", 2, "leader"),
             Step(9, "zk-pause", 2, "zk-leader"), Step(13, "zk-kill", 3, "zk-leader")]
    run, nem = run_steps(cluster, workload, nemesis, history, steps)
    check_history(history.run_dir, cluster, ["zk-expire", "zk-pause", "zk-kill"])
    details = [d["detail"] for d in nem.done if d["fault"] == "zk-expire"]
    assert all("expired" in d for d in details), details


def test_partitions_through_the_proxy(cluster, workload, nemesis, history):
    steps = [Step(1, "partition-isolate", 3, "leader"), Step(5, "partition-halves", 3),
             Step(9, "partition-one-way", 3, "leader", {"direction": "in"}),
             Step(13, "partition-zk", 3, "controller"), Step(17, "partition-clients", 3, "leader"),
             Step(21, "partition-ring", 2), Step(24, "partition-bridge", 2)]
    run, nem = run_steps(cluster, workload, nemesis, history, steps)
    check_history(history.run_dir, cluster, [s.fault for s in steps])
    # everything re-enabled, no toxic of ours left
    from faults.injectors import net
    for name, p in net.proxy_client(cluster).proxies().items():
        assert p.enabled, name
        assert not [t for t in p.toxics() if t.startswith(net.TOXIC_PREFIX)], name


def test_link_toxics(cluster, workload, nemesis, history):
    steps = [Step(1, "latency", 3, "leader", {"latency": 100, "jitter": 50}),
             Step(5, "bandwidth", 3, None, {"rate": 32}), Step(9, "slicer", 3, "random"),
             Step(13, "reset-peer", 3, "leader"), Step(17, "link-timeout", 3, "random")]
    run, nem = run_steps(cluster, workload, nemesis, history, steps)
    check_history(history.run_dir, cluster, [s.fault for s in steps])


def test_disk_faults(cluster, workload, nemesis, history):
    steps = [Step(3, "truncate-tail", 3, "follower", {"bytes": 100}),
             Step(8, "bitflip", 3, "follower", {"flips": 2}),
             Step(13, "lose-unfsynced", 3, "leader")]
    run, nem = run_steps(cluster, workload, nemesis, history, steps)
    check_history(history.run_dir, cluster, [s.fault for s in steps])
    details = " ".join(d["detail"] for d in nem.done)
    assert "cut" in details and "flipped" in details
