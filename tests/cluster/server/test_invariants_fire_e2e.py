"""Every invariant oracle must be shown to find something (issue 35).

reports/invariants.py checks the design's definitions on samples of the
brokers' state; its unit tests feed it crafted samples. An oracle that
never fires on a real broker proves nothing: the samples may lack what it
reads, or the state it looks for may never show where it looks. Here REAL
broker processes run from a copy of `cluster/` and `contracts/` with ONE
realistic one-line bug, sampled by the harness's own samplers
(harness/observer.py: StateSampler's `broker-state`, MetadataSampler over
`zookeeper_state`'s `metadata`, into an observations.jsonl), and the oracle
must name the bug's effect; the same scenario on an unmutated copy must
leave it silent. So each test fails both ways: an oracle that cannot see
the bug, and one that cries wolf on the intact broker.

  mutation (one line)                                       oracle fired
  partition.py maybe_advance_hw: `if leo < new` ->          isr_behind_hw: the leader's
    `if leo > new` (the HW taken from the wrong member:       HW passes the LEO of a
    the furthest, not the slowest ISR replica)                follower in its ISR
  leader_selectors.offline_leader: `if live_ar and          unclean_election: the only
    unclean_enabled` -> `if live_ar` (the setting             live replica, out of the
    unclean.leader.election.enable=false ignored)             ISR, becomes leader
  replica_state_machine._remove_from_isr: `gone =           dead_isr_member: a dead
    by_tp[tp] - {cur.leader}` -> `- set(cur.isr)`             follower stays in the ISR
    (the dead replica is never taken out of the ISR)          past the grace
  reassignment.step5_stop_old_replicas: `isr = tuple(b      dead_isr_member ("outside
    for b in cur.isr if b in rar) or ...` -> `isr =           the assignment"): a removed
    tuple(cur.isr)` (a removed replica stays in the ISR)      replica, live, in the ISR
  reassignment.check: `if not set(r.new_replicas) <=        reassignment_unsynced: the
    set(lai.isr)` -> `& set(lai.isr)` (any target in          reassignment ends with a
    the ISR will do, not all)                                 new replica out of the ISR
  partition.update_follower_hw: `new = min(leader_hw,       hw_regression ("HW past the
    self.leo)` -> `new = leader_hw` (a follower takes         LEO"): a follower catching
    the leader's HW uncapped)                                 up by partial fetches

The copy is imported, not the repository: the brokers run `python -m
cluster.broker` with cwd the copy (broker_cluster.REPO patched for the
test; `-m` puts cwd first on sys.path, before the editable install's
finder), and with a bytecode cache prefix each test checks that the
mutated module was compiled from the copy and never from the repository.

Not covered here (only by the crafted samples of
tests/reports/test_reports_invariants.py):
  * hw_regression's other rule, "leader HW went back": the leader's HW is
    the least LEO of its ISR (docs/design.md#high-watermark), and within one
    leader epoch no ISR member's LEO goes back (a follower truncates at a
    new epoch only). Tried: maybe_advance_hw's `if new > self.hw` as `!=`
    lowers the HW only as an epoch begins (its followers' LEOs unknown,
    -1), before a sample of that epoch shows more; under load and a leader
    change the rule stayed silent.
  * committed_divergence: it reads the batch at each replica's HW - 1 at a
    sample, so replicas that disagree must be sampled with their HWs inside
    the batches they disagree on (docs/design.md#g-replicas-agree). The
    natural bug, a deposed leader skipping its truncation, keeps its extra
    batches, but with two replicas the new leader, alone in the ISR, has its
    HW at its LEO, past them, and the rejoining replica takes that HW with
    its first fetch: the disagreeing batches are never anyone's HW - 1.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import broker_cluster
from broker_cluster import AckedProducer, wait_until
from cluster import admin
from harness import kafka_wire
from harness.observer import MetadataSampler, Observations, StateSampler, zookeeper_state
from reports.invariants import (dead_isr_member, hw_regression, isr_behind_hw,
                                reassignment_unsynced, unclean_election)
from reports.observations import MAX_SAMPLE_GAP_NS

REPO = broker_cluster.REPO
CONFIG = {"chaoslog.controller.enable": True, "chaoslog.state.window.enable": True}

# (file, old line, new line): one realistic bug each.
HW_FROM_THE_WRONG_MEMBER = ("cluster/server/partition.py",
                            "                if leo < new:\n",
                            "                if leo > new:\n")
UNCLEAN_SETTING_IGNORED = ("cluster/controller/leader_selectors.py",
                           "    if live_ar and unclean_enabled:\n",
                           "    if live_ar:\n")
DEAD_REPLICA_KEPT_IN_ISR = ("cluster/controller/replica_state_machine.py",
                            "            gone = by_tp[tp] - {cur.leader}\n",
                            "            gone = by_tp[tp] - set(cur.isr)\n")
REMOVED_REPLICA_KEPT_IN_ISR = ("cluster/controller/reassignment.py",
                               "            isr = tuple(b for b in cur.isr if b in rar) or tuple(cur.isr)\n",
                               "            isr = tuple(cur.isr)\n")
ANY_TARGET_IN_SYNC = ("cluster/controller/reassignment.py",
                      "        if not set(r.new_replicas) <= set(lai.isr):\n",
                      "        if not set(r.new_replicas) & set(lai.isr):\n")
FOLLOWER_HW_UNCAPPED = ("cluster/server/partition.py",
                        "        new = min(leader_hw, self.leo)\n",
                        "        new = leader_hw\n")

GRACE_S = 2.0   # dead_isr_member: the controller's time to act
LAG_S = 10.0    # replica.lag.time.max.ms, the broker's default
MODES = pytest.mark.parametrize("broken", [True, False], ids=["broken", "intact"])


# -- the broker under test: a copy, mutated or not ----------------------------------------------

def _tree(tmp_path: Path, monkeypatch, mutation: tuple[str, str, str], broken: bool) -> Path:
    """cluster/ and contracts/ copied under tmp_path/tree, `mutation` applied
    when `broken`; brokers started during the test run from there, writing
    their bytecode under tmp_path/pyc (nothing written to the repository or
    the venv)."""
    tree = tmp_path / "tree"
    for pkg in ("cluster", "contracts"):
        shutil.copytree(REPO / pkg, tree / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    path, old, new = mutation
    f = tree / path
    text = f.read_text()
    assert text.count(old) == 1, f"{path}: the line to mutate moved: {old!r}"
    if broken:
        f.write_text(text.replace(old, new))
    monkeypatch.setattr(broker_cluster, "REPO", tree)
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path / "pyc"))
    return tree


def _assert_ran_from(tree: Path, tmp_path: Path, mutation: tuple[str, str, str]) -> None:
    """The brokers compiled the mutated module of the copy, never the repository's."""
    def cached(src: Path) -> Path:
        return (tmp_path / "pyc" / str(src.parent).lstrip("/")
                / f"{src.stem}.{sys.implementation.cache_tag}.pyc")
    assert cached(tree / mutation[0]).is_file(), f"the brokers did not import the copy's {mutation[0]}"
    assert not cached(REPO / mutation[0]).exists(), f"a broker imported the repository's {mutation[0]}"


# -- sampling with the harness's samplers ---------------------------------------------------------

class _Brokers:
    """What StateSampler asks of a harness cluster: its node names and
    addresses, and how to connect (plaintext)."""

    client_security = None

    def __init__(self, c):
        self.c = c
        self.spec = self

    def node_names(self) -> list[str]:
        return [f"broker-{i}" for i in self.c.brokers]

    def node(self, name: str):
        b = self.c.brokers[int(name.split("-")[1])]
        return SimpleNamespace(host=b.address[0], port=b.port)


class _Observed:
    """An observations.jsonl on a monotonic clock, read back by kind."""

    def __init__(self, path: Path):
        self.path = path
        t0 = time.monotonic_ns()
        self.obs = Observations(path, lambda: time.monotonic_ns() - t0)

    def clock(self) -> int:
        return self.obs.clock()

    def read(self, kind: str) -> list[dict]:
        out = []
        for line in self.path.read_bytes().split(b"\n"):
            try:
                o = json.loads(line)
            except ValueError:
                continue   # empty, or being written
            if o.get("kind") == kind:
                out.append(o)
        return sorted(out, key=lambda o: o["time"])


def _zk(c) -> dict:
    return zookeeper_state(c.zk)


def _partition(state: dict, topic: str) -> dict:
    """Partition 0 of `topic` in a ZooKeeper reading ({} before its first election)."""
    found = [p for p in state["partitions"] if (p["topic"], p["partition"]) == (topic, 0)]
    return found[0] if found else {}


def _controller_view(c, cid: int):
    conn = kafka_wire.KafkaConnection(*c.brokers[cid].address, timeout=10)
    try:
        view = kafka_wire.state_window(conn).get("controller")
    finally:
        conn.close()
    return None if view is None or view.get("busy") else view


def _one_replica_off_the_controller(c, topic: str) -> tuple[int, int, int]:
    """A topic of one partition on one of the two brokers that are not the
    controller; returns (controller, that broker, the other) once it leads."""
    cid = wait_until(lambda: _zk(c)["controller"], 30, "a controller")
    a, b = sorted(set(c.brokers) - {cid})
    admin.create_topic(c.zk, topic, 1, 1, replica_assignment={0: [a]})
    wait_until(lambda: _partition(_zk(c), topic).get("leader") == a, 30, f"{topic}: leader {a}")
    return cid, a, b


def _pair_off_the_controller(c, topic: str) -> tuple[int, int]:
    """A topic of one partition on the two brokers that are not the
    controller (so killing them moves no controller); returns (leader,
    follower) once both are in the ISR."""
    cid = wait_until(lambda: _zk(c)["controller"], 30, "a controller")
    a, b = sorted(set(c.brokers) - {cid})
    admin.create_topic(c.zk, topic, 1, 2, replica_assignment={0: [a, b]})
    wait_until(lambda: (lambda p: p.get("leader") == a and p.get("isr") == [a, b])(
        _partition(_zk(c), topic)), 30, f"{topic}: leader {a}, ISR [{a}, {b}]")
    return a, b


def _fill(bootstrap: str, topic: str, batches: int) -> None:
    """`batches` small batches (10 records of 100 bytes) in partition 0 of
    `topic`, all acknowledged: with replica.fetch.max.bytes=1 a follower
    fetches one batch a request, so catching up takes `batches` fetches."""
    import confluent_kafka as ck
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                     "batch.num.messages": 10})
    failed = []
    for i in range(batches * 10):
        p.produce(topic, value=b"%099d" % i, partition=0,
                  on_delivery=lambda err, _m: err and failed.append(str(err)))
        p.poll(0)
    assert p.flush(30) == 0 and failed == [], failed[:3]


# -- isr_behind_hw ----------------------------------------------------------------------------------

@MODES
def test_isr_behind_hw_fires_when_the_hw_follows_the_fastest_member(
        make_cluster, tmp_path, monkeypatch, broken):
    tree = _tree(tmp_path, monkeypatch, HW_FROM_THE_WRONG_MEMBER, broken)
    c = make_cluster(2, **CONFIG, **{"min.insync.replicas": 2})
    admin.create_topic(c.zk, "hwm", 1, 2)
    leader = admin.wait_for_leaders(c.zk, "hwm", 30)["partitions"][0]["leader"]
    follower = 3 - leader
    seen = _Observed(tmp_path / "observations.jsonl")
    sampler = StateSampler(_Brokers(c), seen.obs, lambda: {"hwm"}, period_s=0.01).start()
    try:
        with AckedProducer(c.bootstrap, "hwm", b"h%07d") as load:
            if broken:
                found = wait_until(lambda: isr_behind_hw(seen.read("broker-state")), 45,
                                   "isr_behind_hw on the broken leader")
            else:
                def leader_samples_under_load() -> int:
                    n = sum(1 for s in seen.read("broker-state")
                            if s["broker"] == leader and any(
                                p["leader"] == leader and p["isr"] == [1, 2]
                                and p["followers"].get(str(follower), -1) >= 0
                                for p in s["partitions"]))
                    return len(load.acked) >= 3000 and n >= 150
                wait_until(leader_samples_under_load, 45,
                           "3000 acknowledged writes and 150 samples of the leader with both in its ISR")
                found = isr_behind_hw(seen.read("broker-state"))
    finally:
        sampler.stop()
        seen.obs.close()
    assert load.errors == []
    _assert_ran_from(tree, tmp_path, HW_FROM_THE_WRONG_MEMBER)
    if not broken:
        assert found == []
        return
    i = found[0]
    assert (i["topic"], i["partition"], i["leader"], i["follower"]) == ("hwm", 0, leader, follower)
    assert i["follower"] in i["isr"] and 0 <= i["follower_leo"] < i["hw"]


# -- unclean_election ---------------------------------------------------------------------------------

@MODES
def test_unclean_election_fires_when_the_setting_is_ignored(make_cluster, tmp_path, monkeypatch,
                                                             broken):
    tree = _tree(tmp_path, monkeypatch, UNCLEAN_SETTING_IGNORED, broken)
    c = make_cluster(3, **CONFIG, **{"unclean.leader.election.enable": False})
    a, b = _pair_off_the_controller(c, "uc")
    cid = _zk(c)["controller"]
    seen = _Observed(tmp_path / "observations.jsonl")
    sampler = MetadataSampler(lambda: _zk(c), seen.obs, period_s=0.1).start()
    try:
        # The follower goes (out of the ISR), then the leader, the last ISR member.
        c.brokers[b].terminate()
        wait_until(lambda: _partition(_zk(c), "uc").get("isr") == [a], 30, f"uc: ISR [{a}]")
        c.brokers[a].terminate()
        wait_until(lambda: _partition(_zk(c), "uc").get("leader") == -1, 30, "uc: leader -1")
        # Only the out-of-sync replica comes back.
        c.brokers[b].start().wait_registered(c.zk)
        if broken:
            found = wait_until(lambda: unclean_election(seen.read("metadata")), 30,
                               "unclean_election on the broken controller")
        else:
            # The controller has handled b's startup (its view is taken between
            # events), and ZooKeeper was sampled after that.
            wait_until(lambda: (lambda v: v and b in [x["id"] for x in v["live_brokers"]])(
                _controller_view(c, cid)), 30, f"the controller sees broker {b}")
            t = seen.clock()
            wait_until(lambda: [s for s in seen.read("metadata") if s["time"] > t], 10,
                       "a sample after the controller saw the broker")
            found = unclean_election(seen.read("metadata"))
    finally:
        sampler.stop()
        seen.obs.close()
    _assert_ran_from(tree, tmp_path, UNCLEAN_SETTING_IGNORED)
    if not broken:
        assert found == []
        assert _partition(seen.read("metadata")[-1], "uc")["leader"] == -1
        return
    [i] = found
    assert (i["topic"], i["partition"], i["leader"]) == ("uc", 0, b)
    assert i["previous_leader"] == -1 and i["previous_isr"] == [a]


# -- dead_isr_member ----------------------------------------------------------------------------------

@MODES
def test_dead_isr_member_fires_when_the_controller_keeps_a_dead_replica(
        make_cluster, tmp_path, monkeypatch, broken):
    tree = _tree(tmp_path, monkeypatch, DEAD_REPLICA_KEPT_IN_ISR, broken)
    # The leader's own lag rule must not shrink the ISR within the test.
    c = make_cluster(3, **CONFIG, **{"replica.lag.time.max.ms": 120000})
    a, b = _pair_off_the_controller(c, "dead")
    seen = _Observed(tmp_path / "observations.jsonl")
    sampler = MetadataSampler(lambda: _zk(c), seen.obs, period_s=0.2).start()
    try:
        c.brokers[b].terminate()
        wait_until(lambda: b not in _zk(c)["live_brokers"], 30, f"broker {b} unregistered")
        if broken:
            found = wait_until(lambda: dead_isr_member(seen.read("metadata"), GRACE_S, True), 30,
                               "dead_isr_member on the broken controller")
        else:
            wait_until(lambda: _partition(_zk(c), "dead").get("isr") == [a], 30,
                       f"dead: ISR [{a}]")
            t = seen.clock()
            wait_until(lambda: [s for s in seen.read("metadata") if s["time"] > t], 10,
                       "a sample after the ISR shrank")
            found = dead_isr_member(seen.read("metadata"), GRACE_S, True)
    finally:
        sampler.stop()
        seen.obs.close()
    _assert_ran_from(tree, tmp_path, DEAD_REPLICA_KEPT_IN_ISR)
    if not broken:
        assert found == []
        return
    i = found[0]
    assert (i["topic"], i["partition"], i["broker"], i["leader"]) == ("dead", 0, b, a)
    assert i["isr"] == [a, b] and i["seconds"] > GRACE_S


@MODES
def test_dead_isr_member_fires_when_a_reassignment_keeps_a_removed_replica(
        make_cluster, tmp_path, monkeypatch, broken):
    tree = _tree(tmp_path, monkeypatch, REMOVED_REPLICA_KEPT_IN_ISR, broken)
    # The new leader's lag rule must not take the removed replica out.
    c = make_cluster(3, **CONFIG, **{"replica.lag.time.max.ms": 120000})
    _cid, a, b = _one_replica_off_the_controller(c, "mv")
    seen = _Observed(tmp_path / "observations.jsonl")
    sampler = MetadataSampler(lambda: _zk(c), seen.obs, period_s=0.2).start()

    def moved() -> bool:
        state = _zk(c)
        p = _partition(state, "mv")
        return "mv/0" not in state["reassigning"] and (p.get("replicas"), p.get("leader")) == ([b], b)
    try:
        admin.reassign(c.zk, {("mv", 0): [b]})
        wait_until(moved, 30, f"mv moved from {a} to {b}")
        # Samples for twice the grace after the move: where the bug shows.
        t = seen.clock()
        wait_until(lambda: [s for s in seen.read("metadata") if s["time"] > t + 2 * GRACE_S * 1e9],
                   30, "samples past the grace")
        found = dead_isr_member(seen.read("metadata"), GRACE_S, True)
    finally:
        sampler.stop()
        seen.obs.close()
    _assert_ran_from(tree, tmp_path, REMOVED_REPLICA_KEPT_IN_ISR)
    if not broken:
        assert found == []
        assert _partition(_zk(c), "mv")["isr"] == [b]
        return
    i = found[0]
    assert (i["topic"], i["partition"], i["broker"], i["rule"]) == ("mv", 0, a, "outside the assignment")
    assert i["leader"] == b and i["replicas"] == [b] and i["isr"] == sorted([a, b])


# -- reassignment_unsynced ------------------------------------------------------------------------

def _no_fault(_broker: int, _time: int) -> bool:
    return False


def _finish(samples: list[dict], tp: str) -> tuple[dict, dict] | None:
    """The last sample with `tp` pending and the first after it without."""
    for prev, cur in zip(samples, samples[1:]):
        if tp in prev["reassigning"] and tp not in cur["reassigning"]:
            return prev, cur
    return None


@MODES
def test_reassignment_unsynced_fires_when_any_target_in_sync_will_do(
        make_cluster, tmp_path, monkeypatch, broken):
    tree = _tree(tmp_path, monkeypatch, ANY_TARGET_IN_SYNC, broken)
    # The new replica fetches one batch a request: 2000 batches take it about
    # 2 s (measured), the broken controller's finish about 0.1 s.
    c = make_cluster(3, **CONFIG, **{"replica.fetch.max.bytes": 1})
    cid, a, b = _one_replica_off_the_controller(c, "ra")
    _fill(c.brokers[a].bootstrap, "ra", 2000)
    seen = _Observed(tmp_path / "observations.jsonl")
    sampler = MetadataSampler(lambda: _zk(c), seen.obs, period_s=0.05).start()
    pgid = c.brokers[cid].proc.pid
    try:
        # The broken controller would finish within milliseconds of reading
        # the request: it is stopped while the request is written, so that
        # a sample shows the reassignment pending (docs/design.md#reassignment).
        os.killpg(pgid, signal.SIGSTOP)
        try:
            admin.reassign(c.zk, {("ra", 0): [a, b]})
            wait_until(lambda: [s for s in seen.read("metadata") if "ra/0" in s["reassigning"]],
                       10, "a sample of the pending reassignment")
        finally:
            os.killpg(pgid, signal.SIGCONT)
        wait_until(lambda: _finish(seen.read("metadata"), "ra/0"), 30, "the reassignment done")
        found = reassignment_unsynced(seen.read("metadata"), LAG_S, _no_fault)
    finally:
        sampler.stop()
        seen.obs.close()
    _assert_ran_from(tree, tmp_path, ANY_TARGET_IN_SYNC)
    pending, done = _finish(seen.read("metadata"), "ra/0")
    # Samples close enough that the oracle judges this finish.
    assert done["time"] - pending["time"] <= MAX_SAMPLE_GAP_NS
    assert _partition(done, "ra")["replicas"] == [a, b]
    if not broken:
        assert found == []
        assert _partition(done, "ra")["isr"] == sorted([a, b])
        return
    [i] = found
    assert (i["topic"], i["partition"], i["targets"], i["isr"], i["missing"]) == (
        "ra", 0, [a, b], [a], [b])


# -- hw_regression ----------------------------------------------------------------------------------

@MODES
def test_hw_regression_fires_when_a_follower_takes_the_leaders_hw_past_its_leo(
        make_cluster, tmp_path, monkeypatch, broken):
    tree = _tree(tmp_path, monkeypatch, FOLLOWER_HW_UNCAPPED, broken)
    # A follower fetches one batch a request: catching up 2000 batches (about
    # 2 s, measured), each fetch gives it part of what the leader has.
    c = make_cluster(2, **CONFIG, **{"replica.fetch.max.bytes": 1})
    cid = wait_until(lambda: _zk(c)["controller"], 30, "a controller")
    f = 3 - cid
    admin.create_topic(c.zk, "hwr", 1, 2, replica_assignment={0: [cid, f]})
    wait_until(lambda: _partition(_zk(c), "hwr").get("isr") == sorted([cid, f]), 30,
               f"hwr: ISR [{cid}, {f}]")
    # The follower misses 2000 batches, then comes back out of the ISR.
    c.brokers[f].terminate()
    wait_until(lambda: _partition(_zk(c), "hwr").get("isr") == [cid], 30, f"hwr: ISR [{cid}]")
    _fill(c.brokers[cid].bootstrap, "hwr", 2000)
    seen = _Observed(tmp_path / "observations.jsonl")
    sampler = StateSampler(_Brokers(c), seen.obs, lambda: {"hwr"}, period_s=0.02).start()
    try:
        c.brokers[f].start().wait_registered(c.zk)
        if broken:
            found = wait_until(lambda: hw_regression(seen.read("broker-state")), 30,
                               "hw_regression on the broken follower")
        else:
            wait_until(lambda: _partition(_zk(c), "hwr").get("isr") == sorted([cid, f]), 30,
                       f"hwr: {f} back in the ISR")
            found = hw_regression(seen.read("broker-state"))
    finally:
        sampler.stop()
        seen.obs.close()
    _assert_ran_from(tree, tmp_path, FOLLOWER_HW_UNCAPPED)
    end = max(p["leo"] for s in seen.read("broker-state") if s["broker"] == cid
              for p in s["partitions"])
    catching_up = [p for s in seen.read("broker-state") if s["broker"] == f
                   for p in s["partitions"] if p["leader"] == cid and 0 < p["leo"] < end]
    if not broken:
        assert found == []
        # The follower was seen with a partial log: where the bug would show.
        assert len(catching_up) >= 5, f"{len(catching_up)} samples of {f} catching up"
        return
    i = found[0]
    assert (i["topic"], i["partition"], i["broker"], i["rule"]) == ("hwr", 0, f, "HW past the LEO")
    assert i["leo"] < i["hw"] <= end
