"""KIP-101's two scenarios, end to end: high-watermark truncation loses
acknowledged writes and makes replicas diverge; leader-epoch truncation
does neither.

Both run the same scripted schedule with replication.truncation=hw and with
replication.truncation=leader-epoch, everything else equal, and check in
ZooKeeper that each step happened before the next one starts.

Scenario 1, "high-watermark truncation followed by immediate leader
election". A follower learns the high watermark one fetch after the data it
covers; when it becomes a follower of a new leader it truncates its log to
that high watermark (seed 000, becomeFollower); if that new leader dies
before the follower fetched the data back, the follower is elected, cleanly,
without writes that were acknowledged. Here (3 brokers, topic t: 1
partition, replicas [B, C, A], A the controller; min.insync.replicas=2,
unclean election off: the Jepsen fixes do not help):
  1. writes flow, ISR [B, C, A], leader B;
  2. the clients are cut off from B (partition-clients): B gets no new
     writes; the last ones it had commit, their acknowledgements still go
     out, and A, long-polling with nothing new to fetch, does not learn the
     high watermark that covers them (replica.fetch.wait.max.ms=10000);
  3. C is killed (SIGKILL): ZooKeeper still counts it alive for a session
     timeout;
  4. B shuts down cleanly (controlled shutdown): the controller moves the
     leadership to C, the next replica in the ISR; A becomes C's follower
     and truncates (hw) or asks C where to truncate (leader-epoch: C does
     not answer, A keeps its log);
  5. C's session expires: A, the only live ISR member, is elected, cleanly;
  6. heal: B and C come back as followers of A, writes resume.
  hw: the writes acknowledged last before the cut are lost (valid False);
  leader-epoch: valid True.

Scenario 2, "replica divergence after multiple hard failures". Both
replicas go down; the follower loses what it had not fsynced (a power loss:
the `lose-unfsynced` fault); it comes back first with a shorter log, is
elected (cleanly: it is in the ISR) and takes new writes at offsets the
other replica still holds with other values. The other replica returns as a
follower: with hw it truncates to its checkpointed high watermark, which
covers those offsets, and keeps its old values there: the two logs diverge.
With leader-epoch it asks the leader where its epoch ended and truncates to
that. Here (3 brokers, topic t: 1 partition, replicas [A, B], the third
broker the controller; min.insync.replicas=1 as in the KIP):
  1. writes flow, leader A, follower B, ISR [A, B];
  2. A killed (SIGKILL), B killed and cut back to its last fsync
     (lose-unfsynced: B loses its whole log, nothing forced an fsync);
  3. both sessions expire: the partition has no leader (unclean off);
  4. B restarts, is elected, takes writes until its log is longer than A's
     high watermark checkpoint;
  5. A restarts as B's follower and rejoins the ISR;
  6. B shuts down cleanly: A leads, and serves what its log holds;
  7. B back as A's follower, in the ISR again; final reads; the two
     replicas' log files compared offset by offset.
  Both configs lose the writes acknowledged before the power loss at
  offsets past B's fsynced prefix: acks=all means "in every ISR replica's
  page cache", not "on disk", and both replicas went down (KIP-101 does not
  change that). What differs, and what the test checks:
  hw: the replica logs diverge (same offset, different values), writes
      acknowledged after B took over are lost and reads return values from
      before the power loss at offsets B had rewritten (inconsistent-offset);
  leader-epoch: the replica logs agree, no write acknowledged after B took
      over is lost, and no read after B took over returns a value B's log
      did not have.

Coordination modes (docs/design.md#v2): scenario 2 runs in both
(`--chaoslog-coordination v2`: the replicas are brokers 1 and 2, elections
are the replicas' own). Scenario 1 has a script per mode: step 4 needs the
leadership to move to C, making A C's follower (and so truncate) first. The
controller does that in a controlled shutdown; in V2, where C and A race for
B's lock, A is paused while B stops, so C takes it, then C is killed holding
it and A resumes as its follower (test_hw_truncation_then_immediate_election_v2).

Docker backend (the client cut is iptables; the data directories are bind
mounts the harness reads).
"""
from __future__ import annotations

import threading

import pytest

from harness.backends.base import coordination_of
from suite_helpers import (S, SESSION_TIMEOUT_S, AckWatch, ZkView, ack_times, broker, describe,
                           divergence, events, reads, replica_log, wait_for)

pytestmark = [pytest.mark.docker, pytest.mark.scenario]

TP = ("t", 0)
MODES = ["hw", "leader-epoch"]

SCENARIO_1 = {"min.insync.replicas": 2, "unclean.leader.election.enable": False,
              "replica.fetch.wait.max.ms": 10000, "replica.lag.time.max.ms": 30000}
SCENARIO_2 = {"min.insync.replicas": 1, "unclean.leader.election.enable": False,
              "replica.high.watermark.checkpoint.interval.ms": 200}


def _config(base: dict, mode: str):
    return pytest.param({"broker_config": {**base, "replication.truncation": mode}}, id=mode)


# -- scenario 1 -------------------------------------------------------------------------

@pytest.mark.parametrize("cluster", [_config(SCENARIO_1, m) for m in MODES], indirect=True)
def test_hw_truncation_then_immediate_election(cluster, workload, nemesis, history):
    """KIP-101 scenario 1: hw loses acknowledged writes, leader-epoch does not."""
    mode = cluster.spec.broker_config["replication.truncation"]
    acks = AckWatch(history)
    zk = ZkView(nemesis.run.zk)
    a = wait_for(zk.controller, 30, "a controller")
    b, c = sorted({1, 2, 3} - {a})
    # No live consumer: it would read the last round from B before A's
    # truncation, and the checker would call the write an inconsistent
    # offset instead of lost (anomalies.md). The final reads judge.
    run = workload({"t": 1}, acks="all", rate=100, producers=2, slots=4, consumers=0,
                   assignment={"t": {0: [b, c, a]}})

    # 1. Writes flow, full ISR, leader B.
    wait_for(lambda: (lai := zk.lai()).leader == b and len(lai.isr) == 3, 30,
             f"leader {b} with a full ISR")
    acks.wait_acks(100, 0, 30, "before the faults", TP)
    assert zk.controller() == a, "the controller moved before the faults"

    # 2. B gets no new writes; its last ones commit.
    t_cut = acks.now()
    nemesis.inject("partition-clients", broker(b))
    wait_for(lambda: acks.now() - t_cut >= 1 * S, 5, "a second after the cut")
    last_acked = acks.since(0, TP)[-1].time
    # 3. + 4. C dies (still registered), B hands its leadership to C.
    t_kill = acks.now()
    nemesis.inject("kill", broker(c))
    # The controller answers B's controlled shutdown once the new leader has
    # acknowledged, or after a bound (C never will): watch ZooKeeper meanwhile.
    failed: list[BaseException] = []

    def stop_b():
        try:
            nemesis.inject("stop", broker(b))
        except BaseException as e:  # noqa: BLE001 - reported below
            failed.append(e)
    stopping = threading.Thread(target=stop_b, daemon=True)
    stopping.start()
    moved = wait_for(lambda: (lai := zk.lai()).leader in (c, a) and lai, 15,
                     "the controlled shutdown moving the leadership")
    assert moved.leader == c, f"the leadership went to {moved.leader}, not to {c}: {moved}"
    assert set(moved.isr) == {c, a}, moved
    assert c in zk.registered(), f"broker {c}'s session expired before the leadership moved to it"
    assert acks.now() - t_cut < 8 * S, "too slow: A's long poll (10 s) may have ended"
    stopping.join(40)
    assert not stopping.is_alive() and not failed, f"broker {b}'s controlled shutdown: {failed}"
    _a_elected_then_judged(cluster, nemesis, history, run, acks, zk, a, mode,
                           t_cut, t_kill, last_acked, "")


@pytest.mark.v2_only
@pytest.mark.parametrize("cluster", [_config(SCENARIO_1, m) for m in MODES], indirect=True)
def test_hw_truncation_then_immediate_election_v2(cluster, workload, nemesis, history):
    """KIP-101 scenario 1 in V2: the same anomaly, reached through the
    replicas' own election (the module's docstring)."""
    mode = cluster.spec.broker_config["replication.truncation"]
    acks = AckWatch(history)
    zk = ZkView(nemesis.run.zk)
    b, c, a = 1, 2, 3
    run = workload({"t": 1}, acks="all", rate=100, producers=2, slots=4, consumers=0,
                   assignment={"t": {0: [b, c, a]}})

    # 1. Writes flow, full ISR, leader B (the preferred replica).
    wait_for(lambda: (lai := zk.lai()).leader == b and len(lai.isr) == 3, 30,
             f"leader {b} with a full ISR")
    acks.wait_acks(100, 0, 30, "before the faults", TP)
    # 2. B gets no new writes; its last ones commit.
    t_cut = acks.now()
    nemesis.inject("partition-clients", broker(b))
    wait_for(lambda: acks.now() - t_cut >= 1 * S, 5, "a second after the cut")
    last_acked = acks.since(0, TP)[-1].time
    # 3. + 4. B stops (its lock goes) while A is frozen: C takes the lock.
    # A's pause stays well inside its session timeout: it stays registered,
    # so C's election keeps it in the ISR.
    frozen = nemesis.inject("pause", broker(a))
    t_kill = acks.now()
    nemesis.inject("stop", broker(b))
    moved = wait_for(lambda: (lai := zk.elected()) is not None and lai.leader in (c, a) and lai,
                     15, f"a replica taking broker {b}'s lock")
    assert moved.leader == c, f"the leadership went to {moved.leader}, not to {c}: {moved}"
    assert set(moved.isr) == {c, a}, moved
    # C dies holding the lock (it goes at C's session expiry); A resumes,
    # follows C and truncates (hw) or asks C where to (leader-epoch: no answer).
    nemesis.inject("kill", broker(c))
    frozen.stop()
    assert acks.now() - t_cut < 8 * S, "too slow: A's long poll (10 s) may have ended"
    _a_elected_then_judged(cluster, nemesis, history, run, acks, zk, a, mode,
                           t_cut, t_kill, last_acked, " (V2)")


def _a_elected_then_judged(cluster, nemesis, history, run, acks, zk, a, mode,
                           t_cut, t_kill, last_acked, label):
    """Scenario 1's steps 5 and 6 and its verdict, the same in both modes."""
    # 5. C's session expires: A is elected from the ISR.
    elected = wait_for(lambda: (lai := zk.elected()) is not None and lai.leader == a and lai,
                       SESSION_TIMEOUT_S + 10, f"broker {a}'s election")
    assert elected.isr == (a,), elected     # clean: A was in the ISR [C, A]
    # What A holds as it takes over (it takes no write alone: min ISR 2).
    max_acked = max(k.offset for k in acks.since(0, TP))
    log_a = replica_log(cluster.data_dir(broker(a)), "t", 0)
    a_end = max(log_a) + 1 if log_a else 0
    if mode == "hw":
        assert a_end <= max_acked, f"A elected with offsets up to {a_end - 1}: nothing truncated"
    else:
        assert a_end > max_acked, f"A elected with offsets up to {a_end - 1} < {max_acked} acknowledged"
    # 6. Heal: clients back, B and C restarted as followers of A; writes resume.
    t_heal = acks.now()
    nemesis.heal()
    wait_for(lambda: len(zk.lai().isr) >= 2, 60, "a second replica back in the ISR")
    acks.wait_acks(100, t_heal, 30, "after the heal", TP)
    run.finish(quiet_s=2.0, final_timeout_s=60, settle_s=3.0)
    summary = run.verdict()

    if mode == "hw":
        assert summary["valid"] is False, describe(summary)
        lost = summary["anomalies"]["lost"] + summary["anomalies"]["unseen"]
        assert lost, describe(summary)
        # What was lost is what A truncated: acknowledged in the last round
        # before the cut took effect, after the fault began, before the kill.
        acked = ack_times(events(history.run_dir))
        for x in lost:
            t, _ = acked[x["value"]]
            assert t_cut - 1 * S <= t <= t_kill, (x, t_cut, t, t_kill)
    else:
        assert summary["valid"] is True, describe(summary)
    # The scenario's premise held in both runs: writes acknowledged after the
    # clients lost B (the round A had fetched but not seen committed).
    assert last_acked >= t_cut, "no write was acknowledged after the cut"
    print(f"KIP-101 scenario 1{label}, {mode}: A elected holding offsets below {a_end}, highest "
          f"acknowledged offset {max_acked}; {describe(summary)}")


# -- scenario 2 -------------------------------------------------------------------------

@pytest.mark.any_coordination
@pytest.mark.parametrize("cluster", [_config(SCENARIO_2, m) for m in MODES], indirect=True)
def test_divergence_after_multiple_hard_failures(cluster, workload, nemesis, history):
    """KIP-101 scenario 2: hw makes the replicas diverge, leader-epoch does not."""
    mode = cluster.spec.broker_config["replication.truncation"]
    acks = AckWatch(history)
    zk = ZkView(nemesis.run.zk)
    # The replicas are the two brokers that are not the controller (V2 has
    # none: brokers 1 and 2).
    x = (wait_for(zk.controller, 30, "a controller")
         if coordination_of(cluster.spec.broker_config).has_controller else 3)
    a, b = sorted({1, 2, 3} - {x})
    run = workload({"t": 1}, acks="all", rate=150, producers=2, slots=4, consumers=1,
                   assignment={"t": {0: [a, b]}})

    # 1. Writes flow, leader A, follower B in the ISR.
    wait_for(lambda: (lai := zk.lai()).leader == a and set(lai.isr) == {a, b}, 30,
             f"leader {a} with ISR [{a}, {b}]")
    acks.wait_acks(300, 0, 30, "before the failures", TP)
    # 2. Both go down; B also loses what it never fsynced.
    killed = nemesis.inject("kill", broker(a))
    power = nemesis.inject("lose-unfsynced", broker(b))
    pre = acks.since(0, TP)
    pre_max = max(k.offset for k in pre)
    assert "unfsynced bytes dropped" in power.detail(), power.detail()
    # 3. Both sessions end, A's first: left to their timeouts, ZooKeeper may
    # expire B's first, and the controller, seeing A alive, would drop B
    # from the ISR (then nobody can lead cleanly). In the KIP both stay in.
    nemesis.inject("zk-expire", broker(a))
    wait_for(lambda: zk.lai().leader != a, 15, f"the controller noticing broker {a}'s death")
    nemesis.inject("zk-expire", broker(b))
    offline = wait_for(lambda: (lai := zk.lai()).leader == -1 and lai, 15, "the partition going offline")
    assert b in offline.isr, f"broker {b} left the ISR: {offline}"
    assert not ({a, b} & zk.registered())
    # 4. B first: elected from the ISR with its short log; new writes.
    # (t_b before B restarts: the partition is offline until then, so every
    # later ack is B's, also those it gives before we see its election)
    t_b = acks.now()
    power.stop()
    took_over = wait_for(lambda: (lai := zk.lai()).leader == b and lai, 30, f"broker {b}'s election")
    new = acks.wait_acks(1, t_b, 30, f"by broker {b}", TP)
    b_start = min(k.offset for k in new)
    assert b_start <= pre_max, f"B's log was not shorter than what was acknowledged ({b_start} > {pre_max})"
    # Until B's log passes A's checkpointed high watermark (<= pre_max + the
    # sends then in flight + 1).
    wait_for(lambda: max(k.offset for k in acks.since(t_b, TP)) > pre_max + 50, 30,
             f"broker {b}'s log growing past offset {pre_max + 50}")
    # 5. A returns as B's follower and rejoins the ISR.
    killed.stop()
    wait_for(lambda: a in zk.lai().isr, 60, f"broker {a} back in the ISR")
    # 6. A leads.
    stopped = nemesis.inject("stop", broker(b))
    wait_for(lambda: zk.lai().leader == a, 30, f"broker {a} leading")
    t_a = acks.now()
    acks.wait_acks(100, t_a, 30, f"by broker {a}", TP)
    # 7. B back, as A's follower: it truncates its uncommitted tail from when
    # it led (both modes) and catches up.
    stopped.stop()
    wait_for(lambda: set(zk.lai().isr) == {a, b}, 60, f"broker {b} back in the ISR")
    run.finish(quiet_s=2.0, final_timeout_s=60, settle_s=3.0)
    summary = run.verdict()
    # The two replica logs, in sync by the ISR's account: compared offset by offset.
    log_a = replica_log(cluster.data_dir(broker(a)), "t", 0)
    log_b = replica_log(cluster.data_dir(broker(b)), "t", 0)

    evs = events(history.run_dir)
    acked = ack_times(evs)
    post = {v for v, (t, _) in acked.items() if t >= t_b}
    pre_values = {v for v, (t, _) in acked.items() if t < t_b}   # acknowledged by A, before the crash
    lost = summary["anomalies"]["lost"] + summary["anomalies"]["unseen"]
    lost_post = [k for k in lost if k["value"] in post]
    # Values from before the power loss, read after B took over at offsets B rewrote.
    resurrected = [(t, o, v) for t, o, v in reads(evs) if t >= t_b and o >= b_start and v in pre_values]
    # Offsets bound to two values written after B took over: replica divergence, not the power loss.
    split = [k for k in summary["anomalies"]["inconsistent-offset"]
             if len([v for v in k["values"] if v not in pre_values]) > 1]
    diverged = divergence(log_a, log_b)
    facts = (f"{describe(summary)}; lost after B took over: {len(lost_post)}; reads of pre-crash "
             f"values after B took over: {len(resurrected)}; divergent offsets: {len(diverged)} "
             f"(first {diverged[:3]}); B elected with leader epoch {took_over.leader_epoch}")
    print(f"KIP-101 scenario 2, {mode}: {facts}")
    if mode == "hw":
        # A kept its old values where B wrote new ones, and served them once it led.
        assert diverged, facts
        assert resurrected, facts
        assert summary["anomalies"]["inconsistent-offset"], facts
        assert summary["valid"] is False, facts
    else:
        assert not diverged, facts
        assert not resurrected and not lost_post and not split, facts
        # Lost, if anything: acknowledged before the power loss, past B's fsynced prefix.
        for k in lost:
            t, off = acked[k["value"]]
            assert t < t_b and off >= b_start, (k, facts)
