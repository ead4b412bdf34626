"""reports/invariants.py on hand-made samples: each oracle fires on the
state that breaks its definition and stays silent on the legal states
around it (leader changes, unknown follower LEOs, samples too far apart,
topics created again, faults around a reassignment's end)."""
from reports import invariants as inv

S = 1_000_000_000


def replica(topic="t", partition=0, leader=1, epoch=3, isr=(1, 2, 3), hw=10, leo=12,
            followers=None, committed=None, topic_id="id-1"):
    p = {"topic": topic, "partition": partition, "topic_id": topic_id, "leader": leader,
         "epoch": epoch, "isr": list(isr), "hw": hw, "leo": leo}
    if followers is not None:
        p["followers"] = {str(b): leo for b, leo in followers.items()}
    if committed is not None:
        p["committed"] = list(committed)
    return p


def state(broker, t, *parts, start_epoch=1):
    return {"kind": "broker-state", "time": t * S, "broker": broker, "start_epoch": start_epoch,
            "partitions": list(parts)}


def zk(t, *parts, live=(1, 2, 3), controller=1, reassigning=None):
    return {"kind": "metadata", "time": int(t * S), "controller": controller,
            "live_brokers": list(live), "reassigning": reassigning or {}, "partitions": list(parts)}


def lai(leader, isr, version, epoch, replicas=(1, 2, 3), topic="t", partition=0):
    return {"topic": topic, "partition": partition, "leader": leader, "isr": list(isr),
            "zk_version": version, "leader_epoch": epoch, "replicas": list(replicas)}


# -- isr-behind-hw ----------------------------------------------------------------------------

def test_an_isr_member_behind_the_hw_fires_unknown_and_out_of_isr_do_not():
    ok = state(1, 1, replica(followers={2: 10, 3: -1}))            # 3 not fetched yet
    out_of_isr = state(1, 2, replica(isr=(1, 2), followers={2: 11, 3: 4}))
    follower_view = state(2, 2, replica(leader=1, hw=10, leo=3))   # not the leader's sample
    bad = state(1, 3, replica(hw=12, followers={2: 12, 3: 9}))
    got = inv.isr_behind_hw([ok, out_of_isr, follower_view, bad])
    assert [(a["follower"], a["follower_leo"], a["hw"], a["time"]) for a in got] == [
        (3, 9, 12, 3 * S)]


# -- hw-regression -----------------------------------------------------------------------------

def test_a_leader_hw_going_back_within_its_epoch_fires_a_new_epoch_or_incarnation_does_not():
    samples = [state(1, 1, replica(hw=10)), state(1, 2, replica(hw=12)),
               state(1, 3, replica(hw=12, epoch=4)), state(1, 4, replica(hw=11, epoch=5)),
               state(1, 5, replica(hw=11, epoch=5), start_epoch=2),   # restarted: new incarnation
               state(1, 6, replica(hw=9, epoch=5), start_epoch=2)]
    got = inv.hw_regression(samples)
    assert [(a["rule"], a["hw"], a["previous"]) for a in got] == [("leader HW went back", 9, 11)]


def test_a_hw_past_the_leo_fires_on_any_replica():
    got = inv.hw_regression([state(2, 1, replica(leader=1, hw=13, leo=12))])
    assert [(a["rule"], a["broker"]) for a in got] == [("HW past the LEO", 2)]


# -- committed-divergence ------------------------------------------------------------------------

def test_two_replicas_naming_different_committed_batches_at_one_offset_fire():
    a = (8, 9, 3, 111)
    samples = [state(1, 1, replica(committed=a)), state(2, 1, replica(leader=1, committed=a)),
               state(3, 2, replica(leader=1, committed=(8, 9, 2, 222))),
               state(3, 3, replica(leader=1, committed=(8, 9, 2, 222))),          # once per change
               state(1, 4, replica(committed=(8, 9, 2, 222), topic_id="id-2"))]   # another topic
    got = inv.committed_divergence(samples)
    assert [(a["broker"], a["other_broker"], a["offset"]) for a in got] == [(3, 1, 8)]


# -- unclean-election ---------------------------------------------------------------------------

def test_a_leader_from_outside_the_isr_it_was_elected_from_fires():
    samples = [zk(1, lai(1, [1, 2], 4, 3)), zk(2, lai(2, [2], 5, 4)),       # clean: 2 was in [1, 2]
               zk(3, lai(2, [2], 5, 4)), zk(4, lai(3, [3], 6, 5))]          # 3 was not in [2]
    got = inv.unclean_election(samples)
    assert [(a["leader"], a["previous_isr"]) for a in got] == [(3, [2])]


def test_unclean_election_is_judged_only_between_consecutive_versions_close_in_time():
    skipped_version = [zk(1, lai(1, [1, 2], 4, 3)), zk(2, lai(3, [3], 6, 5))]   # v5 unseen
    far_apart = [zk(1, lai(1, [1, 2], 4, 3)), zk(9, lai(3, [3], 5, 4))]
    recreated = [zk(1, lai(1, [1], 0, 0)), zk(2), zk(3, lai(3, [3], 1, 1))]
    for samples in (skipped_version, far_apart, recreated):
        assert inv.unclean_election(samples) == []


# -- dead-isr-member ------------------------------------------------------------------------------

def test_an_unregistered_broker_left_in_an_isr_past_the_grace_fires():
    dead = [zk(t, lai(1, [1, 3], 2, 1), live=(1, 2)) for t in range(0, 12)]
    got = inv.dead_isr_member(dead, grace_s=5, controller=True)
    assert [(a["broker"], a["seconds"]) for a in got] == [(3, 6.0)]
    # Removed within the grace, or no controller to act, or the leader dead: silent.
    removed = dead[:4] + [zk(t, lai(1, [1], 3, 1), live=(1, 2)) for t in range(4, 12)]
    assert inv.dead_isr_member(removed, grace_s=5, controller=True) == []
    headless = [zk(t, lai(1, [1, 3], 2, 1), live=(1, 2), controller=None) for t in range(12)]
    assert inv.dead_isr_member(headless, grace_s=5, controller=True) == []
    assert len(inv.dead_isr_member(headless, grace_s=5, controller=False)) == 1
    offline = [zk(t, lai(3, [3], 2, 1), live=(1, 2)) for t in range(12)]
    assert inv.dead_isr_member(offline, grace_s=5, controller=True) == []


def test_a_broker_outside_the_assignment_left_in_an_isr_past_the_grace_fires():
    """After a reassignment to [1, 2] the ISR keeps the old replica 3, alive."""
    moved = [zk(t, lai(1, [1, 2, 3], 2, 1, replicas=(1, 2))) for t in range(0, 12)]
    got = inv.dead_isr_member(moved, grace_s=5, controller=True)
    assert [(a["broker"], a["rule"], a["seconds"]) for a in got] == [
        (3, "outside the assignment", 6.0)]
    # While the reassignment runs its targets belong; dropped within the grace: silent.
    running = [zk(t, lai(1, [1, 2, 3], 2, 1, replicas=(1, 2)), reassigning={"t/0": [1, 2, 3]})
               for t in range(12)]
    assert inv.dead_isr_member(running, grace_s=5, controller=True) == []
    dropped = moved[:4] + [zk(t, lai(1, [1, 2], 3, 1, replicas=(1, 2))) for t in range(4, 12)]
    assert inv.dead_isr_member(dropped, grace_s=5, controller=True) == []


# -- reassignment-unsynced ---------------------------------------------------------------------

def test_a_reassignment_finished_before_its_new_replica_was_in_sync_fires():
    moving = {"t/0": [1, 2, 4]}
    samples = [zk(1, lai(1, [1, 2, 3], 2, 1), live=(1, 2, 3, 4), reassigning=moving),
               zk(2, lai(1, [1, 2], 3, 1, replicas=(1, 2, 4)), live=(1, 2, 3, 4))]
    got = inv.reassignment_unsynced(samples, lag_s=10, disturbed=lambda b, t: False)
    assert [(a["missing"], a["targets"]) for a in got] == [([4], [1, 2, 4])]
    assert inv.reassignment_unsynced(samples, lag_s=10, disturbed=lambda b, t: b == 4) == []
    synced = samples[:1] + [zk(2, lai(1, [1, 2, 4], 4, 1, replicas=(1, 2, 4)), live=(1, 2, 3, 4))]
    assert inv.reassignment_unsynced(synced, lag_s=10, disturbed=lambda b, t: False) == []
    cancelled = samples[:1] + [zk(2, lai(1, [1, 2, 3], 2, 1), live=(1, 2, 3, 4))]
    assert inv.reassignment_unsynced(cancelled, lag_s=10, disturbed=lambda b, t: False) == []


# -- what a run's configuration promises --------------------------------------------------------

def nemesis(fault, targets, start, stop):
    return [{"index": 2 * start, "time": start * S, "fault": fault, "phase": "start", "targets": targets},
            {"index": 2 * stop + 1, "time": stop * S, "fault": fault, "phase": "stop", "targets": targets}]


def test_promises_read_run_json_over_the_built_in_broker_s_defaults():
    default = inv.Promises.of({"cluster": {"broker_config": {}}}, [], 0)
    assert (default.truncation, default.unclean, default.lag_s, default.session_s,
            default.controller) == ("hw", True, 10.0, 6.0, True)
    assert default.not_promised("isr-behind-hw") == "replication.truncation=hw"
    assert default.not_promised("unclean-election") == "unclean.leader.election.enable=true"
    assert default.not_promised("hw-regression") is default.not_promised("dead-isr-member") is None
    run = {"cluster": {"broker_config": {"replication.truncation": "leader-epoch",
                                         "unclean.leader.election.enable": "false",
                                         "replica.lag.time.max.ms": "3000", "coordination": "v2"}},
           "spec": {"cluster": {"zk_session_timeout_ms": 4000}}, "faults": ["kill"]}
    p = inv.Promises.of(run, [], 0)
    assert (p.lag_s, p.session_s, p.controller) == (3.0, 4.0, False)
    assert all(p.not_promised(name) is None for name in inv.ORACLES)
    # A disk fault that ran (or is listed) takes committed-divergence out; another system, all.
    damaged = inv.Promises.of(run, nemesis("bitflip", ["broker-2"], 1, 2), 3 * S)
    assert damaged.not_promised("committed-divergence") == "disk faults (bitflip)"
    other = inv.Promises.of({**run, "cluster": {**run["cluster"], "system": "tansu"}}, [], 0)
    assert all(other.not_promised(name) for name in inv.ORACLES)


def test_a_fault_disturbs_its_brokers_around_its_window_an_admin_operation_none():
    events = (nemesis("kill", ["broker-2"], 20, 25) + nemesis("reassign", ["broker-3"], 20, 25)
              + nemesis("zk-pause", ["zk-1"], 60, 61))
    p = inv.Promises.of({}, events, 100 * S)
    assert p.disturbed(2, 11 * S) and p.disturbed(2, 35 * S) and not p.disturbed(2, 36 * S)
    assert not p.disturbed(3, 22 * S)                 # an operation, not a failure
    assert p.disturbed(1, 55 * S) and p.disturbed(3, 70 * S)   # ZooKeeper: every broker
