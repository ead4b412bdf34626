"""Fault recipes (faults/recipes.py): drawn by make_schedule like faults,
expanded into ordinary steps that keep their recipe's name, timed by the
broker's lag, and shrunk like any step (pure logic)."""
import json

import pytest

from faults import recipes
from faults.injectors.base import FaultError
from faults.nemesis import Schedule, make_schedule, parse_weights
from faults.recipes import RECIPES
from harness.backends.base import ClusterSpec
from harness.run import RunSpec
from harness.shrink import Shrinker
from harness.workload import WorkloadSpec

ISR = "isr-shrink-then-leader-loss"
RESTART = "restarted-follower-elected"
POWER = "power-loss-of-leader-and-follower"


def one(name, seed=1, **kw):
    """The steps of recipe `name` in a schedule just long enough for one of
    it: the first starts within 10 s (the default interval), a second could
    not start before 10 s after the first's longest end."""
    knobs = recipes.Knobs(kw.get("lag_s") or recipes.lag_s_of(), kw.get("replication_factor", 3))
    longest = recipes.span(RECIPES[name].longest(knobs))
    return make_schedule(seed, [name], duration_s=10 + longest, **kw).steps


def by_fault(steps):
    return {(s.fault, s.target): s for s in steps}


def end(step):
    return step.at_s + step.duration_s


def test_the_leader_is_cut_off_past_the_lag_then_killed_while_still_cut_off():
    for seed in range(20):
        steps = one(ISR, seed)
        assert {s.recipe for s in steps} == {ISR}
        cut, kill = by_fault(steps)[("partition-isolate", "leader")], by_fault(steps)[("kill", "leader")]
        assert cut.params == {"among": "brokers"}    # ZooKeeper untouched: the ISR shrinks
        assert kill.at_s - cut.at_s >= 10 + 1 + 2 - 0.1  # lag (broker defaults) + shrink + alone
        assert cut.at_s < kill.at_s < end(cut)        # killed while still cut off
        assert cut.lane != kill.lane


def test_a_restarted_follower_then_the_leader_and_the_other_follower_down_meanwhile():
    for seed in range(20):
        steps = one(RESTART, seed)
        first, leader, other = sorted(steps, key=lambda s: (s.lane, s.at_s))
        assert (first.fault, first.target) == ("kill", "follower")
        assert (leader.fault, leader.target, leader.lane) == ("kill", "leader", first.lane)
        assert 0.2 - 0.1 <= leader.at_s - end(first) <= 1.5 + 0.1   # right after it is back
        assert first.duration_s >= 10                                  # its session expired first
        assert (other.fault, other.target) == ("kill", "follower") and other.lane != first.lane
        assert other.at_s - first.at_s >= 10 + 1 - 0.1                 # the first is out of the ISR
        assert other.at_s < end(first) and end(other) >= leader.at_s + 10 + recipes.RESTART_S
    two = one(RESTART, 3, replication_factor=2)   # no other follower to take down
    assert [(s.fault, s.target) for s in two] == [("kill", "follower"), ("kill", "leader")]


def test_the_leader_and_a_follower_lose_power_together_and_the_follower_comes_back_first():
    for seed in range(20):
        steps = by_fault(one(POWER, seed))
        leader, follower = steps[("lose-unfsynced", "leader")], steps[("lose-unfsynced", "follower")]
        assert 0 <= follower.at_s - leader.at_s <= 0.5
        assert end(follower) + 10 <= end(leader)   # the follower leads for a while first


def test_the_lag_comes_from_the_broker_config():
    assert recipes.lag_s_of() == 10.0                      # replica.lag.time.max.ms
    assert recipes.lag_s_of({"replica.lag.time.max.ms": "30000"}) == 30.0
    assert recipes.lag_s_of({"replica.lag.time.max.ms": 3000}) == 6.0   # the session timeout
    slow = one(ISR, 1, lag_s=30)
    assert by_fault(slow)[("kill", "leader")].at_s - slow[0].at_s >= 33 - 0.1
    assert make_schedule(1, [ISR], duration_s=120, lag_s=30).settings["lag_s"] == 30
    assert "lag_s" not in make_schedule(1, ["kill"], duration_s=60).settings


def test_same_seed_same_recipes_another_seed_others():
    mix = ["kill:2", f"{ISR}:3", f"{RESTART}:2", POWER]
    a = make_schedule(7, mix, duration_s=300, overlap=2)
    assert a.dumps() == make_schedule(7, mix, duration_s=300, overlap=2).dumps()
    assert len({make_schedule(s, mix, duration_s=300, overlap=2).dumps() for s in range(8)}) == 8


def test_weights_mix_faults_and_recipes():
    assert parse_weights(["kill:2", f"{ISR}:3", ISR]) == {"kill": 2.0, ISR: 4.0}
    s = make_schedule(2, {"kill": 1, ISR: 1}, duration_s=600)
    assert {st.recipe for st in s.steps} == {None, ISR}
    assert all(st.recipe == ISR for st in s.steps if st.fault == "partition-isolate")
    assert s.settings["faults"] == {"kill": 1.0, ISR: 1.0}


def test_lanes_of_a_recipe_are_lanes_nobody_else_uses_and_each_lane_runs_one_step_at_a_time():
    for seed in range(30):
        s = make_schedule(seed, ["kill", "pause", ISR, RESTART, POWER], duration_s=300, overlap=2,
                          interval_s=(2, 8), fault_duration_s=(4, 15))
        for lane in {st.lane for st in s.steps}:
            steps = [st for st in s.steps if st.lane == lane]
            assert all(end(a) <= b.at_s for a, b in zip(steps, steps[1:])), (seed, lane)
            if lane >= 2:   # beyond --overlap 2: a recipe's own lanes only
                assert all(st.recipe for st in steps)
        assert all(end(st) <= 300 + 1e-9 for st in s.steps)
        assert [st.at_s for st in s.steps] == sorted(st.at_s for st in s.steps)


def test_a_recipe_is_placed_whole_or_not_at_all():
    assert make_schedule(1, [ISR], duration_s=20).steps == []    # it needs up to 28 s
    s = make_schedule(1, ["kill", ISR], duration_s=40, interval_s=(1, 2))
    assert all(end(st) <= 40 + 1e-9 for st in s.steps)
    for name in RECIPES:
        placed = [st for st in s.steps if st.recipe == name]
        assert len({st.fault for st in placed}) in (0, len(RECIPES[name].faults()))


def test_a_schedule_with_recipes_round_trips_and_shows_them():
    s = make_schedule(5, [ISR, "kill"], duration_s=120)
    back = Schedule.from_json(json.loads(s.dumps()))
    assert back.steps == s.steps and back.to_text() == s.to_text()
    assert any(st.recipe == ISR for st in back.steps)
    assert f"[{ISR}]" in s.to_text() and "lane 1" in s.to_text()
    old = {"seed": 1, "duration_s": 9, "quiet_s": 1,   # written before recipes existed
           "steps": [{"at_s": 1, "fault": "kill", "duration_s": 2}]}
    assert Schedule.from_json(old).steps[0].recipe is None


def test_unknown_names_and_impossible_recipes_are_refused():
    with pytest.raises(FaultError, match=f"unknown fault 'explode'.*recipes are {ISR}"):
        parse_weights(["kill", "explode"])
    with pytest.raises(FaultError, match="replication factor of 2"):
        make_schedule(1, [RESTART], duration_s=60, replication_factor=1)


def test_the_faults_a_recipe_uses():
    assert recipes.faults_of(["kill", ISR]) == {"kill", "partition-isolate"}
    assert recipes.faults_of([POWER]) == {"lose-unfsynced"}


def test_the_shrinker_keeps_the_recipe_steps_that_matter(tmp_path):
    schedule = make_schedule(4, ["kill", ISR], duration_s=120, interval_s=(2, 4))
    spec = RunSpec(ClusterSpec(), "docker", 3, WorkloadSpec({"t": 1}, rate=100), schedule)

    def replay(spec):   # the fake bug: the leader killed while cut off from the brokers
        steps = spec.schedule.steps
        return {"lost"} if any(a.fault == "partition-isolate" and b.fault == "kill" and
                               b.target == "leader" and a.at_s < b.at_s < end(a)
                               for a in steps for b in steps) else set()
    small = Shrinker(spec, {"lost"}, replay, tmp_path, tries=1).shrink()
    assert [(st.fault, st.recipe) for st in small.schedule.steps] == [("partition-isolate", ISR),
                                                                     ("kill", ISR)]


def test_control_plane_recipes_aim_later_failures_at_what_the_transition_produced():
    for seed in range(20):
        stop, kill = sorted(one("shutdown-then-new-leader-lost", seed), key=lambda s: s.at_s)
        assert (stop.fault, stop.target, kill.fault, kill.target) == (
            "stop", "leader", "kill", "leader")
        assert stop.at_s < kill.at_s < end(stop) and stop.lane != kill.lane  # the successor

        cut, stop = sorted(one("shutdown-with-a-follower-cut-off", seed), key=lambda s: s.at_s)
        assert (cut.fault, cut.target, cut.params, stop.fault, stop.target) == (
            "partition-isolate", "follower", {"among": "brokers"}, "stop", "leader")
        assert stop.at_s >= 10                               # the follower left the ISR first
        assert stop.at_s < end(cut) < end(stop)              # back while the old leader is down

        steps = one("followers-down-then-leader-lost", seed)
        followers = [s for s in steps if s.target == "follower"]
        [leader] = [s for s in steps if s.target == "leader"]
        assert len(followers) == 2 and len({s.lane for s in followers}) == 2
        assert min(end(s) for s in followers) >= 10          # out of the ISR first (the lag)
        assert leader.at_s >= max(end(s) for s in followers) + recipes.RESTART_S

        steps = one("follower-misses-epochs", seed)
        [frozen] = [s for s in steps if s.fault == "pause"]
        kills = sorted((s for s in steps if s.fault == "kill"), key=lambda s: s.at_s)
        assert len(kills) == 2 and all(frozen.at_s < k.at_s < end(frozen) for k in kills)
        assert kills[1].at_s > end(kills[0])                 # two leader changes, one at a time

        steps = one("reassignments-under-failures", seed)
        hows = [s.params["how"] for s in sorted(steps, key=lambda s: s.at_s)
                if s.fault == "reassign"]
        assert hows == ["move", "grow", "shrink"]
        assert {s.fault for s in steps} == {"reassign", "kill", "pause"}
    assert set(recipes.TRANSITIONS) <= set(RECIPES)
