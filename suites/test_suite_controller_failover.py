"""A bug chaoslog found, and its fix: a leader that restarted with a
shorter log during a controller failover kept its leadership, and its
followers truncated to it.

Found by test_suite_faults.py::test_fault_kind[bitflip] (1 run in 3): the
broker that was both the controller and the leader of the partition was
killed, a bit flipped in its active segment, and restarted ~7 s later. Its
old ZooKeeper session expired; broker 2 won the controller election and read
the live brokers a few milliseconds after the restarted broker had
registered again. The new controller therefore saw it alive and kept it
leader with the same leader epoch, although its recovery had cut the log at
the corrupt batch (offset 51 < 57 acknowledged). The followers ignored the
LeaderAndIsr (same epoch), fetched from it, truncated to its shorter log,
and acks=all writes acknowledged with min.insync.replicas=2 and a full ISR
were overwritten (checker: inconsistent-offset x6, valid False, with SAFE).

A controller that keeps watching sees such a restart (the registration's
start epoch changes: "bounced"); a new controller had nothing to compare
with. The fix follows Kafka's broker epochs (KIP-380, the registration
znode's czxid): at failover, a live broker registered after the last write
of the leaderAndISR of a partition it leads or follows in the ISR restarted
unseen, and is handled as bounced (Controller._restarted_unseen).

The scenario made deterministic (SAFE config, topic t: RF 3, replicas
[X, Y, Z] with X the controller, so X leads and controls):
  1. acks=all writes, full ISR;
  2. truncate-tail on X: killed, 2 KB cut off its active segment (acknowledged
     batches: the followers hold them);
  3. Y and Z paused (under the session timeout: their sessions live), so that
     neither wins the next controller election;
  4. X's old session expired (by hand, as zk-expire does), X restarted: it
     registers, wins the election, and finds itself alive and leading;
  5. Y and Z resumed; writes go on; final reads.
Expected: X is not kept as leader with its old leader epoch; the run is
valid (before the fix: valid False, as above).
"""
from __future__ import annotations

import time

import pytest

from faults.injectors.zookeeper import expire_session, read_session
from suite_helpers import (SAFE, SESSION_TIMEOUT_S, AckWatch, ZkView, broker, describe,
                           replica_log, wait_for)

pytestmark = [pytest.mark.docker, pytest.mark.scenario]

TP = ("t", 0)


@pytest.mark.broker_config(**SAFE)
def test_leader_restarted_during_controller_failover(cluster, workload, nemesis, history):
    acks = AckWatch(history)
    zk = ZkView(nemesis.run.zk)
    x = wait_for(zk.controller, 30, "a controller")
    y, z = sorted({1, 2, 3} - {x})
    run = workload({"t": 1}, acks="all", rate=100, producers=2, slots=4, consumers=1,
                   assignment={"t": {0: [x, y, z]}})
    wait_for(lambda: (lai := zk.lai()).leader == x and len(lai.isr) == 3, 30,
             f"leader {x} with a full ISR")
    acks.wait_acks(200, 0, 30, "before the faults", TP)
    before = zk.lai()
    sid, password = read_session(cluster, broker(x))   # its session, before a restart replaces it

    # 2. X down, its log's tail cut.
    damaged = nemesis.inject("truncate-tail", broker(x), bytes=2048)
    acked_max = max(k.offset for k in acks.since(0, TP))
    # 3. + 4. Nobody else can win the election while X comes back.
    paused_at = time.monotonic()
    nemesis.inject("pause", broker(y))
    nemesis.inject("pause", broker(z))
    expire_session(cluster.zookeeper_connect, sid, password)
    damaged.stop()                                   # restart X, wait for its registration
    wait_for(lambda: zk.controller() == x, 5, f"broker {x} controller again")
    # The fix: X restarted unseen, so its leadership moves (to the paused Y
    # or Z, whose sessions live) in a new leader epoch.
    after = wait_for(lambda: (lai := zk.lai()).leader_epoch > before.leader_epoch and lai, 10,
                     "a new leader epoch after X's return")
    assert after.leader in (y, z) and x not in after.isr, after
    x_end = max(replica_log(cluster.data_dir(broker(x)), "t", 0), default=-1) + 1
    assert time.monotonic() - paused_at < SESSION_TIMEOUT_S - 1, "paused too long: sessions at risk"
    # 5. Y and Z back.
    nemesis.heal()
    wait_for(lambda: len(zk.lai().isr) == 3, 60, "a full ISR again")
    acks.wait_acks(100, acks.now(), 30, "after the heal", TP)
    run.finish(quiet_s=2.0, final_timeout_s=60, settle_s=3.0)
    summary = run.verdict()
    facts = (f"X={x} restarted with offsets below {x_end} (highest acknowledged {acked_max}); "
             f"leaderAndISR before {before}, after X's return {after}; {describe(summary)}")
    print(facts)
    assert x_end <= acked_max, f"the cut removed no acknowledged batch: {facts}"
    assert summary["valid"] is True, facts
