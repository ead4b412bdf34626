"""Schedules are reproducible from a seed; the nemesis runs them, records
every start and stop, and always heals. Against a fake cluster (pure logic)."""
import json
import random
import threading
import time
from types import SimpleNamespace

import pytest

from cluster import zkpaths
from contracts.abilities import NodeFiles, PauseResume, ProcessControl, ZooKeeperAccess
from faults import injectors
from faults.injectors.base import FaultContext, FaultError
from faults.nemesis import Nemesis, Schedule, Step, make_schedule, parse_weights
from faults.targets import Resolver, Target, TargetError
from harness.history import HistoryRecorder, read_history


# -- fakes ----------------------------------------------------------------------

class FakeZK:
    def __init__(self, data):
        self.data = dict(data)
        self.owner = {}      # path -> session id of an ephemeral node
        self.sessions = 100

    def get(self, path):
        if path not in self.data:
            raise KeyError(path)
        return self.data[path], SimpleNamespace(version=3)

    def exists(self, path):
        if path not in self.data:
            return None
        return SimpleNamespace(version=0, ephemeralOwner=self.owner.get(path, 1))

    def get_children(self, path):
        pre = path.rstrip("/") + "/"
        return sorted({p[len(pre):].split("/")[0] for p in self.data if p.startswith(pre)})


class FakeCluster:
    backend = "fake"
    abilities = frozenset({ProcessControl, PauseResume, ZooKeeperAccess, NodeFiles})
    coordination = "controller"

    def __init__(self, zk, brokers=3, zookeepers=1):
        self.spec = SimpleNamespace(node_names=lambda: [f"zk-{i}" for i in range(1, zookeepers + 1)]
                                    + [f"broker-{i}" for i in range(1, brokers + 1)], proxied=False)
        self.state = {n: "running" for n in self.spec.node_names()}
        self.calls = []
        self.zk = zk
        self.zookeeper_connect = "fake:2181"

    def nodes(self):
        return [SimpleNamespace(name=n, state=s, kind="zookeeper" if n.startswith("zk") else "broker")
                for n, s in self.state.items()]

    def node(self, name):
        return [n for n in self.nodes() if n.name == name][0]

    def _bid(self, name):
        return int(name.split("-")[1])

    def kill_node(self, name):
        self.calls.append(("kill", name))
        self.state[name] = "stopped"
        if name.startswith("broker"):
            self.zk.data.pop(zkpaths.broker_path(self._bid(name)), None)

    def stop_node(self, name, timeout=30):
        self.calls.append(("stop", name))
        self.kill_node(name)
        self.calls.pop()

    def start_node(self, name):
        self.calls.append(("start", name))
        self.state[name] = "running"
        if name.startswith("broker"):
            path = zkpaths.broker_path(self._bid(name))
            self.zk.data[path] = b"{}"
            self.zk.sessions += 1
            self.zk.owner[path] = self.zk.sessions

    def pause_node(self, name):
        self.calls.append(("pause", name))
        self.state[name] = "paused"

    def resume_node(self, name):
        self.calls.append(("resume", name))
        self.state[name] = "running"


def zk_state(leader=2, isr=(2, 3), replicas=(1, 2, 3), controller=1, live=(1, 2, 3)):
    d = {zkpaths.CONTROLLER: zkpaths.dumps({"brokerid": controller}),
         zkpaths.topic_path("t"): zkpaths.TopicAssignment({0: tuple(replicas)}).encode(),
         zkpaths.leader_and_isr_path("t", 0): zkpaths.LeaderAndIsr(leader, 1, tuple(isr), 1).encode()}
    for b in live:
        d[zkpaths.broker_path(b)] = b"{}"
    return d


def context(tmp_path=None, seed=0, recorder=None, **zk):
    fzk = FakeZK(zk_state(**zk))
    cluster = FakeCluster(fzk)
    resolver = Resolver(cluster, fzk, random.Random(seed), default_partition=("t", 0))
    return FaultContext(cluster, resolver, random.Random(seed), recorder=recorder,
                        log=lambda m: None, wait_timeout=2.0)


# -- schedules ---------------------------------------------------------------------

FAULTS = ["kill", "pause:2", "partition-halves", "hard-bounce", "zk-expire", "latency", "lose-unfsynced"]


def test_same_seed_same_schedule_text_and_json():
    a = make_schedule(7, FAULTS, duration_s=300)
    b = make_schedule(7, FAULTS, duration_s=300)
    assert a.to_text() == b.to_text()
    assert a.dumps() == b.dumps()
    assert Schedule.from_json(json.loads(a.dumps())).to_text() == a.to_text()


def test_different_seed_different_schedule():
    texts = {make_schedule(s, FAULTS, duration_s=300).to_text() for s in range(10)}
    assert len(texts) == 10


def test_schedule_shape():
    s = make_schedule(3, FAULTS, duration_s=200, interval_s=(2, 4), fault_duration_s=(3, 6))
    assert s.steps
    prev_end = 0
    for st in s.steps:
        assert st.at_s >= prev_end + 2 - 1e-9
        assert st.at_s + st.duration_s <= 200 + 1e-9
        assert st.fault in injectors.CATALOGUE
        assert st.target is None or st.target in injectors.kind(st.fault).roles
        prev_end = st.at_s + st.duration_s
    bounces = [st for st in s.steps if st.fault == "hard-bounce"]
    for st in bounces:  # long enough for its rounds unless clipped by the end
        assert st.duration_s >= min(12 * st.params["times"], 200 - st.at_s) - 0.1
    assert s.to_text().splitlines()[-2].strip().endswith("final-heal")


def test_weights_and_pins():
    s = make_schedule(1, {"kill": 1}, duration_s=100, targets={"kill": "controller"},
                      params={"kill": {"x": 1}})
    assert {st.target for st in s.steps} == {"controller"}
    assert all(st.params == {"x": 1} for st in s.steps)
    assert parse_weights(["kill:3", "pause", "kill"]) == {"kill": 4.0, "pause": 1.0}
    with pytest.raises(FaultError, match="unknown fault"):
        parse_weights(["explode"])
    with pytest.raises(FaultError):
        parse_weights(["kill:0"])


def test_roles_fit_the_cluster():
    s = make_schedule(5, ["zk-kill", "kill"], duration_s=500, zookeepers=1, replication_factor=1)
    assert "zk-follower" not in {st.target for st in s.steps}
    assert "follower" not in {st.target for st in s.steps}


def test_roles_the_cluster_refuses_are_not_drawn():
    """V2 coordination has no controller (harness.backends.base.v2_refusal)."""
    no_controller = lambda fault, role: "none" if role == "controller" else None  # noqa: E731
    free = make_schedule(5, ["kill", "partition-isolate"], duration_s=500)
    assert "controller" in {st.target for st in free.steps}
    s = make_schedule(5, ["kill", "partition-isolate"], duration_s=500, refuses=no_controller)
    assert "controller" not in {st.target for st in s.steps}
    assert len({st.target for st in s.steps}) > 1


def test_empty_fault_list_is_just_a_heal():
    s = make_schedule(1, [], duration_s=30)
    assert s.steps == []
    assert "final-heal" in s.to_text()


# -- targets -----------------------------------------------------------------------

def test_target_parsing():
    assert str(Target.parse("leader:t/3")) == "leader:t/3"
    assert Target.parse("broker-2").node == "broker-2"
    for bad in ("leader:t", "controller:t/0", "nobody", "broker-x"):
        with pytest.raises(TargetError):
            Target.parse(bad)


def test_roles_resolve_from_zookeeper():
    ctx = context(leader=2, isr=(2, 3), replicas=(1, 2, 3), controller=1)
    r = ctx.resolver
    assert r.resolve("controller") == ["broker-1"]
    assert r.resolve("leader") == ["broker-2"]
    assert r.resolve("leader:t/0") == ["broker-2"]
    assert r.resolve("follower") == ["broker-3"]
    assert r.resolve("out-of-isr") == ["broker-1"]
    assert len(r.resolve("minority")) == 1 and len(r.resolve("majority")) == 2
    assert r.resolve("all") == ["broker-1", "broker-2", "broker-3"]
    assert r.resolve("broker-3") == ["broker-3"]
    with pytest.raises(TargetError):
        r.resolve("broker-9")
    with pytest.raises(TargetError):
        r.resolve("leader:nope/0")


def test_roles_nobody_holds():
    ctx = context(leader=-1, isr=(1, 2, 3))
    with pytest.raises(TargetError, match="no leader"):
        ctx.resolver.resolve("leader")
    with pytest.raises(TargetError, match="every replica"):
        ctx.resolver.resolve("out-of-isr")
    del ctx.resolver.zk.data[zkpaths.CONTROLLER]
    with pytest.raises(TargetError, match="controller"):
        ctx.resolver.resolve("controller")


# -- the nemesis ---------------------------------------------------------------------

def test_kill_records_start_and_stop_and_restarts(tmp_path):
    with HistoryRecorder(tmp_path / "h.jsonl") as rec:
        ctx = context(recorder=rec)
        inj = injectors.make("kill", ctx, "leader")
        inj.start()
        assert ctx.cluster.state["broker-2"] == "stopped"
        inj.stop()
        inj.stop()  # idempotent
        assert ctx.cluster.state["broker-2"] == "running"
        assert inj.describe()["targets"] == ["broker-2"]
    ev = list(read_history(tmp_path / "h.jsonl"))
    assert [(e["fault"], e["phase"], e["targets"]) for e in ev] == [
        ("kill", "start", ["broker-2"]), ("kill", "stop", ["broker-2"])]
    assert all(e["process"] == -1 and e["type"] == "info" and e["f"] == "nemesis" for e in ev)


def test_restart_after_kill_waits_for_a_new_session():
    ctx = context()
    zk, cluster = ctx.resolver.zk, ctx.cluster
    from faults.injectors.process import restart
    # a killed broker whose registration lingers (session not expired yet)
    cluster.state["broker-1"] = "stopped"
    stale = zk.exists(zkpaths.broker_path(1)).ephemeralOwner
    calls = []
    real_start = cluster.start_node

    def slow_start(name):   # registers only after a while, like a real broker
        calls.append(name)
        cluster.state[name] = "running"
        threading.Timer(0.3, lambda: (real_start(name))).start()
    cluster.start_node = slow_start
    t0 = time.monotonic()
    assert restart(ctx, "broker-1")
    assert time.monotonic() - t0 >= 0.25
    assert zk.exists(zkpaths.broker_path(1)).ephemeralOwner != stale


def test_hard_bounce_rounds_follow_the_role(tmp_path):
    ctx = context()
    inj = injectors.make("hard-bounce", ctx, "leader", times=2)
    inj.start()
    deadline = time.monotonic() + 10
    while not inj.done() and time.monotonic() < deadline:
        time.sleep(0.05)
    inj.stop()
    kills = [c for c in ctx.cluster.calls if c[0] == "kill"]
    starts = [c for c in ctx.cluster.calls if c[0] == "start"]
    assert len(kills) == 2 and len(starts) >= 2
    assert all(s == "running" for s in ctx.cluster.state.values())
    assert "rounds=2" in inj.describe()["detail"]


def test_nemesis_runs_a_schedule_and_heals_everything(tmp_path):
    sched = Schedule(1, 2.0, 0.0, [Step(0.0, "pause", 0.3, "controller"),
                                   Step(0.4, "kill", 5.0, "follower"),
                                   Step(0.5, "kill", 0.1, "out-of-isr")])
    with HistoryRecorder(tmp_path / "h.jsonl") as rec:
        ctx = context(recorder=rec, isr=(1, 2, 3))
        nem = Nemesis(ctx, sched).start()
        time.sleep(0.8)
        assert nem.active() and nem.active()[0]["fault"] == "kill"
        nem.final_heal()
    assert all(s == "running" for s in ctx.cluster.state.values())
    ev = list(read_history(tmp_path / "h.jsonl"))
    phases = [(e["fault"], e["phase"]) for e in ev]
    assert phases == [("pause", "start"), ("pause", "stop"), ("kill", "start"), ("kill", "stop"),
                      ("final-heal", "start"), ("final-heal", "stop")]
    # out-of-isr had nobody: skipped (it also overlapped the running kill)
    assert nem.skipped == [] or nem.skipped[0]["fault"] == "kill"


def test_a_role_nobody_holds_is_skipped_not_fatal(tmp_path):
    ctx = context(isr=(1, 2, 3))
    nem = Nemesis(ctx, Schedule(1, 1.0, 0.0, [Step(0.0, "kill", 0.1, "out-of-isr")])).start()
    nem.join(5)
    nem.final_heal(wait_registered=False)
    assert nem.skipped and "ISR" in nem.skipped[0]["reason"]
    assert ctx.cluster.calls == []


def test_injector_that_fails_midway_heals_and_records_stop(tmp_path):
    with HistoryRecorder(tmp_path / "h.jsonl") as rec:
        ctx = context(recorder=rec)

        def boom(name):
            raise RuntimeError("engine gone")
        ctx.cluster.pause_node = boom
        inj = injectors.make("pause", ctx, "broker-1")
        with pytest.raises(RuntimeError):
            inj.start()
        assert not inj.active
    ev = list(read_history(tmp_path / "h.jsonl"))
    assert [e["phase"] for e in ev] == ["start", "stop"]
    assert "engine gone" in ev[1]["detail"]


def test_unsupported_settings_are_named():
    assert (injectors.unsupported("latency", backend="local", proxied=False, zookeepers=1)
            == "latency needs links through the proxy (a proxied cluster)")
    assert (injectors.unsupported("partition-halves", backend="local", proxied=False, zookeepers=1)
            == "partition-halves needs the docker backend (iptables) or a proxied cluster")
    assert injectors.unsupported("partition-halves", backend="docker", proxied=False, zookeepers=1) is None
    assert injectors.unsupported("partition-clients", backend="local", proxied=True, zookeepers=1) is None
    assert injectors.unsupported("kill", backend="local", proxied=False, zookeepers=1) is None


def test_a_fault_the_cluster_does_not_declare_is_refused_before_anything(tmp_path):
    """The fake declares no network ability (contracts/abilities.py): a
    partition or a link fault is refused from the declarations alone, with
    nothing resolved, recorded or broken; what it declares still runs."""
    with HistoryRecorder(tmp_path / "h.jsonl") as rec:
        ctx = context(recorder=rec)
        for fault, message in [
                ("partition-halves", "partition-halves needs the docker backend (iptables) or a "
                                     "proxied cluster"),
                ("latency", "latency needs links through the proxy (a proxied cluster)")]:
            with pytest.raises(FaultError) as e:
                injectors.make(fault, ctx).start()
            assert str(e.value) == message
        ctx.cluster.abilities = ctx.cluster.abilities - {PauseResume}
        with pytest.raises(FaultError, match="pause needs nodes it can pause and resume"):
            injectors.make("pause", ctx, "broker-1").start()
        injectors.make("kill", ctx, "broker-1").start()
    assert ctx.cluster.calls == [("kill", "broker-1")]
    assert [(e["fault"], e["phase"]) for e in read_history(tmp_path / "h.jsonl")] == [
        ("kill", "start")]


def test_heal_all_repairs_only_with_what_the_cluster_declares():
    from faults.heal import heal_all
    cluster = FakeCluster(FakeZK(zk_state()))
    cluster.abilities = frozenset({PauseResume})
    cluster.state.update({"broker-1": "paused", "broker-2": "stopped"})
    assert heal_all(cluster) == ["resumed broker-1"]
    assert cluster.calls == [("resume", "broker-1")]


# -- overlapping lanes -------------------------------------------------------------------

def test_overlap_draws_lanes_that_overlap_and_one_lane_is_unchanged():
    one = make_schedule(11, ["kill", "pause"], duration_s=120, brokers=3)
    again = make_schedule(11, ["kill", "pause"], duration_s=120, brokers=3, overlap=1)
    assert [s.at_s for s in one.steps] == [s.at_s for s in again.steps]
    three = make_schedule(11, ["kill", "pause", "zk-expire"], duration_s=120, brokers=3, overlap=3)
    assert {s.lane for s in three.steps} == {0, 1, 2}
    assert [s.at_s for s in three.steps] == sorted(s.at_s for s in three.steps)
    overlapping = [(a, b) for a in three.steps for b in three.steps
                   if a.lane < b.lane and a.at_s < b.at_s + b.duration_s and b.at_s < a.at_s + a.duration_s]
    assert overlapping, "three lanes over 120 s never overlapped"
    for lane in range(3):
        steps = [s for s in three.steps if s.lane == lane]
        assert all(a.at_s + a.duration_s <= b.at_s for a, b in zip(steps, steps[1:]))
    assert Schedule.from_json(json.loads(three.dumps())).steps == three.steps


def _injector(fault, targets):
    return SimpleNamespace(fault=fault, targets=targets)


def test_conflicts_between_overlapping_faults():
    from faults.nemesis import conflict
    killed = _injector("kill", ["broker-2"])
    cut = _injector("partition-halves", ["broker-1", "broker-2", "broker-3", "zk-1"])
    assert conflict(_injector("pause", ["broker-2"]), [killed]) == "broker-2 already under kill"
    assert conflict(_injector("zk-expire", ["broker-2"]), [killed]) is not None
    assert conflict(_injector("pause", ["broker-3"]), [killed]) is None
    assert "waits until broker-2" in conflict(cut, [killed])
    assert conflict(_injector("kill", ["broker-1"]), [cut]) is None   # a kill during a partition
    assert "one network fault" in conflict(_injector("partition-isolate", ["broker-1"]), [cut])
    assert conflict(_injector("zk-expire", ["broker-1"]), [cut]) is None


def test_lanes_run_side_by_side_and_a_clash_is_skipped():
    ctx = context()
    steps = [Step(0.0, "kill", 0.6, "broker-2", lane=0),
             Step(0.1, "pause", 0.3, "broker-3", lane=1),       # overlaps the kill: runs
             Step(0.5, "pause", 0.3, "broker-2", lane=1)]       # broker-2 is still killed: skipped
    nem = Nemesis(ctx, Schedule(1, 2.0, 0.0, steps)).start()
    nem.join(10)
    calls = ctx.cluster.calls
    assert ("kill", "broker-2") in calls and ("pause", "broker-3") in calls
    assert calls.index(("pause", "broker-3")) < calls.index(("start", "broker-2"))  # overlapped
    assert ("pause", "broker-2") not in calls
    assert [s["reason"] for s in nem.skipped] == ["broker-2 already under kill"]
    assert not nem.errors


def test_bad_offset_is_drawn_like_a_disk_fault_and_takes_its_broker_down():
    from faults.nemesis import conflict
    s = make_schedule(5, ["bad-offset", "kill"], duration_s=200)
    shifts = [st for st in s.steps if st.fault == "bad-offset"]
    assert shifts and all(st.target in ("leader", "follower") for st in shifts)
    assert all(1 <= st.params["by"] <= 1000 for st in shifts)
    damaged = _injector("bad-offset", ["broker-2"])
    assert conflict(_injector("kill", ["broker-2"]), [damaged]) == "broker-2 already under bad-offset"
    assert "waits until broker-2" in conflict(_injector("partition-halves", ["broker-1"]), [damaged])
