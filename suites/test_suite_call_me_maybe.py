"""Jepsen, "Call me maybe: Kafka" (Kyle Kingsbury, 2013), through chaoslog.

The anomaly: a partition's followers are cut off from its leader (the leader
and the followers all still reach ZooKeeper), so the leader shrinks the ISR
to itself and goes on acknowledging acks=all writes alone. Then the leader
is isolated from everything, ZooKeeper included: its session expires, and
the controller, finding no live ISR member, elects a live replica outside
the ISR (an unclean election). When the network heals, the old leader
returns as a follower and truncates its log: every write it acknowledged
alone is gone.

One scripted schedule, two broker configs:

  seed design (unclean.leader.election.enable=true, min.insync.replicas=1,
  replication.truncation=hw)   -> the checker reports lost acknowledged
                                  writes (valid False, `lost` non-empty)
  the 0.8.2 fixes (unclean.leader.election.enable=false,
  min.insync.replicas=2, still hw) -> nothing lost (valid True)

The schedule (topic t, 1 partition, RF 3, acks=all, one leader L):
  1. wait for a full ISR and acknowledged writes;
  2. partition-isolate L among the brokers only (L <-> followers cut, ZooKeeper
     untouched) until ZooKeeper's leaderAndISR says ISR = [L]
     (replica.lag.time.max.ms=3000 makes that quick);
  3. keep writing: the seed design acknowledges writes with ISR = [L]; the
     fixed one refuses them (NOT_ENOUGH_REPLICAS) and acknowledges none;
  4. partition-isolate L from every node, ZooKeeper included, until the
     controller has reacted: an unclean leader with ISR = [it] (seed design),
     or no leader at all (fixed);
  5. heal; L registers again and rejoins the ISR (truncating, in the seed
     design, to the new leader's log); 100 more writes;
  6. final reads, checker. In the seed design the writes L acknowledged
     alone are gone: `lost` where the new leader's log reused their offsets
     (also `inconsistent-offset`), `unseen` past its end (the final reads
     completed: the log no longer holds them).
Each step is checked against ZooKeeper or the acknowledgements, so a run in
which the scenario did not happen fails as such, never as a verdict.

Both coordination modes (`--chaoslog-coordination v2`, docs/design.md#v2):
in V2 no controller elects; in step 4 a follower, seeing the leader's lock
gone and no ISR member registered, elects itself (unclean) or, fixed, waits.

Docker backend (partitions are iptables rules in the broker containers);
the clients run beside the cluster and still reach L throughout, as Jepsen's
did.
"""
from __future__ import annotations

import pytest

from suite_helpers import (SESSION_TIMEOUT_S, AckWatch, ZkView, ack_times, broker, describe,
                           events, wait_for)

pytestmark = [pytest.mark.docker, pytest.mark.scenario, pytest.mark.any_coordination]

COMMON = {"replica.lag.time.max.ms": 3000, "replication.truncation": "hw"}
SEED_DESIGN = {**COMMON, "unclean.leader.election.enable": True, "min.insync.replicas": 1}
FIXED = {**COMMON, "unclean.leader.election.enable": False, "min.insync.replicas": 2}
TP = ("t", 0)


def call_me_maybe(workload, nemesis, history, *, unclean: bool):
    acks = AckWatch(history)
    # No live consumer: like Jepsen's test, the judge is the final read of
    # everything. (A live consumer reads the old leader's acknowledged
    # writes before they are truncated; the checker then reports them as
    # inconsistent offsets rather than lost: see anomalies.md's `lost`.)
    run = workload({"t": 1}, replication_factor=3, acks="all", rate=100, producers=2, slots=4,
                   consumers=0)
    zk = ZkView(run.zk)

    # 1. A healthy partition.
    wait_for(lambda: len(zk.lai().isr) == 3, 30, "a full ISR of 3")
    acks.wait_acks(50, 0, 30, "before the faults")
    before = zk.lai()
    leader = before.leader
    followers = [r for r in zk.assignment("t")[0] if r != leader]

    # 2. The followers lose the leader; ZooKeeper does not.
    t_cut = acks.now()
    cut = nemesis.inject("partition-isolate", broker(leader), among="brokers")
    shrunk = wait_for(lambda: (lai := zk.lai()).isr == (leader,) and lai, 20,
                      f"the ISR shrinking to [{leader}]")
    assert shrunk.leader == leader
    assert zk.registered() >= {leader, *followers}, "a broker lost ZooKeeper during the cut"
    t_shrunk = acks.now()

    # 3. Writes go on against the ISR of one.
    if unclean:
        alone = acks.wait_acks(30, t_shrunk, 20, "with ISR = [leader] (min.insync.replicas=1)", TP)
    else:
        wait_for(lambda: acks.error_counts(t_shrunk)["NOT_ENOUGH_REPLICAS"] >= 10, 20,
                 "writes refused with NOT_ENOUGH_REPLICAS (min.insync.replicas=2)")

    # 4. The leader loses everyone, ZooKeeper included.
    t_iso = acks.now()
    isolated = nemesis.inject("partition-isolate", broker(leader))
    wait_for(lambda: leader not in zk.registered(), SESSION_TIMEOUT_S + 10,
             f"ZooKeeper expiring broker {leader}'s session")
    if unclean:
        elected = wait_for(lambda: (lai := zk.lai()).leader in followers and lai, 15,
                           "an unclean election of a follower")
        # Unclean: the new leader was not in the ISR ([old leader]) it replaced.
        assert elected.leader not in shrunk.isr, f"not an unclean election: {elected}"
        assert elected.leader_epoch > shrunk.leader_epoch
        t_elected = acks.now()
        acks.wait_acks(30, t_elected, 20, "by the new leader", TP)
    else:
        offline = wait_for(lambda: (lai := zk.lai()).leader == -1 and lai, 15,
                           "the partition going offline (no clean leader, no unclean election)")
        assert offline.isr == (leader,), offline
        t_offline = acks.now()
        # While the ISR is [leader], nothing is acknowledged. (Between the
        # cut and the shrink, writes the followers fetched before the cut
        # are still acknowledged, as late as a loaded machine delivers them.)
        during = acks.since(t_shrunk, TP, until=t_offline)
        assert not during, f"{len(during)} writes acknowledged with ISR = [{leader}] and min ISR 2"

    # 5. Heal: the old leader comes back as a follower and catches up.
    isolated.stop()   # flushes every chaoslog iptables rule: the cut goes too
    cut.stop()
    wait_for(lambda: leader in zk.registered(), 30, f"broker {leader} registering again")
    back = wait_for(lambda: (lai := zk.lai()).leader != -1 and leader in lai.isr and lai, 60,
                    f"broker {leader} back in the ISR")
    if unclean:
        assert back.leader != leader, "the unclean leader lost its leadership again"
    else:
        assert back.leader == leader, f"the only ISR member {leader} was not elected: {back}"
    # Written by the leader of the new epoch, which the old one now follows.
    acks.wait_acks(100, acks.now(), 30, "after the old leader rejoined", TP)
    run.finish(quiet_s=2.0, final_timeout_s=60, settle_s=3.0)
    summary = run.verdict()

    if unclean:
        assert summary["valid"] is False, describe(summary)
        lost = summary["anomalies"]["lost"]
        assert lost, f"no lost acknowledged write: {describe(summary)}"
        # Every lost write was acknowledged by the old leader alone: after the
        # cut, before the new leader took over.
        acked = ack_times(events(history.run_dir))
        for a in lost:
            t, _off = acked[a["value"]]
            assert t_cut <= t <= t_elected, (a, t_cut, t, t_elected)
        assert {a.value for a in alone} & {a["value"] for a in lost}, \
            "none of the writes acknowledged with ISR = [leader] was lost"
    else:
        assert summary["valid"] is True, describe(summary)
        assert not summary["anomalies"]["lost"]
    print(f"call me maybe, unclean={unclean}: {describe(summary)}")


@pytest.mark.broker_config(**SEED_DESIGN)
def test_seed_design_loses_acknowledged_writes(workload, nemesis, history):
    """unclean election on, min ISR 1, hw truncation: lost acknowledged writes (valid False)."""
    call_me_maybe(workload, nemesis, history, unclean=True)


@pytest.mark.broker_config(**FIXED)
@pytest.mark.v2_fast
def test_fixed_config_loses_nothing(workload, nemesis, history):
    """unclean election off, min ISR 2: the same schedule loses nothing (valid True)."""
    call_me_maybe(workload, nemesis, history, unclean=False)
