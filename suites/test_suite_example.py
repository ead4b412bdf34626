"""How a chaos suite reads: broker config (a marker), faults, the verdict.

Two ways to say "faults":
  - a seeded random schedule: nemesis(["kill", "stop", ...], duration=60,
    seed=1) draws which fault, when, for how long and against which role
    (`chaoslog run --seed 1 --faults ... --print-schedule` prints the same schedule);
  - a scripted scenario: nemesis.inject(fault, target, **params) starts one
    fault now against an explicit target, so the test can wait for the
    cluster to react before the next step (see test_suite_call_me_maybe.py
    and test_suite_kip101.py).
`workload(...)` starts the producers and consumers; `.finish()` heals,
waits, stops the clients, runs the final reads and closes the history;
`.verdict()` runs the checker (reports.analyze, the reference checker by
default; CHAOSLOG_CHECKER=spark for the Spark one) and returns summary.json.

These two are soak runs of 60 s with several fault kinds, so they are marked
slow (run with --run-slow or -m slow). The CI suites are the other files.
"""
import pytest

from suite_helpers import SAFE, describe

pytestmark = [pytest.mark.slow, pytest.mark.docker]


@pytest.mark.broker_config(**SAFE)
def test_acks_all_loses_nothing_under_process_faults(workload, nemesis):
    run = workload({"t": 3}, replication_factor=3, acks="all")
    nemesis(["kill", "stop", "pause", "hard-bounce"], duration=60, seed=1)
    summary = run.finish().verdict()
    assert summary["valid"] is True, describe(summary)


@pytest.mark.broker_config(**SAFE)
def test_acks_all_loses_nothing_under_partitions_and_session_expiry(workload, nemesis):
    run = workload({"t": 3}, replication_factor=3, acks="all")
    nemesis(["partition-isolate", "partition-halves", "partition-ring", "zk-expire"],
            duration=60, seed=1)
    summary = run.finish().verdict()
    assert summary["valid"] is True, describe(summary)
