"""Real client applications: a consumer group of each Python client under
broker kills and under kills of its coordinator (issue 19, point 3).

For confluent-kafka, kafka-python and aiokafka alike, three consumers
subscribe as one group (harness/workload/group.py and its group_*.py) to a
topic that acks=all producers of the same library write (one idempotent),
a raw fetcher reads too (every oracle has its input), and they commit
synchronously after each poll, or (confluent-kafka under coordinator kills)
by librdkafka's auto-commit: kafka-python and aiokafka cannot report every
auto-commit (harness/workload/group.py, GROUP_CLIENTS).
Once every member holds partitions and every partition has an acknowledged
commit, a kill starts: of a leader of the topic, or of whichever broker
coordinates the group when the kill starts
(faults/targets.py, `coordinator:GROUP`), so the committed offsets must
survive the coordinator's failover (docs/design.md#groups, #g-durability).
Every oracle must hold, the group's too: no acknowledged commit regresses,
no assignment resumes past a commit over records the group never read, no
record below the final commit goes unread. And the group oracles must have
had something to judge: acknowledged commits, and assignments to more than
one member.

The default tiers run one scenario per client (marked `pressure`); the whole
3 x 2 matrix is the `slow` variant. One cluster serves the module; each
scenario leaves it healed. CHAOSLOG_GROUP_CLIENTS_SEED draws other schedules.
"""
from __future__ import annotations

import os

import pytest

from faults.nemesis import make_schedule
from reports.groups import commits, read_groups
from suite_helpers import SAFE, assert_valid, wait_for

pytestmark = [pytest.mark.docker]

SEED = int(os.environ.get("CHAOSLOG_GROUP_CLIENTS_SEED", "0"))
PARTITIONS = 4
CONSUMERS = 3
CLIENTS = ("confluent", "kafka-python", "aiokafka")
# confluent-kafka auto-commits only under coordinator kills. When a follower
# of the group's offsets partition dies, commits wait in purgatory until the
# ISR shrinks, longer than offsets.commit.timeout.ms, and are answered
# REQUEST_TIMED_OUT (docs/design.md#groups, "Commits"); librdkafka then sends
# the same request again, after the auto-commits of later offsets that were
# queued meanwhile, and the coordinator takes the older offset last: the
# committed offset goes backwards, rightly reported as commit-regressed, by
# the client's doing. A synchronous commit has no later commit to overtake.
AUTO = {("confluent", "coordinator")}
FAULTS = ("broker", "coordinator")
# Kills outlast the ZooKeeper session (6 s), so the controller moves
# leadership (and with the offsets partition's, the group's coordinator).
KILLS_S = 20.0
CONFIG = {**SAFE, "group.initial.rebalance.delay.ms": 1500}


@pytest.fixture(scope="module")
def shared_cluster(module_cluster_factory):
    return module_cluster_factory(brokers=3, broker_config=CONFIG)


@pytest.fixture
def cluster(shared_cluster):
    shared_cluster.wait_brokers_registered(timeout=90)
    return shared_cluster


def _group_ready(run) -> bool:
    """Every member holds partitions and every partition has an
    acknowledged commit of the group."""
    events = read_groups(run.run_dir) or []
    members = {e["member"] for e in events if e["kind"] == "assign" and e.get("partitions")}
    done = {c.partition for c in commits(events) if c.outcome == "ok"}
    return len(members) == CONSUMERS and done >= set(range(PARTITIONS))


def group_under_kills(workload, nemesis, client: str, fault: str, seed: int, topic: str) -> None:
    """`topic` is the scenario's own: the cluster serves the whole module."""
    run = workload({topic: PARTITIONS}, replication_factor=3, client=client, rate=150,
                   producers=2, slots=3, consumers=CONSUMERS, fetchers=1, sub_via="subscribe",
                   commit="auto" if (client, fault) in AUTO else "manual",
                   mix=[{"acks": "all", "idempotent": True, "max_in_flight": 5}, {"acks": "all"}])
    group = run.workload.group
    # The kills start once the whole group holds commits: a coordinator that
    # dies before anything was committed has nothing to lose.
    wait_for(lambda: _group_ready(run), 90,
             f"group {group} of {client}: partitions at every member, every one committed", 0.5)
    spec = run.cluster.spec
    # A broker kill hits a leader of the group's topic: its consumers fail over too.
    target = f"coordinator:{group}" if fault == "coordinator" else f"leader:{topic}/0"
    played = nemesis(make_schedule(
        seed, {"kill": 1}, duration_s=KILLS_S, interval_s=(1, 3), fault_duration_s=(8, 10),
        quiet_s=4, brokers=spec.brokers, zookeepers=spec.zookeepers, targets={"kill": target}))
    run.finish(quiet_s=5.0, final_timeout_s=60, settle_s=5.0)
    assert played.done, f"no kill was played: skipped {played.skipped}"
    assert all(f"target={target}" in d.get("detail", "") for d in played.done), played.done
    assert_valid(run)
    events = read_groups(run.run_dir) or []
    ok = [c for c in commits(events) if c.outcome == "ok" and c.group == group]
    assert ok, f"group {group} has no acknowledged commit: nothing for the group oracles"
    members = {e["member"] for e in events if e["kind"] == "assign" and e.get("partitions")}
    assert len(members) > 1, f"group {group}: partitions were assigned to {members} only"


@pytest.mark.pressure
@pytest.mark.parametrize("client,fault", [("confluent", "coordinator"),
                                          ("kafka-python", "broker"),
                                          ("aiokafka", "coordinator")])
def test_a_client_s_group_under_kills(workload, nemesis, client, fault):
    """One scenario per client in the default tiers."""
    group_under_kills(workload, nemesis, client, fault, SEED, f"{client}-{fault}")


@pytest.mark.slow
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("client", CLIENTS)
def test_every_client_s_group_under_every_kill(workload, nemesis, client, fault):
    """The whole matrix (another seed)."""
    group_under_kills(workload, nemesis, client, fault, SEED + 1, f"slow-{client}-{fault}")
