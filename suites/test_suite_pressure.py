"""Pressure: randomized runs with overlapping faults, every oracle on.

The scripted suites replay famous anomalies; these search. Each run puts the
fixed configurations under as much as a 2-core box sustains at once: several
topics and partitions, acks=all and idempotent producers side by side, a
library consumer and a raw-protocol fetcher reading throughout, client
processes crashed and restarted, three lanes of faults overlapping (kills,
clean stops, pauses, session expiries, partitions of several shapes, disk
damage on one broker, leadership moved by admin operations), aimed at the
leader, the controller and the ISR followers. Then every guarantee of
docs/design.md#guarantees is checked: by the clients' history and by what the
harness observed of the cluster (ZooKeeper samples, each broker's Metadata,
the replicas' own files).

The control-plane transitions run comes first among them (marked `lead`),
right after the smoke tier (suites/conftest.py orders them, this file's
order within): with it they catch most broker bugs within 5 minutes
(bench/mutation/). The seed of each run is fixed so a
failure replays; CHAOSLOG_PRESSURE_SEED draws another search.
"""
from __future__ import annotations

import os
import random
import time

import pytest

from faults import recipes
from faults.injectors.base import FaultError
from faults.targets import TargetError
from suite_helpers import SAFE, assert_valid, caught_up, cluster_view, wait_for

SEED = int(os.environ.get("CHAOSLOG_PRESSURE_SEED", "0"))
# Seventy seconds of faults: the first run then ends about 4.5 minutes into
# `pytest suites`; CHAOSLOG_PRESSURE_SECONDS searches longer.
SECONDS = float(os.environ.get("CHAOSLOG_PRESSURE_SECONDS", "70"))

# Every fault of the design's fault model (processes crash, stop or freeze,
# sessions expire, the network partitions; disks keep what was written),
# overlapping, that the fixed configurations must survive without breaking a
# guarantee; admin operations move leadership meanwhile.
FAULTS = {"kill": 3, "stop": 2, "pause": 2, "hard-bounce": 1, "zk-expire": 2,
          "partition-isolate": 2, "partition-halves": 1, "partition-one-way": 1,
          "partition-zk": 1, "partition-clients": 1,
          "elect-preferred": 1, "move-leader": 2, "reassign": 1, "add-partitions": 1}
# Disk damage is outside that model when it overlaps other failures: a leader
# that lost acknowledged records from its disk and restarts while no other
# in-sync replica is alive leads with the shorter log (docs/design.md
# #g-durability; the first pressure runs found exactly that). One fault at a
# time, the design must still lose nothing: the damaged replica is not
# elected while an intact in-sync replica lives, and recovers from the others.
DISK_FAULTS = {"truncate-tail": 2, "bitflip": 1, "lose-unfsynced": 2, "bad-offset": 1, "kill": 1,
               "stop": 1, "zk-expire": 1, "move-leader": 1}
TARGETS = {"lose-unfsynced": "leader"}

# Churn in the log layer: small segments roll every few seconds, a sparse
# index entry every few batches, and followers leave and rejoin the ISR
# within the faults' durations, so rolls, index lookups, truncation across
# segments and ISR changes all happen under the faults.
CHURN = {"log.segment.bytes": 64 * 1024, "log.index.interval.bytes": 128,
         "replica.lag.time.max.ms": 3000}

# Every control-plane transition (docs/design.md#controlled-shutdown,
# #reassignment, #preferred-election, #isr, #truncation),
# each chained with failures aimed at the roles it produced
# (faults/recipes.py), beside the admin operations on their own.
TRANSITIONS = {**{name: 2 for name in recipes.TRANSITIONS}, "move-leader": 1,
               "elect-preferred": 1, "reassign": 1, "add-partitions": 1}

# The design as first written (docs/design.md#config): min ISR 1, unclean
# election on, truncation to the HW.
SEED_FAITHFUL = {"min.insync.replicas": 1, "unclean.leader.election.enable": True,
                 "replication.truncation": "hw"}
# One failure of the design's fault model at a time: fault -> the roles it is aimed at.
# Not power loss (lose-unfsynced): a process crash keeps what the kernel has,
# and a leader that lost acknowledged records may elect itself again with the
# shorter log (docs/design.md#not-guaranteed, "Disk loss beyond the fault model").
ONE_AT_A_TIME = {"kill": ("leader", "follower", "controller"), "stop": ("leader", "follower"),
                 "pause": ("leader", "follower"), "hard-bounce": ("leader", "follower"),
                 "zk-expire": ("leader", "controller"), "partition-isolate": ("leader", "follower"),
                 "partition-zk": ("leader",), "move-leader": (None,), "elect-preferred": (None,), "reassign": (None,)}

WORKLOAD = dict(rate=300, producers=3, slots=3, consumers=1, fetchers=1, crash_every_s=25,
                mix=[{"acks": "all", "idempotent": True, "max_in_flight": 5},
                     {"acks": "all"}, {"acks": "1"}])


def pressure_run(workload, nemesis, seed: int, faults=FAULTS, overlap: int = 3):
    # Topic b has two replicas per partition: a spare broker for `reassign`.
    run = workload({"a": 3, "b": 2}, replication_factor=3,
                   assignment={"b": {0: [1, 2], 1: [2, 3]}}, **WORKLOAD)
    nemesis(faults, duration=SECONDS, seed=seed, overlap=overlap, interval=(2, 6),
            fault_duration=(4, 10), quiet=8,
            targets={f: role for f, role in TARGETS.items() if f in faults})
    run.finish(quiet_s=8.0, final_timeout_s=90, settle_s=5.0)
    return run


@pytest.mark.pressure
@pytest.mark.any_coordination
@pytest.mark.broker_config(**SAFE, **CHURN)
def test_fixed_configuration_under_everything_at_once(workload, nemesis):
    """min ISR 2, no unclean election, leader-epoch truncation. Also in V2
    coordination (`make test-v2`), where the admin operations go to the
    leaders and the controller role is not drawn."""
    run = pressure_run(workload, nemesis, SEED)
    assert_valid(run)


@pytest.mark.lead
@pytest.mark.v2_fast
@pytest.mark.pressure
@pytest.mark.any_coordination
@pytest.mark.any_security
@pytest.mark.broker_config(**SAFE, **CHURN)
def test_fixed_configuration_under_control_plane_transitions(workload, nemesis):
    # One lane: a recipe runs lanes of its own, and two at once would aim at the same leader.
    run = pressure_run(workload, nemesis, SEED + 3, TRANSITIONS, overlap=1)
    assert_valid(run)


@pytest.mark.pressure
@pytest.mark.broker_config(**{**SAFE, **CHURN, "min.insync.replicas": 1})
def test_min_isr_1_without_unclean_election_under_everything_at_once(workload, nemesis):
    """With min ISR 1 an acks=all write may be acknowledged by the leader
    alone; with no unclean election it is still never lost."""
    run = pressure_run(workload, nemesis, SEED + 1)
    assert_valid(run)


@pytest.mark.pressure
@pytest.mark.broker_config(**SAFE, **CHURN)
def test_fixed_configuration_under_disk_damage_one_fault_at_a_time(workload, nemesis):
    run = pressure_run(workload, nemesis, SEED + 2, DISK_FAULTS, overlap=1)
    assert_valid(run)


@pytest.mark.v2_fast
@pytest.mark.pressure
@pytest.mark.any_coordination
@pytest.mark.broker_config(**SEED_FAITHFUL, **CHURN)
def test_seed_faithful_configuration_loses_nothing_to_one_failure_at_a_time(workload, nemesis):
    """docs/design.md#not-guaranteed: the design as first written loses
    acknowledged acks=all writes only when failures overlap (Jepsen 2013: the
    ISR shrinks to the leader, then the leader dies; KIP-101: a follower
    restarts, then the leader dies before it caught up; two replicas lose
    power together). One failure at a time, each healed and every partition
    fully replicated again before the next (every replica caught up, as the
    leaders' state windows show: not only listed in the ISR), it loses
    nothing and its replicas agree: `hw` truncation is not "anything goes"."""
    run = workload({"a": 3, "b": 2}, replication_factor=3,
                   assignment={"b": {0: [1, 2], 1: [2, 3]}}, **WORKLOAD)
    view = cluster_view(run)
    topics = {"a": 3, "b": 2}   # (no fault here adds partitions)
    brokers = set(range(1, run.cluster.spec.brokers + 1))
    rng = random.Random(SEED + 4)
    played = []
    end = time.monotonic() + SECONDS
    while time.monotonic() < end:
        fault = rng.choice(sorted(ONE_AT_A_TIME))
        target = rng.choice(ONE_AT_A_TIME[fault])
        try:
            nemesis.inject(fault, target)
            played.append(fault)
        except (FaultError, TargetError):
            # Refused here (not in this coordination mode), or no role holder
            # now (a leader resigning for the preferred replica): another pick.
            time.sleep(0.5)
            continue
        time.sleep(rng.uniform(3.0, 7.0))
        nemesis.heal()
        wait_for(lambda: view.registered() == brokers and view.fully_replicated(topics)
                 and caught_up(run.cluster, topics), 120,
                 f"every broker back and every replica caught up after {fault}")
    assert len(played) >= 4, f"only {played} took place"
    run.finish(quiet_s=8.0, final_timeout_s=90, settle_s=5.0)
    assert_valid(run)
