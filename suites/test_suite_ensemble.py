"""ZooKeeper-ensemble faults: the brokers stall, never misbehave, and recover.

The design assumes ZooKeeper works with a quorum (docs/design.md#guarantees).
What it owes when the ensemble itself is hit is no unsafe step: while a
member is down the others serve; while the majority is down nobody can
change the cluster's metadata, so leaders and ISRs stay as they were, and
once the quorum is back every partition must recover with nothing lost.
A 3-node ensemble under the fixed configuration, an acks=all and an
idempotent producer throughout:

  1. a follower partitioned from every other node, brokers and ensemble
     members alike (a minority cut off; iptables in the ZooKeeper
     containers);
  2. the ensemble's leader killed (a new one is elected, sessions move);
  3. a follower frozen (its peers and clients see a member cut off);
  4. the majority killed, a follower and then the leader, for 12 s: no
     quorum.

The verdict must be valid (no loss, no duplicate, the cluster recovered in
its bound), and the faults must have taken effect: the harness's own
ZooKeeper samples stop while the quorum is gone.
"""
from __future__ import annotations

import re

import pytest

from faults.nemesis import Schedule, Step
from reports.observations import read_observations
from suite_helpers import SAFE, describe

NS = 1_000_000_000

pytestmark = [pytest.mark.docker]


@pytest.mark.zookeepers(3)
@pytest.mark.broker_config(**SAFE)
def test_an_ensemble_losing_its_leader_a_member_and_its_majority_loses_nothing(workload, nemesis):
    run = workload({"t": 2}, replication_factor=3, mix=({"acks": "all"}, {"acks": "all",
                                                                          "idempotent": True}))
    # Roles are resolved when a step starts: each step leaves the ensemble
    # 5 s to be whole again (a member rejoining is neither leader nor follower).
    nemesis(Schedule(seed=0, duration_s=61.0, quiet_s=10.0, steps=[
        Step(4.0, "partition-isolate", 6.0, "zk-follower"),
        Step(15.0, "zk-kill", 8.0, "zk-leader"),
        Step(28.0, "zk-pause", 8.0, "zk-follower"),
        # A follower first: the leader keeps its quorum and its role until
        # the second kill (a member looking for a leader is neither).
        Step(41.0, "zk-kill", 12.0, "zk-follower", lane=0),
        Step(41.5, "zk-kill", 11.5, "zk-leader", lane=1),
    ]))
    summary = run.finish().verdict()
    assert summary["valid"] is True, describe(summary)
    # The cut between ensemble members was made (one member drops another's
    # packets), not refused for want of iptables in the ZooKeeper containers.
    cut = [w for w in summary["fault_windows"] if w["fault"] == "partition-isolate"]
    detail = str(cut[0]["detail"]) if len(cut) == 1 else ""
    assert re.search(r"zk-\d<-\{[^}]*zk-\d", detail) and "start failed" not in detail, (
        f"the minority was not cut off: {cut}")
    kills = [w for w in summary["fault_windows"] if w["fault"] == "zk-kill"]
    majority = kills[1:]
    assert len(majority) == 2 and len({t for w in majority for t in w["targets"]}) == 2, (
        f"the majority loss did not hit two members: {majority}")
    # Without a quorum no server answers: the harness's own ZooKeeper samples
    # (one a second) must stop from shortly after both kills to the heal.
    down_from = max(w["start"] for w in majority) + 3 * NS
    down_to = min(w["stop"] for w in majority)
    read = [o["time"] for o in read_observations(run.run_dir).metadata
            if down_from <= o["time"] <= down_to]
    assert not read, (f"ZooKeeper answered {len(read)} samples while two of its three members "
                      f"were down, {down_from / NS:.1f}-{down_to / NS:.1f} s")
