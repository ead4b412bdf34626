"""Apache Kafka's replication_test.py matrix, through chaoslog.

Kafka's ducktape test (tests/kafkatest/tests/core/replication_test.py): 3
brokers, a topic with 3 partitions and replication factor 3,
min.insync.replicas=2, acks=all producers; one failure mode against one
broker while the producers run; then every acknowledged message must be
consumed. Failure modes:

  clean_shutdown  SIGTERM (our broker: a controlled shutdown); stays down
  hard_shutdown   SIGKILL; stays down
  clean_bounce    SIGTERM and restart, N rounds
  hard_bounce     SIGKILL, wait until ZooKeeper has expired its session,
                  restart, N rounds
and the broker hit is the leader of partition 0 or the controller (found
again every round). Kafka bounces 5 times; the CI variant here bounces twice
(`CHAOSLOG_BOUNCES`), the `slow` variant 5 times. A broker shut down stays
down for most of the run, then the final heal starts it again (the final
reads need every partition led).

Broker config: SAFE (min.insync.replicas=2, unclean election off,
leader-epoch truncation). Expected verdict: valid (no lost, unseen or
otherwise wrong acknowledged write), with the fault really applied (the
nemesis says which broker it hit and how many rounds) and writes
acknowledged after it.

With `--chaoslog-coordination v2` (docs/design.md#v2) the four leader
cases run; V2 has no controller to hit.

The eight cases share one cluster (module scope), each with a topic of its
own; each starts from a whole cluster (every broker registered, every
partition of its topic fully in sync).
"""
from __future__ import annotations

import os

import pytest

from harness.backends.base import coordination_of
from suite_helpers import S, SAFE, AckWatch, ZkView, describe, wait_for

pytestmark = [pytest.mark.docker]

BOUNCES = int(os.environ.get("CHAOSLOG_BOUNCES", "2"))

MODES = {  # Kafka's failure mode -> chaoslog fault
    "clean_shutdown": "stop",
    "hard_shutdown": "kill",
    "clean_bounce": "clean-bounce",
    "hard_bounce": "hard-bounce",
}


@pytest.fixture(scope="module")
def shared_cluster(module_cluster_factory):
    return module_cluster_factory(brokers=3, broker_config=SAFE)


@pytest.fixture
def cluster(shared_cluster):
    """The module's cluster, whole again before each case."""
    shared_cluster.wait_brokers_registered(timeout=90)
    return shared_cluster


HOLD_S = 8.0    # a shut-down broker stays down this long (a SIGKILLed one's session expires within it)
# V2 has no controller to drop a dead broker from the ISRs at its session
# expiry: the partitions it followed stall (acks=all) until their leaders drop
# it after replica.lag.time.max.ms (10 s), and the one it led has a leader
# again after its session (6 s) and the others' head start (docs/design.md#v2-broker).
HOLD_S_V2 = 14.0
AFTER_S = 4.0   # writes on the whole cluster after the fault


def _case(cluster, workload, nemesis, history, mode: str, target: str, rounds: int):
    fault = MODES[mode]
    topic = f"rep-{mode}-{target}-{rounds}".replace("_", "-")
    acks = AckWatch(history)
    run = workload({topic: 3}, replication_factor=3, acks="all", rate=60, producers=2, slots=3)
    zk = ZkView(run.zk)
    wait_for(lambda: zk.fully_replicated({topic: 3}), 30, f"{topic}: full ISR on every partition")
    acks.wait_acks(20, 0, 20, "before the fault")
    role = f"leader:{topic}/0" if target == "leader" else "controller"
    holder = nemesis.resolve(role, partition=(topic, 0))

    # The scripted schedule: the fault against whoever holds the role now.
    t0 = acks.now()
    if fault in ("stop", "kill"):
        hold_s = HOLD_S if coordination_of(cluster.spec.broker_config).has_controller else HOLD_S_V2
        inj = nemesis.inject(fault, role, partition=(topic, 0))
        wait_for(lambda: acks.now() - t0 >= hold_s * S, hold_s + 5, "the hold")
    else:
        inj = nemesis.inject(fault, role, partition=(topic, 0), times=rounds)
        per_round = 15.0 if fault == "hard-bounce" else 10.0   # session expiry + restart
        wait_for(inj.done, per_round * rounds + 20, f"{rounds} rounds of {fault}")
    inj.stop()                              # restarts whatever is down
    t1 = acks.now()
    acks.wait_acks(20, t1, 30, "after the fault")
    wait_for(lambda: acks.now() - t1 >= AFTER_S * S, AFTER_S + 5, "writes after the fault")
    run.finish(quiet_s=2.0, final_timeout_s=60, settle_s=3.0)

    # The fault really happened, to the broker that held the role (a bounce
    # finds the role's holder again every round, as Kafka's test does).
    if fault in ("clean-bounce", "hard-bounce"):
        assert inj.hit and inj.hit[0] == holder[0], (inj.hit, holder)
        assert inj.rounds == rounds and inj.error is None, inj.describe()
        assert not [n for n in inj.notes if "still registered" in n or "not registered" in n], inj.notes
    else:
        assert inj.targets == holder, (inj.targets, holder)
    if fault in ("stop", "kill"):
        # min ISR 2 of 3 survives one broker down: writes go on while it is down.
        assert acks.count(t0 + 2 * S, until=t1) > 0, "no write acknowledged while the broker was down"

    summary = run.verdict()
    assert summary["valid"] is True, describe(summary)
    assert summary["counts"]["acknowledged"] > 100, describe(summary)
    return summary


# Both coordination modes hit the leader; V2 has no controller (docs/design.md#v2).
TARGETS = [pytest.param("leader", marks=pytest.mark.any_coordination), "controller"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", list(MODES))
def test_replication(cluster, workload, nemesis, history, mode, target):
    """3 brokers, 3 partitions, RF 3, min ISR 2, acks=all; one failure mode
    against the leader of partition 0 or the controller: nothing acknowledged
    is lost (valid)."""
    rounds = BOUNCES if "bounce" in mode else 1
    _case(cluster, workload, nemesis, history, mode, target, rounds)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", ["clean_bounce", "hard_bounce"])
def test_replication_five_bounces(cluster, workload, nemesis, history, mode, target):
    """Kafka's own count: 5 bounces of the leader of partition 0 or the controller."""
    _case(cluster, workload, nemesis, history, mode, target, 5)
